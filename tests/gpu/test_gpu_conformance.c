// SPDX-License-Identifier: MIT
// Conformance of every GPU backend compiled in against the CPU backend, plan by plan: each case
// builds the same plan (op records over the same random buffers and weights) on both backends, runs
// it, and compares every buffer afterwards, so a fused kernel that skipped or miswrote any buffer
// the records write fails, not only the final output. Cases: each fused pattern of the GPU plan
// runner (src/backends/gpu/gpu_plan.c) in every weight format it fuses and in formats it does not
// fuse (those run record by record), with and without biases, plus patterns that must not fuse
// (several tokens, aliasing buffers), a whole decoder layer (decode, batched decode of 24-56
// sequences with the attention's decode hint, and prefill-sized; its q/k norms, RoPEs and KV store
// one fused launch; one-token layers at a short cache and at one the decode attention splits), and the
// records no pattern covers; products of 2-64 tokens sharing their input (q/k/v, gate/up + SwiGLU:
// the grouped launch by default, the launch pairs with MLXCEL_GPU_GROUPED=0, ctest gpu_conformance_ungrouped*); the projection patterns again on a backend without the streaming
// matrix-vector kernel (MLXCEL_GPU_NO_STREAM_MATVEC=1), on one with its previous task shape
// (MLXCEL_GPU_STREAM_ROWS=2), on one with its lean one-token form (MLXCEL_GPU_STREAM_LEAN=1, both
// task shapes), on one with the previous matrix-vector
// kernels (MLXCEL_GPU_OLD_MATVEC=1) and prefill-sized layers on the pipelined kernel
// (MLXCEL_GPU_PREFILL_KERNEL=pipe); gpt_oss's records (attention sinks, clamped SwiGLU, expert biases) in
// a block of that family. Each plan runs three times on the GPU (direct, recorded as a graph,
// replayed) with the input buffers restored in between, and every run must match.
// Bounds: relative L2 error per buffer of 2e-5 (float32 paths: summation order only); buffers after
// a KV cache read (after_cache_tol: 2e-4 with both caches in I16, the default; 3e-3 with the GPU's
// f16 cache, MLXCEL_GPU_KV=f16, run again below for the attention cases); tensor-core prefill
// matmuls 1.5e-2 (bf16 inputs, test_gpu_ops.c). Exit 77 when no GPU backend can start.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../unit/check.h"
#include "backends/gpu/gpu_backend.h"
#include "backends/gpu_entry.h"
#include "backends/plan.h"
#include "gpu_ref.h"

#define MAX_BUFS 24
#define MAX_MATS 8

static mx_error err;

// A case's data: float buffers and int buffers (host contents), weight matrices (host).
typedef struct data {
    int nf, ni, nm;
    const char *fname[MAX_BUFS];
    int64_t flen[MAX_BUFS];
    float *fhost[MAX_BUFS];
    bool fread_only[MAX_BUFS];
    int64_t ilen[MAX_BUFS];
    int32_t *ihost[MAX_BUFS];
    mx_matrix mat[MAX_MATS];
    double tol[MAX_BUFS];
} data;

// The same data in one backend's memory.
typedef struct side {
    mx_backend *be;
    float *f[MAX_BUFS];
    int32_t *i[MAX_BUFS];
    mx_matrix m[MAX_MATS];
    void *kv;
    mx_kv_layout lay;
} side;

typedef void (*build_fn)(mx_plan *p, side *s, const void *cfg);

static int add_f(data *d, const char *name, int64_t len, ref_rng *r, float lo, float hi, double tol) {
    int k = d->nf++;
    d->fname[k] = name, d->flen[k] = len, d->tol[k] = tol;
    d->fhost[k] = malloc(sizeof(float) * (size_t)len);
    ref_fill(r, d->fhost[k], len, lo, hi);
    return k;
}

static int add_i(data *d, const int32_t *v, int64_t len) {
    int k = d->ni++;
    d->ilen[k] = len;
    d->ihost[k] = malloc(sizeof(int32_t) * (size_t)len);
    memcpy(d->ihost[k], v, sizeof(int32_t) * (size_t)len);
    return k;
}

static int add_m(data *d, ref_rng *r, mx_quant q, mx_dtype dt, mx_dtype st, int64_t experts, int64_t rows, int64_t cols) {
    int k = d->nm++;
    d->mat[k] = ref_matrix_random(r, q, dt, st, experts, rows, cols);
    return k;
}

static void data_free(data *d) {
    for (int k = 0; k < d->nf; k++) free(d->fhost[k]);
    for (int k = 0; k < d->ni; k++) free(d->ihost[k]);
    for (int k = 0; k < d->nm; k++) ref_matrix_free(&d->mat[k]);
}

static void die(const char *what) {
    fprintf(stderr, "test_gpu_conformance: %s: %s\n", what, err.msg);
    exit(1);
}

static void side_upload(side *s, const data *d, const mx_kv_layout *lay) {
    for (int k = 0; k < d->nf; k++) {
        if (!s->f[k] && !(s->f[k] = s->be->ops->alloc(s->be, sizeof(float) * (size_t)d->flen[k], &err))) die("alloc");
        if (s->be->ops->upload(s->be, s->f[k], d->fhost[k], sizeof(float) * (size_t)d->flen[k], &err)) die("upload");
    }
    for (int k = 0; k < d->ni; k++) {
        if (!s->i[k] && !(s->i[k] = s->be->ops->alloc(s->be, sizeof(int32_t) * (size_t)d->ilen[k], &err))) die("alloc");
        if (s->be->ops->upload(s->be, s->i[k], d->ihost[k], sizeof(int32_t) * (size_t)d->ilen[k], &err)) die("upload");
    }
    if (lay && !s->kv) {
        s->lay = *lay;
        if (!(s->kv = s->be->ops->alloc(s->be, mx_kv_bytes(lay, s->be->kv_dtype), &err))) die("alloc kv");
    }
}

static void side_free(side *s, const data *d) {
    for (int k = 0; k < d->nf; k++) s->be->ops->release(s->be, s->f[k]);
    for (int k = 0; k < d->ni; k++) s->be->ops->release(s->be, s->i[k]);
    for (int k = 0; k < d->nm; k++) s->be->ops->release_matrix(s->be, &s->m[k]);
    s->be->ops->release(s->be, s->kv);
}

static float *download_f(side *s, const data *d, int k) {
    float *h = malloc(sizeof(float) * (size_t)d->flen[k]);
    if (s->be->ops->download(s->be, h, s->f[k], sizeof(float) * (size_t)d->flen[k], &err)) die("download");
    return h;
}

// Runs the case on the CPU and on `gpu` and compares every float buffer (int buffers: exactly).
static void run_case(const char *label, mx_backend *cpu, mx_backend *gpu, data *d, build_fn build, const void *cfg,
                     const mx_kv_layout *lay, int compare_ints_from) {
    side sc = {.be = cpu}, sg = {.be = gpu};
    for (int k = 0; k < d->nm; k++) {
        if (cpu->ops->upload_matrix(cpu, &d->mat[k], &sc.m[k], &err)) die("upload_matrix cpu");
        if (gpu->ops->upload_matrix(gpu, &d->mat[k], &sg.m[k], &err)) die("upload_matrix gpu");
    }
    side_upload(&sc, d, lay);
    side_upload(&sg, d, lay);  // allocates: the plan records point at these buffers
    mx_plan *pc = mx_plan_create(&err), *pg = mx_plan_create(&err);
    if (!pc || !pg) die("plan");
    build(pc, &sc, cfg);
    build(pg, &sg, cfg);
    CHECK(pc->n_ops == pg->n_ops);
    if (mx_plan_run(cpu, pc, &err)) die("run cpu");
    float *ref[MAX_BUFS];
    for (int k = 0; k < d->nf; k++) ref[k] = download_f(&sc, d, k);
    int32_t *iref[MAX_BUFS] = {0};
    for (int k = compare_ints_from; k < d->ni; k++) {
        iref[k] = malloc(sizeof(int32_t) * (size_t)d->ilen[k]);
        if (cpu->ops->download(cpu, iref[k], sc.i[k], sizeof(int32_t) * (size_t)d->ilen[k], &err)) die("download");
    }
    double worst = 0.0;
    for (int run = 0; run < 3; run++) {
        side_upload(&sg, d, lay);  // restores inputs (in-place records changed them)
        if (mx_plan_run(gpu, pg, &err)) die("run gpu");
        for (int k = 0; k < d->nf; k++) {
            if (d->tol[k] < 0) continue;  // a buffer the GPU's plan may leave as it was (layer_case)
            float *got = download_f(&sg, d, k);
            double e = ref_rel_err(got, ref[k], d->flen[k]);
            CHECK_MSG(e <= d->tol[k], "%s: buffer %s (run %d): rel err %.3e > %.1e", label, d->fname[k], run, e,
                      d->tol[k]);
            worst = e > worst ? e : worst;
            free(got);
        }
        for (int k = compare_ints_from; k < d->ni; k++) {
            int32_t *got = malloc(sizeof(int32_t) * (size_t)d->ilen[k]);
            if (gpu->ops->download(gpu, got, sg.i[k], sizeof(int32_t) * (size_t)d->ilen[k], &err)) die("download");
            CHECK_MSG(memcmp(got, iref[k], sizeof(int32_t) * (size_t)d->ilen[k]) == 0, "%s: int buffer %d differs",
                      label, k);
            free(got);
        }
    }
    printf("%-52s %3d records, worst rel err %.2e\n", label, pg->n_ops, worst);
    for (int k = 0; k < d->nf; k++) free(ref[k]);
    for (int k = 0; k < d->ni; k++) free(iref[k]);
    mx_plan_free(cpu, pc);
    mx_plan_free(gpu, pg);
    side_free(&sc, d);
    side_free(&sg, d);
}

