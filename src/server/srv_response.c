// SPDX-License-Identifier: MIT
// OpenAI response JSON (see srv_response.h): completion and chat objects, their choices and stream
// chunks, usage, logprobs and tool calls, with finish_reason as OpenAI spells it.
#include "server/srv_response.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *srv_finish_reason(const srv_job *j) {
    return j->finish && strcmp(j->finish, "stop") == 0 && srv_output_n_tools(j->out) > 0 ? "tool_calls" : j->finish;
}

json_t *srv_usage_json(int n_prompt, int n_generated) {
    return json_pack("{s:i, s:i, s:i}", "prompt_tokens", n_prompt, "completion_tokens", n_generated, "total_tokens",
                     n_prompt + n_generated);
}

json_t *srv_tool_call_json(const srv_gen_info *info, int choice, int i, const char *name, const char *args, bool with_index) {
    char id[96];
    snprintf(id, sizeof id, "call_%s_%d_%d", info->id + (strncmp(info->id, "chatcmpl-", 9) == 0 ? 9 : 0), choice, i);
    json_t *t = json_pack("{s:s, s:s, s:{s:s, s:s}}", "id", id, "type", "function", "function", "name", name, "arguments", args);
    if (with_index) json_object_set_new(t, "index", json_integer(i));
    return t;
}

json_t *srv_tool_calls_json(const srv_job *j, const srv_gen_info *info, int choice, int from, bool with_index) {
    json_t *arr = json_array();
    for (int i = from; i < srv_output_n_tools(j->out); i++)
        json_array_append_new(arr, srv_tool_call_json(info, choice, i, srv_output_tool_name(j->out, i),
                                                      srv_output_tool_args(j->out, i), with_index));
    return arr;
}

// {token, logprob, bytes} of one token; NULL when its text cannot be decoded (out of memory: an
// empty text would pass for the token's).
static json_t *token_entry(const mx_tokenizer *tok, int32_t id, double lp) {
    char *txt = mx_tokenizer_decode(tok, &id, 1, false);
    if (!txt) return NULL;
    json_t *bytes = json_array();
    for (const unsigned char *p = (const unsigned char *)txt; *p; p++) json_array_append_new(bytes, json_integer(*p));
    json_t *e = json_pack("{s:s, s:f, s:o}", "token", txt, "logprob", lp, "bytes", bytes);
    free(txt);
    return e;
}

// The chat form of one token: {token, logprob, bytes, top_logprobs: [...]}; NULL as token_entry.
static json_t *logprob_item(const mx_tokenizer *tok, const mx_sample_out *o) {
    json_t *e = token_entry(tok, o->id, o->logprob);
    json_t *tops = json_array();
    for (int i = 0; i < o->n_top && e; i++) {
        json_t *top = token_entry(tok, o->top_id[i], o->top_logprob[i]);
        if (!top) json_decref(e), e = NULL;
        json_array_append_new(tops, top);
    }
    if (!e) return json_decref(tops), NULL;
    json_object_set_new(e, "top_logprobs", tops);
    return e;
}

json_t *srv_logprobs_json(const mx_tokenizer *tok, const mx_sample_out *lp, size_t n, srv_kind kind, size_t *text_offset) {
    if (kind == SRV_KIND_CHAT) {
        json_t *content = json_array();
        for (size_t i = 0; i < n; i++) {
            json_t *item = logprob_item(tok, &lp[i]);
            if (!item) return json_decref(content), NULL;
            json_array_append_new(content, item);
        }
        return json_pack("{s:o}", "content", content);
    }
    json_t *tokens = json_array(), *lps = json_array(), *tops = json_array(), *offs = json_array();
    bool decoded = true;
    for (size_t i = 0; i < n && decoded; i++) {
        const mx_sample_out *o = &lp[i];
        char *t = mx_tokenizer_decode(tok, &o->id, 1, false);
        decoded = t != NULL;
        json_array_append_new(tokens, json_string(t ? t : ""));
        json_array_append_new(lps, json_real(o->logprob));
        json_t *m = json_object();
        for (int k = 0; k < o->n_top && decoded; k++) {
            char *at = mx_tokenizer_decode(tok, &o->top_id[k], 1, false);
            decoded = at != NULL;
            json_object_set_new(m, at ? at : "", json_real(o->top_logprob[k]));
            free(at);
        }
        json_array_append_new(tops, m);
        json_array_append_new(offs, json_integer((json_int_t)*text_offset));
        *text_offset += t ? strlen(t) : 0;
        free(t);
    }
    if (!decoded) {
        json_decref(tokens), json_decref(lps), json_decref(tops), json_decref(offs);
        return NULL;
    }
    return json_pack("{s:o, s:o, s:o, s:o}", "tokens", tokens, "token_logprobs", lps, "top_logprobs", tops,
                     "text_offset", offs);
}

