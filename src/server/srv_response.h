// SPDX-License-Identifier: MIT
// The OpenAI response layer: everything a generation answer says in JSON, built from finished or
// running jobs (their output split into content / reasoning / tool calls, their logprobs): the
// whole chat.completion / text_completion object, and the pieces of streamed chunks. The scheduler
// and the jobs hold no JSON; the OpenAI finish_reason is named here. Job locks are taken by the
// caller unless said otherwise; the pieces that take plain values (logprobs, one tool call) need no
// job, so a stream formats its copies of a job's new output outside the job's lock.
#ifndef MX_SERVER_SRV_RESPONSE_H
#define MX_SERVER_SRV_RESPONSE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "server/srv_job.h"
#include "server/srv_request.h"
#include "tokenizer/tokenizer.h"

// What a generation response needs after the request body is gone.
typedef struct srv_gen_info {
    srv_kind kind;
    bool include_usage;
    int n_prompt;
    long created;
    char id[64];
    char model[256];
} srv_gen_info;

// The OpenAI finish_reason of a finished job: its finish, "tool_calls" when it stopped after calls.
const char *srv_finish_reason(const srv_job *j);
json_t *srv_usage_json(int n_prompt, int n_generated);
// Tool call i of choice `choice` (its name and JSON arguments text); with_index adds the call's index
// (stream deltas).
json_t *srv_tool_call_json(const srv_gen_info *info, int choice, int i, const char *name, const char *args, bool with_index);
// The tool calls from index `from` of choice `choice` of a job.
json_t *srv_tool_calls_json(const srv_job *j, const srv_gen_info *info, int choice, int from, bool with_index);
// Logprobs of n generated tokens in the chat or completion form. text_offset: the completion form's
// offset of the first token's text in the generated text, advanced past the n tokens' texts. NULL
// when a token's text cannot be decoded (out of memory): the request then fails, as it does when
// jansson fails an allocation.
json_t *srv_logprobs_json(const mx_tokenizer *tok, const mx_sample_out *lp, size_t n, srv_kind kind, size_t *text_offset);
// Choice `index` of a finished job: message (chat) or text, logprobs, finish_reason; NULL when its
// logprobs cannot be built (srv_logprobs_json).
json_t *srv_choice_json(const mx_tokenizer *tok, const srv_job *j, const srv_gen_info *info, int index);
// The whole answer of n finished jobs, choice i from jobs[i], with usage. Takes no lock: the caller
// has seen each job done under its lock, and nothing changes a job after that. NULL when a choice
// cannot be built.
json_t *srv_completion_json(const mx_tokenizer *tok, srv_job **jobs, int n, const srv_gen_info *info);

// A streamed chunk carrying one choice (or none: choice NULL, e.g. the usage chunk).
json_t *srv_chunk_json(const srv_gen_info *info, json_t *choice);
// The choice of a chunk: delta (chat) or text, logprobs (NULL: null), finish_reason (NULL: null).
json_t *srv_chunk_choice_json(const srv_gen_info *info, int index, json_t *delta_or_text, json_t *logprobs,
                              const char *finish);

#endif
