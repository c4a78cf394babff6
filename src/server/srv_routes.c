// SPDX-License-Identifier: MIT
// The small routes: GET /v1/models, GET /health, GET /metrics (Prometheus text format), and the
// llama-server style POST /tokenize ({"content": text, "with_pieces"?} -> {"tokens": [...]}) and POST
// /detokenize ({"tokens": [...]} -> {"content": text}), other fields a 400, and POST /apply-template.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/srv_buf.h"
#include "server/srv_harmony.h"
#include "server/srv_internal.h"
#include "server/srv_reply.h"
#include "tokenizer/tok_internal.h"

enum MHD_Result srv_route_models(mx_server *s, struct MHD_Connection *c) {
    json_t *m = json_pack("{s:s, s:s, s:I, s:s}", "id", s->model_id, "object", "model", "created", (json_int_t)s->started,
                          "owned_by", "mlxcel");
    return srv_respond_json(s, c, 200, json_pack("{s:s, s:[o]}", "object", "list", "data", m));
}

enum MHD_Result srv_route_health(mx_server *s, struct MHD_Connection *c) {
    srv_stats st;
    srv_sched_stats(s->sched, &st);
    const mx_engine_stats *e = &st.engine;
    json_t *kv = json_pack("{s:i, s:i, s:i, s:i, s:i}", "block_size", e->kv_block_size, "blocks_total", e->kv_blocks,
                           "blocks_used", e->kv_blocks_used, "blocks_cached", e->kv_blocks_cached, "blocks_free",
                           e->kv_blocks_free);
    return srv_respond_json(s, c, 200,
                            json_pack("{s:s, s:i, s:i, s:i, s:i, s:I, s:o}", "status", "ok", "slots_idle",
                                      st.n_slots - st.active, "slots_processing", st.active, "queue", st.queued,
                                      "slots_preempted", e->preempted_now, "preemptions", (json_int_t)e->preemptions,
                                      "kv_cache", kv));
}

static void metric(srv_buf *b, const char *name, const char *type, const char *help, double v) {
    srv_buf_printf(b, "# HELP mlxcel_%s %s\n# TYPE mlxcel_%s %s\nmlxcel_%s %.17g\n", name, help, name, type, name, v);
}

