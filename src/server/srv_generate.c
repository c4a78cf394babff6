// SPDX-License-Identifier: MIT
// POST /v1/chat/completions and /v1/completions: validates the request, builds the prompt (chat
// template for chat), checks it against the context, submits one job per choice to the scheduler
// and answers with one JSON object (srv_response.h), or hands the jobs to the SSE stream
// (srv_stream.c).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/clock.h"
#include "server/srv_guard.h"
#include "server/srv_harmony.h"
#include "server/srv_internal.h"
#include "server/srv_json_alloc.h"
#include "server/srv_reply.h"
#include "server/srv_response.h"
#include "server/srv_text.h"

// Renders and encodes the prompt. Returns 0, or an HTTP status with msg set.
static unsigned build_prompt(mx_server *s, const srv_request *r, int32_t **ids, size_t *n, bool *think_open, char *msg,
                             size_t cap) {
    mx_error err = {{0}};
    *think_open = false;
    if (r->kind == SRV_KIND_COMPLETION && r->prompt_tokens) {
        int32_t V = mx_tokenizer_vocab_size(s->tok);
        for (int i = 0; i < r->n_prompt_tokens; i++)
            if (r->prompt_tokens[i] >= V) {
                snprintf(msg, cap, "'prompt[%d]': token id %d is outside the vocabulary (%d)", i, r->prompt_tokens[i], V);
                return 400;
            }
        *ids = malloc(sizeof(int32_t) * (size_t)r->n_prompt_tokens);
        if (!*ids) return snprintf(msg, cap, "out of memory"), 500;
        memcpy(*ids, r->prompt_tokens, sizeof(int32_t) * (size_t)r->n_prompt_tokens);
        *n = (size_t)r->n_prompt_tokens;
        return 0;
    }
    char *text;
    if (r->kind == SRV_KIND_CHAT) {
        if (!s->tmpl) {
            snprintf(msg, cap, "the model has no chat template; use /v1/completions");
            return 400;
        }
        if (s->calls == SRV_CALLS_HARMONY) srv_harmony_prepare_messages(r->messages);
        if (s->o.no_special_in_content && srv_guard_messages(s->tok, r->messages, &err)) {
            snprintf(msg, cap, "%s", err.msg);
            return 500;
        }
        json_t *tools = r->tool_choice == SRV_TOOLS_NONE ? NULL : r->tools;
        if (r->reasoning_effort && s->calls != SRV_CALLS_HARMONY) {  // other templates would ignore it
            snprintf(msg, cap, "'reasoning_effort' is supported for gpt-oss (harmony) models only");
            return 400;
        }
        bool oom;
        json_t *kwargs = srv_request_template_vars(r, &oom);
        if (oom) return snprintf(msg, cap, "out of memory"), 500;
        text = mx_chat_template_render(s->tmpl, r->messages, tools, true, kwargs, &err);
        json_decref(kwargs);
        if (!text) {
            snprintf(msg, cap, "rendering the chat template: %s", err.msg);
            return 400;
        }
        size_t len = strlen(text);
        while (len && (text[len - 1] == '\n' || text[len - 1] == ' ')) len--;
        *think_open = len >= 7 && memcmp(text + len - 7, "<think>", 7) == 0;
    } else {
        text = strdup(r->prompt);
        if (!text) return snprintf(msg, cap, "out of memory"), 500;
    }
    int rc = r->kind == SRV_KIND_CHAT && s->o.no_special_in_content ? srv_guard_encode(s->tok, text, ids, n, &err)
                                                                     : mx_tokenizer_encode(s->tok, text, strlen(text), ids, n, &err);
    free(text);
    if (rc) {
        snprintf(msg, cap, "tokenizing the prompt: %s", err.msg);
        return 400;
    }
    return 0;
}

// Checks what needs the vocabulary (logit_bias ids). Returns 0 or 400 with msg.
static unsigned check_vocab_fields(mx_server *s, const srv_request *r, char *msg, size_t cap) {
    int V = mx_model_config(s->model)->vocab_size;
    for (int i = 0; i < r->n_bias; i++)
        if (r->bias_ids[i] >= V) {
            snprintf(msg, cap, "'logit_bias': token id %d is outside the vocabulary (%d)", r->bias_ids[i], V);
            return 400;
        }
    return 0;
}

