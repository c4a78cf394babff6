// SPDX-License-Identifier: MIT
// The decoder forward pass shared by every family, written once against the backend ops, and the
// context that owns the KV cache and activation scratch. Shapes use B = tokens in the current step
// (at most max_batch), H = hidden, D = head_dim. Nothing is allocated per step.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "models/model_internal.h"

#define LOGIT_ROWS 16  // output rows per lm_head pass: bounds the logits buffer to [16, vocab]

struct mx_ctx {
    mx_model *m;
    mx_backend *be;
    mx_kv_layout lay;
    void *kv;
    int max_batch;
    // backend scratch
    int32_t *d_tokens, *d_pos, *d_slot;  // [B]
    float *x, *h, *tmp;                  // [B, H]
    float *q, *att;                      // [B, n_heads*D]
    float *k, *v;                        // [B, n_kv_heads*D]
    float *gate, *up;                    // [B, I] (dense) or [B*k, moe_I] (MoE)
    float *router;                       // [B, E]
    int32_t *moe_ids;                    // [B*k]
    float *moe_w;                        // [B*k]
    float *moe_y;                        // [B*k, H]
    float *out_h;                        // [LOGIT_ROWS, H]
    float *logits;                       // [LOGIT_ROWS, vocab]
    int32_t *d_argmax;                   // [LOGIT_ROWS] chosen tokens
    mx_sample_params *d_sample;          // sampling parameters (backend memory)
    bool sampling;                       // ids are drawn with d_sample, not argmax
    void **bufs;
    int n_bufs;
};

static void *ctx_alloc(mx_ctx *c, size_t bytes, mx_error *err) {
    void *p = c->be->ops->alloc(c->be, bytes ? bytes : 4, err);
    if (p) c->bufs[c->n_bufs++] = p;
    return p;
}

mx_ctx *mx_ctx_create(mx_model *m, int n_slots, int max_ctx, int max_batch, mx_error *err) {
    const mx_config *cfg = &m->cfg;
    if (n_slots < 1 || max_ctx < 1 || max_batch < 1) {
        mx_fail(err, "context needs at least one slot, position and token per step");
        return NULL;
    }
    mx_ctx *c = calloc(1, sizeof *c);
    if (!c || !(c->bufs = calloc(32, sizeof *c->bufs))) {
        free(c);
        mx_fail(err, "out of memory");
        return NULL;
    }
    c->m = m;
    c->be = m->be;
    c->max_batch = max_batch;
    c->lay = (mx_kv_layout){cfg->n_layers, n_slots, max_ctx, cfg->n_kv_heads, cfg->head_dim};
    size_t B = (size_t)max_batch, H = cfg->hidden_size, QD = (size_t)cfg->n_heads * cfg->head_dim,
           KD = (size_t)cfg->n_kv_heads * cfg->head_dim;
    size_t K = cfg->num_experts_per_tok > 0 ? (size_t)cfg->num_experts_per_tok : 1;
    size_t I = (size_t)cfg->intermediate_size, moeI = (size_t)cfg->moe_intermediate_size;
    size_t ff = B * I > B * K * moeI ? B * I : B * K * moeI;
    bool ok = (c->kv = ctx_alloc(c, mx_kv_bytes(&c->lay, c->be->kv_dtype), err)) &&
              (c->d_tokens = ctx_alloc(c, 4 * B, err)) && (c->d_pos = ctx_alloc(c, 4 * B, err)) &&
              (c->d_slot = ctx_alloc(c, 4 * B, err)) && (c->x = ctx_alloc(c, 4 * B * H, err)) &&
              (c->h = ctx_alloc(c, 4 * B * H, err)) && (c->tmp = ctx_alloc(c, 4 * B * H, err)) &&
              (c->q = ctx_alloc(c, 4 * B * QD, err)) && (c->att = ctx_alloc(c, 4 * B * QD, err)) &&
              (c->k = ctx_alloc(c, 4 * B * KD, err)) && (c->v = ctx_alloc(c, 4 * B * KD, err)) &&
              (c->gate = ctx_alloc(c, 4 * ff, err)) && (c->up = ctx_alloc(c, 4 * ff, err)) &&
              (c->out_h = ctx_alloc(c, 4 * LOGIT_ROWS * H, err)) &&
              (c->logits = ctx_alloc(c, 4 * (size_t)LOGIT_ROWS * cfg->vocab_size, err)) &&
              (c->d_argmax = ctx_alloc(c, 4 * LOGIT_ROWS, err)) &&
              (c->d_sample = ctx_alloc(c, sizeof(mx_sample_params), err));
    if (ok && cfg->num_experts > 0)
        ok = (c->router = ctx_alloc(c, 4 * B * cfg->num_experts, err)) && (c->moe_ids = ctx_alloc(c, 4 * B * K, err)) &&
             (c->moe_w = ctx_alloc(c, 4 * B * K, err)) && (c->moe_y = ctx_alloc(c, 4 * B * K * H, err));
    if (!ok) {
        mx_fail_prefix(err, "creating a context (%d slots x %d positions, KV %.1f MB): ", n_slots, max_ctx,
                       mx_kv_bytes(&c->lay, c->be->kv_dtype) / 1e6);
        mx_ctx_free(c);
        return NULL;
    }
    return c;
}

