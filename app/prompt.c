// SPDX-License-Identifier: MIT
// Prompt reading and encoding for the CLI (see prompt.h).
#include "prompt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

char *prompt_read_arg(const char *cmd, const char *arg) {
    if (strcmp(arg, "-") != 0) return strdup(arg);
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + len, 1, cap - len - 1, stdin)) > 0) {
        len += got;
        if (len + 1 == cap) {
            char *g = realloc(buf, cap *= 2);
            if (!g) {
                free(buf);
                buf = NULL;
            }
            buf = g;
        }
    }
    if (!buf) {
        cli_error(cmd, "out of memory reading standard input");
        return NULL;
    }
    buf[len] = 0;
    return buf;
}

mx_tokenizer *prompt_load_tokenizer(const char *cmd, const char *dir) {
    char path[4200];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    mx_error err = {{0}};
    mx_tokenizer *tok = mx_tokenizer_load(path, &err);
    if (!tok) cli_error(cmd, "%s", err.msg);
    return tok;
}

int prompt_encode(const char *cmd, const char *dir, const mx_tokenizer *tok, const char *text, const char *system,
                  bool use_template, int32_t **ids, size_t *n_ids) {
    (void)dir;
    (void)system;
    (void)use_template;
    mx_error err = {{0}};
    if (mx_tokenizer_encode(tok, text, strlen(text), ids, n_ids, &err) != 0) {
        cli_error(cmd, "%s", err.msg);
        return -1;
    }
    if (*n_ids == 0) {
        cli_error(cmd, "the prompt encodes to no tokens");
        return -1;
    }
    return 0;
}
