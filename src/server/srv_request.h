// SPDX-License-Identifier: MIT
// Validation of OpenAI-style request bodies (/v1/chat/completions and /v1/completions) into a
// plain struct. Every field is either implemented, on a short list of harmless ones that change
// nothing (user, metadata, store: false, service_tier), or an error naming it: nothing is accepted
// and ignored. A known field of the wrong type or out of range is an error naming the field (the
// caller answers 400). JSON values are borrowed from the
// parsed body (which must outlive the struct) except `messages`, which is a normalized copy.
#ifndef MX_SERVER_SRV_REQUEST_H
#define MX_SERVER_SRV_REQUEST_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sample/sampler.h"

enum { SRV_MAX_CHOICES = 16 };  // `n` at most
// Bytes in one stop string at most: every generated token checks how much of the text's end could
// still grow into each stop string, which costs up to the square of its length.
enum { SRV_MAX_STOP_BYTES = 512 };

typedef enum srv_kind { SRV_KIND_CHAT, SRV_KIND_COMPLETION } srv_kind;

typedef enum srv_tool_choice {
    SRV_TOOLS_AUTO,      // the model decides (tools in the prompt, tool calls parsed)
    SRV_TOOLS_NONE,      // no tools in the prompt, no tool calls
    SRV_TOOLS_REQUIRED,  // at least one call, forced through a grammar
    SRV_TOOLS_NAMED,     // a call of tool_name, forced through a grammar
} srv_tool_choice;

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
    const char *reasoning_effort;  // chat: "low", "medium" or "high" (borrowed), NULL when absent
    const char *prompt;       // completion: borrowed text (NULL when given as tokens)
    int32_t *prompt_tokens;   // completion: owned, when the prompt is a list of token ids
    int n_prompt_tokens;
    const char *model;        // borrowed; NULL when absent
    int n;                    // choices to generate (each its own sequence, seeds seed, seed+1, ...)
    int32_t *bias_ids;        // logit_bias (owned): added to the token's logit before sampling
    float *bias_values;
    int n_bias;
    bool json_object;         // response_format json_object (any JSON object; or json_schema below)
    json_t *json_schema;      // response_format json_schema.schema (borrowed), NULL when absent
    const char *grammar;      // GBNF text (borrowed), NULL when absent
    srv_tool_choice tool_choice;
    const char *tool_name;    // tool_choice {"type": "function", "function": {"name"}} (borrowed)
    bool parallel_tool_calls; // default true
} srv_request;

// Returns 0, or -1 with a message in msg. `defaults` gives the sampling of unset fields.
int srv_request_parse(json_t *body, srv_kind kind, const mx_sampling *defaults, srv_request *r, char *msg, size_t cap);
void srv_request_clear(srv_request *r);

// The first key of the object body that is not one of `known` (NULL-terminated), or NULL: every
// route refuses such a field by name.
const char *srv_unknown_field(json_t *body, const char *const *known);

// The chat template's extra variables: chat_template_kwargs plus reasoning_effort (a new reference,
// or NULL when there are none; NULL with *oom set when out of memory).
json_t *srv_request_template_vars(const srv_request *r, bool *oom);

#endif