#define ADD(p, KIND, field, ...) mx_plan_add(p, (mx_op){.kind = KIND, .field = {__VA_ARGS__}})

// Bound on buffers computed from a KV cache read (attention, latent attention), float32 paths. Both
// backends in I16 (int16 codes with one scale per 16 values, the default of both) store the same
// codes for the same values (test_gpu_ops compares the cache bytes); here k and v reach the cache
// through each backend's own float32 sums (2e-5 apart at most), which can move a code by one unit,
// 1/32767 of its chunk's largest value: even every code one unit off would be ~5e-5 relative (L2) on
// uniform values, so 2e-4 leaves 4x. The GPU's f16 cache (MLXCEL_GPU_KV=f16) rounds to 11 bits
// (2^-11 relative per value at most) against the CPU's int16: 3e-3, the bound of that cache.
static double after_cache_tol(const mx_backend *gpu) { return gpu->kv_dtype == MX_DTYPE_I16 ? 2e-4 : 3e-3; }

// ---- the projection patterns -----------------------------------------------------------------------

typedef struct proj_cfg {
    int n, H, QR, KR, I;
    bool bias;
    int pattern;
} proj_cfg;

enum { P_NORM_QKV, P_QKV, P_NORM_GATE_UP, P_GATE_UP, P_RESIDUAL, P_NORM_ONE, P_ALIAS_NORM, P_ALIAS_RES };
static const char *const pattern_names[] = {"rmsnorm + q/k/v", "q/k/v sharing input", "rmsnorm + gate/up + swiglu",
                                            "gate/up + swiglu (separate out)", "matmul + residual add",
                                            "rmsnorm + one matmul", "in-place rmsnorm + matmuls (no fusion)",
                                            "residual into the input (no fusion)"};

// Buffers: 0 x, 1 h, 2 q, 3 k, 4 v, 5 norm w, 6 bq, 7 bk, 8 bv, 9 act. Matrices: 0 wq/gate/o, 1 wk/up, 2 wv.
static void build_proj(mx_plan *p, side *s, const void *vc) {
    const proj_cfg *c = vc;
    float **b = s->f;
    const float *bq = c->bias ? b[6] : NULL, *bk = c->bias ? b[7] : NULL, *bv = c->bias ? b[8] : NULL;
    switch (c->pattern) {
    case P_NORM_QKV:
    case P_QKV:
        if (c->pattern == P_NORM_QKV) ADD(p, MX_OP_RMSNORM, rmsnorm, b[1], b[0], b[5], c->n, c->H, 1e-6f);
        ADD(p, MX_OP_MATMUL, matmul, b[2], b[1], &s->m[0], bq, c->n);
        ADD(p, MX_OP_MATMUL, matmul, b[3], b[1], &s->m[1], bk, c->n);
        ADD(p, MX_OP_MATMUL, matmul, b[4], b[1], &s->m[2], bv, c->n);
        break;
    case P_NORM_GATE_UP:
        ADD(p, MX_OP_RMSNORM, rmsnorm, b[1], b[0], b[5], c->n, c->H, 1e-6f);
        ADD(p, MX_OP_MATMUL, matmul, b[2], b[1], &s->m[0], bq, c->n);
        ADD(p, MX_OP_MATMUL, matmul, b[3], b[1], &s->m[1], bk, c->n);
        ADD(p, MX_OP_SWIGLU, swiglu, b[2], b[2], b[3], (int64_t)c->n * c->I);
        break;
    case P_GATE_UP:
        ADD(p, MX_OP_MATMUL, matmul, b[2], b[1], &s->m[0], bq, c->n);
        ADD(p, MX_OP_MATMUL, matmul, b[3], b[1], &s->m[1], bk, c->n);
        ADD(p, MX_OP_SWIGLU, swiglu, b[9], b[2], b[3], (int64_t)c->n * c->I);
        break;
    case P_RESIDUAL:
        ADD(p, MX_OP_MATMUL, matmul, b[4], b[2], &s->m[0], bq, c->n);
        ADD(p, MX_OP_ADD, add, b[0], b[4], (int64_t)c->n * c->H);
        break;
    case P_NORM_ONE:
        ADD(p, MX_OP_RMSNORM, rmsnorm, b[1], b[0], b[5], c->n, c->H, 1e-6f);
        ADD(p, MX_OP_MATMUL, matmul, b[2], b[1], &s->m[0], bq, c->n);
        break;
    case P_ALIAS_NORM:
        ADD(p, MX_OP_RMSNORM, rmsnorm, b[1], b[1], b[5], c->n, c->H, 1e-6f);
        ADD(p, MX_OP_MATMUL, matmul, b[2], b[1], &s->m[0], bq, c->n);
        ADD(p, MX_OP_MATMUL, matmul, b[3], b[1], &s->m[1], bk, c->n);
        break;
    case P_ALIAS_RES:  // x += W x: the product reads the buffer the add writes
        ADD(p, MX_OP_MATMUL, matmul, b[4], b[1], &s->m[0], bq, c->n);
        ADD(p, MX_OP_ADD, add, b[1], b[4], (int64_t)c->n * c->H);
        break;
    }
}

typedef struct fmt {
    mx_quant q;
    mx_dtype dtype, scale_dtype;
} fmt;

static void proj_case(mx_backend *cpu, mx_backend *gpu, ref_rng *r, const fmt *f, proj_cfg c) {
    data d = {0};
    const int64_t n = c.n, H = c.H;
    const bool gu = c.pattern == P_NORM_GATE_UP || c.pattern == P_GATE_UP;
    const int64_t R0 = gu ? c.I : c.pattern == P_RESIDUAL || c.pattern == P_ALIAS_RES ? H : c.QR;
    const int64_t R1 = gu ? c.I : c.KR, C0 = c.pattern == P_RESIDUAL ? c.QR : H;
    const double tol = n >= 64 ? 1.5e-2 : 2e-5;
    add_f(&d, "x", n * H, r, -2, 2, 2e-5);
    add_f(&d, "h", n * (H > c.QR ? H : c.QR), r, -2, 2, 2e-5);
    add_f(&d, "q/gate", n * (R0 > c.QR ? R0 : c.QR), r, -1, 1, tol);
    add_f(&d, "k/up", n * R1, r, -1, 1, tol);
    add_f(&d, "v/out", n * (c.KR > H ? c.KR : H), r, -1, 1, tol);
    add_f(&d, "norm w", H, r, 0.5f, 1.5f, 0);
    add_f(&d, "bias q", R0, r, -0.5f, 0.5f, 0);
    add_f(&d, "bias k", R1, r, -0.5f, 0.5f, 0);
    add_f(&d, "bias v", c.KR, r, -0.5f, 0.5f, 0);
    add_f(&d, "act", n * R0, r, -1, 1, tol);
    if (c.pattern == P_RESIDUAL) d.tol[0] = tol;
    if (c.pattern == P_ALIAS_RES) d.tol[1] = tol;
    add_m(&d, r, f->q, f->dtype, f->scale_dtype, 1, R0, C0);
    add_m(&d, r, f->q, f->dtype, f->scale_dtype, 1, R1, H);
    add_m(&d, r, f->q, f->dtype, f->scale_dtype, 1, c.KR, H);
    char label[160], ml[64];
    snprintf(label, sizeof label, "%s, %s, n=%d%s", pattern_names[c.pattern], ref_matrix_label(&d.mat[0], ml, sizeof ml),
             c.n, c.bias ? ", bias" : "");
    run_case(label, cpu, gpu, &d, build_proj, &c, NULL, 0);
    data_free(&d);
}

// ---- q/k norm + RoPE ---------------------------------------------------------------------------------

typedef struct rope_cfg {
    int n, NH, NKV, D;
    bool norm;
    int rot_dim;     // 0: whole head; else a partial rotation (must not fuse)
    bool long_table; // longrope's second table from position 2048 on (must not fuse)
} rope_cfg;

// Buffers: 0 q, 1 k, 2 qn, 3 kn, 4 inv_freq, 5 long inv_freq. Ints: 0 pos.
static void build_rope(mx_plan *p, side *s, const void *vc) {
    const rope_cfg *c = vc;
    float **b = s->f;
    mx_rope rope = {b[4], c->D, 0.9f, c->rot_dim, c->long_table ? b[5] : NULL, 2048};
    if (c->norm) {
        ADD(p, MX_OP_RMSNORM, rmsnorm, b[0], b[0], b[2], c->n * c->NH, c->D, 1e-6f);
        ADD(p, MX_OP_RMSNORM, rmsnorm, b[1], b[1], b[3], c->n * c->NKV, c->D, 1e-6f);
    }
    ADD(p, MX_OP_ROPE, rope, b[0], s->i[0], c->n, c->NH, rope);
    ADD(p, MX_OP_ROPE, rope, b[1], s->i[0], c->n, c->NKV, rope);
}

