// SPDX-License-Identifier: MIT
// GPU speed check without a model file: builds random affine 4-bit (group 64, bf16 scales) weights
// of a Qwen3 shape on the device and times the backend ops of one decode token (captured in a graph
// and replayed, and launched directly) at a given context, and of a prefill batch. It issues the
// same op sequence as a Qwen3 forward pass (the engine's model code is the reference for that), so
// its tok/s is the GPU backend's share of `mlxcel bench`. With a batch B > 0, last: a batched decode
// step of B sequences (token i the position `context` of slot i, the attention's decode hint on, as
// the engine's server steps), timed as a graph, and its per-op times.
// Usage: bench_gpu_decode [qwen3-0.6b|qwen3-8b] [context=512] [prefill=512] [replays=200] [batch=0]
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>

#include "backends/gpu/gpu_backend.h"
#include "backends/gpu/gpu_rt.h"
#include "backends/gpu_entry.h"
#include "backends/plan.h"
#include "../unit/test_rng.h"

typedef struct shape {
    const char *name;
    int hidden, layers, heads, kv_heads, head_dim, inter, vocab;
    bool tied;
} shape;

static const shape shapes[] = {
    {"qwen3-0.6b", 1024, 28, 16, 8, 128, 3072, 151936, true},
    {"qwen3-8b", 4096, 36, 32, 8, 128, 12288, 151936, false},
};

static mx_error err;
static test_rng rng = {0x243f6a8885a308d3ull};
static uint64_t next(void) { return test_rng_next(&rng); }

static void die(const char *what) {
    fprintf(stderr, "bench_gpu_decode: %s: %s\n", what, err.msg);
    exit(1);
}

static void *dalloc(mx_backend *be, size_t bytes) {
    void *p = be->ops->alloc(be, bytes, &err);
    if (!p) die("alloc");
    return p;
}

static void *dfrom(mx_backend *be, const void *h, size_t bytes) {
    void *p = dalloc(be, bytes);
    if (be->ops->upload(be, p, h, bytes, &err) != 0) die("upload");
    return p;
}

// A random 4-bit g64 host matrix (data, bf16 scales/biases) reused as the source of many uploads.
static mx_matrix host_q4(int64_t rows, int64_t cols) {
    mx_matrix m = {{MX_QUANT_AFFINE, 4, 64}, MX_DTYPE_U32, MX_DTYPE_BF16, 1, rows, cols, NULL, NULL, NULL};
    int64_t db = mx_matrix_data_bytes(&m), sb = mx_matrix_scale_bytes(&m);
    uint64_t *d = malloc((size_t)db);
    for (int64_t i = 0; i < db / 8; i++) d[i] = next();
    uint16_t *s = malloc((size_t)sb), *b = malloc((size_t)sb);
    for (int64_t i = 0; i < sb / 2; i++) {
        float sv = ((float)(next() % 1000) + 500.0f) * 2e-6f, bv = -8.0f * sv;
        s[i] = mx_f32_to_bf16(sv);
        b[i] = mx_f32_to_bf16(bv);
    }
    m.data = d, m.scales = s, m.biases = b;
    return m;
}

typedef struct layer {
    mx_matrix q, k, v, o, gate, up, down;
    float *in_norm, *post_norm, *q_norm, *k_norm;
} layer;

typedef struct model {
    shape s;
    mx_matrix embed, lm_head;
    layer *L;
    float *final_norm, *inv_freq;
    void *kv;
    mx_kv_layout lay;
    // activations for up to n tokens
    float *x, *h, *q, *k, *v, *att, *tmp, *g, *u, *last, *logits;
    int32_t *ids, *pos, *slot, *next_id, *last_row;
    int cap;
} model;

#define ADD(p, KIND, field, ...) mx_plan_add(p, (mx_op){.kind = KIND, .field = {__VA_ARGS__}})

