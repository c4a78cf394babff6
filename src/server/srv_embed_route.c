// SPDX-License-Identifier: MIT
// POST /v1/embeddings (OpenAI shape): {"input": a string, a list of strings, a list of token ids or
// a list of lists of token ids; "model"?, "encoding_format"? ("float" or "base64": the float32
// values little-endian, base64-encoded), "dimensions"? (1..hidden size: the first values,
// renormalized), "user"?} -> {"object": "list", "data": [{"object": "embedding", "index",
// "embedding"}], "model", "usage": {"prompt_tokens", "total_tokens"}}. Anything else is a 400.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/srv_internal.h"
#include "server/srv_reply.h"

#define MAX_INPUTS 256

static char *base64(const unsigned char *p, size_t n) {
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *out = malloc(4 * ((n + 2) / 3) + 1), *o = out;
    if (!out) return NULL;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0) | (i + 2 < n ? p[i + 2] : 0);
        *o++ = tab[v >> 18 & 63];
        *o++ = tab[v >> 12 & 63];
        *o++ = i + 1 < n ? tab[v >> 6 & 63] : '=';
        *o++ = i + 2 < n ? tab[v & 63] : '=';
    }
    *o = 0;
    return out;
}

// True when v is a non-empty array of token ids.
static bool is_id_list(json_t *v) {
    if (!json_is_array(v) || json_array_size(v) == 0) return false;
    size_t i;
    json_t *x;
    json_array_foreach(v, i, x) if (!json_is_integer(x)) return false;
    return true;
}

typedef struct inputs {
    int n;
    int32_t *tok[MAX_INPUTS];
    int len[MAX_INPUTS];
} inputs;

static void inputs_free(inputs *in) {
    for (int i = 0; i < in->n; i++) free(in->tok[i]);
}

// Tokenizes / copies one input. Returns 0 or 400 with msg.
static unsigned add_input(mx_server *s, inputs *in, json_t *v, const char *where, char *msg, size_t cap) {
    int i = in->n++;
    int V = mx_model_config(s->model)->vocab_size, max = srv_embedder_max_tokens(s->embedder);
    if (json_is_string(v)) {
        mx_error err = {{0}};
        size_t n = 0;
        if (mx_tokenizer_encode(s->tok, json_string_value(v), json_string_length(v), &in->tok[i], &n, &err))
            return snprintf(msg, cap, "%s: %s", where, err.msg), 400;
        in->len[i] = (int)n;
    } else {
        size_t n = json_array_size(v), k;
        json_t *x;
        if (!(in->tok[i] = malloc(sizeof(int32_t) * (n + 1)))) return snprintf(msg, cap, "out of memory"), 500;
        json_array_foreach(v, k, x) {
            json_int_t id = json_integer_value(x);
            if (id < 0 || id >= V) return snprintf(msg, cap, "%s[%zu]: token id %lld is outside the vocabulary (%d)", where, k, (long long)id, V), 400;
            in->tok[i][k] = (int32_t)id;
        }
        in->len[i] = (int)n;
    }
    if (in->len[i] == 0) return snprintf(msg, cap, "%s is empty", where), 400;
    if (in->len[i] > max)
        return snprintf(msg, cap, "%s has %d tokens; at most %d fit (see --ctx)", where, in->len[i], max), 400;
    return 0;
}

static unsigned parse_inputs(mx_server *s, json_t *input, inputs *in, char *msg, size_t cap) {
    if (!input) return snprintf(msg, cap, "'input' is required"), 400;
    if (json_is_string(input) || is_id_list(input)) return add_input(s, in, input, "'input'", msg, cap);
    if (!json_is_array(input) || json_array_size(input) == 0)
        return snprintf(msg, cap, "'input' must be a string, a list of strings, or token ids"), 400;
    if (json_array_size(input) > MAX_INPUTS) return snprintf(msg, cap, "'input' holds at most %d items", MAX_INPUTS), 400;
    size_t i;
    json_t *v;
    json_array_foreach(input, i, v) {
        char where[48];
        snprintf(where, sizeof where, "'input[%zu]'", i);
        if (!json_is_string(v) && !is_id_list(v))
            return snprintf(msg, cap, "%s must be a string or a list of token ids", where), 400;
        unsigned st = add_input(s, in, v, where, msg, cap);
        if (st) return st;
    }
    return 0;
}