static void rope_case(mx_backend *cpu, mx_backend *gpu, ref_rng *r, rope_cfg c) {
    data d = {0};
    add_f(&d, "q", (int64_t)c.n * c.NH * c.D, r, -2, 2, 2e-5);
    add_f(&d, "k", (int64_t)c.n * c.NKV * c.D, r, -2, 2, 2e-5);
    add_f(&d, "q norm", c.D, r, 0.5f, 1.5f, 0);
    add_f(&d, "k norm", c.D, r, 0.5f, 1.5f, 0);
    int k = add_f(&d, "inv_freq", c.D / 2, r, 0, 1, 0);
    for (int j = 0; j < c.D / 2; j++) d.fhost[k][j] = 1.0f / powf(10000.0f, 2.0f * j / c.D);
    k = add_f(&d, "long inv_freq", c.D / 2, r, 0, 1, 0);
    for (int j = 0; j < c.D / 2; j++) d.fhost[k][j] = 0.5f / powf(10000.0f, 2.0f * j / c.D);
    int32_t pos[64];
    for (int t = 0; t < c.n; t++) pos[t] = (int32_t)(ref_next(r) % 5000);
    add_i(&d, pos, c.n);
    char label[128];
    snprintf(label, sizeof label, "%sRoPE q/k, %d+%d heads of %d%s%s, n=%d", c.norm ? "q/k rmsnorm + " : "", c.NH,
             c.NKV, c.D, c.rot_dim ? ", partial" : "", c.long_table ? ", long table" : "", c.n);
    run_case(label, cpu, gpu, &d, build_rope, &c, NULL, 0);
    data_free(&d);
}

// ---- records no pattern covers (GeGLU, scale, gpt_oss's clamped SwiGLU and expert bias) -------------

// Buffers: 0 gate, 1 up, 2 out, 3 expert biases [8, 30]. Ints: 0 expert ids [100].
static void build_elementwise(mx_plan *p, side *s, const void *vc) {
    const int kind = *(const int *)vc;
    float **b = s->f;
    if (kind == 0) ADD(p, MX_OP_GEGLU, geglu, b[2], b[0], b[1], 3000);
    if (kind == 1) ADD(p, MX_OP_SCALE, scale, b[0], 3000, 45.25f);
    if (kind == 2) ADD(p, MX_OP_SWIGLU_CLAMPED, swiglu_clamped, b[2], b[0], b[1], 3000, 7.0f, 1.702f);
    if (kind == 3) ADD(p, MX_OP_SWIGLU_CLAMPED, swiglu_clamped, b[0], b[0], b[1], 3000, 7.0f, 1.702f);  // in place
    if (kind == 4) ADD(p, MX_OP_EXPERT_BIAS, expert_bias, b[2], b[3], s->i[0], 100, 30);
}

static void elementwise_case(mx_backend *cpu, mx_backend *gpu, ref_rng *r, int kind) {
    static const char *const labels[] = {"geglu record", "scale record", "swiglu_clamped record",
                                         "swiglu_clamped record, in place", "expert_bias record"};
    data d = {0};
    const float span = kind == 2 || kind == 3 ? 12 : 4;  // the clamped SwiGLU on both sides of +-7
    add_f(&d, "gate", 3000, r, -span, span, 1e-5);
    add_f(&d, "up", 3000, r, -span, span, 0);
    add_f(&d, "out", 3000, r, -4, 4, 1e-5);
    add_f(&d, "expert biases", 8 * 30, r, -1, 1, 0);
    int32_t ids[100];
    for (int i = 0; i < 100; i++) ids[i] = (int32_t)(ref_next(r) % 8);
    add_i(&d, ids, 100);
    run_case(labels[kind], cpu, gpu, &d, build_elementwise, &kind, NULL, 0);
    data_free(&d);
}

// ---- a whole decoder layer and the output head ------------------------------------------------------

typedef struct layer_cfg {
    int n, H, NH, NKV, D, I, V;
    bool decode;  // a batched decode step: token t the next position of slot t, the attention's decode hint
    int ctx;      // positions per sequence of the cache (0: 64, 256 with decode); one token: at ctx - 30
} layer_cfg;

// Buffers: 0 x, 1 h, 2 q, 3 k, 4 v, 5 att, 6 tmp, 7 gate, 8 up, 9 attn norm, 10 ffn norm, 11 q norm,
// 12 k norm, 13 inv_freq, 14 out_h, 15 logits, 16 final norm. Ints: 0 pos, 1 slot, 2 tokens, 3 rows, 4 ids.
// Matrices: 0 q, 1 k, 2 v, 3 o, 4 gate, 5 up, 6 down, 7 embed/lm_head.
static void build_layer(mx_plan *p, side *s, const void *vc) {
    const layer_cfg *c = vc;
    float **b = s->f;
    const int n = c->n;
    mx_rope rope = {.inv_freq = b[13], .head_dim = c->D, .attn_factor = 1.0f};
    mx_kv_ref kv = {s->kv, s->lay, 1, s->i[1], s->i[0], NULL};
    ADD(p, MX_OP_EMBED, embed, b[0], &s->m[7], s->i[2], n);
    ADD(p, MX_OP_RMSNORM, rmsnorm, b[1], b[0], b[9], n, c->H, 1e-6f);
    ADD(p, MX_OP_MATMUL, matmul, b[2], b[1], &s->m[0], NULL, n);
    ADD(p, MX_OP_MATMUL, matmul, b[3], b[1], &s->m[1], NULL, n);
    ADD(p, MX_OP_MATMUL, matmul, b[4], b[1], &s->m[2], NULL, n);
    ADD(p, MX_OP_RMSNORM, rmsnorm, b[2], b[2], b[11], n * c->NH, c->D, 1e-6f);
    ADD(p, MX_OP_RMSNORM, rmsnorm, b[3], b[3], b[12], n * c->NKV, c->D, 1e-6f);
    ADD(p, MX_OP_ROPE, rope, b[2], s->i[0], n, c->NH, rope);
    ADD(p, MX_OP_ROPE, rope, b[3], s->i[0], n, c->NKV, rope);
    ADD(p, MX_OP_KV_STORE, kv_store, kv, b[3], b[4], n);
    ADD(p, MX_OP_ATTENTION, attention, b[5], b[2], kv, n, c->NH, 1.0f / sqrtf((float)c->D), 0, NULL, c->decode);
    ADD(p, MX_OP_MATMUL, matmul, b[6], b[5], &s->m[3], NULL, n);
    ADD(p, MX_OP_ADD, add, b[0], b[6], (int64_t)n * c->H);
    ADD(p, MX_OP_RMSNORM, rmsnorm, b[1], b[0], b[10], n, c->H, 1e-6f);
    ADD(p, MX_OP_MATMUL, matmul, b[7], b[1], &s->m[4], NULL, n);
    ADD(p, MX_OP_MATMUL, matmul, b[8], b[1], &s->m[5], NULL, n);
    ADD(p, MX_OP_SWIGLU, swiglu, b[7], b[7], b[8], (int64_t)n * c->I);
    ADD(p, MX_OP_MATMUL, matmul, b[6], b[7], &s->m[6], NULL, n);
    ADD(p, MX_OP_ADD, add, b[0], b[6], (int64_t)n * c->H);
    ADD(p, MX_OP_GATHER_ROWS, gather_rows, b[14], b[0], s->i[3], 2, c->H);
    ADD(p, MX_OP_RMSNORM, rmsnorm, b[14], b[14], b[16], 2, c->H, 1e-6f);
    ADD(p, MX_OP_MATMUL, matmul, b[15], b[14], &s->m[7], NULL, 2);
    ADD(p, MX_OP_ARGMAX, argmax, s->i[4], b[15], 2, c->V);
}

// The tolerance of the rotated q and k buffers of an n-token step: with MLXCEL_GPU_ATTN_ROPE=1 (the
// default: unset or anything but "0") a
// one-token step's q/k norm + RoPE runs inside the decode attention (gpu_plan.c, try_attn_rope),
// which leaves q and k unrotated (no later record reads them), so they are not compared then (-1);
// the attention's output and everything after it are.
static double rotated_qk_tol(int n, double tol) {
    const char *attn_rope = getenv("MLXCEL_GPU_ATTN_ROPE");
    return n == 1 && !(attn_rope && !strcmp(attn_rope, "0")) ? -1.0 : tol;
}