void mx_ctx_free(mx_ctx *c) {
    if (!c) return;
    for (int i = 0; i < c->n_bufs; i++) c->be->ops->release(c->be, c->bufs[i]);
    free(c->bufs);
    free(c);
}

int mx_ctx_max_ctx(const mx_ctx *c) { return c->lay.max_ctx; }
int mx_ctx_slots(const mx_ctx *c) { return c->lay.n_slots; }
int64_t mx_ctx_kv_bytes(const mx_ctx *c) { return (int64_t)mx_kv_bytes(&c->lay, c->be->kv_dtype); }

size_t mx_kv_bytes(const mx_kv_layout *lay, mx_dtype kv_dtype) {
    return (size_t)lay->n_layers * lay->n_slots * 2 * lay->max_ctx * lay->n_kv_heads * lay->head_dim *
           mx_dtype_size(kv_dtype);
}

// One transformer block on the n tokens in c->x.
static void block_forward(mx_ctx *c, const mx_layer *L, int layer, int n) {
    const mx_config *cfg = &c->m->cfg;
    const mx_backend_ops *o = c->be->ops;
    mx_backend *be = c->be;
    int H = cfg->hidden_size, D = cfg->head_dim, NH = cfg->n_heads, NKV = cfg->n_kv_heads;
    float eps = cfg->rms_norm_eps;

    o->rmsnorm(be, c->h, c->x, L->attn_norm, n, H, eps);
    o->matmul(be, c->q, c->h, &L->wq, L->bq, n);
    o->matmul(be, c->k, c->h, &L->wk, L->bk, n);
    o->matmul(be, c->v, c->h, &L->wv, L->bv, n);
    if (L->q_norm) {
        o->rmsnorm(be, c->q, c->q, L->q_norm, n * NH, D, eps);
        o->rmsnorm(be, c->k, c->k, L->k_norm, n * NKV, D, eps);
    }
    o->rope(be, c->q, c->d_pos, n, NH, &c->m->rope);
    o->rope(be, c->k, c->d_pos, n, NKV, &c->m->rope);
    o->kv_store(be, c->kv, &c->lay, layer, c->k, c->v, c->d_slot, c->d_pos, n);
    o->attention(be, c->att, c->q, c->kv, &c->lay, layer, c->d_slot, c->d_pos, n, NH, 1.0f / sqrtf((float)D), 0);
    o->matmul(be, c->tmp, c->att, &L->wo, L->bo, n);
    o->add(be, c->x, c->tmp, (int64_t)n * H);

    o->rmsnorm(be, c->h, c->x, L->ffn_norm, n, H, eps);
    if (L->moe) {
        int E = cfg->num_experts, K = cfg->num_experts_per_tok, I = cfg->moe_intermediate_size;
        o->matmul(be, c->router, c->h, &L->router, NULL, n);
        o->moe_route(be, c->moe_ids, c->moe_w, c->router, n, E, K, cfg->norm_topk_prob);
        o->moe_matmul(be, c->gate, c->h, &L->e_gate, c->moe_ids, n * K, K);
        o->moe_matmul(be, c->up, c->h, &L->e_up, c->moe_ids, n * K, K);
        o->swiglu(be, c->gate, c->gate, c->up, (int64_t)n * K * I);
        o->moe_matmul(be, c->moe_y, c->gate, &L->e_down, c->moe_ids, n * K, 1);
        o->moe_combine(be, c->x, c->moe_y, c->moe_w, n, K, H);
        return;
    }
    int I = cfg->intermediate_size;
    o->matmul(be, c->gate, c->h, &L->w_gate, L->b_gate, n);
    o->matmul(be, c->up, c->h, &L->w_up, L->b_up, n);
    o->swiglu(be, c->gate, c->gate, c->up, (int64_t)n * I);
    o->matmul(be, c->tmp, c->gate, &L->w_down, L->b_down, n);
    o->add(be, c->x, c->tmp, (int64_t)n * H);
}

