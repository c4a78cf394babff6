// SPDX-License-Identifier: MIT
// Validation of OpenAI-style request bodies (/v1/chat/completions and /v1/completions) into a
// plain struct. Unknown fields are ignored; a known field of the wrong type or out of range is an
// error whose message names the field (the caller answers 400). JSON values are borrowed from the
// parsed body (which must outlive the struct) except `messages`, which is a normalized copy.
#ifndef MX_SERVER_SRV_REQUEST_H
#define MX_SERVER_SRV_REQUEST_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sample/sampler.h"

typedef enum srv_kind { SRV_KIND_CHAT, SRV_KIND_COMPLETION } srv_kind;

typedef struct srv_request {
    srv_kind kind;
    bool stream;
    bool include_usage;       // stream_options.include_usage
    bool ignore_eos;          // llama-server extension: generate through stop tokens
    int max_tokens;           // -1: until the context is full
    mx_sampling sampling;
    const char *stops[16];    // borrowed strings
    int n_stops;
    int n_logprobs;           // -1: none; else top alternatives per token
    json_t *messages;         // chat: owned copy, content parts joined into strings
    json_t *tools;            // chat: borrowed, NULL when absent
    json_t *template_kwargs;  // chat: borrowed chat_template_kwargs, NULL when absent
    const char *prompt;       // completion: borrowed text (NULL when given as tokens)
    int32_t *prompt_tokens;   // completion: owned, when the prompt is a list of token ids
    int n_prompt_tokens;
    const char *model;        // borrowed; NULL when absent
} srv_request;

// Returns 0, or -1 with a message in msg. `defaults` gives the sampling of unset fields.
int srv_request_parse(json_t *body, srv_kind kind, const mx_sampling *defaults, srv_request *r, char *msg, size_t cap);
void srv_request_clear(srv_request *r);

#endif