static void layer_case(mx_backend *cpu, mx_backend *gpu, ref_rng *r, const fmt *f, layer_cfg c) {
    data d = {0};
    const int64_t n = c.n, H = c.H, QD = (int64_t)c.NH * c.D, KD = (int64_t)c.NKV * c.D;
    const double pre = n >= 64 ? 1.5e-2 : 2e-5, post = n >= 64 ? 2e-2 : after_cache_tol(gpu);
    add_f(&d, "x", n * H, r, -1, 1, post);
    add_f(&d, "h", n * H, r, -1, 1, post);
    add_f(&d, "q", n * QD, r, -1, 1, rotated_qk_tol(c.n, pre));
    add_f(&d, "k", n * KD, r, -1, 1, rotated_qk_tol(c.n, pre));
    add_f(&d, "v", n * KD, r, -1, 1, pre);
    add_f(&d, "att", n * QD, r, -1, 1, post);
    add_f(&d, "tmp", n * H, r, -1, 1, post);
    add_f(&d, "gate", n * c.I, r, -1, 1, post);
    add_f(&d, "up", n * c.I, r, -1, 1, post);
    add_f(&d, "attn norm", H, r, 0.5f, 1.5f, 0);
    add_f(&d, "ffn norm", H, r, 0.5f, 1.5f, 0);
    add_f(&d, "q norm", c.D, r, 0.5f, 1.5f, 0);
    add_f(&d, "k norm", c.D, r, 0.5f, 1.5f, 0);
    int kf = add_f(&d, "inv_freq", c.D / 2, r, 0, 1, 0);
    for (int j = 0; j < c.D / 2; j++) d.fhost[kf][j] = 1.0f / powf(1e6f, 2.0f * j / c.D);
    add_f(&d, "out_h", 2 * H, r, -1, 1, post);
    add_f(&d, "logits", 2 * (int64_t)c.V, r, -1, 1, post);
    add_f(&d, "final norm", H, r, 0.5f, 1.5f, 0);
    int32_t *pos = malloc(4 * (size_t)n), *slot = malloc(4 * (size_t)n), *tok = malloc(4 * (size_t)n);
    for (int t = 0; t < c.n; t++) {
        pos[t] = c.n == 1 ? (c.ctx ? c.ctx - 30 : 37) : c.decode ? 5 + t * 37 % 200 : t % 40;  // n > 1: two sequences in two slots,
        slot[t] = c.n == 1 ? 2 : c.decode ? t : t / 40;                  // or (decode) one token in each of n
        tok[t] = (int32_t)(ref_next(r) % (uint64_t)c.V);
    }
    int32_t rows[2] = {c.n - 1, 0}, ids[2] = {0, 0};
    add_i(&d, pos, n), add_i(&d, slot, n), add_i(&d, tok, n), add_i(&d, rows, 2), add_i(&d, ids, 2);
    free(pos), free(slot), free(tok);
    add_m(&d, r, f->q, f->dtype, f->scale_dtype, 1, QD, H);
    add_m(&d, r, f->q, f->dtype, f->scale_dtype, 1, KD, H);
    add_m(&d, r, f->q, f->dtype, f->scale_dtype, 1, KD, H);
    add_m(&d, r, f->q, f->dtype, f->scale_dtype, 1, H, QD);
    add_m(&d, r, f->q, f->dtype, f->scale_dtype, 1, c.I, H);
    add_m(&d, r, f->q, f->dtype, f->scale_dtype, 1, c.I, H);
    add_m(&d, r, f->q, f->dtype, f->scale_dtype, 1, H, c.I);
    add_m(&d, r, f->q, f->dtype, f->scale_dtype, 1, c.V, H);
    // Slots: one per token in a batched decode, else one per 40 tokens (at least 3 either way).
    const int prefill_slots = (c.n + 39) / 40, n_slots = c.decode ? c.n : prefill_slots;
    mx_kv_layout lay = {2, n_slots > 3 ? n_slots : 3, c.ctx ? c.ctx : c.decode ? 256 : 64, c.NKV, c.D, 0};
    char label[160], ml[64];
    snprintf(label, sizeof label, "decoder layer + head, %s, n=%d%s, cache %d", ref_matrix_label(&d.mat[0], ml, sizeof ml),
             c.n, c.decode ? " (batched decode)" : "", lay.max_ctx);
    // The cache starts as zeros on both sides. The ids are not compared: logits differ by the cache's
    // rounding, so near-ties may pick different tokens (argmax has its own exact test).
    run_case(label, cpu, gpu, &d, build_layer, &c, &lay, d.ni);
    data_free(&d);
}

// ---- records no pattern covers (MoE, plain and DeepSeek-V3's grouped routing) ------------------------

// groups 0: the moe_route record; else DeepSeek-V3's grouped routing (moe_route_grouped: the best
// topk_groups of `groups` expert groups, with a score correction bias).
typedef struct moe_cfg {
    int n, H, E, K, I, groups, topk_groups;
} moe_cfg;

// The MLP half of a MoE layer (src/models/forward.c, mlp_records). Buffers: 0 h, 1 router logits,
// 2 weights, 3 gate, 4 up, 5 y, 6 x, [7 score correction bias (grouped routing only),] then the
// norm's weight. Ints: 0 ids (compared exactly). Matrices: 0 router, 1 gate, 2 up, 3 down.
static void build_moe(mx_plan *p, side *s, const void *vc) {
    const moe_cfg *c = vc;
    float **b = s->f;
    const int n = c->n, K = c->K;
    ADD(p, MX_OP_RMSNORM, rmsnorm, b[0], b[6], b[c->groups ? 8 : 7], n, c->H, 1e-6f);
    ADD(p, MX_OP_MATMUL, matmul, b[1], b[0], &s->m[0], NULL, n);
    if (c->groups)
        ADD(p, MX_OP_MOE_ROUTE_GROUPED, moe_route_grouped, s->i[0], b[2], b[1], b[7], n, c->E, K, c->groups,
            c->topk_groups, true, 2.5f);
    else
        ADD(p, MX_OP_MOE_ROUTE, moe_route, s->i[0], b[2], b[1], n, c->E, K, true);
    ADD(p, MX_OP_MOE_MATMUL, moe_matmul, b[3], b[0], &s->m[1], s->i[0], n * K, K);
    ADD(p, MX_OP_MOE_MATMUL, moe_matmul, b[4], b[0], &s->m[2], s->i[0], n * K, K);
    ADD(p, MX_OP_SWIGLU, swiglu, b[3], b[3], b[4], (int64_t)n * K * c->I);
    ADD(p, MX_OP_MOE_MATMUL, moe_matmul, b[5], b[3], &s->m[3], s->i[0], n * K, 1);
    ADD(p, MX_OP_MOE_COMBINE, moe_combine, b[6], b[5], b[2], n, K, c->H);
}

static void moe_case(mx_backend *cpu, mx_backend *gpu, ref_rng *r, const fmt *f, moe_cfg c) {
    data d = {0};
    const int64_t n = c.n, K = c.K;
    add_f(&d, "h", n * c.H, r, -1, 1, 2e-5);
    add_f(&d, "router", n * c.E, r, -1, 1, 2e-5);
    add_f(&d, "weights", n * K, r, 0, 1, 2e-5);
    add_f(&d, "gate", n * K * c.I, r, -1, 1, 2e-5);
    add_f(&d, "up", n * K * c.I, r, -1, 1, 2e-5);
    add_f(&d, "y", n * K * c.H, r, -1, 1, 2e-5);
    add_f(&d, "x", n * c.H, r, -1, 1, 2e-5);
    if (c.groups) add_f(&d, "score bias", c.E, r, -0.1f, 0.1f, 0);
    add_f(&d, "norm weight", c.H, r, 0.5f, 1.5f, 0);
    int32_t ids[256] = {0};
    add_i(&d, ids, n * K);
    add_m(&d, r, f->q, f->dtype, f->scale_dtype, 1, c.E, c.H);
    add_m(&d, r, f->q, f->dtype, f->scale_dtype, c.E, c.I, c.H);
    add_m(&d, r, f->q, f->dtype, f->scale_dtype, c.E, c.I, c.H);
    add_m(&d, r, f->q, f->dtype, f->scale_dtype, c.E, c.H, c.I);
    char label[160], ml[64];
    if (c.groups)
        snprintf(label, sizeof label, "MoE grouped routing, %s, n=%d, %d groups",
                 ref_matrix_label(&d.mat[1], ml, sizeof ml), c.n, c.groups);
    else
        snprintf(label, sizeof label, "MoE block, %s, n=%d", ref_matrix_label(&d.mat[1], ml, sizeof ml), c.n);
    run_case(label, cpu, gpu, &d, build_moe, &c, NULL, 0);
    data_free(&d);
}

// ---- multi-head latent attention (deepseek_v3) ------------------------------------------------------

typedef struct mla_cfg {
    int n, H, NH, QL, nope, R, KL, V;
} mla_cfg;