enum MHD_Result srv_route_metrics(mx_server *s, struct MHD_Connection *c) {
    srv_stats st;
    srv_sched_stats(s->sched, &st);
    const mx_engine_stats *e = &st.engine;
    srv_buf b = {0};
    metric(&b, "http_requests_total", "counter", "HTTP requests received", (double)atomic_load(&s->http_requests));
    metric(&b, "http_errors_total", "counter", "HTTP answers with an error status", (double)atomic_load(&s->http_errors));
    metric(&b, "requests_total", "counter", "Generation requests admitted into a slot", (double)st.requests);
    metric(&b, "requests_cancelled_total", "counter", "Generations cancelled (client gone)", (double)st.cancelled);
    metric(&b, "prompt_tokens_total", "counter", "Prompt tokens of admitted requests", (double)st.prompt_tokens);
    metric(&b, "prefix_cache_hit_tokens_total", "counter", "Prompt tokens reused from a cached prefix",
           (double)e->reused_tokens);
    metric(&b, "prefix_cache_miss_tokens_total", "counter", "Prompt tokens computed",
           (double)(st.prompt_tokens - e->reused_tokens));
    metric(&b, "prefix_cache_hits_total", "counter", "Full prompt KV blocks found in the prefix cache",
           (double)e->prefix_hits);
    metric(&b, "prefix_cache_misses_total", "counter", "Full prompt KV blocks computed", (double)e->prefix_misses);
    metric(&b, "prefix_cache_evictions_total", "counter", "Cached KV blocks evicted for new contents",
           (double)e->prefix_evictions);
    metric(&b, "preemptions_total", "counter", "Running requests whose KV blocks were taken back (resumed later)",
           (double)e->preemptions);
    metric(&b, "recomputed_tokens_total", "counter", "Tokens computed again after preemptions (their KV blocks were taken back)",
           (double)e->recomputed_tokens);
    metric(&b, "sequences_preempted", "gauge", "Preempted requests waiting to resume", e->preempted_now);
    metric(&b, "padding_tokens_total", "counter", "Tokens of the padding slot added to steps (step shapes in buckets)",
           (double)e->padding_tokens);
    metric(&b, "kv_blocks_total", "gauge", "KV pool blocks (--kv-size / block size)", e->kv_blocks);
    metric(&b, "kv_blocks_used", "gauge", "KV blocks held by running sequences", e->kv_blocks_used);
    metric(&b, "kv_blocks_cached", "gauge", "Unreferenced KV blocks kept for the prefix cache", e->kv_blocks_cached);
    metric(&b, "generated_tokens_total", "counter", "Tokens generated", (double)e->generated_tokens);
    metric(&b, "queue_depth", "gauge", "Requests waiting for a slot", st.queued);
    metric(&b, "slots_processing", "gauge", "Slots generating", st.active);
    metric(&b, "slots_total", "gauge", "Slots (--parallel)", st.n_slots);
    metric(&b, "tokens_per_second", "gauge", "Average tokens per second of forward time (all sequences)",
           e->busy_seconds > 0 ? (double)e->generated_tokens / e->busy_seconds : 0);
    metric(&b, "step_tokens_per_second", "gauge", "Sequences advanced per second in the last step", e->last_tok_per_s);
    metric(&b, "steps_total", "counter", "Engine steps (one forward pass over every running sequence)", (double)e->steps);
    metric(&b, "step_prepare_seconds_total", "counter", "Step time preparing the batch and sampling rows on the host",
           e->t_prepare);
    metric(&b, "step_forward_seconds_total", "counter", "Step time in the forward pass and the backend's token choice",
           e->t_forward);
    metric(&b, "step_host_choose_seconds_total", "counter", "Step time choosing tokens on the host (backend cannot)",
           e->t_host_choose);
    metric(&b, "step_finish_seconds_total", "counter",
           "Step time handing tokens to requests (stop rules, detokenization, output stage)", e->t_finish);
    metric(&b, "scheduler_between_steps_seconds_total", "counter",
           "Scheduler time between consecutive steps while requests run (upkeep, admission, lock waits)",
           st.between_steps_seconds);
    metric(&b, "scheduler_upkeep_seconds_total", "counter",
           "The part of the time between steps in queue and slot upkeep (admission, finished and cancelled requests)",
           st.upkeep_seconds);
    metric(&b, "scheduler_admit_seconds_total", "counter",
           "The part of the upkeep admitting queued requests into slots (sequence creation, engine admission)",
           st.admit_seconds);
    metric(&b, "scheduler_release_seconds_total", "counter",
           "The part of the upkeep dropping finished, cancelled and expired requests (engine release, their end)",
           st.release_seconds);
    metric(&b, "scheduler_upkeep_cpu_seconds_total", "counter",
           "CPU time of the scheduler thread in the upkeep (the rest of the upkeep it was preempted or blocked)",
           st.upkeep_cpu_seconds);
    metric(&b, "scheduler_upkeep_preemptions_total", "counter",
           "Involuntary context switches of the scheduler thread in the upkeep (preempted by other threads)",
           (double)st.upkeep_preemptions);
    metric(&b, "scheduler_upkeep_blocks_total", "counter",
           "Voluntary context switches of the scheduler thread in the upkeep (blocked on a lock)", (double)st.upkeep_blocks);
    metric(&b, "scheduler_upkeep_lock_wait_seconds_total", "counter",
           "The part of the upkeep waiting for request locks held by connection threads", st.upkeep_lock_wait_seconds);
    metric(&b, "scheduler_step_lock_wait_seconds_total", "counter",
           "Step time waiting for request locks held by connection threads (handing tokens to requests)",
           st.step_lock_wait_seconds);
    metric(&b, "scheduler_step_preemptions_total", "counter",
           "Involuntary context switches of the scheduler thread during steps (preempted by other threads)",
           (double)st.step_preemptions);
    metric(&b, "scheduler_step_blocks_total", "counter",
           "Voluntary context switches of the scheduler thread during steps (blocked on a lock or a backend wait)",
           (double)st.step_blocks);
    metric(&b, "gpu_graph_replays_total", "counter", "Step plans run by replaying a recorded graph (GPU backends)",
           (double)e->plan_replays);
    metric(&b, "gpu_graph_recordings_total", "counter",
           "Step plans recorded as a graph (a step shape's second run; GPU backends)", (double)e->plan_recordings);
    metric(&b, "plan_direct_runs_total", "counter",
           "Step plans run record by record (a step shape's first run on a GPU; every step on the CPU)",
           (double)e->plan_direct_runs);
    metric(&b, "gpu_plan_device_seconds_total", "counter",
           "Device time of the step plans (GPU backends with MLXCEL_GPU_PLAN_TIMES=1; else 0)", e->plan_device_seconds);
    metric(&b, "plans_built_total", "counter", "Step plans built (a new step shape, or one evicted from the plan cache)",
           (double)e->plans_built);
    metric(&b, "plans_evicted_total", "counter", "Step plans evicted from the plan cache to make room",
           (double)e->plans_evicted);
    metric(&b, "split_mixed_steps_total", "counter",
           "Steps with prompt chunks whose decode tokens had an attention record of their own (MLXCEL_GPU_SPLIT_MIXED=1)",
           (double)e->split_steps);
    metric(&b, "decode_steps_total", "counter", "Steps without prompt tokens (every token a sequence's next)",
           (double)e->decode_steps);
    metric(&b, "decode_rows_total", "counter", "Tokens generated in steps without prompt tokens", (double)e->decode_rows);
    metric(&b, "step_decode_forward_seconds_total", "counter",
           "The part of step_forward_seconds_total in steps without prompt tokens", e->t_forward_decode);
    metric(&b, "gpu_decode_device_seconds_total", "counter",
           "The part of gpu_plan_device_seconds_total in steps without prompt tokens", e->decode_device_seconds);
    if (b.oom) {
        srv_buf_free(&b);
        return srv_respond_error(s, c, 500, NULL, "out of memory");
    }
    struct MHD_Response *r = MHD_create_response_from_buffer(b.n, b.p, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        srv_buf_free(&b);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", "text/plain; version=0.0.4");
    srv_add_common_headers(s, c, r);
    enum MHD_Result ret = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    return ret;
}

// One token of a with_pieces answer, as llama-server writes it: {"id", "piece"}, the piece being the
// token's decoded bytes as a string when they are valid UTF-8, else the list of byte values (a
// character split across tokens). NULL when out of memory.
static json_t *token_piece(const mx_tokenizer *tok, int32_t id) {
    size_t len;
    const char *p = mx_tokenizer_token_bytes(tok, id, &len);
    json_t *piece;
    if (tok_utf8_valid((const unsigned char *)p, len)) {
        piece = json_stringn(p ? p : "", len);
    } else {
        piece = json_array();
        for (size_t i = 0; piece && i < len; i++)
            if (json_array_append_new(piece, json_integer((unsigned char)p[i]))) {
                json_decref(piece);
                piece = NULL;
            }
    }
    return piece ? json_pack("{s:i, s:o}", "id", (int)id, "piece", piece) : NULL;
}

// {"content": text, "with_pieces"?: bool, "add_special"?: false}. Special tokens written in the text
// are matched; no BOS or other special token is added (add_special true is a 400: the server's own
// prompts never get one either, their chat templates write them as text).
enum MHD_Result srv_route_tokenize(mx_server *s, struct MHD_Connection *c, json_t *body) {
    static const char *const fields[] = {"content", "with_pieces", "add_special", NULL};
    const char *unknown = srv_unknown_field(body, fields);
    if (unknown) return srv_respond_error(s, c, 400, "invalid_request", "'%s' is not supported by /tokenize", unknown);
    json_t *content = json_object_get(body, "content"), *wp = json_object_get(body, "with_pieces");
    json_t *as = json_object_get(body, "add_special");
    if (!json_is_string(content)) return srv_respond_error(s, c, 400, "invalid_request", "'content' must be a string");
    if (wp && !json_is_null(wp) && !json_is_boolean(wp))
        return srv_respond_error(s, c, 400, "invalid_request", "'with_pieces' must be a boolean");
    if (as && !json_is_null(as) && !json_is_boolean(as))
        return srv_respond_error(s, c, 400, "invalid_request", "'add_special' must be a boolean");
    if (json_is_true(as))
        return srv_respond_error(s, c, 400, "invalid_request",
                                 "'add_special': true is not supported: /tokenize adds no BOS or other special token");
    int32_t *ids = NULL;
    size_t n = 0;
    mx_error err = {{0}};
    if (mx_tokenizer_encode(s->tok, json_string_value(content), json_string_length(content), &ids, &n, &err))
        return srv_respond_error(s, c, 400, "invalid_request", "tokenizing: %s", err.msg);
    json_t *arr = json_array();
    bool oom = !arr;
    for (size_t i = 0; i < n && !oom; i++)
        oom = json_array_append_new(arr, json_is_true(wp) ? token_piece(s->tok, ids[i]) : json_integer(ids[i])) != 0;
    free(ids);
    if (oom) {
        json_decref(arr);
        return srv_respond_error(s, c, 500, NULL, "out of memory");
    }
    return srv_respond_json(s, c, 200, json_pack("{s:o}", "tokens", arr));
}

enum MHD_Result srv_route_detokenize(mx_server *s, struct MHD_Connection *c, json_t *body) {
    static const char *const fields[] = {"tokens", NULL};
    const char *unknown = srv_unknown_field(body, fields);
    if (unknown) return srv_respond_error(s, c, 400, "invalid_request", "'%s' is not supported by /detokenize", unknown);
    json_t *tokens = json_object_get(body, "tokens");
    if (!json_is_array(tokens)) return srv_respond_error(s, c, 400, "invalid_request", "'tokens' must be an array");
    size_t n = json_array_size(tokens), i;
    int32_t *ids = malloc(sizeof(int32_t) * (n ? n : 1));
    if (!ids) return srv_respond_error(s, c, 500, NULL, "out of memory");
    int32_t V = mx_tokenizer_vocab_size(s->tok);
    json_t *v;
    json_array_foreach(tokens, i, v) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= V) {
            free(ids);
            return srv_respond_error(s, c, 400, "invalid_request", "'tokens[%zu]' must be a token id in [0, %d)", i, V);
        }
        ids[i] = (int32_t)json_integer_value(v);
    }
    char *text = mx_tokenizer_decode(s->tok, ids, n, false);
    free(ids);
    if (!text) return srv_respond_error(s, c, 500, NULL, "out of memory");
    json_t *resp = json_pack("{s:s}", "content", text);
    free(text);
    return srv_respond_json(s, c, 200, resp);
}