// Makes the n jobs of a request (choice i samples with seed + i). Returns 0 or an HTTP status.
static unsigned make_jobs(mx_server *s, const srv_request *r, const int32_t *ids, size_t n, bool think_open,
                          srv_job **jobs, char *msg, size_t cap) {
    unsigned status = 0;
    char *gbnf = srv_grammar_text(r, s->calls, think_open, &status, msg, cap);
    if (status) return status;
    bool tools = r->kind == SRV_KIND_CHAT && r->tool_choice != SRV_TOOLS_NONE;
    bool mistral = tools && r->tools && srv_calls_mistral(s->calls);
    bool harmony = r->kind == SRV_KIND_CHAT && s->calls == SRV_CALLS_HARMONY;  // channels and calls in special tokens
    srv_output_opts oo = {r->stops, r->n_stops, r->kind == SRV_KIND_CHAT && !harmony, think_open, harmony ? tools && r->tools : tools,
                          tools && r->tools && s->calls == SRV_CALLS_JSON, mistral, harmony};
    int room = s->o.ctx - (int)n;
    for (int i = 0; i < r->n && !status; i++) {
        srv_job *j = jobs[i] = srv_job_create(ids, (int)n, &oo);
        if (!j) {
            status = 500, snprintf(msg, cap, "out of memory");
            break;
        }
        j->max_tokens = r->max_tokens < 0 || r->max_tokens > room ? room : r->max_tokens;
        j->sampling = r->sampling;
        if (r->sampling.has_seed) j->sampling.seed = r->sampling.seed + (uint64_t)i;
        j->n_logprobs = r->n_logprobs;
        j->ignore_eos = r->ignore_eos;
        j->keep_special = mistral || harmony;  // Mistral's call markers and harmony's are special tokens
        j->deadline = s->o.timeout > 0 ? mx_now() + s->o.timeout : 0;
        if (r->n_bias) {
            j->bias_ids = malloc(sizeof *j->bias_ids * (size_t)r->n_bias);
            j->bias_values = malloc(sizeof *j->bias_values * (size_t)r->n_bias);
            if (!j->bias_ids || !j->bias_values) {
                status = 500, snprintf(msg, cap, "out of memory");
                break;
            }
            memcpy(j->bias_ids, r->bias_ids, sizeof *j->bias_ids * (size_t)r->n_bias);
            memcpy(j->bias_values, r->bias_values, sizeof *j->bias_values * (size_t)r->n_bias);
            j->n_bias = r->n_bias;
        }
        // A forced Mistral call may use the marker tokens themselves (the job keeps them in its text).
        // Harmony's markers are special tokens that any of its grammars may write (forced calls and
        // JSON answers come after the model's own headers).
        bool forced = r->tool_choice == SRV_TOOLS_REQUIRED || r->tool_choice == SRV_TOOLS_NAMED;
        bool markers = harmony || (mistral && forced && !r->grammar);
        if (gbnf) j->matcher = srv_grammars_matcher(s->grammars, gbnf, markers, &status, msg, cap);
    }
    free(gbnf);
    return status;
}

