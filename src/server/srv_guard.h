// SPDX-License-Identifier: MIT
// --no-special-in-content: message content as plain text. By default the chat prompt is rendered
// and then tokenized with added/special tokens recognized anywhere, as Hugging Face does, so a user
// who writes "<|im_end|>" in a message ends the turn. With the flag, every added token written in
// a message's content is wrapped in two marker characters (U+FDD0, U+FDD1: noncharacters, removed
// from client text first) before rendering; after rendering the markers are taken out and the
// ranges they enclosed are tokenized as ordinary text (mx_tokenizer_encode_guarded). Content
// without added tokens renders and tokenizes exactly as without the flag.
#ifndef MX_SERVER_SRV_GUARD_H
#define MX_SERVER_SRV_GUARD_H

#include <jansson.h>
#include <stdint.h>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

// Marks the added tokens in the string content of each message (in place). Returns 0 or -1.
int srv_guard_messages(const mx_tokenizer *tok, json_t *messages, mx_error *err);
// Removes the markers from text (in place, NUL-terminated) and encodes it with the marked ranges
// as plain text. Returns 0 or -1 (like mx_tokenizer_encode).
int srv_guard_encode(const mx_tokenizer *tok, char *text, int32_t **ids, size_t *n_ids, mx_error *err);

#endif