// The logprobs of a whole answer; JSON null when the request asked for none, NULL when a token's
// text cannot be decoded (srv_logprobs_json).
static json_t *job_logprobs_json(const mx_tokenizer *tok, const srv_job *j, srv_kind kind) {
    size_t off = 0;
    return j->n_logprobs >= 0 ? srv_logprobs_json(tok, j->lp, j->n_lp, kind, &off) : json_null();
}

json_t *srv_choice_json(const mx_tokenizer *tok, const srv_job *j, const srv_gen_info *info, int index) {
    size_t clen, rlen;
    const char *content = srv_output_content(j->out, &clen);
    const char *reasoning = srv_output_reasoning(j->out, &rlen);
    if (info->kind == SRV_KIND_CHAT) {
        int n_tools = srv_output_n_tools(j->out);
        json_t *msg = json_pack("{s:s}", "role", "assistant");
        bool blank = true;  // only the newlines between tool calls
        for (size_t i = 0; i < clen && blank; i++) blank = content[i] == '\n' || content[i] == ' ';
        json_object_set_new(msg, "content", !blank || !n_tools ? json_stringn(content, clen) : json_null());
        if (rlen) json_object_set_new(msg, "reasoning_content", json_stringn(reasoning, rlen));
        if (n_tools) json_object_set_new(msg, "tool_calls", srv_tool_calls_json(j, info, index, 0, false));
        return json_pack("{s:i, s:o, s:o, s:s}", "index", index, "message", msg, "logprobs",
                         job_logprobs_json(tok, j, info->kind), "finish_reason", srv_finish_reason(j));
    }
    return json_pack("{s:i, s:s%, s:o, s:s}", "index", index, "text", content, clen, "logprobs",
                     job_logprobs_json(tok, j, info->kind), "finish_reason", srv_finish_reason(j));
}

json_t *srv_completion_json(const mx_tokenizer *tok, srv_job **jobs, int n, const srv_gen_info *info) {
    json_t *choices = json_array();
    int generated = 0;
    for (int i = 0; i < n; i++) {
        json_t *choice = srv_choice_json(tok, jobs[i], info, i);
        if (!choice) return json_decref(choices), NULL;  // never an answer with a choice left out
        json_array_append_new(choices, choice);
        generated += jobs[i]->n_generated;
    }
    return json_pack("{s:s, s:s, s:I, s:s, s:o, s:o}", "id", info->id, "object",
                     info->kind == SRV_KIND_CHAT ? "chat.completion" : "text_completion", "created", (json_int_t)info->created,
                     "model", info->model, "choices", choices, "usage", srv_usage_json(info->n_prompt, generated));
}

json_t *srv_chunk_json(const srv_gen_info *info, json_t *choice) {
    json_t *choices = json_array();
    if (choice) json_array_append_new(choices, choice);
    return json_pack("{s:s, s:s, s:I, s:s, s:o}", "id", info->id, "object",
                     info->kind == SRV_KIND_CHAT ? "chat.completion.chunk" : "text_completion", "created",
                     (json_int_t)info->created, "model", info->model, "choices", choices);
}

json_t *srv_chunk_choice_json(const srv_gen_info *info, int index, json_t *delta_or_text, json_t *logprobs,
                              const char *finish) {
    json_t *c = json_pack("{s:i}", "index", index);
    json_object_set_new(c, info->kind == SRV_KIND_CHAT ? "delta" : "text", delta_or_text);
    json_object_set_new(c, "logprobs", logprobs ? logprobs : json_null());
    json_object_set_new(c, "finish_reason", finish ? json_string(finish) : json_null());
    return c;
}