enum MHD_Result srv_route_generate(mx_server *s, struct MHD_Connection *c, srv_kind kind, json_t *body) {
    srv_request r;
    char msg[1024];
    if (srv_request_parse(body, kind, &s->o.sampling, &r, msg, sizeof msg))
        return srv_respond_error(s, c, 400, "invalid_request", "%s", msg);
    int32_t *ids = NULL;
    size_t n = 0;
    bool think_open;
    unsigned status = check_vocab_fields(s, &r, msg, sizeof msg);
    if (!status) status = build_prompt(s, &r, &ids, &n, &think_open, msg, sizeof msg);
    if (!status && n == 0) status = 400, snprintf(msg, sizeof msg, "the prompt is empty");
    if (!status && n >= (size_t)s->o.ctx) {
        free(ids);
        srv_request_clear(&r);
        return srv_respond_error(s, c, 400, "context_length_exceeded",
                                 "the prompt has %zu tokens but the context holds %d tokens per sequence "
                                 "(prompt + at least 1 generated token must fit; see --ctx)",
                                 n, s->o.ctx);
    }
    srv_job *jobs[SRV_MAX_CHOICES] = {0};
    int n_jobs = r.n;
    if (!status) status = make_jobs(s, &r, ids, n, think_open, jobs, msg, sizeof msg);
    free(ids);
    if (status) {
        for (int i = 0; i < n_jobs; i++) srv_job_release(jobs[i]);
        srv_request_clear(&r);
        return srv_respond_error(s, c, status, status == 400 ? "invalid_request" : NULL, "%s", msg);
    }
    srv_gen_info info = {.kind = kind, .include_usage = r.include_usage, .n_prompt = (int)n, .created = (long)mx_wall_now()};
    snprintf(info.id, sizeof info.id, "%s-%llx%04llx", kind == SRV_KIND_CHAT ? "chatcmpl" : "cmpl",
             (unsigned long long)s->started, (unsigned long long)atomic_fetch_add(&s->ids, 1));
    const char *model = r.model ? r.model : s->model_id;
    srv_text_copy(info.model, sizeof info.model, model, strlen(model));
    bool stream = r.stream;
    srv_request_clear(&r);

    int submitted = 0;
    while (submitted < n_jobs && !atomic_load(&s->stopping) && srv_sched_submit(s->sched, jobs[submitted]) == 0)
        submitted++;
    if (submitted < n_jobs) {
        for (int i = 0; i < n_jobs; i++) {
            if (i < submitted) srv_job_cancel(jobs[i]);
            srv_job_release(jobs[i]);
        }
        if (submitted) srv_sched_wake(s->sched);
        return srv_respond_error(s, c, 503, "queue_full", "the server is busy (%d requests queued); retry later",
                                 s->o.max_queue);
    }
    if (stream) return srv_stream_start(s, c, jobs, n_jobs, &info);

    for (int i = 0; i < n_jobs; i++) {
        srv_job *j = jobs[i];
        for (;;) {  // the job's lock only around the wait: the scheduler takes it for every token
            pthread_mutex_lock(&j->mu);
            if (!j->done) {
                struct timespec ts = mx_wall_deadline(0.1);
                pthread_cond_timedwait(&j->cv, &j->mu, &ts);
            }
            bool done = j->done;
            pthread_mutex_unlock(&j->mu);
            if (done) break;
            bool stopping = atomic_load(&s->stopping);
            if (stopping || srv_client_gone(c)) {
                for (int k = 0; k < n_jobs; k++) {
                    srv_job_cancel(jobs[k]);
                    srv_job_release(jobs[k]);
                }
                srv_sched_wake(s->sched);
                if (stopping)
                    return srv_respond_error(s, c, 503, "shutting_down", "the server shut down before the request finished");
                return MHD_NO;
            }
        }
    }
    json_t *resp = NULL;
    status = 200;
    for (int i = 0; i < n_jobs && !resp; i++) {
        pthread_mutex_lock(&jobs[i]->mu);
        if (jobs[i]->error_status) {
            status = (unsigned)jobs[i]->error_status;
            resp = srv_error_json(status, NULL, jobs[i]->error);
        }
        pthread_mutex_unlock(&jobs[i]->mu);
    }
    unsigned long json_failures = srv_json_alloc_failures();
    if (!resp) resp = srv_completion_json(s->tok, jobs, n_jobs, &info);
    // A key or element left out, or a choice that could not be built: the 500 fallback instead.
    if (!resp || srv_json_alloc_failures() != json_failures) {
        json_decref(resp);
        resp = NULL;
        status = 500;
    }
    for (int i = 0; i < n_jobs; i++) srv_job_release(jobs[i]);
    return srv_respond_json(s, c, status, resp);
}
