// SPDX-License-Identifier: MIT
// The small routes: GET /v1/models, GET /health, GET /metrics (Prometheus text format), and the
// llama-server style POST /tokenize ({"content": text} -> {"tokens": [...]}) and POST /detokenize
// ({"tokens": [...]} -> {"content": text}).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/srv_buf.h"
#include "server/srv_internal.h"

enum MHD_Result srv_route_models(mx_server *s, struct MHD_Connection *c) {
    json_t *m = json_pack("{s:s, s:s, s:I, s:s}", "id", s->model_id, "object", "model", "created", (json_int_t)s->started,
                          "owned_by", "mlxcel");
    return srv_respond_json(s, c, 200, json_pack("{s:s, s:[o]}", "object", "list", "data", m));
}

enum MHD_Result srv_route_health(mx_server *s, struct MHD_Connection *c) {
    srv_stats st;
    srv_sched_stats(s->sched, &st);
    return srv_respond_json(s, c, 200,
                            json_pack("{s:s, s:i, s:i, s:i}", "status", "ok", "slots_idle", st.n_slots - st.active,
                                      "slots_processing", st.active, "queue", st.queued));
}

static void metric(srv_buf *b, const char *name, const char *type, const char *help, double v) {
    srv_buf_printf(b, "# HELP mlxcel_%s %s\n# TYPE mlxcel_%s %s\nmlxcel_%s %.17g\n", name, help, name, type, name, v);
}

enum MHD_Result srv_route_metrics(mx_server *s, struct MHD_Connection *c) {
    srv_stats st;
    srv_sched_stats(s->sched, &st);
    srv_buf b = {0};
    metric(&b, "http_requests_total", "counter", "HTTP requests received", (double)atomic_load(&s->http_requests));
    metric(&b, "http_errors_total", "counter", "HTTP answers with an error status", (double)atomic_load(&s->http_errors));
    metric(&b, "requests_total", "counter", "Generation requests admitted into a slot", (double)st.requests);
    metric(&b, "requests_cancelled_total", "counter", "Generations cancelled (client gone)", (double)st.cancelled);
    metric(&b, "prompt_tokens_total", "counter", "Prompt tokens processed", (double)st.prompt_tokens);
    metric(&b, "generated_tokens_total", "counter", "Tokens generated", (double)st.generated_tokens);
    metric(&b, "queue_depth", "gauge", "Requests waiting for a slot", st.queued);
    metric(&b, "slots_processing", "gauge", "Slots generating", st.active);
    metric(&b, "slots_total", "gauge", "Slots (--parallel)", st.n_slots);
    metric(&b, "tokens_per_second", "gauge", "Average tokens per second of forward time (all sequences)",
           st.busy_seconds > 0 ? (double)st.generated_tokens / st.busy_seconds : 0);
    metric(&b, "step_tokens_per_second", "gauge", "Sequences advanced per second in the last step", st.last_tok_per_s);
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
    enum MHD_Result ret = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    return ret;
}

enum MHD_Result srv_route_tokenize(mx_server *s, struct MHD_Connection *c, json_t *body) {
    json_t *content = json_object_get(body, "content");
    if (!json_is_string(content)) return srv_respond_error(s, c, 400, "invalid_request", "'content' must be a string");
    int32_t *ids = NULL;
    size_t n = 0;
    mx_error err = {{0}};
    if (mx_tokenizer_encode(s->tok, json_string_value(content), json_string_length(content), &ids, &n, &err))
        return srv_respond_error(s, c, 400, "invalid_request", "tokenizing: %s", err.msg);
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++) json_array_append_new(arr, json_integer(ids[i]));
    free(ids);
    return srv_respond_json(s, c, 200, json_pack("{s:o}", "tokens", arr));
}

enum MHD_Result srv_route_detokenize(mx_server *s, struct MHD_Connection *c, json_t *body) {
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