// Layer L's q/k norms, RoPE and KV store for n tokens (what the plan runner fuses into one launch).
static void add_qk_rope_kv(mx_plan *p, const model *m, const layer *L, mx_kv_ref kv, int n) {
    const shape *s = &m->s;
    mx_rope rope = {.inv_freq = m->inv_freq, .head_dim = s->head_dim, .attn_factor = 1.0f};
    ADD(p, MX_OP_RMSNORM, rmsnorm, m->q, m->q, L->q_norm, n * s->heads, s->head_dim, 1e-6f);
    ADD(p, MX_OP_RMSNORM, rmsnorm, m->k, m->k, L->k_norm, n * s->kv_heads, s->head_dim, 1e-6f);
    ADD(p, MX_OP_ROPE, rope, m->q, m->pos, n, s->heads, rope);
    ADD(p, MX_OP_ROPE, rope, m->k, m->pos, n, s->kv_heads, rope);
    ADD(p, MX_OP_KV_STORE, kv_store, kv, m->k, m->v, n);
}

// Layer L's first half for n tokens: RMSNorm, q/k/v, the q/k norms + RoPE + KV store and the
// attention (decode: the records' hint, each token in its own slot).
static void add_attn_half(mx_plan *p, const model *m, const layer *L, mx_kv_ref kv, int n, bool decode) {
    const shape *s = &m->s;
    ADD(p, MX_OP_RMSNORM, rmsnorm, m->h, m->x, L->in_norm, n, s->hidden, 1e-6f);
    ADD(p, MX_OP_MATMUL, matmul, m->q, m->h, &L->q, NULL, n);
    ADD(p, MX_OP_MATMUL, matmul, m->k, m->h, &L->k, NULL, n);
    ADD(p, MX_OP_MATMUL, matmul, m->v, m->h, &L->v, NULL, n);
    add_qk_rope_kv(p, m, L, kv, n);
    ADD(p, MX_OP_ATTENTION, attention, m->att, m->q, kv, n, s->heads, 0.08838834764f, 0, NULL, decode);
}

// Layer L's second half for n tokens: with o_proj the o-projection and its residual add, then the
// RMSNorm, gate/up, SwiGLU, down product and residual add.
static void add_mlp_half(mx_plan *p, const model *m, const layer *L, int n, bool o_proj) {
    const shape *s = &m->s;
    if (o_proj) {
        ADD(p, MX_OP_MATMUL, matmul, m->tmp, m->att, &L->o, NULL, n);
        ADD(p, MX_OP_ADD, add, m->x, m->tmp, (int64_t)n * s->hidden);
    }
    ADD(p, MX_OP_RMSNORM, rmsnorm, m->h, m->x, L->post_norm, n, s->hidden, 1e-6f);
    ADD(p, MX_OP_MATMUL, matmul, m->g, m->h, &L->gate, NULL, n);
    ADD(p, MX_OP_MATMUL, matmul, m->u, m->h, &L->up, NULL, n);
    ADD(p, MX_OP_SWIGLU, swiglu, m->g, m->g, m->u, (int64_t)n * s->inter);
    ADD(p, MX_OP_MATMUL, matmul, m->tmp, m->g, &L->down, NULL, n);
    ADD(p, MX_OP_ADD, add, m->x, m->tmp, (int64_t)n * s->hidden);
}

// The records of one step of n tokens, then the logits and argmax of row *last_row (device).
// decode: the attention records' hint (each token in its own slot).
static mx_plan *forward_plan(model *m, int n, const int32_t *last_row, bool decode) {
    const shape *s = &m->s;
    mx_plan *p = mx_plan_create(&err);
    if (!p) die("plan");
    ADD(p, MX_OP_EMBED, embed, m->x, &m->embed, m->ids, n);
    for (int l = 0; l < s->layers; l++) {
        layer *L = &m->L[l];
        mx_kv_ref kv = {m->kv, m->lay, l, m->slot, m->pos, NULL};
        add_attn_half(p, m, L, kv, n, decode);
        add_mlp_half(p, m, L, n, true);
    }
    ADD(p, MX_OP_GATHER_ROWS, gather_rows, m->last, m->x, last_row, 1, s->hidden);
    ADD(p, MX_OP_RMSNORM, rmsnorm, m->last, m->last, m->final_norm, 1, s->hidden, 1e-6f);
    ADD(p, MX_OP_MATMUL, matmul, m->logits, m->last, &m->lm_head, NULL, 1);
    ADD(p, MX_OP_ARGMAX, argmax, m->next_id, m->logits, 1, s->vocab);
    return p;
}

