// SPDX-License-Identifier: MIT
// Embeddings for /v1/embeddings (see srv_embed.h): inputs run through the model in batches for their
// final hidden states, pooled (mean or last token: --pooling, else the model folder's pooling
// config), cut to `dimensions` and L2-normalized.
#include "server/srv_embed.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/json_text.h"
#include "io/mapped_file.h"

#define EMBED_SLOTS 4

struct srv_embedder {
    mx_model *m;
    mx_ctx *ctx;  // made at the first request
    int max_ctx, dim;
    srv_pooling pooling;
    pthread_mutex_t *model_lock;
    pthread_mutex_t mu;  // one request at a time owns the context
};

static srv_pooling pooling_from_model(const mx_model *m) {
    char path[4200];
    snprintf(path, sizeof path, "%s/1_Pooling/config.json", mx_model_dir(m));
    mx_error ignored = {{0}};  // no readable file: mean pooling
    char *text = mx_read_text_file(path, NULL, &ignored);
    json_t *j = text ? mx_json_loads(text, 0, NULL) : NULL;
    free(text);
    bool last = json_is_true(json_object_get(j, "pooling_mode_lasttoken"));
    json_decref(j);
    return last ? SRV_POOL_LAST : SRV_POOL_MEAN;
}

srv_embedder *srv_embedder_create(mx_model *m, int max_ctx, const char *pooling, pthread_mutex_t *model_lock,
                                  mx_error *err) {
    srv_pooling p;
    if (!pooling) p = pooling_from_model(m);
    else if (strcmp(pooling, "mean") == 0) p = SRV_POOL_MEAN;
    else if (strcmp(pooling, "last") == 0) p = SRV_POOL_LAST;
    else return mx_fail(err, "pooling '%s' is not one of mean, last", pooling), NULL;
    srv_embedder *e = calloc(1, sizeof *e);
    if (!e) return mx_fail(err, "out of memory"), NULL;
    e->m = m;
    e->max_ctx = max_ctx;
    e->dim = mx_model_config(m)->hidden_size;
    e->pooling = p;
    e->model_lock = model_lock;
    pthread_mutex_init(&e->mu, NULL);
    return e;
}

void srv_embedder_free(srv_embedder *e) {
    if (!e) return;
    mx_ctx_free(e->ctx);
    pthread_mutex_destroy(&e->mu);
    free(e);
}

srv_pooling srv_embedder_pooling(const srv_embedder *e) { return e->pooling; }
int srv_embedder_dim(const srv_embedder *e) { return e->dim; }
int srv_embedder_max_tokens(const srv_embedder *e) { return e->max_ctx; }

// One batch of inputs [first, first + k) in slots 0..k-1.
static int run_batch(srv_embedder *e, int32_t *const *tokens, const int *lens, int first, int k, int dims, float *out,
                     mx_error *err) {
    int total = 0, n_out = 0;
    for (int i = 0; i < k; i++) {
        total += lens[first + i];
        n_out += e->pooling == SRV_POOL_MEAN ? lens[first + i] : 1;
    }
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)total * 4);
    float *hidden = malloc(sizeof(float) * (size_t)n_out * (size_t)e->dim);
    if (!tok || !hidden) {
        free(tok), free(hidden);
        return mx_fail(err, "out of memory");
    }
    int32_t *pos = tok + total, *slot = pos + total, *rows = slot + total;
    int t = 0, r = 0;
    for (int i = 0; i < k; i++) {
        int len = lens[first + i];
        for (int p = 0; p < len; p++, t++) {
            tok[t] = tokens[first + i][p];
            pos[t] = p;
            slot[t] = i;
            if (e->pooling == SRV_POOL_MEAN || p == len - 1) rows[r++] = t;
        }
    }
    mx_batch b = {total, tok, pos, slot, n_out, rows};
    pthread_mutex_lock(e->model_lock);
    int rc = mx_ctx_forward_hidden(e->ctx, &b, hidden, err);
    pthread_mutex_unlock(e->model_lock);
    for (int i = 0, at = 0; i < k && rc == 0; i++) {
        int rows_i = e->pooling == SRV_POOL_MEAN ? lens[first + i] : 1;
        float *v = out + (size_t)(first + i) * (size_t)dims;
        for (int d = 0; d < dims; d++) {
            double sum = 0;
            for (int q = 0; q < rows_i; q++) sum += hidden[(size_t)(at + q) * (size_t)e->dim + (size_t)d];
            v[d] = (float)(sum / rows_i);
        }
        double norm = 0;
        for (int d = 0; d < dims; d++) norm += (double)v[d] * v[d];
        norm = sqrt(norm);
        for (int d = 0; d < dims && norm > 0; d++) v[d] = (float)(v[d] / norm);
        at += rows_i;
    }
    free(tok);
    free(hidden);
    return rc;
}

int srv_embedder_run(srv_embedder *e, int32_t *const *tokens, const int *lens, int n, int dims, float *out,
                     mx_error *err) {
    pthread_mutex_lock(&e->mu);
    int rc = 0;
    if (!e->ctx) {
        pthread_mutex_lock(e->model_lock);
        e->ctx = mx_ctx_create(e->m, EMBED_SLOTS, e->max_ctx, 256, err);
        pthread_mutex_unlock(e->model_lock);
        if (!e->ctx) rc = -1;
    }
    for (int first = 0; first < n && rc == 0; first += EMBED_SLOTS) {
        int k = n - first < EMBED_SLOTS ? n - first : EMBED_SLOTS;
        rc = run_batch(e, tokens, lens, first, k, dims, out, err);
    }
    pthread_mutex_unlock(&e->mu);
    return rc;
}
