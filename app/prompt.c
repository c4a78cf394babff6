// SPDX-License-Identifier: MIT
// Prompt reading and encoding for the CLI (see prompt.h): `-p TEXT` or `-p -` (standard input), the
// model folder's tokenizer, and the chat template applied (with an optional system message) unless
// the command asks for the raw text.
#include "prompt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "chat/chat_template.h"
#include "cli.h"
#include "io/mapped_file.h"

char *prompt_read_arg(const char *cmd, const char *arg) {
    if (strcmp(arg, "-") != 0) return strdup(arg);
    mx_error err = {{0}};
    char *text = mx_read_stream(stdin, "standard input", NULL, &err);
    if (!text) cli_error(cmd, "%s", err.msg);
    return text;
}

mx_tokenizer *prompt_load_tokenizer(const char *cmd, const char *dir) {
    char path[4200];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    mx_error err = {{0}};
    mx_tokenizer *tok = mx_tokenizer_load(path, &err);
    if (!tok) cli_error(cmd, "%s", err.msg);
    return tok;
}

// Renders [system?, user] through the model's chat template; NULL with *no_template set when the
// model has none, NULL with a message printed on a real error.
static char *render_chat(const char *cmd, const char *dir, const mx_tokenizer *tok, const char *text,
                         const char *system, bool *no_template, int32_t *extra_eos) {
    mx_error err = {{0}};
    *no_template = false;
    mx_chat_template *t = mx_chat_template_load(dir, &err);
    if (!t) {
        if (err.msg[0]) cli_error(cmd, "%s", err.msg);
        else *no_template = true;
        return NULL;
    }
    json_t *messages = json_array();
    if (system) json_array_append_new(messages, json_pack("{s:s, s:s}", "role", "system", "content", system));
    json_array_append_new(messages, json_pack("{s:s, s:s}", "role", "user", "content", text));
    char *out = mx_chat_template_render(t, messages, NULL, true, NULL, &err);
    const char *eos = mx_chat_template_eos(t);
    if (eos && extra_eos) *extra_eos = mx_tokenizer_token_id(tok, eos);
    if (!out) cli_error(cmd, "chat template: %s", err.msg);
    json_decref(messages);
    mx_chat_template_free(t);
    return out;
}

int prompt_encode(const char *cmd, const char *dir, const mx_tokenizer *tok, const char *text, const char *system,
                  bool use_template, int32_t **ids, size_t *n_ids, int32_t *extra_eos) {
    mx_error err = {{0}};
    if (extra_eos) *extra_eos = -1;
    char *rendered = NULL;
    if (use_template) {
        bool none;
        rendered = render_chat(cmd, dir, tok, text, system, &none, extra_eos);
        if (!rendered && !none) return -1;
        if (none && system) {
            cli_error(cmd, "--system needs a chat template, and this model has none");
            return -1;
        }
    }
    const char *src = rendered ? rendered : text;
    int rc = mx_tokenizer_encode(tok, src, strlen(src), ids, n_ids, &err);
    free(rendered);
    if (rc != 0) {
        cli_error(cmd, "%s", err.msg);
        return -1;
    }
    if (*n_ids == 0) {
        cli_error(cmd, "the prompt encodes to no tokens");
        return -1;
    }
    return 0;
}