static void run_plan(mx_backend *be, const mx_plan *p) {
    if (mx_plan_run(be, p, &err) != 0) die("run_plan");
}

static void run_op(mx_backend *be, mx_op op) {
    if (mx_run_op(be, op, &err) != 0) die(mx_op_kind_name(op.kind));
}

static float time_ms(void *e0, void *e1);

// Average device time of one run of plan p over `reps` runs after `warm` untimed ones, in ms.
static float plan_ms(mx_backend *be, const mx_plan *p, int warm, int reps, void *e0, void *e1, void *stream) {
    for (int i = 0; i < warm; i++) run_plan(be, p);
    mxg_rt_event_record(e0, stream, &err);
    for (int i = 0; i < reps; i++) run_plan(be, p);
    mxg_rt_event_record(e1, stream, &err);
    return time_ms(e0, e1) / reps;
}

// Average device time of `stmt` over `reps` launches, in microseconds.
#define TIME_OP(label, n_tok, reps, stmt)                                          \
    do {                                                                            \
        for (int w_ = 0; w_ < 2; w_++) stmt;                                       \
        mxg_rt_event_record(e0, stream, &err);                                      \
        for (int r_ = 0; r_ < (reps); r_++) stmt;                                  \
        mxg_rt_event_record(e1, stream, &err);                                      \
        printf("  %-22s n=%-4d %9.2f us\n", label, n_tok, 1e3 * time_ms(e0, e1) / (reps)); \
    } while (0)

