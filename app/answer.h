// SPDX-License-Identifier: MIT
// How `generate` and `chat` show the model's answer as it streams. Most models' text is printed as
// decoded (Qwen3's reasoning included, between its own <think> and </think>). A harmony model
// (gpt-oss: its tokenizer has the harmony special tokens) writes channels in special tokens; its
// text goes through the output stage the server uses (server/srv_output.h), and the analysis
// channel is printed between "<think>" and "</think>" lines, the shape Qwen3's reasoning has, then
// the final channel. No marker and no part of one is ever printed.
#ifndef MX_APP_ANSWER_H
#define MX_APP_ANSWER_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "server/srv_output.h"
#include "tokenizer/tokenizer.h"

typedef struct answer_printer {
    FILE *out;
    srv_output *harmony;       // NULL: print the text as decoded
    size_t shown_reasoning, shown_content;
    bool think_open;           // "<think>" printed, "</think>" not yet
} answer_printer;

// Returns 0, or -1 when out of memory.
int answer_printer_init(answer_printer *p, const mx_tokenizer *tok, FILE *out);
void answer_printer_push(answer_printer *p, const char *text, size_t len);
// Ends the answer (prints what was held back and closes an open "<think>").
void answer_printer_finish(answer_printer *p);
// The answer for a chat history: harmony's final channel, or NULL for "the text as decoded".
const char *answer_printer_content(const answer_printer *p);
void answer_printer_free(answer_printer *p);

// The ids that end a turn besides the model's eos: the template's eos (or -1) and, for a harmony
// model, <|return|> and <|call|>. Returns how many were written to ids[0..3).
int answer_stop_ids(const mx_tokenizer *tok, int32_t template_eos, int32_t ids[3]);

#endif