// POST /apply-template (as llama-server): {"messages", "add_generation_prompt"?, "tools"?,
// "chat_template_kwargs"?, "reasoning_effort"?} -> {"prompt": the text the model would get}. Messages and tools are
// validated as in /v1/chat/completions.
enum MHD_Result srv_route_apply_template(mx_server *s, struct MHD_Connection *c, json_t *body) {
    static const char *const fields[] = {"messages", "add_generation_prompt", "tools", "chat_template_kwargs",
                                         "reasoning_effort", "model", NULL};
    const char *key = srv_unknown_field(body, fields);
    if (key) return srv_respond_error(s, c, 400, "invalid_request", "'%s' is not supported by /apply-template", key);
    json_t *v;
    json_t *agp = json_object_get(body, "add_generation_prompt");
    if (agp && !json_is_boolean(agp))
        return srv_respond_error(s, c, 400, "invalid_request", "'add_generation_prompt' must be a boolean");
    if (!s->tmpl) return srv_respond_error(s, c, 400, "invalid_request", "the model has no chat template");
    json_t *req = json_object();
    json_object_foreach(body, key, v) {
        if (strcmp(key, "add_generation_prompt") != 0) json_object_set(req, key, v);
    }
    srv_request r;
    char msg[1024];
    if (srv_request_parse(req, SRV_KIND_CHAT, &s->o.sampling, &r, msg, sizeof msg)) {
        json_decref(req);
        return srv_respond_error(s, c, 400, "invalid_request", "%s", msg);
    }
    mx_error err = {{0}};
    if (r.reasoning_effort && s->calls != SRV_CALLS_HARMONY) {
        srv_request_clear(&r);
        json_decref(req);
        return srv_respond_error(s, c, 400, "invalid_request", "'reasoning_effort' is supported for gpt-oss (harmony) models only");
    }
    if (s->calls == SRV_CALLS_HARMONY) srv_harmony_prepare_messages(r.messages);
    bool oom;
    json_t *vars = srv_request_template_vars(&r, &oom);
    char *text = oom ? NULL : mx_chat_template_render(s->tmpl, r.messages, r.tools, agp ? json_is_true(agp) : true, vars, &err);
    if (oom) snprintf(err.msg, sizeof err.msg, "out of memory");
    json_decref(vars);
    srv_request_clear(&r);
    json_decref(req);
    if (!text) return srv_respond_error(s, c, 400, "invalid_request", "rendering the chat template: %s", err.msg);
    json_t *resp = json_pack("{s:s}", "prompt", text);
    free(text);
    return srv_respond_json(s, c, 200, resp);
}