// The records of src/models/forward_mla.c. Buffers: 0 h, 1 q_a, 2 q_nope, 3 q_pe, 4 c_kv, 5 k_pe,
// 6 q_lat, 7 o_lat, 8 att, 9 out, 10 q_a norm, 11 kv_a norm, 12 inv_freq. Ints: 0 pos, 1 slot,
// 2 head ids. Matrices: 0 q_a, 1 q_nope, 2 q_pe, 3 kv_a, 4 k_pe, 5 embed_q, 6 unembed_out, 7 o.
static void build_mla(mx_plan *p, side *s, const void *vc) {
    const mla_cfg *c = vc;
    float **b = s->f;
    const int n = c->n;
    mx_rope rope = {.inv_freq = b[12], .head_dim = c->R, .attn_factor = 1.25f, .rot_dim = c->R};
    mx_kv_ref kv = {s->kv, s->lay, 1, s->i[1], s->i[0], NULL};
    ADD(p, MX_OP_MATMUL, matmul, b[1], b[0], &s->m[0], NULL, n);
    ADD(p, MX_OP_RMSNORM, rmsnorm, b[1], b[1], b[10], n, c->QL, 1e-6f);
    ADD(p, MX_OP_MATMUL, matmul, b[2], b[1], &s->m[1], NULL, n);
    ADD(p, MX_OP_MATMUL, matmul, b[3], b[1], &s->m[2], NULL, n);
    ADD(p, MX_OP_MATMUL, matmul, b[4], b[0], &s->m[3], NULL, n);
    ADD(p, MX_OP_MATMUL, matmul, b[5], b[0], &s->m[4], NULL, n);
    ADD(p, MX_OP_RMSNORM, rmsnorm, b[4], b[4], b[11], n, c->KL, 1e-6f);
    ADD(p, MX_OP_ROPE, rope, b[3], s->i[0], n, c->NH, rope);
    ADD(p, MX_OP_ROPE, rope, b[5], s->i[0], n, 1, rope);
    ADD(p, MX_OP_LATENT_STORE, latent_store, kv, b[4], b[5], n, c->KL, c->R);
    ADD(p, MX_OP_MOE_MATMUL, moe_matmul, b[6], b[2], &s->m[5], s->i[2], n * c->NH, 1);
    ADD(p, MX_OP_LATENT_ATTENTION, latent_attention, b[7], b[6], b[3], kv, n, c->NH, c->KL, c->R, 0.17f);
    ADD(p, MX_OP_MOE_MATMUL, moe_matmul, b[8], b[7], &s->m[6], s->i[2], n * c->NH, 1);
    ADD(p, MX_OP_MATMUL, matmul, b[9], b[8], &s->m[7], NULL, n);
}

static void mla_case(mx_backend *cpu, mx_backend *gpu, ref_rng *r, const fmt *f, mla_cfg c) {
    data d = {0};
    const int64_t n = c.n, NH = c.NH;
    const double post = after_cache_tol(gpu);  // after the latent cache
    add_f(&d, "h", n * c.H, r, -1, 1, 0);
    add_f(&d, "q_a", n * c.QL, r, -1, 1, 2e-5);
    add_f(&d, "q_nope", n * NH * c.nope, r, -1, 1, 2e-5);
    add_f(&d, "q_pe", n * NH * c.R, r, -1, 1, 2e-5);
    add_f(&d, "c_kv", n * c.KL, r, -1, 1, 2e-5);
    add_f(&d, "k_pe", n * c.R, r, -1, 1, 2e-5);
    add_f(&d, "q_lat", n * NH * c.KL, r, -1, 1, 2e-5);
    add_f(&d, "o_lat", n * NH * c.KL, r, -1, 1, post);
    add_f(&d, "att", n * NH * c.V, r, -1, 1, post);
    add_f(&d, "out", n * c.H, r, -1, 1, post);
    add_f(&d, "q_a norm", c.QL, r, 0.5f, 1.5f, 0);
    add_f(&d, "kv_a norm", c.KL, r, 0.5f, 1.5f, 0);
    int kf = add_f(&d, "inv_freq", c.R / 2, r, 0, 1, 0);
    for (int j = 0; j < c.R / 2; j++) d.fhost[kf][j] = 1.0f / powf(1e4f, 2.0f * j / c.R);
    int32_t *pos = malloc(4 * (size_t)n), *slot = malloc(4 * (size_t)n), *heads = malloc(4 * (size_t)(n * NH));
    for (int t = 0; t < c.n; t++) {
        pos[t] = c.n == 1 ? 37 : t % 40;  // n > 1: two sequences of positions in two slots
        slot[t] = c.n == 1 ? 2 : t / 40;
    }
    for (int64_t i = 0; i < n * NH; i++) heads[i] = (int32_t)(i % NH);
    add_i(&d, pos, n), add_i(&d, slot, n), add_i(&d, heads, n * NH);
    free(pos), free(slot), free(heads);
    add_m(&d, r, f->q, f->dtype, f->scale_dtype, 1, c.QL, c.H);
    add_m(&d, r, f->q, f->dtype, f->scale_dtype, 1, NH * c.nope, c.QL);
    add_m(&d, r, f->q, f->dtype, f->scale_dtype, 1, NH * c.R, c.QL);
    add_m(&d, r, f->q, f->dtype, f->scale_dtype, 1, c.KL, c.H);
    add_m(&d, r, f->q, f->dtype, f->scale_dtype, 1, c.R, c.H);
    add_m(&d, r, f->q, f->dtype, f->scale_dtype, NH, c.KL, c.nope);
    add_m(&d, r, f->q, f->dtype, f->scale_dtype, NH, c.V, c.KL);
    add_m(&d, r, f->q, f->dtype, f->scale_dtype, 1, c.H, NH * c.V);
    mx_kv_layout lay = {2, 3, 64, 1, (c.KL + c.R) / 2, 0};
    char label[160], ml[64];
    snprintf(label, sizeof label, "latent attention, %s, n=%d, kv_lora %d", ref_matrix_label(&d.mat[0], ml, sizeof ml),
             c.n, c.KL);
    run_case(label, cpu, gpu, &d, build_mla, &c, &lay, d.ni);
    data_free(&d);
}

// ---- a gpt_oss block: attention with sinks (sliding window or not), MoE with biases -----------------

typedef struct gptoss_cfg {
    int n, H, NH, NKV, D, E, K, I, window;
} gptoss_cfg;

// The records of src/models/forward.c for a gpt_oss layer (without the norms). Buffers: 0 h, 1 q,
// 2 k, 3 v, 4 att, 5 sinks, 6 router logits, 7 weights, 8 gate, 9 up, 10 y, 11 x, 12 gate bias,
// 13 up bias, 14 down bias, 15 router bias, 16 inv_freq, 17 q bias. Ints: 0 pos, 1 slot, 2 ids.
// Matrices: 0 q, 1 k, 2 v, 3 router, 4 gate, 5 up, 6 down.
static void build_gptoss(mx_plan *p, side *s, const void *vc) {
    const gptoss_cfg *c = vc;
    float **b = s->f;
    const int n = c->n, K = c->K;
    mx_rope rope = {.inv_freq = b[16], .head_dim = c->D, .attn_factor = 1.35f};
    mx_kv_ref kv = {s->kv, s->lay, 1, s->i[1], s->i[0], NULL};
    ADD(p, MX_OP_MATMUL, matmul, b[1], b[0], &s->m[0], b[17], n);
    ADD(p, MX_OP_MATMUL, matmul, b[2], b[0], &s->m[1], NULL, n);
    ADD(p, MX_OP_MATMUL, matmul, b[3], b[0], &s->m[2], NULL, n);
    ADD(p, MX_OP_ROPE, rope, b[1], s->i[0], n, c->NH, rope);
    ADD(p, MX_OP_ROPE, rope, b[2], s->i[0], n, c->NKV, rope);
    ADD(p, MX_OP_KV_STORE, kv_store, kv, b[2], b[3], n);
    ADD(p, MX_OP_ATTENTION, attention, b[4], b[1], kv, n, c->NH, 1.0f / sqrtf((float)c->D), c->window, b[5]);
    ADD(p, MX_OP_MATMUL, matmul, b[6], b[0], &s->m[3], b[15], n);
    ADD(p, MX_OP_MOE_ROUTE, moe_route, s->i[2], b[7], b[6], n, c->E, K, true);
    ADD(p, MX_OP_MOE_MATMUL, moe_matmul, b[8], b[0], &s->m[4], s->i[2], n * K, K);
    ADD(p, MX_OP_MOE_MATMUL, moe_matmul, b[9], b[0], &s->m[5], s->i[2], n * K, K);
    ADD(p, MX_OP_EXPERT_BIAS, expert_bias, b[8], b[12], s->i[2], n * K, c->I);
    ADD(p, MX_OP_EXPERT_BIAS, expert_bias, b[9], b[13], s->i[2], n * K, c->I);
    ADD(p, MX_OP_SWIGLU_CLAMPED, swiglu_clamped, b[8], b[8], b[9], (int64_t)n * K * c->I, 7.0f, 1.702f);
    ADD(p, MX_OP_MOE_MATMUL, moe_matmul, b[10], b[8], &s->m[6], s->i[2], n * K, 1);
    ADD(p, MX_OP_EXPERT_BIAS, expert_bias, b[10], b[14], s->i[2], n * K, c->H);
    ADD(p, MX_OP_MOE_COMBINE, moe_combine, b[11], b[10], b[7], n, K, c->H);
}