// Per-op device times of layer 0 (and the output projection) for a batch of n tokens (decode: a
// batched decode step, the attention's hint on), of the q/k norm + RoPE + KV store records as the
// plan runner fuses them into one launch, and of the layer's halves and the whole layer as plans.
static void op_times(mx_backend *be, model *m, int n, bool decode, void *e0, void *e1, void *stream) {
    const shape *s = &m->s;
    layer *L = &m->L[0];
    mx_rope rope = {.inv_freq = m->inv_freq, .head_dim = s->head_dim, .attn_factor = 1.0f};
    mx_kv_ref kv = {m->kv, m->lay, 0, m->slot, m->pos, NULL};
    int reps = n == 1 ? 200 : 10;
#define OP(KIND, field, ...) run_op(be, (mx_op){.kind = KIND, .field = {__VA_ARGS__}})
    printf("per-op times, %d token%s%s:\n", n, n == 1 ? "" : "s", decode ? " (batched decode)" : "");
    TIME_OP("rmsnorm", n, reps, OP(MX_OP_RMSNORM, rmsnorm, m->h, m->x, L->in_norm, n, s->hidden, 1e-6f));
    TIME_OP("matmul q", n, reps, OP(MX_OP_MATMUL, matmul, m->q, m->h, &L->q, NULL, n));
    TIME_OP("matmul k", n, reps, OP(MX_OP_MATMUL, matmul, m->k, m->h, &L->k, NULL, n));
    TIME_OP("q/k norm", n, reps, OP(MX_OP_RMSNORM, rmsnorm, m->q, m->q, L->q_norm, n * s->heads, s->head_dim, 1e-6f));
    TIME_OP("rope q", n, reps, OP(MX_OP_ROPE, rope, m->q, m->pos, n, s->heads, rope));
    TIME_OP("kv_store", n, reps, OP(MX_OP_KV_STORE, kv_store, kv, m->k, m->v, n));
    TIME_OP("attention", n, reps, OP(MX_OP_ATTENTION, attention, m->att, m->q, kv, n, s->heads, 0.0883883f, 0, NULL, decode));
    mx_plan *qk = mx_plan_create(&err);
    if (!qk) die("plan");
    add_qk_rope_kv(qk, m, L, kv, n);
    TIME_OP("q/k norm+rope+kv fused", n, reps, run_plan(be, qk));
    mx_plan_free(be, qk);
    TIME_OP("matmul o", n, reps, OP(MX_OP_MATMUL, matmul, m->tmp, m->att, &L->o, NULL, n));
    TIME_OP("add", n, reps, OP(MX_OP_ADD, add, m->x, m->tmp, (int64_t)n * s->hidden));
    TIME_OP("matmul gate", n, reps, OP(MX_OP_MATMUL, matmul, m->g, m->h, &L->gate, NULL, n));
    TIME_OP("swiglu", n, reps, OP(MX_OP_SWIGLU, swiglu, m->g, m->g, m->u, (int64_t)n * s->inter));
    TIME_OP("matmul down", n, reps, OP(MX_OP_MATMUL, matmul, m->tmp, m->g, &L->down, NULL, n));
    // The layer's second half as plans, as the plan runner fuses them: o-proj + add, RMSNorm,
    // gate/up, SwiGLU, down + add (three launches), and from the RMSNorm on (two).
    for (int o = 1; o >= 0; o--) {
        mx_plan *mlp = mx_plan_create(&err);
        if (!mlp) die("plan");
        add_mlp_half(mlp, m, L, n, o);
        TIME_OP(o ? "o-proj + mlp half plan" : "mlp half plan", n, reps, run_plan(be, mlp));
        mx_plan_free(be, mlp);
    }
    // The layer's first half as a plan (RMSNorm + q/k/v, the attention with the q/k norm + RoPE + KV
    // store folded in: two or three launches), and the whole layer; with the second half's times
    // above, what the launch boundaries around the attention cost.
    for (int whole = 0; whole <= 1; whole++) {
        mx_plan *half = mx_plan_create(&err);
        if (!half) die("plan");
        add_attn_half(half, m, L, kv, n, decode);
        if (whole) add_mlp_half(half, m, L, n, true);
        TIME_OP(whole ? "layer plan" : "attention half plan", n, reps, run_plan(be, half));
        mx_plan_free(be, half);
    }
    if (n == 1) {
        TIME_OP("lm_head", 1, reps, OP(MX_OP_MATMUL, matmul, m->logits, m->last, &m->lm_head, NULL, 1));
        TIME_OP("argmax", 1, reps, OP(MX_OP_ARGMAX, argmax, m->next_id, m->logits, 1, s->vocab));
    }
#undef OP
}

static float time_ms(void *e0, void *e1) {
    float ms = 0;
    if (mxg_rt_event_elapsed_ms(e0, e1, &ms, &err) != 0) die("timing");
    return ms;
}

