// SPDX-License-Identifier: MIT
// Chat templates of a model folder: finds the Jinja template (chat_template.jinja, or
// tokenizer_config.json's chat_template, or chat_template.json), parses it once, and renders
// conversations the way transformers' apply_chat_template does (same variables, same jinja2
// settings), byte for byte. A loaded template is immutable; rendering is thread-safe.
#ifndef MX_CHAT_CHAT_TEMPLATE_H
#define MX_CHAT_CHAT_TEMPLATE_H

#include <jansson.h>
#include <stdbool.h>

#include "core/error.h"

typedef struct mx_chat_template mx_chat_template;

// Loads the template of a model folder: `chat_template.jinja` if present, else tokenizer_config.json's
// `chat_template` (a string, or a list of {name, template} where "default" is used, and "tool_use"
// when tools are given and it exists), else chat_template.json's `chat_template`. Also reads
// bos_token/eos_token (string or {content:...}) from tokenizer_config.json. Returns NULL with
// err->msg empty when the model simply has no template; NULL with a message on a real error.
mx_chat_template *mx_chat_template_load(const char *model_dir, mx_error *err);
// Parses a template from a string; bos/eos may be NULL (then the variables are undefined).
mx_chat_template *mx_chat_template_from_string(const char *source, const char *bos, const char *eos, mx_error *err);
void mx_chat_template_free(mx_chat_template *t);

// Renders messages (JSON array of {role, content, ...}), tools (JSON array or NULL, passed as None
// when NULL), add_generation_prompt, and extra variables (JSON object or NULL, e.g.
// {"enable_thinking": false} from chat_template_kwargs) into a malloc'ed string. Errors read
// "chat template line N: ...". None of the JSON inputs is modified.
char *mx_chat_template_render(const mx_chat_template *t, json_t *messages, json_t *tools, bool add_generation_prompt,
                              json_t *extra_vars, mx_error *err);

// The special tokens read at load (NULL when absent).
const char *mx_chat_template_bos(const mx_chat_template *t);
const char *mx_chat_template_eos(const mx_chat_template *t);

#endif