static void gptoss_case(mx_backend *cpu, mx_backend *gpu, ref_rng *r, const fmt *f, const fmt *ef, gptoss_cfg c) {
    data d = {0};
    const int64_t n = c.n, K = c.K, QD = (int64_t)c.NH * c.D, KD = (int64_t)c.NKV * c.D;
    add_f(&d, "h", n * c.H, r, -1, 1, 0);
    add_f(&d, "q", n * QD, r, -1, 1, rotated_qk_tol(c.n, 2e-5));
    add_f(&d, "k", n * KD, r, -1, 1, rotated_qk_tol(c.n, 2e-5));
    add_f(&d, "v", n * KD, r, -1, 1, 2e-5);
    add_f(&d, "att", n * QD, r, -1, 1, after_cache_tol(gpu));
    add_f(&d, "sinks", c.NH, r, -1, 3, 0);
    add_f(&d, "router", n * c.E, r, -1, 1, 2e-5);
    add_f(&d, "weights", n * K, r, 0, 1, 2e-5);
    add_f(&d, "gate", n * K * c.I, r, -1, 1, 2e-5);
    add_f(&d, "up", n * K * c.I, r, -1, 1, 2e-5);
    add_f(&d, "y", n * K * c.H, r, -1, 1, 2e-5);
    add_f(&d, "x", n * c.H, r, -1, 1, 2e-5);
    add_f(&d, "gate bias", c.E * c.I, r, -0.5f, 0.5f, 0);
    add_f(&d, "up bias", c.E * c.I, r, -0.5f, 0.5f, 0);
    add_f(&d, "down bias", c.E * c.H, r, -0.5f, 0.5f, 0);
    add_f(&d, "router bias", c.E, r, -0.5f, 0.5f, 0);
    int kf = add_f(&d, "inv_freq", c.D / 2, r, 0, 1, 0);
    for (int j = 0; j < c.D / 2; j++) d.fhost[kf][j] = 1.0f / powf(150000.0f, 2.0f * j / c.D);
    add_f(&d, "q bias", QD, r, -0.5f, 0.5f, 0);
    int32_t *pos = malloc(4 * (size_t)n), *slot = malloc(4 * (size_t)n), *ids = calloc((size_t)(n * K), 4);
    for (int t = 0; t < c.n; t++) {
        pos[t] = c.n == 1 ? 37 : t % 40;  // n > 1: two sequences of positions in two slots
        slot[t] = c.n == 1 ? 2 : t / 40;
    }
    add_i(&d, pos, n), add_i(&d, slot, n), add_i(&d, ids, n * K);
    free(pos), free(slot), free(ids);
    add_m(&d, r, f->q, f->dtype, f->scale_dtype, 1, QD, c.H);
    add_m(&d, r, f->q, f->dtype, f->scale_dtype, 1, KD, c.H);
    add_m(&d, r, f->q, f->dtype, f->scale_dtype, 1, KD, c.H);
    add_m(&d, r, f->q, f->dtype, f->scale_dtype, 1, c.E, c.H);
    add_m(&d, r, ef->q, ef->dtype, ef->scale_dtype, c.E, c.I, c.H);
    add_m(&d, r, ef->q, ef->dtype, ef->scale_dtype, c.E, c.I, c.H);
    add_m(&d, r, ef->q, ef->dtype, ef->scale_dtype, c.E, c.H, c.I);
    mx_kv_layout lay = {2, 3, 64, c.NKV, c.D, 0};
    char label[160], ml[64];
    snprintf(label, sizeof label, "gpt_oss block, experts %s, n=%d, window %d", ref_matrix_label(&d.mat[4], ml, sizeof ml),
             c.n, c.window);
    run_case(label, cpu, gpu, &d, build_gptoss, &c, &lay, 2);  // the expert ids compared exactly
    data_free(&d);
}

static const fmt fused_fmts[] = {
    {{MX_QUANT_AFFINE, 4, 64}, MX_DTYPE_U32, MX_DTYPE_BF16},
    {{MX_QUANT_AFFINE, 4, 32}, MX_DTYPE_U32, MX_DTYPE_F16},
    {{MX_QUANT_AFFINE, 8, 128}, MX_DTYPE_U32, MX_DTYPE_BF16},
    {{MX_QUANT_MXFP4, 4, 32}, MX_DTYPE_U32, MX_DTYPE_U8},
    {{MX_QUANT_NONE, 0, 0}, MX_DTYPE_BF16, MX_DTYPE_BF16},
};
static const fmt other_fmts[] = {
    {{MX_QUANT_AFFINE, 3, 64}, MX_DTYPE_U32, MX_DTYPE_BF16},
    {{MX_QUANT_AFFINE, 4, 64}, MX_DTYPE_U32, MX_DTYPE_F32},
    {{MX_QUANT_NONE, 0, 0}, MX_DTYPE_F32, MX_DTYPE_F32},
};

// The projection patterns in each format, the patterns that must not fuse and the several-token
// cases.
static void proj_cases(mx_backend *cpu, mx_backend *gpu, ref_rng *rng) {
    for (int p = 0; p <= P_ALIAS_RES; p++) {
        for (size_t f = 0; f < sizeof fused_fmts / sizeof fused_fmts[0]; f++) {
            proj_case(cpu, gpu, rng, &fused_fmts[f], (proj_cfg){1, 1024, 2048, 512, 3072, false, p});
            if (f == 0) proj_case(cpu, gpu, rng, &fused_fmts[f], (proj_cfg){1, 512, 512, 128, 768, true, p});
        }
        proj_case(cpu, gpu, rng, &other_fmts[p % 3], (proj_cfg){1, 512, 512, 256, 768, p % 2 == 0, p});
        proj_case(cpu, gpu, rng, &fused_fmts[0], (proj_cfg){3, 512, 512, 256, 768, false, p});
    }
    // Few rows (one block per matrix), and a norm over a long row (the staging limit).
    proj_case(cpu, gpu, rng, &fused_fmts[0], (proj_cfg){1, 256, 64, 32, 64, true, P_NORM_QKV});
    proj_case(cpu, gpu, rng, &fused_fmts[0], (proj_cfg){1, 12288, 256, 128, 256, false, P_NORM_GATE_UP});
    // More tasks than the 2,112 warps of an H200's streaming grid (warps take several; eight rows
    // per task over 1024 columns, two in bf16): q/k/v of 20480 + 512 + 512 rows, gate/up of 18000
    // rows, in 4-bit, 8-bit and bf16.
    for (size_t f = 0; f < 5; f += 2) {
        proj_case(cpu, gpu, rng, &fused_fmts[f], (proj_cfg){1, 1024, 20480, 512, 256, f == 0, P_NORM_QKV});
        proj_case(cpu, gpu, rng, &fused_fmts[f], (proj_cfg){1, 1024, 256, 128, 18000, f == 2, P_NORM_GATE_UP});
    }
    // Few rows over long rows: fewer tasks than warps on the streaming kernel (4- and 8-bit), the
    // split-K launches (two and four warps per row group) of the kernels of matvec_fused.cu for bf16
    // here and for the others on the backend without the streaming kernel below; q/k/v of 512 rows
    // over 2048 columns, gate/up of 256 rows over 4096, a residual product of 256 rows over 4224.
    for (size_t f = 0; f < sizeof fused_fmts / sizeof fused_fmts[0]; f++) {
        if (fused_fmts[f].q.mode == MX_QUANT_MXFP4) continue;
        proj_case(cpu, gpu, rng, &fused_fmts[f], (proj_cfg){1, 2048, 256, 128, 256, f == 0, P_NORM_QKV});
        proj_case(cpu, gpu, rng, &fused_fmts[f], (proj_cfg){1, 4096, 256, 128, 256, f == 1, P_NORM_GATE_UP});
        proj_case(cpu, gpu, rng, &fused_fmts[f], (proj_cfg){1, 256, 4224, 128, 256, f == 2, P_RESIDUAL});
    }
    // Decode batches on the tensor-core product followed by the residual add (gpu_plan.c's
    // try_tc_residual: the add in the product's writer where the product takes it) at 4, 17, 32 and
    // 64 tokens: 1024 x 2048 (the columns split: the split-sum kernel, four rows per thread) and
    // 640 x 1024 in 8-bit, and 1024 x 64 (two chunks: never split, the add in the product's own
    // store); with and without bias. (Rows that are not a multiple of 4, the one-row-per-thread sum,
    // are in the mma emulation: this harness's other matrices take the rows as columns.)
    const int tc_batches[] = {4, 17, 32, 64};
    for (size_t k = 0; k < sizeof tc_batches / sizeof tc_batches[0]; k++) {
        const int n = tc_batches[k];
        proj_case(cpu, gpu, rng, &fused_fmts[0], (proj_cfg){n, 1024, 2048, 128, 256, n == 17, P_RESIDUAL});
        proj_case(cpu, gpu, rng, &fused_fmts[2], (proj_cfg){n, 640, 1024, 128, 256, n != 17, P_RESIDUAL});
        proj_case(cpu, gpu, rng, &fused_fmts[0], (proj_cfg){n, 1024, 64, 128, 256, n == 32, P_RESIDUAL});
    }
    // Several tokens through products sharing their input (gpu_plan.c's try_tc_group: one grouped
    // launch by default (MLXCEL_GPU_GROUPED=0: the launch pairs) where the tensor-core decode product takes the batch, the
    // SwiGLU in its sum launch; records otherwise) at 2, 4, 16, 63 and 64 tokens: the 0.6B's q/k/v
    // (2048, 512, 512 rows) and gate/up (3072) over 1024 columns, with and without the norm before
    // them, 4-bit g64 and 8-bit g128; and q/k/v over 256 columns (8 chunks: few splits) in 4-bit g32
    // f16, and in mxfp4 (no tensor-core product: the records).
    const int group_batches[] = {2, 4, 16, 63, 64};
    const int group_patterns[] = {P_NORM_QKV, P_QKV, P_NORM_GATE_UP, P_GATE_UP};
    for (size_t k = 0; k < sizeof group_batches / sizeof group_batches[0]; k++) {
        const int n = group_batches[k];
        for (int p = 0; p < 4; p++)
            proj_case(cpu, gpu, rng, &fused_fmts[p % 2 == 0 ? 0 : 2],
                      (proj_cfg){n, 1024, 2048, 512, 3072, (p + n) % 2 == 0, group_patterns[p]});
        proj_case(cpu, gpu, rng, &fused_fmts[1], (proj_cfg){n, 256, 512, 128, 768, n != 16, P_QKV});
        proj_case(cpu, gpu, rng, &fused_fmts[1], (proj_cfg){n, 256, 512, 128, 768, n == 16, P_GATE_UP});
    }
    proj_case(cpu, gpu, rng, &fused_fmts[3], (proj_cfg){16, 256, 512, 128, 768, true, P_QKV});
}

