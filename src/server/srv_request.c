// SPDX-License-Identifier: MIT
// OpenAI request validation (see srv_request.h): every field of a completions or chat request is
// type- and range-checked into srv_request, unknown or unsupported fields are refused by name, and
// messages, stops, logprobs, logit_bias, response_format and tools are normalized.
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
        if (json_string_length(s) > SRV_MAX_STOP_BYTES)
            return bad(msg, cap, "'stop' strings hold at most %d bytes", SRV_MAX_STOP_BYTES);
        r->stops[r->n_stops++] = json_string_value(s);
        return 0;
    }
    if (!json_is_array(s)) return bad(msg, cap, "'stop' must be a string or an array of strings");
    if (json_array_size(s) > 16) return bad(msg, cap, "'stop' holds at most 16 strings");
    size_t i;
    json_t *v;
    json_array_foreach(s, i, v) {
        if (!json_is_string(v)) return bad(msg, cap, "'stop[%zu]' must be a string", i);
        if (json_string_length(v) > SRV_MAX_STOP_BYTES)
            return bad(msg, cap, "'stop[%zu]' holds more than %d bytes", i, SRV_MAX_STOP_BYTES);
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

// Fields of each kind: everything the parser below reads, plus harmless ones that change nothing.
static const char *const chat_fields[] = {
    "model", "messages", "stream", "stream_options", "n", "max_tokens", "max_completion_tokens", "temperature",
    "top_p", "min_p", "top_k", "repetition_penalty", "repetition_context_size", "presence_penalty",
    "frequency_penalty", "seed", "stop", "logprobs", "top_logprobs", "tools", "tool_choice", "parallel_tool_calls",
    "response_format", "grammar", "logit_bias", "chat_template_kwargs", "reasoning_effort", "ignore_eos", "user",
    "metadata", "store", "service_tier", NULL};
static const char *const completion_fields[] = {
    "model", "prompt", "stream", "stream_options", "n", "max_tokens", "temperature", "top_p", "min_p", "top_k",
    "repetition_penalty", "repetition_context_size", "presence_penalty", "frequency_penalty", "seed", "stop",
    "logprobs", "response_format", "grammar", "logit_bias", "ignore_eos", "user", "metadata", "service_tier", NULL};

const char *srv_unknown_field(json_t *body, const char *const *known) {
    const char *key;
    json_t *v;
    json_object_foreach(body, key, v) {
        bool ok = false;
        for (const char *const *k = known; *k && !ok; k++) ok = strcmp(*k, key) == 0;
        if (!ok) return key;
    }
    return NULL;
}

static int check_fields(json_t *body, srv_kind kind, char *msg, size_t cap) {
    const char *unknown = srv_unknown_field(body, kind == SRV_KIND_CHAT ? chat_fields : completion_fields);
    if (unknown) return bad(msg, cap, "'%s' is not supported by this server", unknown);
    json_t *store = json_object_get(body, "store");
    if (store && !json_is_false(store) && !json_is_null(store)) return bad(msg, cap, "'store' must be false (completions are not stored)");
    json_t *meta = json_object_get(body, "metadata");
    if (meta && !json_is_object(meta) && !json_is_null(meta)) return bad(msg, cap, "'metadata' must be an object");
    json_t *user = json_object_get(body, "user");
    if (user && !json_is_string(user) && !json_is_null(user)) return bad(msg, cap, "'user' must be a string");
    json_t *tier = json_object_get(body, "service_tier");
    if (tier && !json_is_null(tier) && (!json_is_string(tier) || (strcmp(json_string_value(tier), "auto") != 0 &&
                                                                  strcmp(json_string_value(tier), "default") != 0)))
        return bad(msg, cap, "'service_tier' must be \"auto\" or \"default\"");
    return 0;
}

static int parse_logit_bias(json_t *body, srv_request *r, char *msg, size_t cap) {
    json_t *lb = json_object_get(body, "logit_bias");
    if (!lb || json_is_null(lb)) return 0;
    if (!json_is_object(lb)) return bad(msg, cap, "'logit_bias' must be an object of token id -> bias");
    size_t n = json_object_size(lb);
    if (n > 1024) return bad(msg, cap, "'logit_bias' holds at most 1024 tokens");
    r->bias_ids = malloc(sizeof *r->bias_ids * (n + 1));
    r->bias_values = malloc(sizeof *r->bias_values * (n + 1));
    if (!r->bias_ids || !r->bias_values) return bad(msg, cap, "out of memory");
    const char *key;
    json_t *v;
    json_object_foreach(lb, key, v) {
        char *end;
        long id = strtol(key, &end, 10);
        if (!*key || *end || id < 0 || id > INT32_MAX) return bad(msg, cap, "'logit_bias' key '%s' is not a token id", key);
        if (!json_is_number(v) || json_number_value(v) < -100 || json_number_value(v) > 100)
            return bad(msg, cap, "'logit_bias[%s]' must be a number in [-100, 100]", key);
        r->bias_ids[r->n_bias] = (int32_t)id;
        r->bias_values[r->n_bias++] = (float)json_number_value(v);
    }
    return 0;
}

static int parse_response_format(json_t *body, srv_request *r, char *msg, size_t cap) {
    json_t *g = json_object_get(body, "grammar");
    if (g && !json_is_null(g)) {
        if (!json_is_string(g)) return bad(msg, cap, "'grammar' must be a string (GBNF)");
        r->grammar = json_string_value(g);
    }
    json_t *rf = json_object_get(body, "response_format");
    if (!rf || json_is_null(rf)) return 0;
    if (!json_is_object(rf)) return bad(msg, cap, "'response_format' must be an object");
    const char *type = json_string_value(json_object_get(rf, "type"));
    if (!type) return bad(msg, cap, "'response_format.type' must be a string");
    const char *key;
    json_t *v;
    if (strcmp(type, "text") == 0) {
        json_object_foreach(rf, key, v) {
            if (strcmp(key, "type") != 0) return bad(msg, cap, "'response_format.%s' is not supported with type text", key);
        }
        return 0;
    }
    if (r->grammar) return bad(msg, cap, "'grammar' and a JSON 'response_format' cannot be combined");
    r->json_object = true;
    if (strcmp(type, "json_object") == 0) {
        json_object_foreach(rf, key, v) {
            if (strcmp(key, "type") == 0) continue;
            if (strcmp(key, "schema") != 0) return bad(msg, cap, "'response_format.%s' is not supported", key);
            if (!json_is_object(v)) return bad(msg, cap, "'response_format.schema' must be an object");
            r->json_schema = v;
        }
        return 0;
    }
    if (strcmp(type, "json_schema") != 0)
        return bad(msg, cap, "'response_format.type' must be text, json_object or json_schema");
    json_t *js = json_object_get(rf, "json_schema");
    if (!json_is_object(js)) return bad(msg, cap, "'response_format.json_schema' must be an object");
    json_object_foreach(rf, key, v) {
        if (strcmp(key, "type") != 0 && strcmp(key, "json_schema") != 0)
            return bad(msg, cap, "'response_format.%s' is not supported", key);
    }
    json_object_foreach(js, key, v) {
        if (strcmp(key, "schema") == 0 || strcmp(key, "name") == 0 || strcmp(key, "description") == 0 ||
            strcmp(key, "strict") == 0)
            continue;
        return bad(msg, cap, "'response_format.json_schema.%s' is not supported", key);
    }
    json_t *schema = json_object_get(js, "schema");
    if (!schema) return bad(msg, cap, "'response_format.json_schema.schema' is required");
    if (!json_is_object(schema) && !json_is_boolean(schema))
        return bad(msg, cap, "'response_format.json_schema.schema' must be a JSON schema");
    r->json_schema = schema;
    return 0;
}

static int parse_tool_choice(json_t *body, srv_request *r, char *msg, size_t cap) {
    r->parallel_tool_calls = true;
    if (get_bool(body, "parallel_tool_calls", &r->parallel_tool_calls, msg, cap)) return -1;
    json_t *tc = json_object_get(body, "tool_choice");
    if (!tc || json_is_null(tc)) return 0;
    if (json_is_string(tc)) {
        const char *m = json_string_value(tc);
        if (strcmp(m, "auto") == 0) r->tool_choice = SRV_TOOLS_AUTO;
        else if (strcmp(m, "none") == 0) r->tool_choice = SRV_TOOLS_NONE;
        else if (strcmp(m, "required") == 0) r->tool_choice = SRV_TOOLS_REQUIRED;
        else return bad(msg, cap, "'tool_choice' must be none, auto, required or {\"type\": \"function\", ...}");
    } else {
        const char *name = json_string_value(json_object_get(json_object_get(tc, "function"), "name"));
        const char *type = json_string_value(json_object_get(tc, "type"));
        if (!json_is_object(tc) || !type || strcmp(type, "function") != 0 || !name)
            return bad(msg, cap, "'tool_choice' object must be {\"type\": \"function\", \"function\": {\"name\": ...}}");
        r->tool_choice = SRV_TOOLS_NAMED;
        r->tool_name = name;
    }
    if (r->tool_choice == SRV_TOOLS_REQUIRED || r->tool_choice == SRV_TOOLS_NAMED) {
        if (!r->tools) return bad(msg, cap, "'tool_choice' %s needs 'tools'", r->tool_choice == SRV_TOOLS_NAMED ? "naming a function" : "required");
        if (r->json_object || r->grammar) return bad(msg, cap, "a forced 'tool_choice' cannot be combined with 'response_format' or 'grammar'");
    }
    if (r->tool_choice == SRV_TOOLS_NAMED) {
        size_t i;
        json_t *t;
        bool found = false;
        json_array_foreach(r->tools, i, t) {
            const char *n = json_string_value(json_object_get(json_object_get(t, "function"), "name"));
            found |= n && strcmp(n, r->tool_name) == 0;
        }
        if (!found) return bad(msg, cap, "'tool_choice' names '%s', which is not in 'tools'", r->tool_name);
    }
    return 0;
}

static int parse_tools(json_t *body, srv_request *r, char *msg, size_t cap) {
    json_t *tools = json_object_get(body, "tools");
    if (!tools || json_is_null(tools)) return 0;
    if (!json_is_array(tools)) return bad(msg, cap, "'tools' must be an array");
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        json_t *f = json_object_get(t, "function");
        const char *type = json_string_value(json_object_get(t, "type"));
        if (!json_is_object(t) || !type || strcmp(type, "function") != 0 || !json_is_object(f) ||
            !json_is_string(json_object_get(f, "name")))
            return bad(msg, cap, "'tools[%zu]' must be {\"type\": \"function\", \"function\": {\"name\", ...}}", i);
        json_t *params = json_object_get(f, "parameters");
        if (params && !json_is_object(params)) return bad(msg, cap, "'tools[%zu].function.parameters' must be a JSON schema", i);
    }
    if (json_array_size(tools) > 0) r->tools = tools;
    return 0;
}

