// SPDX-License-Identifier: MIT
// Tokenizer for Jinja templates, with the whitespace rules transformers renders chat templates
// with: trim_blocks and lstrip_blocks on, `-`/`+` markers on tags, newlines normalized to "\n" and
// one trailing newline dropped (keep_trailing_newline off). Text between tags becomes JT_TEXT
// tokens already trimmed; comments vanish; `{% raw %}` bodies become text. Token strings point into
// the normalized source or the arena, both owned by the template.
#ifndef MX_CHAT_JINJA_LEXER_H
#define MX_CHAT_JINJA_LEXER_H

#include <stddef.h>
#include <stdint.h>

#include "core/arena.h"
#include "core/error.h"

typedef enum jtok_kind {
    JT_TEXT,
    JT_VAR_BEGIN,   // {{
    JT_VAR_END,     // }}
    JT_BLOCK_BEGIN, // {%
    JT_BLOCK_END,   // %}
    JT_NAME,
    JT_STRING, // s/n: the decoded value
    JT_INT,
    JT_FLOAT,
    JT_OP, // s/n: the operator text
    JT_EOF,
} jtok_kind;

typedef struct jtok {
    jtok_kind kind;
    int line;
    const char *s;
    size_t n;
    int64_t i;
    double f;
} jtok;

typedef struct jtoks {
    jtok *v;
    size_t n, cap;
} jtoks;

// Tokenizes src (n bytes); the token array is malloc'ed (free with free(out->v)). Errors name the line.
int jinja_lex(const char *src, size_t n, mx_arena *arena, jtoks *out, mx_error *err);

#endif
