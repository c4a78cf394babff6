// SPDX-License-Identifier: MIT
// OpenAI request validation (see srv_request.h).
#include "server/srv_request.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int bad(char *msg, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int bad(char *msg, size_t cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, cap, fmt, ap);
    va_end(ap);
    return -1;
}

// Reads an optional number field into *out within [lo, hi]. null counts as absent.
static int get_number(json_t *body, const char *key, double lo, double hi, float *out, char *msg, size_t cap) {
    json_t *v = json_object_get(body, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_number(v)) return bad(msg, cap, "'%s' must be a number", key);
    double x = json_number_value(v);
    if (!isfinite(x) || x < lo || x > hi) return bad(msg, cap, "'%s' must be in [%g, %g]", key, lo, hi);
    *out = (float)x;
    return 0;
}

static int get_int(json_t *body, const char *key, long long lo, long long hi, long long *out, bool *present, char *msg,
                   size_t cap) {
    json_t *v = json_object_get(body, key);
    if (present) *present = false;
    if (!v || json_is_null(v)) return 0;
    if (!json_is_integer(v)) return bad(msg, cap, "'%s' must be an integer", key);
    long long x = json_integer_value(v);
    if (x < lo || x > hi) return bad(msg, cap, "'%s' must be in [%lld, %lld]", key, lo, hi);
    *out = x;
    if (present) *present = true;
    return 0;
}

static int get_bool(json_t *body, const char *key, bool *out, char *msg, size_t cap) {
    json_t *v = json_object_get(body, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_boolean(v)) return bad(msg, cap, "'%s' must be a boolean", key);
    *out = json_is_true(v);
    return 0;
}

// Copies messages, checking roles and joining list-of-parts content into one string.
static json_t *normalize_messages(json_t *msgs, char *msg, size_t cap) {
    if (!msgs) return bad(msg, cap, "'messages' is required"), NULL;
    if (!json_is_array(msgs) || json_array_size(msgs) == 0)
        return bad(msg, cap, "'messages' must be a non-empty array"), NULL;
    json_t *copy = json_deep_copy(msgs);
    size_t i;
    json_t *m;
    json_array_foreach(copy, i, m) {
        if (!json_is_object(m)) {
            json_decref(copy);
            return bad(msg, cap, "'messages[%zu]' must be an object", i), NULL;
        }
        if (!json_is_string(json_object_get(m, "role"))) {
            json_decref(copy);
            return bad(msg, cap, "'messages[%zu].role' must be a string", i), NULL;
        }
        json_t *c = json_object_get(m, "content");
        if (!c || json_is_null(c) || json_is_string(c)) continue;
        if (!json_is_array(c)) {
            json_decref(copy);
            return bad(msg, cap, "'messages[%zu].content' must be a string or an array of parts", i), NULL;
        }
        size_t k, total = 0;
        json_t *part;
        json_array_foreach(c, k, part) {
            json_t *t = json_is_object(part) ? json_object_get(part, "text") : NULL;
            if (!json_is_string(t)) {
                json_decref(copy);
                return bad(msg, cap, "'messages[%zu].content[%zu]' must be a text part", i, k), NULL;
            }
            total += json_string_length(t);
        }
        char *joined = malloc(total + 1);
        if (!joined) {
            json_decref(copy);
            return bad(msg, cap, "out of memory"), NULL;
        }
        size_t at = 0;
        json_array_foreach(c, k, part) {
            json_t *t = json_object_get(part, "text");
            memcpy(joined + at, json_string_value(t), json_string_length(t));
            at += json_string_length(t);
        }
        joined[at] = 0;
        json_object_set_new(m, "content", json_stringn(joined, at));
        free(joined);
    }
    return copy;
}

static int parse_prompt(json_t *body, srv_request *r, char *msg, size_t cap) {
    json_t *p = json_object_get(body, "prompt");
    if (!p) return bad(msg, cap, "'prompt' is required");
    if (json_is_array(p) && json_array_size(p) == 1 && json_is_string(json_array_get(p, 0))) p = json_array_get(p, 0);
    if (json_is_string(p)) {
        r->prompt = json_string_value(p);
        return 0;
    }
    if (!json_is_array(p) || json_array_size(p) == 0)
        return bad(msg, cap, "'prompt' must be a string or a non-empty array of token ids");
    size_t n = json_array_size(p), i;
    json_t *v;
    r->prompt_tokens = malloc(sizeof(int32_t) * n);
    if (!r->prompt_tokens) return bad(msg, cap, "out of memory");
    json_array_foreach(p, i, v) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX)
            return bad(msg, cap, "'prompt[%zu]' must be a token id (batched prompts are not supported)", i);
        r->prompt_tokens[i] = (int32_t)json_integer_value(v);
    }
    r->n_prompt_tokens = (int)n;
    return 0;
}

static int parse_stop(json_t *body, srv_request *r, char *msg, size_t cap) {
    json_t *s = json_object_get(body, "stop");
    if (!s || json_is_null(s)) return 0;
    if (json_is_string(s)) {
        r->stops[r->n_stops++] = json_string_value(s);
        return 0;
    }
    if (!json_is_array(s)) return bad(msg, cap, "'stop' must be a string or an array of strings");
    if (json_array_size(s) > 16) return bad(msg, cap, "'stop' holds at most 16 strings");
    size_t i;
    json_t *v;
    json_array_foreach(s, i, v) {
        if (!json_is_string(v)) return bad(msg, cap, "'stop[%zu]' must be a string", i);
        r->stops[r->n_stops++] = json_string_value(v);
    }
    return 0;
}