static int parse_fields(json_t *body, srv_request *r, char *msg, size_t cap) {
    if (check_fields(body, r->kind, msg, cap)) return -1;
    json_t *model = json_object_get(body, "model");
    if (model && !json_is_null(model) && !json_is_string(model)) return bad(msg, cap, "'model' must be a string");
    r->model = json_string_value(model);
    if (get_bool(body, "stream", &r->stream, msg, cap)) return -1;
    if (get_bool(body, "ignore_eos", &r->ignore_eos, msg, cap)) return -1;
    json_t *so = json_object_get(body, "stream_options");
    if (so && !json_is_null(so)) {
        if (!json_is_object(so)) return bad(msg, cap, "'stream_options' must be an object");
        if (get_bool(so, "include_usage", &r->include_usage, msg, cap)) return -1;
        const char *key;
        json_t *v;
        json_object_foreach(so, key, v) {
            if (strcmp(key, "include_usage") != 0) return bad(msg, cap, "'stream_options.%s' is not supported", key);
        }
    }
    long long n = 1, mt = -1, mct = -1;
    bool has_mt, has_mct;
    if (get_int(body, "n", 1, SRV_MAX_CHOICES, &n, NULL, msg, cap)) return -1;
    r->n = (int)n;
    // max_completion_tokens is OpenAI's newer name for max_tokens (chat): either, or both when equal.
    if (get_int(body, "max_tokens", 1, 1 << 30, &mt, &has_mt, msg, cap)) return -1;
    if (get_int(body, "max_completion_tokens", 1, 1 << 30, &mct, &has_mct, msg, cap)) return -1;
    if (has_mt && has_mct && mt != mct)
        return bad(msg, cap, "'max_tokens' (%lld) and 'max_completion_tokens' (%lld) differ: give one of them", mt, mct);
    r->max_tokens = (int)(has_mct ? mct : mt);
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
    if (parse_stop(body, r, msg, cap) || parse_logprobs(body, r, msg, cap) || parse_logit_bias(body, r, msg, cap) ||
        parse_response_format(body, r, msg, cap))
        return -1;
    if (r->kind == SRV_KIND_COMPLETION) return parse_prompt(body, r, msg, cap);
    if (!(r->messages = normalize_messages(json_object_get(body, "messages"), msg, cap))) return -1;
    if (parse_tools(body, r, msg, cap) || parse_tool_choice(body, r, msg, cap)) return -1;
    json_t *kw = json_object_get(body, "chat_template_kwargs");
    if (kw && !json_is_null(kw)) {
        if (!json_is_object(kw)) return bad(msg, cap, "'chat_template_kwargs' must be an object");
        r->template_kwargs = kw;
    }
    json_t *effort = json_object_get(body, "reasoning_effort");
    if (effort && !json_is_null(effort)) {
        const char *e = json_string_value(effort);
        if (!e || (strcmp(e, "low") != 0 && strcmp(e, "medium") != 0 && strcmp(e, "high") != 0))
            return bad(msg, cap, "'reasoning_effort' must be \"low\", \"medium\" or \"high\"");
        if (json_object_get(kw, "reasoning_effort"))
            return bad(msg, cap, "'reasoning_effort' is given twice (also in 'chat_template_kwargs')");
        r->reasoning_effort = e;
    }
    return 0;
}

int srv_request_parse(json_t *body, srv_kind kind, const mx_sampling *defaults, srv_request *r, char *msg, size_t cap) {
    *r = (srv_request){.kind = kind, .max_tokens = -1, .sampling = *defaults, .n_logprobs = -1, .n = 1};
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
    free(r->bias_ids);
    free(r->bias_values);
    r->messages = NULL;
    r->prompt_tokens = NULL;
    r->bias_ids = NULL;
    r->bias_values = NULL;
}

json_t *srv_request_template_vars(const srv_request *r, bool *oom) {
    *oom = false;
    if (!r->reasoning_effort) return r->template_kwargs ? json_incref(r->template_kwargs) : NULL;
    json_t *v = r->template_kwargs ? json_copy(r->template_kwargs) : json_object();
    if (!v || json_object_set_new(v, "reasoning_effort", json_string(r->reasoning_effort))) {
        json_decref(v);
        *oom = true;
        return NULL;
    }
    return v;
}