// Final norm and output projection for `r` rows of c->x starting at `rows` (host indices): rows
// that are consecutive are read in place, others are gathered first. Kernels only: the results
// stay in c->logits / c->d_argmax.
static void project_rows(mx_ctx *c, const int32_t *rows, int r, bool want_ids) {
    const mx_config *cfg = &c->m->cfg;
    const mx_backend_ops *o = c->be->ops;
    int H = cfg->hidden_size;
    bool consecutive = true;
    for (int i = 1; i < r && consecutive; i++) consecutive = rows[i] == rows[0] + i;
    const float *src = c->x + (size_t)rows[0] * H;
    if (!consecutive) {
        o->gather_rows(c->be, c->out_h, c->x, rows, r, H);
        src = c->out_h;
    }
    o->rmsnorm(c->be, c->out_h, src, c->m->final_norm, r, H, cfg->rms_norm_eps);
    o->matmul(c->be, c->logits, c->out_h, &c->m->lm_head, NULL, r);
    if (!want_ids) return;
    if (!c->sampling) {
        o->argmax(c->be, c->d_argmax, c->logits, r, cfg->vocab_size);
    } else if (consecutive) {
        o->sample(c->be, c->d_argmax, c->logits, r, cfg->vocab_size, c->d_sample, c->d_pos + rows[0]);
    } else {
        for (int i = 0; i < r; i++)
            o->sample(c->be, c->d_argmax + i, c->logits + (size_t)i * cfg->vocab_size, 1, cfg->vocab_size,
                      c->d_sample, c->d_pos + rows[i]);
    }
}

int mx_ctx_set_sampling(mx_ctx *c, const mx_sample_params *p, mx_error *err) {
    if (!p || p->temp <= 0.0f) {
        c->sampling = false;
        return 1;
    }
    if (!c->be->ops->sample) {
        c->sampling = false;
        return 0;
    }
    if (c->be->ops->upload(c->be, c->d_sample, p, sizeof *p, err)) return -1;
    c->sampling = true;
    return 1;
}

static int download_rows(mx_ctx *c, int r, float *logits, int32_t *argmax, mx_error *err) {
    const mx_backend_ops *o = c->be->ops;
    if (argmax && o->download(c->be, argmax, c->d_argmax, sizeof(int32_t) * r, err)) return -1;
    if (logits && o->download(c->be, logits, c->logits, sizeof(float) * r * c->m->cfg.vocab_size, err)) return -1;
    return 0;
}

// Outputs for `n` rows in passes of at most LOGIT_ROWS rows, into the caller's host arrays.
static int emit_outputs(mx_ctx *c, const int32_t *rows, int n, float *logits, int32_t *argmax, mx_error *err) {
    int V = c->m->cfg.vocab_size;
    for (int done = 0; done < n; done += LOGIT_ROWS) {
        int r = n - done < LOGIT_ROWS ? n - done : LOGIT_ROWS;
        project_rows(c, rows + done, r, argmax != NULL);
        if (download_rows(c, r, logits ? logits + (size_t)done * V : NULL, argmax ? argmax + done : NULL, err)) return -1;
    }
    return 0;
}

// The kernels of one whole step on the n tokens already uploaded.
static void step_kernels(mx_ctx *c, int n) {
    c->be->ops->embed(c->be, c->x, &c->m->embed, c->d_tokens, n);
    for (int l = 0; l < c->m->cfg.n_layers; l++) block_forward(c, &c->m->layers[l], l, n);
}