enum MHD_Result srv_route_embeddings(mx_server *s, struct MHD_Connection *c, json_t *body) {
    static const char *const fields[] = {"input", "model", "encoding_format", "dimensions", "user", NULL};
    const char *unknown = srv_unknown_field(body, fields);
    if (unknown) return srv_respond_error(s, c, 400, "invalid_request", "'%s' is not supported by /v1/embeddings", unknown);
    json_t *fmt = json_object_get(body, "encoding_format"), *dj = json_object_get(body, "dimensions");
    json_t *model = json_object_get(body, "model"), *user = json_object_get(body, "user");
    bool b64 = false;
    if (fmt && !json_is_null(fmt)) {
        const char *f = json_string_value(fmt);
        if (!f || (strcmp(f, "float") != 0 && strcmp(f, "base64") != 0))
            return srv_respond_error(s, c, 400, "invalid_request", "'encoding_format' must be float or base64");
        b64 = strcmp(f, "base64") == 0;
    }
    if (model && !json_is_null(model) && !json_is_string(model))
        return srv_respond_error(s, c, 400, "invalid_request", "'model' must be a string");
    if (user && !json_is_null(user) && !json_is_string(user))
        return srv_respond_error(s, c, 400, "invalid_request", "'user' must be a string");
    int dim = srv_embedder_dim(s->embedder), dims = dim;
    if (dj && !json_is_null(dj)) {
        if (!json_is_integer(dj) || json_integer_value(dj) < 1 || json_integer_value(dj) > dim)
            return srv_respond_error(s, c, 400, "invalid_request", "'dimensions' must be an integer in [1, %d]", dim);
        dims = (int)json_integer_value(dj);
    }
    inputs in = {0};
    char msg[512];
    unsigned st = parse_inputs(s, json_object_get(body, "input"), &in, msg, sizeof msg);
    if (st) {
        inputs_free(&in);
        return srv_respond_error(s, c, st, st == 400 ? "invalid_request" : NULL, "%s", msg);
    }
    float *out = malloc(sizeof(float) * (size_t)in.n * (size_t)dims);
    mx_error err = {{0}};
    if (!out || srv_embedder_run(s->embedder, in.tok, in.len, in.n, dims, out, &err)) {
        inputs_free(&in);
        free(out);
        return srv_respond_error(s, c, 500, NULL, "embedding failed: %s", out ? err.msg : "out of memory");
    }
    // Every value must reach the answer: an allocation that fails while it is built is a 500, never
    // a shorter or empty embedding.
    json_t *data = json_array();
    bool oom = !data;
    int tokens = 0;
    for (int i = 0; i < in.n && !oom; i++) {
        const float *e = out + (size_t)i * (size_t)dims;
        json_t *emb;
        if (b64) {
            char *t = base64((const unsigned char *)e, sizeof(float) * (size_t)dims);  // little-endian hosts only
            emb = t ? json_string(t) : NULL;
            free(t);
        } else {
            emb = json_array();
            for (int d = 0; d < dims && emb; d++)
                if (json_array_append_new(emb, json_real(e[d]))) {
                    json_decref(emb);
                    emb = NULL;
                }
        }
        oom = !emb || json_array_append_new(data, json_pack("{s:s, s:i, s:o}", "object", "embedding", "index", i,
                                                            "embedding", emb)) != 0;
        tokens += in.len[i];
    }
    inputs_free(&in);
    free(out);
    if (oom) {
        json_decref(data);
        return srv_respond_error(s, c, 500, NULL, "out of memory building the embeddings");
    }
    json_t *resp = json_pack("{s:s, s:o, s:s, s:{s:i, s:i}}", "object", "list", "data", data, "model",
                             json_is_string(model) ? json_string_value(model) : s->model_id, "usage", "prompt_tokens",
                             tokens, "total_tokens", tokens);
    return srv_respond_json(s, c, 200, resp);
}
