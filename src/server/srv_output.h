// SPDX-License-Identifier: MIT
// The text side of one generation: turns the stream of decoded text pieces into what an OpenAI
// response carries. Two stages, in order:
//   1. stop strings: text is released only once it cannot be the start of a stop string; when a
//      stop string appears, the text before it is released and everything after is dropped;
//   2. segmentation (chat only): `<think>...</think>` at the start goes to reasoning, and each
//      `<tool_call>{"name":..., "arguments":...}</tool_call>` block becomes a tool call; the rest is
//      content. With mistral_calls, calls follow `[TOOL_CALLS]` in either of Mistral's forms: a JSON
//      list `[{"name", "arguments"}, ...]` (each call is taken as soon as its object is complete), or
//      `NAME[ARGS]{...}` (optionally `NAME[CALL_ID]ID[ARGS]{...}`), one call per marker. Partial tags
//      are held back the same way as partial stop strings. With json_calls
//      (Llama 3.x templates), an answer whose first visible character opens a JSON object or list is
//      held to the end and becomes tool calls when it is {"name", "parameters" | "arguments"}.
//      With harmony (gpt-oss), segmentation is srv_harmony.h's instead: the analysis channel is
//      reasoning, final is content, messages to a recipient (functions.NAME) are tool calls.
// The object owns growing buffers for content and reasoning and a list of tool calls; readers take
// what is new through byte counts (content_len, reasoning_len, n_tools). Not thread-safe: the
// caller locks. No model or tokenizer knowledge here, so it is unit-tested with scripted text.
#ifndef MX_SERVER_SRV_OUTPUT_H
#define MX_SERVER_SRV_OUTPUT_H

#include <stdbool.h>
#include <stddef.h>

typedef struct srv_output srv_output;

typedef struct srv_output_opts {
    const char *const *stops;  // stop strings (copied); empty strings are ignored
    int n_stops;
    bool parse_think;          // a leading <think>...</think> is reasoning
    bool think_open;           // the prompt already opened <think>: output starts as reasoning
    bool parse_tools;          // <tool_call> blocks become tool calls
    bool json_calls;           // (Llama 3.x) an answer that is a JSON object {"name", "parameters"} (or a
                               // list of them) is a tool call: such an answer is held back until the end
    bool mistral_calls;        // (Mistral) with parse_tools, calls open with [TOOL_CALLS] instead of <tool_call>
    bool harmony;              // (gpt-oss) the text is harmony messages (special tokens kept); parse_tools
                               // makes messages to functions.NAME calls; parse_think and json_calls are unused
} srv_output_opts;

srv_output *srv_output_create(const srv_output_opts *o);
void srv_output_free(srv_output *o);

// Feeds decoded text. Returns true once a stop string has matched (later pushes are ignored).
bool srv_output_push(srv_output *o, const char *text, size_t len);
// End of generation: releases held-back text (an unfinished tool call becomes content).
void srv_output_finish(srv_output *o);
bool srv_output_stopped(const srv_output *o);
// An allocation failed while text was parsed (a buffer, a call, or jansson reading one): what was
// released may lack text or calls, so the job ends with an error. Sticky.
bool srv_output_failed(const srv_output *o);

// Released text so far (NUL-terminated, valid until the next push/finish).
const char *srv_output_content(const srv_output *o, size_t *len);
const char *srv_output_reasoning(const srv_output *o, size_t *len);
int srv_output_n_tools(const srv_output *o);
const char *srv_output_tool_name(const srv_output *o, int i);
const char *srv_output_tool_args(const srv_output *o, int i);  // a JSON text (object as a string)

#endif