// A decode-shaped step (every row outputs, in order, in one pass) on a backend with graphs: the
// kernels of the whole step are recorded once per (n, output kind) and replayed afterwards.
static int graph_step(mx_ctx *c, int n, float *logits, int32_t *argmax, mx_error *err) {
    const mx_backend_ops *o = c->be->ops;
    int key = n * 4 + (argmax != NULL) + 2 * (argmax && c->sampling);
    if (!o->graph_launch(c->be, key)) {
        _Static_assert(LOGIT_ROWS == 16, "identity rows below");
        static const int32_t identity[LOGIT_ROWS] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
        if (o->graph_begin(c->be, err)) return -1;
        step_kernels(c, n);
        project_rows(c, identity, n, argmax != NULL);
        if (o->graph_end(c->be, key, err) || !o->graph_launch(c->be, key)) return -1;
    }
    return download_rows(c, n, logits, argmax, err);
}

static int check_batch(const mx_ctx *c, const mx_batch *b, mx_error *err) {
    int V = c->m->cfg.vocab_size;
    for (int t = 0; t < b->n; t++) {
        if (b->tokens[t] < 0 || b->tokens[t] >= V)
            return mx_fail(err, "token id %d at batch row %d is outside the vocabulary (0..%d)", b->tokens[t], t, V - 1);
        if (b->pos[t] < 0 || b->pos[t] >= c->lay.max_ctx)
            return mx_fail(err, "position %d is outside the context of %d tokens", b->pos[t], c->lay.max_ctx);
        if (b->slot[t] < 0 || b->slot[t] >= c->lay.n_slots)
            return mx_fail(err, "KV slot %d does not exist (%d slots)", b->slot[t], c->lay.n_slots);
    }
    for (int i = 0; i < b->n_out; i++)
        if (b->out_rows[i] < 0 || b->out_rows[i] >= b->n) return mx_fail(err, "output row %d is not in the batch", b->out_rows[i]);
    return 0;
}

int mx_ctx_forward(mx_ctx *c, const mx_batch *b, float *logits, int32_t *argmax, mx_error *err) {
    if (check_batch(c, b, err)) return -1;
    const mx_backend_ops *o = c->be->ops;
    const mx_config *cfg = &c->m->cfg;
    int32_t local[LOGIT_ROWS];
    int out_done = 0;
    for (int start = 0; start < b->n; start += c->max_batch) {
        int n = b->n - start < c->max_batch ? b->n - start : c->max_batch;
        if (o->upload(c->be, c->d_tokens, b->tokens + start, 4 * (size_t)n, err) ||
            o->upload(c->be, c->d_pos, b->pos + start, 4 * (size_t)n, err) ||
            o->upload(c->be, c->d_slot, b->slot + start, 4 * (size_t)n, err))
            return -1;
        bool decode_shaped = b->n_out == b->n && b->n == n && n <= LOGIT_ROWS && o->graph_launch;
        for (int i = 0; decode_shaped && i < b->n; i++) decode_shaped = b->out_rows[i] == i;
        if (decode_shaped && (logits || argmax)) {
            if (graph_step(c, n, logits, argmax, err)) return -1;
            out_done = b->n_out;
            continue;
        }
        step_kernels(c, n);
        // Output rows that fall in this step, in the caller's order (rows are expected ascending
        // within a step; any order works, one row at a time through `local`).
        while (out_done < b->n_out && b->out_rows[out_done] >= start && b->out_rows[out_done] < start + n) {
            int cnt = 0;
            while (out_done + cnt < b->n_out && cnt < LOGIT_ROWS && b->out_rows[out_done + cnt] >= start &&
                   b->out_rows[out_done + cnt] < start + n) {
                local[cnt] = b->out_rows[out_done + cnt] - start;
                cnt++;
            }
            if (emit_outputs(c, local, cnt, logits ? logits + (size_t)out_done * cfg->vocab_size : NULL,
                             argmax ? argmax + out_done : NULL, err))
                return -1;
            out_done += cnt;
        }
    }
    if (out_done != b->n_out) return mx_fail(err, "output rows must be listed in batch order");
    return o->sync(c->be, err);
}