static int parse_logprobs(json_t *body, srv_request *r, char *msg, size_t cap) {
    long long k = 0;
    bool has;
    if (r->kind == SRV_KIND_CHAT) {
        bool on = false;
        if (get_bool(body, "logprobs", &on, msg, cap)) return -1;
        if (get_int(body, "top_logprobs", 0, 20, &k, &has, msg, cap)) return -1;
        r->n_logprobs = on ? (int)k : -1;
        return 0;
    }
    json_t *v = json_object_get(body, "logprobs");
    if (json_is_boolean(v)) {
        r->n_logprobs = json_is_true(v) ? 0 : -1;
        return 0;
    }
    if (get_int(body, "logprobs", 0, 20, &k, &has, msg, cap)) return -1;
    r->n_logprobs = has ? (int)k : -1;
    return 0;
}

static int parse_fields(json_t *body, srv_request *r, char *msg, size_t cap) {
    json_t *model = json_object_get(body, "model");
    if (model && !json_is_null(model) && !json_is_string(model)) return bad(msg, cap, "'model' must be a string");
    r->model = json_string_value(model);
    if (get_bool(body, "stream", &r->stream, msg, cap)) return -1;
    if (get_bool(body, "ignore_eos", &r->ignore_eos, msg, cap)) return -1;
    json_t *so = json_object_get(body, "stream_options");
    if (so && !json_is_null(so)) {
        if (!json_is_object(so)) return bad(msg, cap, "'stream_options' must be an object");
        if (get_bool(so, "include_usage", &r->include_usage, msg, cap)) return -1;
    }
    long long n = 1, mt = -1;
    if (get_int(body, "n", 1, 1000000, &n, NULL, msg, cap)) return -1;
    if (n != 1) return bad(msg, cap, "'n' must be 1 (several choices are not supported)");
    if (get_int(body, "max_tokens", 1, 1 << 30, &mt, NULL, msg, cap)) return -1;
    if (get_int(body, "max_completion_tokens", 1, 1 << 30, &mt, NULL, msg, cap)) return -1;
    r->max_tokens = (int)mt;
    mx_sampling *s = &r->sampling;
    if (get_number(body, "temperature", 0, 100, &s->temp, msg, cap) ||
        get_number(body, "top_p", 0, 1, &s->top_p, msg, cap) ||
        get_number(body, "min_p", 0, 1, &s->min_p, msg, cap) ||
        get_number(body, "repetition_penalty", 0.01, 100, &s->repetition_penalty, msg, cap) ||
        get_number(body, "presence_penalty", -2, 2, &s->presence_penalty, msg, cap) ||
        get_number(body, "frequency_penalty", -2, 2, &s->frequency_penalty, msg, cap))
        return -1;
    long long k = 0, seed = 0;
    bool has = false;
    if (get_int(body, "top_k", -1, 1 << 24, &k, &has, msg, cap)) return -1;
    if (has) s->top_k = k < 0 ? 0 : (int)k;
    if (get_int(body, "repetition_context_size", 1, 1 << 20, &k, &has, msg, cap)) return -1;
    if (has) s->repetition_context = (int)k;
    if (get_int(body, "seed", INT64_MIN, INT64_MAX, &seed, &has, msg, cap)) return -1;
    if (has) {
        s->seed = (uint64_t)seed;
        s->has_seed = true;
    }
    if (parse_stop(body, r, msg, cap) || parse_logprobs(body, r, msg, cap)) return -1;
    if (r->kind == SRV_KIND_COMPLETION) return parse_prompt(body, r, msg, cap);
    if (!(r->messages = normalize_messages(json_object_get(body, "messages"), msg, cap))) return -1;
    json_t *tools = json_object_get(body, "tools");
    if (tools && !json_is_null(tools)) {
        if (!json_is_array(tools)) return bad(msg, cap, "'tools' must be an array");
        if (json_array_size(tools) > 0) r->tools = tools;
    }
    json_t *kw = json_object_get(body, "chat_template_kwargs");
    if (kw && !json_is_null(kw)) {
        if (!json_is_object(kw)) return bad(msg, cap, "'chat_template_kwargs' must be an object");
        r->template_kwargs = kw;
    }
    return 0;
}

int srv_request_parse(json_t *body, srv_kind kind, const mx_sampling *defaults, srv_request *r, char *msg, size_t cap) {
    *r = (srv_request){.kind = kind, .max_tokens = -1, .sampling = *defaults, .n_logprobs = -1};
    if (!json_is_object(body)) return bad(msg, cap, "the request body must be a JSON object");
    if (parse_fields(body, r, msg, cap)) {
        srv_request_clear(r);
        return -1;
    }
    return 0;
}

void srv_request_clear(srv_request *r) {
    json_decref(r->messages);
    free(r->prompt_tokens);
    r->messages = NULL;
    r->prompt_tokens = NULL;
}
