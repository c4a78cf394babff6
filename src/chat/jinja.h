// SPDX-License-Identifier: MIT
// A Jinja template interpreter for chat templates: parse once, render many times (concurrently).
// Covers what real chat templates use (if/for/set/macro/filter blocks, loop controls, namespaces,
// Python-like expressions, jinja2's common filters and tests, string/dict methods) with the
// environment transformers uses: trim_blocks, lstrip_blocks, no autoescape, a `tojson` that calls
// json.dumps(ensure_ascii=False), and the globals raise_exception() and strftime_now().
// Errors are "line N: what" messages; a template that cannot be rendered never yields text.
#ifndef MX_CHAT_JINJA_H
#define MX_CHAT_JINJA_H

#include <jansson.h>
#include <stddef.h>

#include "core/error.h"

typedef struct jinja_template jinja_template;

// Parses n bytes of template source. NULL with a message on a syntax error.
jinja_template *jinja_template_parse(const char *src, size_t n, mx_error *err);
void jinja_template_free(jinja_template *t);

// Renders with the members of `vars` (a JSON object, or NULL) as variables; returns a malloc'ed
// NUL-terminated string, or NULL with a message. Thread-safe on one template; vars are only read.
char *jinja_template_render(const jinja_template *t, json_t *vars, mx_error *err);
// The same with variables given as n (name, value) pairs (later pairs win); no JSON is modified,
// not even reference counts, so shared inputs are safe across threads.
char *jinja_template_render_vars(const jinja_template *t, const char *const *names, json_t *const *values,
                                 size_t n, mx_error *err);

#endif
