// SPDX-License-Identifier: MIT
// Turning what the user typed into token ids: reading -p (or stdin), loading the model's tokenizer,
// and applying the chat template when the model has one.
#ifndef MX_APP_PROMPT_H
#define MX_APP_PROMPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tokenizer/tokenizer.h"

// The -p value, or all of standard input for "-"; malloc'ed; NULL (message printed) on failure.
char *prompt_read_arg(const char *cmd, const char *arg);
// Loads DIR/tokenizer.json; NULL (message printed) on failure.
mx_tokenizer *prompt_load_tokenizer(const char *cmd, const char *dir);
// Encodes the prompt; with use_template and a chat template in DIR, renders [system?, user] with the
// generation prompt first; *extra_eos (may be NULL) receives the template's end-of-turn token id,
// or -1. Returns 0, or -1 with a message printed.
int prompt_encode(const char *cmd, const char *dir, const mx_tokenizer *tok, const char *text, const char *system,
                  bool use_template, int32_t **ids, size_t *n_ids, int32_t *extra_eos);

#endif