int main(int argc, char **argv) {
    const char *name = argc > 1 ? argv[1] : "qwen3-0.6b";
    int ctx = argc > 2 ? atoi(argv[2]) : 512, prefill = argc > 3 ? atoi(argv[3]) : 512;
    int replays = argc > 4 ? atoi(argv[4]) : 200, batch = argc > 5 ? atoi(argv[5]) : 0;
    const shape *s = NULL;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        if (strcmp(shapes[i].name, name) == 0) s = &shapes[i];
    if (!s) {
        fprintf(stderr, "unknown shape %s (qwen3-0.6b, qwen3-8b)\n", name);
        return 2;
    }
    mx_backend_options opt = {.name = mx_gpu_backend_name()};
    mx_backend *be = mx_gpu_backend_create(&opt, &err);
    if (!be) {
        printf("skipped: %s\n", err.msg);
        return 77;
    }
    model m;
    memset(&m, 0, sizeof m);
    m.s = *s;
    m.cap = prefill > batch ? prefill : batch;
    if (m.cap < 1) m.cap = 1;
    int qd = s->heads * s->head_dim, kd = s->kv_heads * s->head_dim;
    mx_matrix hq = host_q4(qd, s->hidden), hk = host_q4(kd, s->hidden), ho = host_q4(s->hidden, qd);
    mx_matrix hg = host_q4(s->inter, s->hidden), hd = host_q4(s->hidden, s->inter), he = host_q4(s->vocab, s->hidden);
    double wbytes = 0;
    m.L = calloc((size_t)s->layers, sizeof(layer));
    float *ones = malloc(sizeof(float) * (size_t)(s->inter > s->hidden ? s->inter : s->hidden));
    for (int i = 0; i < s->inter || i < s->hidden; i++) ones[i] = 1.0f + (float)(next() % 100) * 1e-3f;
#define UP(dst, src)                                                                          \
    do {                                                                                      \
        if (be->ops->upload_matrix(be, &(src), &(dst), &err) != 0) die("upload_matrix");      \
        wbytes += (double)mx_matrix_data_bytes(&(src)) + 2.0 * mx_matrix_scale_bytes(&(src)); \
    } while (0)
    for (int l = 0; l < s->layers; l++) {
        layer *L = &m.L[l];
        UP(L->q, hq);
        UP(L->k, hk);
        UP(L->v, hk);
        UP(L->o, ho);
        UP(L->gate, hg);
        UP(L->up, hg);
        UP(L->down, hd);
        L->in_norm = dfrom(be, ones, sizeof(float) * s->hidden);
        L->post_norm = dfrom(be, ones, sizeof(float) * s->hidden);
        L->q_norm = dfrom(be, ones, sizeof(float) * s->head_dim);
        L->k_norm = dfrom(be, ones, sizeof(float) * s->head_dim);
    }
    double layer_bytes = wbytes;
    if (be->ops->upload_matrix(be, &he, &m.embed, &err) != 0) die("upload_matrix");
    if (s->tied) {
        m.lm_head = m.embed;
    } else if (be->ops->upload_matrix(be, &he, &m.lm_head, &err) != 0) {
        die("upload_matrix");
    }
    wbytes += (double)mx_matrix_data_bytes(&he) + 2.0 * mx_matrix_scale_bytes(&he);
    m.final_norm = dfrom(be, ones, sizeof(float) * s->hidden);
    float *inv = malloc(sizeof(float) * s->head_dim / 2);
    for (int j = 0; j < s->head_dim / 2; j++) inv[j] = 1.0f / (float)pow(1000000.0, 2.0 * j / s->head_dim);
    m.inv_freq = dfrom(be, inv, sizeof(float) * s->head_dim / 2);
    int max_ctx = (ctx > prefill ? ctx : prefill) + 8;
    m.lay = (mx_kv_layout){s->layers, batch > 1 ? batch : 1, max_ctx, s->kv_heads, s->head_dim, 0};
    m.kv = dalloc(be, mx_kv_bytes(&m.lay, be->kv_dtype));
    size_t cap = (size_t)m.cap;
    m.x = dalloc(be, 4 * cap * s->hidden), m.h = dalloc(be, 4 * cap * s->hidden);
    m.q = dalloc(be, 4 * cap * qd), m.k = dalloc(be, 4 * cap * kd), m.v = dalloc(be, 4 * cap * kd);
    m.att = dalloc(be, 4 * cap * qd), m.tmp = dalloc(be, 4 * cap * s->hidden);
    m.g = dalloc(be, 4 * cap * s->inter), m.u = dalloc(be, 4 * cap * s->inter);
    m.last = dalloc(be, 4 * (size_t)s->hidden), m.logits = dalloc(be, 4 * (size_t)s->vocab);
    int32_t *hid = malloc(4 * cap), *hpos = malloc(4 * cap), *hslot = calloc(cap, 4);
    for (size_t i = 0; i < cap; i++) hid[i] = (int32_t)(next() % (uint64_t)s->vocab), hpos[i] = (int32_t)i;
    m.ids = dfrom(be, hid, 4 * cap), m.pos = dfrom(be, hpos, 4 * cap), m.slot = dfrom(be, hslot, 4 * cap);
    m.next_id = dalloc(be, 4);
    int32_t last_rows[2] = {prefill - 1, 0};  // the last token of the prefill plan, of the decode plan
    m.last_row = dfrom(be, last_rows, sizeof last_rows);

    void *e0, *e1, *stream = mx_gpu_stream(be);
    if (mxg_rt_event_create(&e0, &err) || mxg_rt_event_create(&e1, &err)) die("events");
    printf("%s: %d layers, weights %.1f MB (layers %.1f MB), device %s\n", s->name, s->layers, wbytes / 1e6,
           layer_bytes / 1e6, be->device_name);

    // Prefill: n tokens at positions 0..n-1 (fills the cache), direct launches, best of 3.
    mx_gpu_use_graphs(be, false);
    mx_plan *prefill_plan = forward_plan(&m, prefill, m.last_row, false);
    float best = 1e30f;
    for (int rep = 0; rep < 3; rep++) {
        float ms = plan_ms(be, prefill_plan, 0, 1, e0, e1, stream);
        best = ms < best ? ms : best;
    }
    if (be->ops->sync(be, &err) != 0) die("prefill");
    printf("prefill %d tokens: %.2f ms, %.0f tok/s\n", prefill, best, prefill / (best / 1e3));

    // Decode: one token at position ctx.
    int32_t p = ctx;
    be->ops->upload(be, m.pos, &p, 4, &err);
    mx_plan *decode_plan = forward_plan(&m, 1, m.last_row + 1, false);
    float direct = plan_ms(be, decode_plan, 3, replays / 4, e0, e1, stream);
    mx_gpu_use_graphs(be, true);
    float graphed = plan_ms(be, decode_plan, 5, replays, e0, e1, stream);  // recorded on the second run
    if (be->ops->sync(be, &err) != 0) die("decode");
    double kvb = 2.0 * s->layers * s->kv_heads * s->head_dim * 2.0 * ctx;
    printf("decode at context %d: %.3f ms/token graph (%.0f tok/s, %.0f GB/s of weights+KV), %.3f ms direct (%.0f tok/s)\n",
           ctx, graphed, 1e3 / graphed, (wbytes + kvb) / (graphed / 1e3) / 1e9, direct, 1e3 / direct);
    mx_plan_free(be, decode_plan);
    mx_plan_free(be, prefill_plan);
    mx_gpu_use_graphs(be, false);  // op_times' fused q/k plan: direct launches, as its single records
    op_times(be, &m, 1, false, e0, e1, stream);
    int32_t *mid = malloc(sizeof(int32_t) * (size_t)prefill);
    for (int i = 0; i < prefill; i++) mid[i] = i;
    be->ops->upload(be, m.pos, mid, sizeof(int32_t) * (size_t)prefill, &err);
    free(mid);
    op_times(be, &m, prefill, false, e0, e1, stream);
    if (be->ops->sync(be, &err) != 0) die("op times");
    if (batch > 0) {  // token i at position ctx of slot i (the cache holds what the runs above left)
        int32_t *bpos = malloc(sizeof(int32_t) * (size_t)batch), *bslot = malloc(sizeof(int32_t) * (size_t)batch);
        for (int i = 0; i < batch; i++) bpos[i] = ctx, bslot[i] = i;
        be->ops->upload(be, m.pos, bpos, sizeof(int32_t) * (size_t)batch, &err);
        be->ops->upload(be, m.slot, bslot, sizeof(int32_t) * (size_t)batch, &err);
        free(bpos), free(bslot);
        mx_plan *step = forward_plan(&m, batch, m.last_row + 1, true);
        mx_gpu_use_graphs(be, true);
        const float ms = plan_ms(be, step, 5, replays / 4, e0, e1, stream);  // recorded on the second run
        printf("batched decode step of %d sequences at context %d: %.3f ms graph (%.0f tok/s)\n", batch, ctx, ms,
               batch * 1e3 / ms);
        mx_plan_free(be, step);
        mx_gpu_use_graphs(be, false);
        op_times(be, &m, batch, true, e0, e1, stream);
        if (be->ops->sync(be, &err) != 0) die("batched decode");
    }
    mxg_rt_event_destroy(e0), mxg_rt_event_destroy(e1);
    mx_backend_free(be);
    return 0;
}