// The GPU backend made with `var`=`value` set for its creation only (exits naming the setting when it
// cannot be made), after the line that heads the cases run on it.
static mx_backend *gpu_with(const mx_backend_options *gopt, const char *var, const char *value) {
    setenv(var, value, 1);
    mx_backend *gpu = mx_gpu_backend_create(gopt, &err);
    unsetenv(var);
    char what[128];
    snprintf(what, sizeof what, "gpu backend with %s=%s", var, value);
    if (!gpu) die(what);
    printf("cpu vs %s with %s=%s\n", gpu->ops->name, var, value);
    return gpu;
}

int main(void) {
    mx_backend_options copt = {.name = "cpu", .threads = 2}, gopt = {.name = mx_gpu_backend_name()};
    // The streaming matrix-vector kernel on every row length it can take (by default only from 4096
    // weights on), so the short layers of the cases below reach it too.
    setenv("MLXCEL_GPU_STREAM_MIN_COLS", "0", 1);
    mx_backend *cpu = mx_backend_create(&copt, &err);
    if (!cpu) die("cpu backend");
    mx_backend *gpu = mx_gpu_backend_create(&gopt, &err);
    if (!gpu) {
        printf("skipped: %s\n", err.msg);
        mx_backend_free(cpu);
        return strstr(err.msg, "GPU found") ? 77 : 1;
    }
    printf("cpu vs %s (%s)\n", gpu->ops->name, gpu->device_name);
    ref_rng rng = {0x2545f4914f6cdd1dull};
    proj_cases(cpu, gpu, &rng);
    rope_case(cpu, gpu, &rng, (rope_cfg){1, 16, 8, 128, true, 0, false});
    rope_case(cpu, gpu, &rng, (rope_cfg){5, 32, 8, 128, true, 0, false});
    rope_case(cpu, gpu, &rng, (rope_cfg){1, 12, 4, 64, false, 0, false});
    rope_case(cpu, gpu, &rng, (rope_cfg){3, 8, 2, 256, true, 0, false});
    rope_case(cpu, gpu, &rng, (rope_cfg){3, 8, 4, 128, true, 64, false});
    rope_case(cpu, gpu, &rng, (rope_cfg){4, 8, 4, 96, false, 0, true});
    for (int kind = 0; kind < 5; kind++) elementwise_case(cpu, gpu, &rng, kind);
    // One-token layers.
    for (size_t f = 0; f < sizeof fused_fmts / sizeof fused_fmts[0]; f++)
        layer_case(cpu, gpu, &rng, &fused_fmts[f], (layer_cfg){1, 512, 8, 4, 64, 1024, 1000, false, 0});
    layer_case(cpu, gpu, &rng, &other_fmts[0], (layer_cfg){1, 512, 8, 4, 64, 1024, 1000, false, 0});
    // 1024-wide layers: every product on the streaming kernel (rows of 32 chunks or more), the
    // head at two tokens too (bf16 there: the kernels of matvec.cuh).
    for (size_t f = 0; f < sizeof fused_fmts / sizeof fused_fmts[0]; f++)
        layer_case(cpu, gpu, &rng, &fused_fmts[f], (layer_cfg){1, 1024, 8, 4, 128, 2048, 1000, false, 0});
    // ... at a longer cache (600 positions, the token at 570): the decode attention split over the
    // context and merged by its combine; 16 heads of 8 KV heads (Qwen3-0.6B's).
    for (size_t f = 0; f < sizeof fused_fmts / sizeof fused_fmts[0]; f++)
        layer_case(cpu, gpu, &rng, &fused_fmts[f], (layer_cfg){1, 1024, 8, 4, 128, 2048, 1000, false, 600});
    layer_case(cpu, gpu, &rng, &fused_fmts[0], (layer_cfg){1, 1024, 16, 8, 128, 2048, 1000, false, 600});
    // Qwen3-0.6B's layer shape.
    layer_case(cpu, gpu, &rng, &fused_fmts[0], (layer_cfg){1, 1024, 16, 8, 128, 3072, 1000, false, 0});
    layer_case(cpu, gpu, &rng, &fused_fmts[0], (layer_cfg){4, 512, 8, 4, 64, 1024, 1000, false, 0});
    layer_case(cpu, gpu, &rng, &fused_fmts[0], (layer_cfg){70, 512, 8, 4, 64, 1024, 1000, false, 0});
    // Batched decode steps (server steps of 17-64 sequences: the flash-decoding kernel by the
    // record's hint; on 132 multiprocessors 4 KV heads in groups of 2 split the context below 50
    // tokens, here in 2, and not above).
    layer_case(cpu, gpu, &rng, &fused_fmts[0], (layer_cfg){24, 512, 8, 4, 64, 1024, 1000, true, 0});
    layer_case(cpu, gpu, &rng, &fused_fmts[0], (layer_cfg){56, 512, 8, 4, 128, 1024, 1000, true, 0});
    moe_case(cpu, gpu, &rng, &fused_fmts[0], (moe_cfg){1, 256, 8, 2, 128, 0, 0});
    moe_case(cpu, gpu, &rng, &fused_fmts[0], (moe_cfg){5, 256, 8, 2, 128, 0, 0});
    moe_case(cpu, gpu, &rng, &fused_fmts[0], (moe_cfg){1, 256, 16, 4, 128, 4, 2});
    moe_case(cpu, gpu, &rng, &fused_fmts[4], (moe_cfg){6, 256, 64, 6, 128, 8, 3});
    // DeepSeek-V3 fixture sizes (decode, two prefilled sequences), and DeepSeek-V3 / Kimi-K2 head sizes.
    mla_case(cpu, gpu, &rng, &fused_fmts[0], (mla_cfg){1, 128, 4, 64, 64, 32, 64, 64});
    mla_case(cpu, gpu, &rng, &fused_fmts[0], (mla_cfg){45, 128, 4, 64, 64, 32, 64, 64});
    mla_case(cpu, gpu, &rng, &fused_fmts[4], (mla_cfg){3, 512, 8, 256, 128, 64, 512, 128});
    // gpt_oss: decode (head rows, the context split over blocks: the sinks in the merge) and two
    // prefilled sequences (token rows), with and without the sliding window; experts mxfp4 and 8-bit.
    const fmt q8 = {{MX_QUANT_AFFINE, 8, 64}, MX_DTYPE_U32, MX_DTYPE_BF16};
    for (int window = 0; window <= 8; window += 8) {
        gptoss_case(cpu, gpu, &rng, &q8, &fused_fmts[3], (gptoss_cfg){1, 256, 8, 2, 64, 8, 2, 128, window});
        gptoss_case(cpu, gpu, &rng, &q8, &fused_fmts[3], (gptoss_cfg){45, 256, 8, 2, 64, 8, 2, 128, window});
    }
    gptoss_case(cpu, gpu, &rng, &fused_fmts[4], &q8, (gptoss_cfg){3, 256, 8, 2, 64, 8, 4, 128, 8});
    // The gpt_oss fixtures' sizes (hidden 64, head_dim 32, 4 experts of 128): decode and a prompt.
    gptoss_case(cpu, gpu, &rng, &q8, &fused_fmts[3], (gptoss_cfg){1, 64, 4, 2, 32, 4, 2, 128, 8});
    gptoss_case(cpu, gpu, &rng, &q8, &fused_fmts[3], (gptoss_cfg){20, 64, 4, 2, 32, 4, 2, 128, 8});
    mx_backend_free(gpu);
    // The kernels of kernels/matvec.cuh for every pattern (MLXCEL_GPU_NO_STREAM_MATVEC=1, the A/B
    // switch of the streaming kernel): the projection patterns at widths the streaming kernel would
    // take, with its split-K launches, and a 1024-wide layer.
    gpu = gpu_with(&gopt, "MLXCEL_GPU_NO_STREAM_MATVEC", "1");
    for (size_t f = 0; f < sizeof fused_fmts / sizeof fused_fmts[0]; f++) {
        for (int p = P_NORM_QKV; p <= P_RESIDUAL; p++)
            if (p != P_GATE_UP) proj_case(cpu, gpu, &rng, &fused_fmts[f], (proj_cfg){1, 1024, 2048, 512, 3072, f == 1, p});
        if (fused_fmts[f].q.mode == MX_QUANT_MXFP4) continue;
        proj_case(cpu, gpu, &rng, &fused_fmts[f], (proj_cfg){1, 2048, 256, 128, 256, f == 0, P_NORM_QKV});
        proj_case(cpu, gpu, &rng, &fused_fmts[f], (proj_cfg){1, 256, 4224, 128, 256, f == 2, P_RESIDUAL});
    }
    layer_case(cpu, gpu, &rng, &fused_fmts[0], (layer_cfg){1, 1024, 8, 4, 128, 2048, 1000, false, 0});
    mx_backend_free(gpu);
    // The streaming kernel's two task shapes over long rows, each forced for every launch
    // (MLXCEL_GPU_STREAM_ROWS=2: two rows per task, one for gate/up, twice the chunks per step; =4:
    // four and two; by default each launch takes one by its size, and the harness's small products
    // mostly take two): q/k/v over 4096 columns, gate/up over 4096, a residual product over 4224 (a
    // partial step), in every format it streams.
    for (int shape = 0; shape < 2; shape++) {
        gpu = gpu_with(&gopt, "MLXCEL_GPU_STREAM_ROWS", shape ? "4" : "2");
        for (size_t f = 0; f < 4; f++) {
            proj_case(cpu, gpu, &rng, &fused_fmts[f], (proj_cfg){1, 4096, 1024, 256, 256, f == 0, P_NORM_QKV});
            proj_case(cpu, gpu, &rng, &fused_fmts[f], (proj_cfg){1, 4096, 256, 128, 1024, f == 1, P_NORM_GATE_UP});
            proj_case(cpu, gpu, &rng, &fused_fmts[f], (proj_cfg){1, 512, 4224, 128, 256, f == 2, P_RESIDUAL});
        }
        mx_backend_free(gpu);
    }
    // The streaming kernel's lean one-token form (MLXCEL_GPU_STREAM_LEAN=1: its affine 4/8-bit products
    // with each chunk's sum of x staged once per block and the rows' addresses formed once per task):
    // q/k/v and gate/up over 4096 columns, residual products over 4224 (a partial step) and over
    // 12288 (the staging and sums past 48 KB of shared memory), with the task shapes chosen per launch
    // and with each forced, in the affine formats it takes (the others run as by default).
    for (int shape = 0; shape < 3; shape++) {
        if (shape) setenv("MLXCEL_GPU_STREAM_ROWS", shape == 1 ? "2" : "4", 1);
        gpu = gpu_with(&gopt, "MLXCEL_GPU_STREAM_LEAN", "1");
        unsetenv("MLXCEL_GPU_STREAM_ROWS");
        for (size_t f = 0; f < 3; f++) {
            proj_case(cpu, gpu, &rng, &fused_fmts[f], (proj_cfg){1, 4096, 1024, 256, 256, f == 0, P_NORM_QKV});
            proj_case(cpu, gpu, &rng, &fused_fmts[f], (proj_cfg){1, 4096, 256, 128, 1024, f == 1, P_NORM_GATE_UP});
            proj_case(cpu, gpu, &rng, &fused_fmts[f], (proj_cfg){1, 512, 4224, 128, 256, f == 2, P_RESIDUAL});
            proj_case(cpu, gpu, &rng, &fused_fmts[f], (proj_cfg){1, 256, 12288, 128, 256, f == 0, P_RESIDUAL});
        }
        mx_backend_free(gpu);
    }
    // The previous matrix-vector kernels (MLXCEL_GPU_OLD_MATVEC=1, the A/B switch of the benches).
    gpu = gpu_with(&gopt, "MLXCEL_GPU_OLD_MATVEC", "1");
    for (size_t f = 0; f < sizeof fused_fmts / sizeof fused_fmts[0]; f++)
        for (int p = P_NORM_QKV; p <= P_RESIDUAL; p++)
            if (p != P_GATE_UP) proj_case(cpu, gpu, &rng, &fused_fmts[f], (proj_cfg){1, 1024, 2048, 512, 3072, f == 0, p});
    layer_case(cpu, gpu, &rng, &fused_fmts[0], (layer_cfg){1, 512, 8, 4, 64, 1024, 1000, false, 0});
    mx_backend_free(gpu);
    // The pipelined prefill kernel (MLXCEL_GPU_PREFILL_KERNEL=pipe, vendor/cuda/matmul_pipe.cu:
    // affine 4-bit; the f32-scale format on its float32 dequantization; the others on WMMA):
    // prefill-sized layers.
    gpu = gpu_with(&gopt, "MLXCEL_GPU_PREFILL_KERNEL", "pipe");
    layer_case(cpu, gpu, &rng, &fused_fmts[0], (layer_cfg){70, 512, 8, 4, 64, 1024, 1000, false, 0});
    layer_case(cpu, gpu, &rng, &fused_fmts[1], (layer_cfg){200, 512, 8, 4, 64, 1024, 1000, false, 0});
    layer_case(cpu, gpu, &rng, &other_fmts[1], (layer_cfg){130, 512, 8, 4, 64, 1024, 1000, false, 0});
    mx_backend_free(gpu);
    // The fused MoE decode kernels (MLXCEL_GPU_MOE_FUSED=1, kernels/moe_stream.cu: gate/up + SwiGLU
    // and down + combine, each one launch; 2: the routing in the gate/up launch too; 3: the norm,
    // router product and routing in one launch, kernels/moe_router.cu): every format
    // they take (affine 4-bit g64 bf16 and g32 f16, 8-bit g128, mxfp4), 1-8 experts per token, 1-5
    // tokens, short rows (fewer chunks than lanes) and the 30B-A3B's widths (hidden 2048, experts
    // of 768, 8 active; 16 experts here); and shapes they decline (dense bf16 experts; k x I too
    // wide to stage for the down kernel, whose gate/up still fuse; grouped routing, which level 2
    // does not fold), which must give the same results through the records. The routing's ids are
    // compared exactly with the CPU's.
    for (int level = 1; level <= 3; level++) {
        gpu = gpu_with(&gopt, "MLXCEL_GPU_MOE_FUSED", level == 1 ? "1" : level == 2 ? "2" : "3");
        moe_case(cpu, gpu, &rng, &fused_fmts[0], (moe_cfg){1, 256, 8, 2, 128, 0, 0});
        moe_case(cpu, gpu, &rng, &fused_fmts[0], (moe_cfg){5, 256, 8, 2, 128, 0, 0});
        moe_case(cpu, gpu, &rng, &fused_fmts[0], (moe_cfg){1, 2048, 16, 8, 768, 0, 0});
        moe_case(cpu, gpu, &rng, &fused_fmts[0], (moe_cfg){2, 2048, 16, 8, 768, 0, 0});
        moe_case(cpu, gpu, &rng, &fused_fmts[1], (moe_cfg){3, 512, 16, 8, 256, 0, 0});
        moe_case(cpu, gpu, &rng, &fused_fmts[2], (moe_cfg){2, 512, 16, 8, 384, 0, 0});
        moe_case(cpu, gpu, &rng, &fused_fmts[3], (moe_cfg){1, 256, 8, 4, 192, 0, 0});
        moe_case(cpu, gpu, &rng, &fused_fmts[4], (moe_cfg){1, 256, 8, 2, 128, 0, 0});
        moe_case(cpu, gpu, &rng, &fused_fmts[0], (moe_cfg){1, 256, 8, 8, 2048, 0, 0});
        moe_case(cpu, gpu, &rng, &fused_fmts[0], (moe_cfg){1, 256, 16, 4, 128, 4, 2});
        moe_case(cpu, gpu, &rng, &fused_fmts[0], (moe_cfg){6, 256, 64, 6, 128, 8, 3});
        gptoss_case(cpu, gpu, &rng, &q8, &fused_fmts[3], (gptoss_cfg){1, 256, 8, 2, 64, 8, 2, 128, 8});
        mx_backend_free(gpu);
    }
    // The f16 KV cache (MLXCEL_GPU_KV=f16, the A/B switch and fallback): every case that reads the
    // cache, at its own bound.
    gpu = gpu_with(&gopt, "MLXCEL_GPU_KV", "f16");
    CHECK(gpu->kv_dtype == MX_DTYPE_F16);
    layer_case(cpu, gpu, &rng, &fused_fmts[0], (layer_cfg){1, 512, 8, 4, 64, 1024, 1000, false, 0});
    layer_case(cpu, gpu, &rng, &fused_fmts[0], (layer_cfg){4, 512, 8, 4, 64, 1024, 1000, false, 0});
    layer_case(cpu, gpu, &rng, &fused_fmts[0], (layer_cfg){40, 512, 8, 4, 128, 1024, 1000, true, 0});
    mla_case(cpu, gpu, &rng, &fused_fmts[0], (mla_cfg){45, 128, 4, 64, 64, 32, 64, 64});
    mla_case(cpu, gpu, &rng, &fused_fmts[4], (mla_cfg){3, 512, 8, 256, 128, 64, 512, 128});
    gptoss_case(cpu, gpu, &rng, &q8, &fused_fmts[3], (gptoss_cfg){1, 256, 8, 2, 64, 8, 2, 128, 8});
    gptoss_case(cpu, gpu, &rng, &q8, &fused_fmts[3], (gptoss_cfg){45, 256, 8, 2, 64, 8, 2, 128, 0});
    mx_backend_free(gpu);
    mx_backend_free(cpu);
    return check_finish();
}
