// SPDX-License-Identifier: MIT
// Every GPU op against a host reference (gpu_ref.c, weights dequantized by the tests' own
// format_ref.h), for every weight format, on fresh random inputs, with outputs poisoned (NaN) before
// each op so unwritten elements fail. Matmuls run at several batch sizes so each kernel family is
// hit: matrix-vector (n <= 63, in tiles of 8 tokens from n = 9), the tensor-core tiled path and the
// portable float32 tiled path (a second backend made with MLXCEL_GPU_NO_MMA=1 and
// MLXCEL_GPU_MATVEC_TOKENS=8, so its tiled path also runs small batches); the matrix-vector kernels
// also at shapes that reach each of their launch choices, on the default path (the streaming kernel
// where it applies; affine 4/8-bit batches of 4-64 tokens on the tensor-core decode product,
// vendor/cuda/matvec_mma.cu), with that product off (MLXCEL_GPU_TC_DECODE=0, also for the switches
// that follow), without the streaming kernel (a third backend, MLXCEL_GPU_NO_STREAM_MATVEC=1)
// with its previous task shape (MLXCEL_GPU_STREAM_ROWS=2) and on the previous path
// (MLXCEL_GPU_OLD_MATVEC=1); the tiled sizes again on the other prefill kernels (another backend
// each, MLXCEL_GPU_PREFILL_KERNEL=wmma128, pipe, wgmma), with prefill-sized shapes that reach each kernel's block tiles. Attention: prefill chunks, decode, mixed slots, windows, long
// contexts, batched decode steps of 17-64 sequences with the record's decode hint, on both cache
// types and on the general kernel (MLXCEL_GPU_ATTN_DECODE=0), and prefill records on the
// tensor-core kernel (MLXCEL_GPU_ATTN_MMA=1, also prefill chunks at long context; its own bound);
// the fused q/k norm + RoPE + KV store launch against the kv_store record, byte for byte. A plan
// run four times (recorded as a graph, then replayed) closes the run. Exit 77 (ctest: skipped) when the machine has no GPU.
//
// Matmul bounds: every output element within its own bound (elem_bound below: float32 rounding of
// any summation order, plus on the tensor-core path the bf16 rounding of its inputs), and the whole
// output's relative L2 error within 2e-5 (float32 paths) or, on the tensor-core path, within twice
// the error that rounding the inputs to bf16 gives on the host (the size of error that path must
// have) plus 2e-5. The worst element error as a fraction of its bound is printed per group.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../unit/check.h"
#include "backends/gpu/gpu_backend.h"
#include "backends/plan.h"
#include "backends/gpu_entry.h"
#include "gpu_ref.h"

static mx_error err;

static void *dev_alloc(mx_backend *be, size_t bytes) {
    void *d = be->ops->alloc(be, bytes, &err);
    if (!d) {
        fprintf(stderr, "alloc: %s\n", err.msg);
        exit(1);
    }
    return d;
}

static void *dev_from(mx_backend *be, const void *host, size_t bytes) {
    void *d = dev_alloc(be, bytes);
    if (be->ops->upload(be, d, host, bytes, &err) != 0) {
        fprintf(stderr, "upload: %s\n", err.msg);
        exit(1);
    }
    return d;
}

static void dev_poison(mx_backend *be, void *d, size_t bytes) {
    void *h = malloc(bytes);
    memset(h, 0xff, bytes);
    be->ops->upload(be, d, h, bytes, &err);
    free(h);
}

static void dev_to(mx_backend *be, void *host, const void *d, size_t bytes) {
    if (be->ops->download(be, host, d, bytes, &err) != 0) {
        fprintf(stderr, "download (device error after an op): %s\n", err.msg);
        exit(1);
    }
}

// One record at a time through run_plan (a plan of one record: never recorded as a graph).
static void run1(mx_backend *be, mx_op op) {
    if (mx_run_op(be, op, &err) != 0) {
        fprintf(stderr, "%s: %s\n", mx_op_kind_name(op.kind), err.msg);
        exit(1);
    }
}

static void op_embed(mx_backend *be, float *out, const mx_matrix *w, const int32_t *ids, int n) {
    run1(be, (mx_op){.kind = MX_OP_EMBED, .embed = {out, w, ids, n}});
}
static void op_matmul(mx_backend *be, float *out, const float *x, const mx_matrix *w, const float *bias, int n) {
    run1(be, (mx_op){.kind = MX_OP_MATMUL, .matmul = {out, x, w, bias, n}});
}
static void op_rmsnorm(mx_backend *be, float *out, const float *x, const float *w, int n, int dim, float eps) {
    run1(be, (mx_op){.kind = MX_OP_RMSNORM, .rmsnorm = {out, x, w, n, dim, eps}});
}
static void op_rope(mx_backend *be, float *x, const int32_t *pos, int n, int n_heads, const mx_rope *rope) {
    run1(be, (mx_op){.kind = MX_OP_ROPE, .rope = {x, pos, n, n_heads, *rope}});
}
static void op_kv_store(mx_backend *be, void *kv, const mx_kv_layout *lay, const int32_t *table, int layer,
                        const float *k, const float *v, const int32_t *slot, const int32_t *pos, int n) {
    run1(be, (mx_op){.kind = MX_OP_KV_STORE, .kv_store = {{kv, *lay, layer, slot, pos, table}, k, v, n}});
}
static void op_attention(mx_backend *be, float *out, const float *q, const void *kv, const mx_kv_layout *lay,
                         const int32_t *table, int layer, const int32_t *slot, const int32_t *pos, int n, int n_heads,
                         float scale, int window, bool decode) {
    run1(be, (mx_op){.kind = MX_OP_ATTENTION, .attention = {out, q, {(void *)kv, *lay, layer, slot, pos, table}, n,
                                                            n_heads, scale, window, NULL, decode}});
}
static void op_swiglu(mx_backend *be, float *out, const float *gate, const float *up, int64_t count) {
    run1(be, (mx_op){.kind = MX_OP_SWIGLU, .swiglu = {out, gate, up, count}});
}
static void op_geglu(mx_backend *be, float *out, const float *gate, const float *up, int64_t count) {
    run1(be, (mx_op){.kind = MX_OP_GEGLU, .geglu = {out, gate, up, count}});
}
static void op_scale(mx_backend *be, float *x, int64_t count, float scale) {
    run1(be, (mx_op){.kind = MX_OP_SCALE, .scale = {x, count, scale}});
}
static void op_add(mx_backend *be, float *x, const float *y, int64_t count) {
    run1(be, (mx_op){.kind = MX_OP_ADD, .add = {x, y, count}});
}
static void op_moe_route(mx_backend *be, int32_t *ids, float *weights, const float *logits, int n, int n_experts,
                         int k, bool norm_topk) {
    run1(be, (mx_op){.kind = MX_OP_MOE_ROUTE, .moe_route = {ids, weights, logits, n, n_experts, k, norm_topk}});
}
static void op_moe_matmul(mx_backend *be, float *out, const float *x, const mx_matrix *w, const int32_t *ids, int m,
                          int x_div) {
    run1(be, (mx_op){.kind = MX_OP_MOE_MATMUL, .moe_matmul = {out, x, w, ids, m, x_div}});
}
static void op_moe_combine(mx_backend *be, float *out, const float *y, const float *weights, int n, int k, int dim) {
    run1(be, (mx_op){.kind = MX_OP_MOE_COMBINE, .moe_combine = {out, y, weights, n, k, dim}});
}
// rows_host: copied to the device first (the record reads rows from backend memory).
static void op_gather_rows(mx_backend *be, float *out, const float *x, const int32_t *rows_host, int n, int dim) {
    int32_t *d_rows = dev_from(be, rows_host, sizeof(int32_t) * (size_t)n);
    run1(be, (mx_op){.kind = MX_OP_GATHER_ROWS, .gather_rows = {out, x, d_rows, n, dim}});
    be->ops->release(be, d_rows);
}
static void op_argmax(mx_backend *be, int32_t *ids, const float *logits, int n, int vocab) {
    run1(be, (mx_op){.kind = MX_OP_ARGMAX, .argmax = {ids, logits, n, vocab}});
}

static float *fmalloc(int64_t n) { return malloc(sizeof(float) * (size_t)(n > 0 ? n : 1)); }

// Worst error seen per group, for the summary lines.
typedef struct group_stat {
    const char *name;
    double worst;
    int cases;
    double worst_elem;  // worst element error / its bound (groups with per-element bounds)
} group_stat;

static void stat_add(group_stat *g, double e) {
    g->cases++;
    if (e > g->worst || isnan(e)) g->worst = e;
}

static void stat_print(const group_stat *g, double tol) {
    printf("%-34s %4d cases, worst rel err %.2e (tol %.0e)", g->name, g->cases, g->worst, tol);
    if (g->worst_elem > 0) printf(", worst element %.2f of its bound", g->worst_elem);
    printf("\n");
}

#define F32_ROUNDING (1.0 / 16777216.0)  // 2^-24
#define BF16_INPUTS (1.0 / 128.0 * (1.0 + 1.0 / 512.0))  // x and w each rounded to bf16: 2^-7 (1 + 2^-9)

// Per-element bound of one product output: (cols + 16) float32 roundings of its evaluation scale
// (covers any summation order and any evaluation of the dequantized weights), plus, when the path
// rounds activations and weights to bf16 first, 2^-7 (1 + 2^-9) of sum |w x| (and 1% slack on the
// accumulation of the rounded products).
static double elem_bound(const ref_scale *sc, int64_t cols, bool bf16_inputs) {
    double f32 = (double)(cols + 16) * F32_ROUNDING * sc->eval;
    return bf16_inputs ? BF16_INPUTS * sc->abs + 1.01 * f32 : f32;
}

// Counts outputs outside their bound (NaN counts), reports the first, records the worst ratio.
static int outside_bounds(const char *what, const float *got, const float *ref, const ref_scale *sc, int64_t count,
                          int64_t cols, bool bf16_inputs, group_stat *g) {
    int bad = 0;
    for (int64_t i = 0; i < count; i++) {
        double bound = elem_bound(&sc[i], cols, bf16_inputs), e = fabs((double)got[i] - ref[i]);
        double ratio = bound > 0 ? e / bound : (e > 0 ? INFINITY : 0);
        if (isnan(got[i])) ratio = INFINITY;
        if (ratio > g->worst_elem) g->worst_elem = ratio;
        if (ratio > 1.0 && bad++ == 0)
            fprintf(stderr, "  %s: element %lld is %.9g, reference %.9g, bound %.3g\n", what, (long long)i, got[i],
                    ref[i], bound);
    }
    return bad;
}

// ---- matmul, embed, moe_matmul over every format ------------------------------------------------

typedef struct fmt_case {
    mx_quant q;
    mx_dtype dtype, sdtype;
    int cols;
} fmt_case;

static int all_formats(fmt_case *out) {
    int n = 0;
    const mx_dtype fl[3] = {MX_DTYPE_BF16, MX_DTYPE_F16, MX_DTYPE_F32};
    for (int i = 0; i < 3; i++) {
        out[n++] = (fmt_case){{MX_QUANT_NONE, 0, 0}, fl[i], MX_DTYPE_F32, 256};
        out[n++] = (fmt_case){{MX_QUANT_NONE, 0, 0}, fl[i], MX_DTYPE_F32, 301};  // odd: tails, unaligned rows
    }
    const int bits[6] = {2, 3, 4, 5, 6, 8}, groups[3] = {32, 64, 128};
    for (int b = 0; b < 6; b++)
        for (int g = 0; g < 3; g++)
            for (int s = 0; s < 3; s++) out[n++] = (fmt_case){{MX_QUANT_AFFINE, bits[b], groups[g]}, MX_DTYPE_U32, fl[s], 384};
    out[n++] = (fmt_case){{MX_QUANT_MXFP4, 4, 32}, MX_DTYPE_U32, MX_DTYPE_U8, 384};
    out[n++] = (fmt_case){{MX_QUANT_MXFP8, 8, 32}, MX_DTYPE_U32, MX_DTYPE_U8, 384};
    out[n++] = (fmt_case){{MX_QUANT_NVFP4, 4, 16}, MX_DTYPE_U32, MX_DTYPE_U8, 384};
    out[n++] = (fmt_case){{MX_QUANT_NVFP4, 4, 16}, MX_DTYPE_U32, MX_DTYPE_U8, 400};  // half chunk at row end
    return n;
}

enum { ALL_N, MATVEC_N, TILED_N };
static const char *backend_switch = "";  // the environment switch of the backend under test, for messages
static int matvec_tokens = 63;  // the backend's crossover: batches up to this size are matrix-vector

// One product of n tokens on the uploaded matrix dw (host copy hw, bias or NULL and its device
// copy) against the host reference, within the bounds of its path (mma: the tensor-core path).
static void matmul_case(mx_backend *be, ref_rng *rng, const mx_matrix *hw, const mx_matrix *dw, const float *b,
                        float *dbias, int n, bool mma_backend, bool mma, group_stat *g) {
    const int64_t rows = hw->rows, count = (int64_t)n * rows;
    char label[64];
    ref_matrix_label(hw, label, sizeof label);
    float *x = fmalloc((int64_t)n * hw->cols), *ref = fmalloc(count), *got = fmalloc(count);
    ref_scale *sc = malloc(sizeof(ref_scale) * (size_t)count);
    ref_fill(rng, x, (int64_t)n * hw->cols, -1, 1);
    ref_matmul(ref, sc, x, hw, b, n, false);
    float *dx = dev_from(be, x, sizeof(float) * n * hw->cols), *dout = dev_alloc(be, sizeof(float) * count);
    dev_poison(be, dout, sizeof(float) * count);
    op_matmul(be, dout, dx, dw, b ? dbias : NULL, n);
    dev_to(be, got, dout, sizeof(float) * count);
    double e = ref_rel_err(got, ref, count), tol = 2e-5;
    if (mma) {  // the error that rounding the inputs to bf16 gives, measured on the host
        float *emul = fmalloc(count);
        ref_matmul(emul, NULL, x, hw, b, n, true);
        tol = 2.0 * ref_rel_err(emul, ref, count) + 2e-5;
        free(emul);
    }
    char what[192];
    snprintf(what, sizeof what, "matmul %s %lldx%lld n=%d%s%s", label, (long long)rows, (long long)hw->cols, n,
             mma_backend ? "" : " (no mma)", backend_switch);
    CHECK_MSG(e <= tol, "%s: rel err %.3e > %.2e", what, e, tol);
    int bad = outside_bounds(what, got, ref, sc, count, hw->cols, mma, g);
    CHECK_MSG(bad == 0, "%s: %d of %lld elements outside their bound", what, bad, (long long)count);
    stat_add(g, e);
    be->ops->release(be, dx);
    be->ops->release(be, dout);
    free(x), free(ref), free(got), free(sc);
}

static void test_matmul(mx_backend *be, ref_rng *rng, bool mma_backend, int which_n, group_stat *g_mv,
                        group_stat *g_tiled, group_stat *g_f32) {
    fmt_case fc[80];
    int nf = all_formats(fc);
    const int ns[] = {1, 2, 3, 5, 8, 9, 33, 70, 200};
    const int rows = 133;
    for (int f = 0; f < nf; f++) {
        mx_matrix hw = ref_matrix_random(rng, fc[f].q, fc[f].dtype, fc[f].sdtype, 1, rows, fc[f].cols), dw;
        char label[64];
        ref_matrix_label(&hw, label, sizeof label);
        CHECK_MSG(be->ops->supports(be, MX_OP_MATMUL, &hw), "%s unsupported", label);
        if (be->ops->upload_matrix(be, &hw, &dw, &err) != 0) {
            CHECK_MSG(0, "upload_matrix %s: %s", label, err.msg);
            ref_matrix_free(&hw);
            continue;
        }
        float *bias = fmalloc(rows);
        ref_fill(rng, bias, rows, -1, 1);
        float *dbias = dev_from(be, bias, sizeof(float) * rows);
        for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
            int n = ns[ni];
            if (!mma_backend && n <= matvec_tokens) continue;  // the second backend only re-checks the tiled path
            if ((which_n == MATVEC_N && n > matvec_tokens) || (which_n == TILED_N && n <= matvec_tokens)) continue;
            if (n > 128 && which_n != TILED_N) continue;  // several token tiles: the mma.sync backend only
            bool tiled = n > matvec_tokens, mma = mma_backend && n >= 64;
            matmul_case(be, rng, &hw, &dw, (ni % 2) ? bias : NULL, dbias, n, mma_backend, mma,
                        mma ? g_tiled : tiled ? g_f32 : g_mv);
        }
        be->ops->release(be, dbias);
        free(bias);
        be->ops->release_matrix(be, &dw);
        ref_matrix_free(&hw);
    }
}

// Prefill-sized products whose tile counts reach each block tile of the tensor-core kernels on a
// 132-multiprocessor device (the H200; elsewhere other choices): 4224 rows x 512 tokens gives 132
// tiles of 128 x 128 (the WMMA kernel's and the pipelined kernel's 128-token tiles), 4096 x 512
// gives 128 (WMMA: 64 x 128; pipelined: 64 tokens), 1024 x 300 gives 24 (WMMA: 64 x 64). Few
// columns keep the host reference short; the formats: the pipelined kernel's (affine 4-bit, bf16
// and f16 scales, groups 64 and 32) and one it declines (8-bit).
static void test_matmul_tiles(mx_backend *be, ref_rng *rng, group_stat *g) {
    const struct { int bits, group; mx_dtype sdtype; int rows, cols, n; } c[] = {
        {4, 64, MX_DTYPE_BF16, 4224, 128, 512}, {4, 64, MX_DTYPE_BF16, 4096, 192, 512},
        {4, 32, MX_DTYPE_F16, 1024, 256, 300},  {8, 64, MX_DTYPE_BF16, 4096, 128, 512},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        mx_quant q = {MX_QUANT_AFFINE, c[i].bits, c[i].group};
        mx_matrix hw = ref_matrix_random(rng, q, MX_DTYPE_U32, c[i].sdtype, 1, c[i].rows, c[i].cols), dw;
        if (be->ops->upload_matrix(be, &hw, &dw, &err) != 0) {
            CHECK_MSG(0, "upload_matrix %dx%d: %s", c[i].rows, c[i].cols, err.msg);
            ref_matrix_free(&hw);
            continue;
        }
        float *bias = fmalloc(c[i].rows);
        ref_fill(rng, bias, c[i].rows, -1, 1);
        float *dbias = dev_from(be, bias, sizeof(float) * c[i].rows);
        matmul_case(be, rng, &hw, &dw, i % 2 ? bias : NULL, dbias, c[i].n, true, true, g);
        be->ops->release(be, dbias);
        free(bias);
        be->ops->release_matrix(be, &dw);
        ref_matrix_free(&hw);
    }
}

// Matrix-vector shapes (n <= 33) that reach every launch choice of the matrix-vector kernels: the
// streaming kernel (kernels/matvec_stream.cuh: affine 4/8-bit and mxfp4 at 1-8 tokens, dense bf16
// at one; rows of at
// least 32 chunks whose token rows fit the staging) with one and several tasks per warp, partial
// steps (row lengths that are not a multiple of a step), odd row counts, one to eight tokens; and
// the kernels of kernels/matvec.cuh: many rows (four rows per warp), few rows over long rows
// (split-K over two and four warps), one row, rows too long to stage whole, 8-token tiles. In every
// affine 4/8-bit format (the scaled-activation dot, kernels/matvec_scaled.cuh) and three formats
// that keep the generic dot (`all_scales` false: bf16 scales only, for the previous paths, which
// these shapes check for the A/B switches). `path` names the backend's path in messages; token
// counts above max_n are left out (switches that change only the smaller ones).
static void test_matvec_shapes(mx_backend *be, ref_rng *rng, const char *path, bool all_scales, bool stream,
                               int max_n, group_stat *g) {
    fmt_case fc[32];
    int nf = 0;
    const mx_dtype fl[3] = {MX_DTYPE_BF16, MX_DTYPE_F16, MX_DTYPE_F32};
    const int bits[2] = {4, 8}, groups[3] = {32, 64, 128};
    for (int b = 0; b < 2; b++)
        for (int gi = 0; gi < 3; gi++)
            for (int si = 0; si < (all_scales ? 3 : 1); si++)
                fc[nf++] = (fmt_case){{MX_QUANT_AFFINE, bits[b], groups[gi]}, MX_DTYPE_U32, fl[si], 0};
    fc[nf++] = (fmt_case){{MX_QUANT_AFFINE, 3, 64}, MX_DTYPE_U32, MX_DTYPE_BF16, 0};
    fc[nf++] = (fmt_case){{MX_QUANT_MXFP4, 4, 32}, MX_DTYPE_U32, MX_DTYPE_U8, 0};
    fc[nf++] = (fmt_case){{MX_QUANT_NONE, 0, 0}, MX_DTYPE_BF16, MX_DTYPE_F32, 0};
    // rows x cols and the token counts run on it. Streaming kernel (one task = two rows for one
    // token, one row for several; a step = 4 chunks per lane at 4 bits, 2 at 8 bits; the chunk
    // counts below are for that shape, MLXCEL_GPU_STREAM_ROWS=2, which the default takes where a
    // launch's two-row tasks fit one wave; =4 takes four rows and half the chunks per step, so the
    // same rows also end in a partial step):
    // 133 x 4224 at n = 1 (132 chunks: a full step and one of 4 chunks); 7 x 2048 at 1 and 3 (64
    // chunks, rows shorter than a step: one chunk per lane per step, eight rows per task at 4 bits,
    // four at 8); 1 x 1152 at n = 1-8 (one row, the task's other rows clamped); 20000 x 1024 at 1
    // and 2 and 4300 x 4224 at 1 (more tasks than the 2,112 warps of an H200's grid, so warps take
    // several, loading the next task's chunks during the last step of the current one; 4224: a
    // partial second step, three steps at 8 bits; 2200 x 1024 at 2: one row per task); 300 x 12288
    // at 1 (the 8B down projection's width: 48 KB staged, three steps). These four (BIG) only on
    // the streaming paths (`stream`) and in four formats (4-bit g64 bf16, 8-bit g32 f16, mxfp4 and
    // dense bf16: every step width and dot), to keep the host reference's time down.
    // The kernels of matvec.cuh: 4224 x 512 (16 chunks, too short for the streaming kernel: four
    // rows per warp); 133 x 4224 at n = 3 and 8 and 7 x 2048 at 8 (activations staged by slices,
    // split-K over four and two warps at one token on the previous-path backends); 64 x 13312 at
    // every n (one token's row is longer than the 48 KB of staging); n = 33 on the first five:
    // five 8-token tiles (with 4224 rows the 8-token tiles take four rows per warp).
    enum { N1 = 1, N2 = 2, N3 = 4, N5 = 8, N8 = 16, N33 = 32, BIG = 64 };
    const int shapes[][3] = {{4224, 512, N1 | N3 | N8 | N33}, {133, 4224, N1 | N3 | N8 | N33},
                             {7, 2048, N1 | N3 | N8 | N33}, {1, 1152, N1 | N2 | N3 | N5 | N8 | N33},
                             {64, 13312, N1 | N3 | N8 | N33}, {20000, 1024, N1 | BIG}, {2200, 1024, N2 | BIG},
                             {4300, 4224, N1 | BIG}, {300, 12288, N1 | BIG}};
    const int nshapes = (int)(sizeof shapes / sizeof shapes[0]);
    const int ns[] = {1, 2, 3, 5, 8, 33};
    for (int f = 0; f < nf; f++) {
        const bool big_ok = stream && ((fc[f].q.bits == 4 && fc[f].q.group_size == 64 && fc[f].sdtype == MX_DTYPE_BF16) ||
                                       (fc[f].q.bits == 8 && fc[f].q.group_size == 32 && fc[f].sdtype == MX_DTYPE_F16) ||
                                       fc[f].q.mode == MX_QUANT_MXFP4 || fc[f].q.mode == MX_QUANT_NONE);
        for (int sh = 0; sh < nshapes; sh++) {
            if ((shapes[sh][2] & BIG) && !big_ok) continue;
            const int rows = shapes[sh][0], cols = shapes[sh][1];
            mx_matrix hw = ref_matrix_random(rng, fc[f].q, fc[f].dtype, fc[f].sdtype, 1, rows, cols), dw;
            char label[64];
            ref_matrix_label(&hw, label, sizeof label);
            if (be->ops->upload_matrix(be, &hw, &dw, &err) != 0) {
                CHECK_MSG(0, "upload_matrix %s: %s", label, err.msg);
                ref_matrix_free(&hw);
                continue;
            }
            float *bias = fmalloc(rows);
            ref_fill(rng, bias, rows, -1, 1);
            float *dbias = dev_from(be, bias, sizeof(float) * rows);
            for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
                const int n = ns[ni];
                if (!(shapes[sh][2] & (1 << ni)) || n > max_n) continue;
                const int64_t count = (int64_t)n * rows;
                float *x = fmalloc((int64_t)n * cols), *ref = fmalloc(count), *got = fmalloc(count);
                ref_scale *sc = malloc(sizeof(ref_scale) * (size_t)count);
                ref_fill(rng, x, (int64_t)n * cols, -2, 2);
                const float *b = (ni + (size_t)sh) % 2 ? bias : NULL;
                ref_matmul(ref, sc, x, &hw, b, n, false);
                float *dx = dev_from(be, x, sizeof(float) * n * cols), *dout = dev_alloc(be, sizeof(float) * count);
                dev_poison(be, dout, sizeof(float) * count);
                op_matmul(be, dout, dx, &dw, b ? dbias : NULL, n);
                dev_to(be, got, dout, sizeof(float) * count);
                const double e = ref_rel_err(got, ref, count);
                char what[160];
                snprintf(what, sizeof what, "matvec (%s) %s %dx%d n=%d%s", path, label, rows, cols, n, b ? " bias" : "");
                CHECK_MSG(e <= 2e-5, "%s: rel err %.3e > 2e-5", what, e);
                int bad = outside_bounds(what, got, ref, sc, count, cols, false, g);
                CHECK_MSG(bad == 0, "%s: %d of %lld elements outside their bound", what, bad, (long long)count);
                stat_add(g, e);
                be->ops->release(be, dx);
                be->ops->release(be, dout);
                free(x), free(ref), free(got), free(sc);
            }
            be->ops->release(be, dbias);
            free(bias);
            be->ops->release_matrix(be, &dw);
            ref_matrix_free(&hw);
        }
    }
}

static void test_embed(mx_backend *be, ref_rng *rng, group_stat *g) {
    fmt_case fc[80];
    int nf = all_formats(fc);
    const int rows = 50, n = 6;
    for (int f = 0; f < nf; f++) {
        mx_matrix hw = ref_matrix_random(rng, fc[f].q, fc[f].dtype, fc[f].sdtype, 1, rows, fc[f].cols), dw;
        char label[64];
        ref_matrix_label(&hw, label, sizeof label);
        be->ops->upload_matrix(be, &hw, &dw, &err);
        int32_t ids[6];
        for (int i = 0; i < n; i++) ids[i] = (int32_t)(ref_next(rng) % rows);
        ids[n - 1] = rows - 1;
        float *ref = fmalloc((int64_t)n * hw.cols), *got = fmalloc((int64_t)n * hw.cols);
        double *mag = malloc(sizeof(double) * (size_t)(n * hw.cols));
        ref_embed(ref, mag, &hw, ids, n);
        int32_t *dids = dev_from(be, ids, sizeof ids);
        float *dout = dev_alloc(be, sizeof(float) * n * hw.cols);
        dev_poison(be, dout, sizeof(float) * n * hw.cols);
        op_embed(be, dout, &dw, dids, n);
        dev_to(be, got, dout, sizeof(float) * n * hw.cols);
        double e = ref_rel_err(got, ref, (int64_t)n * hw.cols);
        CHECK_MSG(e <= 1e-6, "embed %s: rel err %.3e", label, e);
        // Each element within 4 float32 roundings of its evaluation magnitude.
        int bad = 0;
        for (int64_t i = 0; i < n * hw.cols; i++) {
            double d = fabs((double)got[i] - ref[i]), bound = 4 * F32_ROUNDING * mag[i];
            double ratio = bound > 0 ? d / bound : (d > 0 || isnan(got[i]) ? INFINITY : 0);
            if (isnan(got[i])) ratio = INFINITY;
            if (ratio > g->worst_elem) g->worst_elem = ratio;
            bad += ratio > 1.0;
        }
        CHECK_MSG(bad == 0, "embed %s: %d elements outside their bound", label, bad);
        stat_add(g, e);
        be->ops->release(be, dids), be->ops->release(be, dout);
        free(ref), free(got), free(mag);
        be->ops->release_matrix(be, &dw);
        ref_matrix_free(&hw);
    }
}

static void test_moe_matmul(mx_backend *be, ref_rng *rng, group_stat *g) {
    fmt_case fc[80];
    int nf = all_formats(fc);
    const int E = 4, rows = 70, m = 6;
    for (int f = 0; f < nf; f++) {
        mx_matrix hw = ref_matrix_random(rng, fc[f].q, fc[f].dtype, fc[f].sdtype, E, rows, fc[f].cols), dw;
        char label[64];
        ref_matrix_label(&hw, label, sizeof label);
        CHECK_MSG(be->ops->supports(be, MX_OP_MOE_MATMUL, &hw), "moe %s unsupported", label);
        be->ops->upload_matrix(be, &hw, &dw, &err);
        for (int x_div = 1; x_div <= 2; x_div++) {
            int32_t ids[6];
            for (int i = 0; i < m; i++) ids[i] = (int32_t)(ref_next(rng) % E);
            ids[0] = E - 1;
            int xr = (m + x_div - 1) / x_div;
            float *x = fmalloc((int64_t)xr * hw.cols), *ref = fmalloc((int64_t)m * rows), *got = fmalloc((int64_t)m * rows);
            ref_scale *sc = malloc(sizeof(ref_scale) * (size_t)(m * rows));
            ref_fill(rng, x, (int64_t)xr * hw.cols, -1, 1);
            ref_moe_matmul(ref, sc, x, &hw, ids, m, x_div);
            int32_t *dids = dev_from(be, ids, sizeof ids);
            float *dx = dev_from(be, x, sizeof(float) * xr * hw.cols), *dout = dev_alloc(be, sizeof(float) * m * rows);
            dev_poison(be, dout, sizeof(float) * m * rows);
            op_moe_matmul(be, dout, dx, &dw, dids, m, x_div);
            dev_to(be, got, dout, sizeof(float) * m * rows);
            double e = ref_rel_err(got, ref, (int64_t)m * rows);
            CHECK_MSG(e <= 2e-5, "moe_matmul %s x_div=%d: rel err %.3e", label, x_div, e);
            char what[128];
            snprintf(what, sizeof what, "moe_matmul %s x_div=%d", label, x_div);
            int bad = outside_bounds(what, got, ref, sc, (int64_t)m * rows, hw.cols, false, g);
            CHECK_MSG(bad == 0, "%s: %d elements outside their bound", what, bad);
            stat_add(g, e);
            be->ops->release(be, dids), be->ops->release(be, dx), be->ops->release(be, dout);
            free(x), free(ref), free(got), free(sc);
        }
        be->ops->release_matrix(be, &dw);
        ref_matrix_free(&hw);
    }
}

// ---- normalization, rope, elementwise --------------------------------------------------------------

static void test_rmsnorm(mx_backend *be, ref_rng *rng, group_stat *g) {
    const int cases[3][2] = {{7, 1000}, {12 * 4, 128}, {1, 4096}};
    for (int c = 0; c < 3; c++) {
        int n = cases[c][0], dim = cases[c][1];
        bool in_place = c == 1;
        float *x = fmalloc((int64_t)n * dim), *w = fmalloc(dim), *ref = fmalloc((int64_t)n * dim), *got = fmalloc((int64_t)n * dim);
        ref_fill(rng, x, (int64_t)n * dim, -3, 3);
        ref_fill(rng, w, dim, 0.5f, 1.5f);
        ref_rmsnorm(ref, x, w, n, dim, 1e-6f);
        float *dx = dev_from(be, x, sizeof(float) * n * dim), *dw = dev_from(be, w, sizeof(float) * dim);
        float *dout = in_place ? dx : dev_alloc(be, sizeof(float) * n * dim);
        if (!in_place) dev_poison(be, dout, sizeof(float) * n * dim);
        op_rmsnorm(be, dout, dx, dw, n, dim, 1e-6f);
        dev_to(be, got, dout, sizeof(float) * n * dim);
        double e = ref_rel_err(got, ref, (int64_t)n * dim);
        CHECK_MSG(e <= 1e-6, "rmsnorm n=%d dim=%d: rel err %.3e", n, dim, e);
        stat_add(g, e);
        be->ops->release(be, dx), be->ops->release(be, dw);
        if (!in_place) be->ops->release(be, dout);
        free(x), free(w), free(ref), free(got);
    }
}

static void test_rope(mx_backend *be, ref_rng *rng, group_stat *g) {
    const int hds[3] = {32, 64, 128};
    for (int c = 0; c < 3; c++) {
        int n = 5, heads = 3, hd = hds[c], half = hd / 2;
        float factor = c == 2 ? 0.9f : 1.0f;
        float *x = fmalloc((int64_t)n * heads * hd), *got = fmalloc((int64_t)n * heads * hd), *inv = fmalloc(half);
        int32_t pos[5];
        for (int i = 0; i < n; i++) pos[i] = (int32_t)(ref_next(rng) % 5000);
        pos[0] = 0;
        for (int j = 0; j < half; j++) inv[j] = powf(1000000.0f, -2.0f * j / hd);
        ref_fill(rng, x, (int64_t)n * heads * hd, -2, 2);
        float *dx = dev_from(be, x, sizeof(float) * n * heads * hd), *dinv = dev_from(be, inv, sizeof(float) * half);
        int32_t *dpos = dev_from(be, pos, sizeof pos);
        mx_rope rope = {.inv_freq = dinv, .head_dim = hd, .attn_factor = factor};
        op_rope(be, dx, dpos, n, heads, &rope);
        dev_to(be, got, dx, sizeof(float) * n * heads * hd);
        ref_rope(x, pos, n, heads, inv, hd, factor);
        double e = ref_rel_err(got, x, (int64_t)n * heads * hd);
        CHECK_MSG(e <= 1e-5, "rope head_dim=%d: rel err %.3e", hd, e);
        stat_add(g, e);
        be->ops->release(be, dx), be->ops->release(be, dinv), be->ops->release(be, dpos);
        free(x), free(got), free(inv);
    }
    // Phi-3: 24 of 32 dimensions rotate (pairs i, i + 12); positions from 2500 on use the long table.
    {
        int n = 6, heads = 3, hd = 32, rot = 24, half = rot / 2, from = 2500;
        float *x = fmalloc((int64_t)n * heads * hd), *got = fmalloc((int64_t)n * heads * hd), *inv = fmalloc(2 * half);
        int32_t pos[6] = {0, 7, 2499, 2500, 3000, 4095};
        for (int j = 0; j < half; j++) {
            inv[j] = powf(10000.0f, -2.0f * j / rot) / (1.0f + 0.1f * j);
            inv[half + j] = powf(10000.0f, -2.0f * j / rot) / (1.0f + 0.7f * j);
        }
        ref_fill(rng, x, (int64_t)n * heads * hd, -2, 2);
        float *dx = dev_from(be, x, sizeof(float) * n * heads * hd), *dinv = dev_from(be, inv, sizeof(float) * 2 * half);
        int32_t *dpos = dev_from(be, pos, sizeof pos);
        mx_rope rope = {.inv_freq = dinv, .head_dim = hd, .attn_factor = 1.19f, .rot_dim = rot,
                        .long_inv_freq = dinv + half, .long_from = from};
        op_rope(be, dx, dpos, n, heads, &rope);
        dev_to(be, got, dx, sizeof(float) * n * heads * hd);
        for (int t = 0; t < n; t++)
            for (int h = 0; h < heads; h++) {
                float *v = x + ((int64_t)t * heads + h) * hd;
                const float *f = pos[t] >= from ? inv + half : inv;
                for (int j = 0; j < half; j++) {  // dimensions rot..hd-1 stay as they are
                    float ang = (float)pos[t] * f[j];
                    double c = cos((double)ang) * 1.19f, s = sin((double)ang) * 1.19f, a = v[j], b = v[j + half];
                    v[j] = (float)(a * c - b * s);
                    v[j + half] = (float)(b * c + a * s);
                }
            }
        double e = ref_rel_err(got, x, (int64_t)n * heads * hd);
        CHECK_MSG(e <= 1e-5, "rope partial rot_dim=%d with long factors: rel err %.3e", rot, e);
        stat_add(g, e);
        be->ops->release(be, dx), be->ops->release(be, dinv), be->ops->release(be, dpos);
        free(x), free(got), free(inv);
    }
}

static void test_elementwise(mx_backend *be, ref_rng *rng, group_stat *g) {
    const int64_t counts[2] = {1003, 4096};
    for (int c = 0; c < 2; c++) {
        int64_t n = counts[c];
        float *a = fmalloc(n), *b = fmalloc(n), *ref = fmalloc(n), *got = fmalloc(n);
        ref_fill(rng, a, n, -6, 6);
        ref_fill(rng, b, n, -2, 2);
        float *da = dev_from(be, a, sizeof(float) * n), *db = dev_from(be, b, sizeof(float) * n);
        float *dout = dev_alloc(be, sizeof(float) * n);
        dev_poison(be, dout, sizeof(float) * n);
        op_swiglu(be, dout, da, db, n);
        dev_to(be, got, dout, sizeof(float) * n);
        for (int64_t i = 0; i < n; i++) ref[i] = (float)((double)a[i] / (1.0 + exp(-(double)a[i])) * b[i]);
        double e = ref_rel_err(got, ref, n);
        CHECK_MSG(e <= 1e-6, "swiglu count=%lld: rel err %.3e", (long long)n, e);
        stat_add(g, e);
        op_swiglu(be, da, da, db, n);  // in place
        dev_to(be, got, da, sizeof(float) * n);
        e = ref_rel_err(got, ref, n);
        CHECK_MSG(e <= 1e-6, "swiglu in place count=%lld: rel err %.3e", (long long)n, e);
        stat_add(g, e);
        // GeLU-tanh gate (Gemma), against the formula in double.
        be->ops->upload(be, da, a, sizeof(float) * n, &err);
        op_geglu(be, dout, da, db, n);
        dev_to(be, got, dout, sizeof(float) * n);
        for (int64_t i = 0; i < n; i++) {
            double g = a[i];
            ref[i] = (float)(0.5 * g * (1.0 + tanh(0.7978845608028654 * (g + 0.044715 * g * g * g))) * b[i]);
        }
        e = ref_rel_err(got, ref, n);
        CHECK_MSG(e <= 1e-6, "geglu count=%lld: rel err %.3e", (long long)n, e);
        stat_add(g, e);
        op_geglu(be, da, da, db, n);  // in place
        dev_to(be, got, da, sizeof(float) * n);
        e = ref_rel_err(got, ref, n);
        CHECK_MSG(e <= 1e-6, "geglu in place count=%lld: rel err %.3e", (long long)n, e);
        stat_add(g, e);
        be->ops->upload(be, da, a, sizeof(float) * n, &err);
        op_scale(be, da, n, 11.3137085f);
        dev_to(be, got, da, sizeof(float) * n);
        for (int64_t i = 0; i < n; i++) ref[i] = a[i] * 11.3137085f;
        e = ref_rel_err(got, ref, n);
        CHECK_MSG(e == 0.0, "scale count=%lld: rel err %.3e", (long long)n, e);
        stat_add(g, e);
        be->ops->upload(be, da, a, sizeof(float) * n, &err);
        op_add(be, da, db, n);
        dev_to(be, got, da, sizeof(float) * n);
        for (int64_t i = 0; i < n; i++) ref[i] = a[i] + b[i];
        e = ref_rel_err(got, ref, n);
        CHECK_MSG(e == 0.0, "add count=%lld: rel err %.3e", (long long)n, e);
        stat_add(g, e);
        be->ops->release(be, da), be->ops->release(be, db), be->ops->release(be, dout);
        free(a), free(b), free(ref), free(got);
    }
}

// ---- KV cache and attention ----------------------------------------------------------------------

// Bound of an attention record of n tokens: 1e-5, or 2e-3 (the emulation test's bound; it measures
// up to 7e-4) on the tensor-core prefill kernel, which takes records of 64 tokens or more when
// the tensor-core kernel is on (vendor/cuda/attn_mma.cu: f16 queries, keys, values and
// probabilities; the default, off with MLXCEL_GPU_ATTN_MMA=0). attn_mma: the backend under test has
// it on (main sets it from the environment, and for its own backend of the other setting).
static bool attn_mma = false;
static double attn_tol(int n) { return attn_mma && n >= 64 ? 2e-3 : 1e-5; }

// Each head size runs twice: each slot owning its blocks in order (no table), and a pool with spare
// blocks handed out through scrambled block tables (paged attention). Head sizes 72 and 36 end in a
// partial I16 chunk (36 also takes the 4-byte tile loads). `cpu` (NULL: none): a CPU backend with
// the same cache type, whose kv_store of the same values must leave the same cache bytes (the I16
// codes and scales are the CPU's, bit for bit).
static void test_attention(mx_backend *be, mx_backend *cpu, ref_rng *rng, group_stat *g) {
    const int hds[6] = {32, 64, 128, 256, 72, 36};
    for (int run = 0; run < 12; run++) {
        const int hi = run / 2, paged = run % 2;
        mx_kv_layout lay = {2, 3, 300, 2, hds[hi], paged ? 64 : 0};
        const int table_len = mx_kv_table_len(&lay);  // 19 blocks per slot, 57 of the pool's 64 used
        int32_t table[3 * 19];
        for (int i = 0; i < 3 * table_len; i++) table[i] = (int32_t)((5 * i + 2) % 64);  // 5 is prime to 64
        int32_t *dtable = paged ? dev_from(be, table, sizeof table) : NULL;
        const int D = lay.head_dim, layer = 1, n_heads = hi == 3 ? 8 : 4;
        const int filled[3] = {260, 120, 300};  // positions stored per slot
        size_t kv_bytes = mx_kv_bytes(&lay, be->kv_dtype);
        void *dkv = dev_alloc(be, kv_bytes);
        void *ckv = cpu ? dev_alloc(cpu, kv_bytes) : NULL;
        // Host mirror [slot][pos][kv_head][D], rounded like the device cache.
        int64_t per_pos = (int64_t)lay.n_kv_heads * D;
        float *kc = fmalloc(3 * 300 * per_pos), *vc = fmalloc(3 * 300 * per_pos);
        for (int s = 0; s < 3; s++) {
            int n = filled[s];
            float *k = fmalloc(n * per_pos), *v = fmalloc(n * per_pos);
            int32_t *slot = malloc(sizeof(int32_t) * n), *pos = malloc(sizeof(int32_t) * n);
            ref_fill(rng, k, n * per_pos, -1, 1);
            ref_fill(rng, v, n * per_pos, -1, 1);
            for (int i = 0; i < n; i++) slot[i] = s, pos[i] = i;
            memcpy(kc + (int64_t)s * 300 * per_pos, k, sizeof(float) * n * per_pos);
            memcpy(vc + (int64_t)s * 300 * per_pos, v, sizeof(float) * n * per_pos);
            for (int64_t r = 0; r < n * lay.n_kv_heads; r++) {
                ref_kv_round(kc + (int64_t)s * 300 * per_pos + r * D, D, be->kv_dtype);
                ref_kv_round(vc + (int64_t)s * 300 * per_pos + r * D, D, be->kv_dtype);
            }
            float *dk = dev_from(be, k, sizeof(float) * n * per_pos), *dv = dev_from(be, v, sizeof(float) * n * per_pos);
            int32_t *dslot = dev_from(be, slot, sizeof(int32_t) * n), *dpos = dev_from(be, pos, sizeof(int32_t) * n);
            op_kv_store(be, dkv, &lay, dtable, layer, dk, dv, dslot, dpos, n);
            op_kv_store(be, dkv, &lay, dtable, 0, dv, dk, dslot, dpos, n);  // layer 0 holds other data
            if (ckv) {  // host memory: the CPU backend's pointers are the host arrays
                op_kv_store(cpu, ckv, &lay, paged ? table : NULL, layer, k, v, slot, pos, n);
                op_kv_store(cpu, ckv, &lay, paged ? table : NULL, 0, v, k, slot, pos, n);
            }
            be->ops->release(be, dk), be->ops->release(be, dv), be->ops->release(be, dslot), be->ops->release(be, dpos);
            free(k), free(v), free(slot), free(pos);
        }
        // Query batches: prefill chunk, decode, mixed slots, sliding window, long prefill.
        struct qcase {
            const char *name;
            int n, window;
            int slot0, pos0;  // consecutive positions in one slot when mixed == 0
            int mixed;
        } cases[] = {
            {"prefill 37", 37, 0, 1, 0, 0},   {"decode", 1, 0, 0, 259, 0},    {"decode 2", 1, 0, 2, 17, 0},
            {"mixed", 9, 0, 0, 0, 1},         {"window 16", 37, 16, 1, 80, 0}, {"prefill 200", 200, 0, 2, 99, 0},
        };
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            int n = cases[c].n;
            int32_t *slot = malloc(sizeof(int32_t) * n), *pos = malloc(sizeof(int32_t) * n);
            for (int i = 0; i < n; i++) {
                if (cases[c].mixed) {
                    slot[i] = (int32_t)(ref_next(rng) % 3);
                    pos[i] = (int32_t)(ref_next(rng) % filled[slot[i]]);
                } else {
                    slot[i] = cases[c].slot0, pos[i] = cases[c].pos0 + i;
                }
            }
            int64_t qn = (int64_t)n * n_heads * D;
            float *q = fmalloc(qn), *ref = fmalloc(qn), *got = fmalloc(qn);
            ref_fill(rng, q, qn, -1, 1);
            float scale = 1.0f / sqrtf((float)D) * 3.0f;  // sharper than usual: exercises the max shift
            ref_attention(ref, q, kc, vc, 300, lay.n_kv_heads, D, slot, pos, n, n_heads, scale, cases[c].window);
            float *dq = dev_from(be, q, sizeof(float) * qn), *dout = dev_alloc(be, sizeof(float) * qn);
            int32_t *dslot = dev_from(be, slot, sizeof(int32_t) * n), *dpos = dev_from(be, pos, sizeof(int32_t) * n);
            dev_poison(be, dout, sizeof(float) * qn);
            op_attention(be, dout, dq, dkv, &lay, dtable, layer, dslot, dpos, n, n_heads, scale, cases[c].window,
                         false);
            dev_to(be, got, dout, sizeof(float) * qn);
            double e = ref_rel_err(got, ref, qn);
            CHECK_MSG(e <= attn_tol(n), "attention head_dim=%d%s %s: rel err %.3e", D, paged ? " paged" : "",
                      cases[c].name, e);
            stat_add(g, e);
            be->ops->release(be, dq), be->ops->release(be, dout), be->ops->release(be, dslot), be->ops->release(be, dpos);
            free(q), free(ref), free(got), free(slot), free(pos);
        }
        if (ckv) {  // the whole cache, both layers, unwritten rows (zero) included
            unsigned char *got = malloc(kv_bytes);
            dev_to(be, got, dkv, kv_bytes);
            size_t diff = 0, first = 0;
            for (size_t i = kv_bytes; i-- > 0;)
                if (got[i] != ((unsigned char *)ckv)[i]) diff++, first = i;
            CHECK_MSG(diff == 0, "kv_store head_dim=%d%s: %zu of %zu cache bytes differ from the CPU backend's (first at %zu)",
                      D, paged ? " paged" : "", diff, kv_bytes, first);
            free(got);
            cpu->ops->release(cpu, ckv);
        }
        be->ops->release(be, dkv);
        if (dtable) be->ops->release(be, dtable);
        free(kc), free(vc);
    }
}

// One attention record of n tokens (their slots and positions; random q, scale 3/sqrt(D)) on the
// device cache dkv (layout lay, block table dtable) against ref_attention over the host copies kc and
// vc of that cache ([slot][lay->max_ctx][heads][D]); returns the relative error.
static double attention_vs_ref(mx_backend *be, ref_rng *rng, void *dkv, const mx_kv_layout *lay, const int32_t *dtable,
                               const float *kc, const float *vc, const int32_t *slot, const int32_t *pos, int n,
                               int n_heads, int window, bool decode) {
    const int D = lay->head_dim;
    const int64_t qn = (int64_t)n * n_heads * D;
    float *q = fmalloc(qn), *ref = fmalloc(qn), *got = fmalloc(qn);
    ref_fill(rng, q, qn, -1, 1);
    const float scale = 3.0f / sqrtf((float)D);
    ref_attention(ref, q, kc, vc, lay->max_ctx, lay->n_kv_heads, D, slot, pos, n, n_heads, scale, window);
    float *dq = dev_from(be, q, sizeof(float) * qn), *dout = dev_alloc(be, sizeof(float) * qn);
    int32_t *ds = dev_from(be, slot, sizeof(int32_t) * n), *dp = dev_from(be, pos, sizeof(int32_t) * n);
    dev_poison(be, dout, sizeof(float) * qn);
    op_attention(be, dout, dq, dkv, lay, dtable, 0, ds, dp, n, n_heads, scale, window, decode);
    dev_to(be, got, dout, sizeof(float) * qn);
    const double e = ref_rel_err(got, ref, qn);
    be->ops->release(be, dq), be->ops->release(be, dout), be->ops->release(be, ds), be->ops->release(be, dp);
    free(q), free(ref), free(got);
    return e;
}

// Decode at long context (the flash-decoding kernel's many splits; kernels/attn_decode.cu): one slot
// of Qwen3-8B's attention shape (8 KV heads of 128, 32 query heads) filled to 4,100 positions in a
// scrambled paged pool, then steps of 1 and 5 tokens at its end, and one with a 1,000-position window.
// prefill: instead prefill chunks in that slot (the tensor-core kernel's shape with
// MLXCEL_GPU_ATTN_MMA=1): 192 tokens at its end, 130 at its start, 256 with a 1,000-position window.
static void test_attention_long(mx_backend *be, ref_rng *rng, group_stat *g, bool prefill) {
    const int ctx = 4100, D = 128, nkv = 8, n_heads = 32, tl = (ctx + MX_KV_BLOCK - 1) / MX_KV_BLOCK;
    mx_kv_layout lay = {1, 1, ctx, nkv, D, tl + 7};
    int32_t *table = malloc(sizeof(int32_t) * tl);
    for (int i = 0; i < tl; i++) table[i] = (int32_t)((int64_t)(tl + 6 - i) * 5 % (tl + 7));  // 5 is prime to 264
    int32_t *dtable = dev_from(be, table, sizeof(int32_t) * tl);
    void *dkv = dev_alloc(be, mx_kv_bytes(&lay, be->kv_dtype));
    const int64_t per_pos = (int64_t)nkv * D;
    float *kc = fmalloc(ctx * per_pos), *vc = fmalloc(ctx * per_pos);
    ref_fill(rng, kc, ctx * per_pos, -1, 1);
    ref_fill(rng, vc, ctx * per_pos, -1, 1);
    int32_t *slot = malloc(sizeof(int32_t) * ctx), *pos = malloc(sizeof(int32_t) * ctx);
    for (int i = 0; i < ctx; i++) slot[i] = 0, pos[i] = i;
    float *dk = dev_from(be, kc, sizeof(float) * ctx * per_pos), *dv = dev_from(be, vc, sizeof(float) * ctx * per_pos);
    int32_t *dslot = dev_from(be, slot, sizeof(int32_t) * ctx), *dpos = dev_from(be, pos, sizeof(int32_t) * ctx);
    op_kv_store(be, dkv, &lay, dtable, 0, dk, dv, dslot, dpos, ctx);
    be->ops->release(be, dk), be->ops->release(be, dv), be->ops->release(be, dslot), be->ops->release(be, dpos);
    for (int64_t r = 0; r < ctx * nkv; r++) ref_kv_round(kc + r * D, D, be->kv_dtype), ref_kv_round(vc + r * D, D, be->kv_dtype);
    const struct { const char *name; int n, window, at_start; } decode_cases[] = {
        {"decode", 1, 0, 0}, {"5 tokens", 5, 0, 0}, {"window 1000", 1, 1000, 0}}, prefill_cases[] = {
        {"prefill 192", 192, 0, 0}, {"prefill 130 at 0", 130, 0, 1}, {"prefill 256, window 1000", 256, 1000, 0}};
    for (size_t c = 0; c < 3; c++) {
        const char *name = prefill ? prefill_cases[c].name : decode_cases[c].name;
        const int n = prefill ? prefill_cases[c].n : decode_cases[c].n;
        const int window = prefill ? prefill_cases[c].window : decode_cases[c].window;
        const int at_start = prefill ? prefill_cases[c].at_start : decode_cases[c].at_start;
        for (int i = 0; i < n; i++) pos[i] = at_start ? i : ctx - n + i;
        const double e = attention_vs_ref(be, rng, dkv, &lay, dtable, kc, vc, slot, pos, n, n_heads, window, false);
        CHECK_MSG(e <= attn_tol(n), "attention at %d positions, %s: rel err %.3e", ctx, name, e);
        stat_add(g, e);
    }
    be->ops->release(be, dkv), be->ops->release(be, dtable);
    free(kc), free(vc), free(slot), free(pos), free(table);
}

// Batched decode steps (a server step: each token the next position of its own slot) with the
// record's decode hint: 17-64 tokens over 72 slots of 1-120 positions in a scrambled paged pool, the
// last 7 tokens of some steps in one padding slot at positions 0-6 (as the engine pads), one with a
// 50-position window; Qwen3-0.6B's attention shape (8 KV heads of 128, 16 query heads: the context
// split below 25 tokens on 132 multiprocessors, one split from 25 on) and groups of 8 on 2 KV heads
// of 64 (split below 50 tokens).
static void test_attention_batch(mx_backend *be, ref_rng *rng, group_stat *g) {
    const struct { int D, nkv, n_heads; } shapes[] = {{128, 8, 16}, {64, 2, 16}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const int D = shapes[si].D, nkv = shapes[si].nkv, n_heads = shapes[si].n_heads, S = 72, ctx = 128;
        const int tl = ctx / MX_KV_BLOCK, nb = S * tl + 5;
        mx_kv_layout lay = {1, S, ctx, nkv, D, nb};
        int32_t *table = malloc(sizeof(int32_t) * S * tl);
        for (int i = 0; i < S * tl; i++) table[i] = (int32_t)((int64_t)(S * tl + 4 - i) * 5 % nb);  // distinct: 5 is prime to 581 = 7 * 83
        int32_t *dtable = dev_from(be, table, sizeof(int32_t) * S * tl);
        void *dkv = dev_alloc(be, mx_kv_bytes(&lay, be->kv_dtype));
        const int64_t per_pos = (int64_t)nkv * D;
        float *kc = fmalloc(S * ctx * per_pos), *vc = fmalloc(S * ctx * per_pos);
        int filled[72], total = 0;
        for (int s = 0; s < S; s++) filled[s] = s == S - 1 ? 7 : 1 + (int)(ref_next(rng) % 120), total += filled[s];
        float *k = fmalloc(total * per_pos), *v = fmalloc(total * per_pos);
        int32_t *slot = malloc(sizeof(int32_t) * total), *pos = malloc(sizeof(int32_t) * total);
        ref_fill(rng, k, total * per_pos, -1, 1);
        ref_fill(rng, v, total * per_pos, -1, 1);
        for (int s = 0, t = 0; s < S; s++)
            for (int p = 0; p < filled[s]; p++, t++) {
                slot[t] = s, pos[t] = p;
                memcpy(kc + ((int64_t)s * ctx + p) * per_pos, k + t * per_pos, sizeof(float) * per_pos);
                memcpy(vc + ((int64_t)s * ctx + p) * per_pos, v + t * per_pos, sizeof(float) * per_pos);
                for (int h = 0; h < nkv; h++) {
                    ref_kv_round(kc + ((int64_t)s * ctx + p) * per_pos + h * D, D, be->kv_dtype);
                    ref_kv_round(vc + ((int64_t)s * ctx + p) * per_pos + h * D, D, be->kv_dtype);
                }
            }
        float *dk = dev_from(be, k, sizeof(float) * total * per_pos), *dv = dev_from(be, v, sizeof(float) * total * per_pos);
        int32_t *dslot = dev_from(be, slot, sizeof(int32_t) * total), *dpos = dev_from(be, pos, sizeof(int32_t) * total);
        op_kv_store(be, dkv, &lay, dtable, 0, dk, dv, dslot, dpos, total);
        be->ops->release(be, dk), be->ops->release(be, dv), be->ops->release(be, dslot), be->ops->release(be, dpos);
        const struct { int n, window, pad; } cases[] = {{17, 0, 0}, {24, 0, 7}, {32, 0, 0}, {40, 50, 7}, {48, 0, 0},
                                                        {56, 0, 7}, {64, 0, 0}};
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            const int n = cases[c].n, pad = cases[c].pad;
            for (int i = 0; i < n; i++) {
                const bool is_pad = i >= n - pad;
                slot[i] = is_pad ? S - 1 : (i * 5 + 3) % (S - 1);
                pos[i] = is_pad ? i - (n - pad) : filled[slot[i]] - 1;
            }
            const double e = attention_vs_ref(be, rng, dkv, &lay, dtable, kc, vc, slot, pos, n, n_heads, cases[c].window, true);
            CHECK_MSG(e <= 1e-5, "batched decode attention, %d KV heads of %d, %d tokens%s%s: rel err %.3e", nkv, D, n,
                      pad ? " (7 padding)" : "", cases[c].window ? " (window)" : "", e);
            stat_add(g, e);
        }
        be->ops->release(be, dkv), be->ops->release(be, dtable);
        free(kc), free(vc), free(k), free(v), free(slot), free(pos), free(table);
    }
}

// The plan's q/k norm + RoPE + KV store pattern (one fused launch, kernels/qk_norm_rope.cu): the
// cache it writes must hold exactly the bytes the kv_store record writes from the k it leaves and
// v (run alone into a second cache), for a decode step of 5 slots and a 37-token chunk of two, paged.
static void test_qk_norm_rope_store(mx_backend *be, ref_rng *rng) {
    const int D = 128, nkv = 8, n_heads = 16, S = 6, ctx = 64, tl = ctx / MX_KV_BLOCK, nb = S * tl + 3;
    mx_kv_layout lay = {2, S, ctx, nkv, D, nb};
    int32_t table[6 * 4];
    for (int i = 0; i < S * tl; i++) table[i] = (int32_t)((i * 5 + 1) % nb);
    int32_t *dtable = dev_from(be, table, sizeof table);
    const size_t kv_bytes = mx_kv_bytes(&lay, be->kv_dtype);
    float *inv = fmalloc(D / 2), *qw = fmalloc(D), *kw = fmalloc(D);
    for (int j = 0; j < D / 2; j++) inv[j] = 1.0f / powf(1e6f, 2.0f * j / D);
    ref_fill(rng, qw, D, 0.5f, 1.5f);
    ref_fill(rng, kw, D, 0.5f, 1.5f);
    float *dinv = dev_from(be, inv, sizeof(float) * D / 2), *dqw = dev_from(be, qw, sizeof(float) * D);
    float *dkw = dev_from(be, kw, sizeof(float) * D);
    const mx_rope rope = {.inv_freq = dinv, .head_dim = D, .attn_factor = 1.0f};
    for (int c = 0; c < 2; c++) {
        const int n = c == 0 ? 5 : 37;
        int32_t slot[37], pos[37];
        for (int t = 0; t < n; t++) slot[t] = c == 0 ? t : t / 20, pos[t] = c == 0 ? 9 * t + 2 : 7 + t % 20;
        const int64_t qn = (int64_t)n * n_heads * D, kn = (int64_t)n * nkv * D;
        float *q = fmalloc(qn), *k = fmalloc(kn), *v = fmalloc(kn);
        ref_fill(rng, q, qn, -2, 2), ref_fill(rng, k, kn, -2, 2), ref_fill(rng, v, kn, -1, 1);
        float *dq = dev_from(be, q, sizeof(float) * qn), *dk = dev_from(be, k, sizeof(float) * kn);
        float *dv = dev_from(be, v, sizeof(float) * kn);
        int32_t *ds = dev_from(be, slot, sizeof(int32_t) * n), *dp = dev_from(be, pos, sizeof(int32_t) * n);
        void *fused = dev_alloc(be, kv_bytes), *plain = dev_alloc(be, kv_bytes);
        unsigned char *zero = calloc(1, kv_bytes), *hf = malloc(kv_bytes), *hp = malloc(kv_bytes);
        be->ops->upload(be, fused, zero, kv_bytes, &err), be->ops->upload(be, plain, zero, kv_bytes, &err);
        const mx_kv_ref rf = {fused, lay, 1, ds, dp, dtable}, rp = {plain, lay, 1, ds, dp, dtable};
        mx_plan *p = mx_plan_create(&err);
        CHECK(p != NULL);
        if (!p) return;
        mx_plan_add(p, (mx_op){.kind = MX_OP_RMSNORM, .rmsnorm = {dq, dq, dqw, n * n_heads, D, 1e-6f}});
        mx_plan_add(p, (mx_op){.kind = MX_OP_RMSNORM, .rmsnorm = {dk, dk, dkw, n * nkv, D, 1e-6f}});
        mx_plan_add(p, (mx_op){.kind = MX_OP_ROPE, .rope = {dq, dp, n, n_heads, rope}});
        mx_plan_add(p, (mx_op){.kind = MX_OP_ROPE, .rope = {dk, dp, n, nkv, rope}});
        mx_plan_add(p, (mx_op){.kind = MX_OP_KV_STORE, .kv_store = {rf, dk, dv, n}});
        CHECK_MSG(mx_plan_run(be, p, &err) == 0, "q/k norm + rope + kv store plan: %s", err.msg);
        run1(be, (mx_op){.kind = MX_OP_KV_STORE, .kv_store = {rp, dk, dv, n}});
        dev_to(be, hf, fused, kv_bytes);
        dev_to(be, hp, plain, kv_bytes);
        size_t diff = 0, written = 0;
        for (size_t i = 0; i < kv_bytes; i++) diff += hf[i] != hp[i], written += hp[i] != 0;
        CHECK_MSG(diff == 0 && written > 0, "fused q/k norm + rope + kv store, %d tokens: %zu of %zu cache bytes differ "
                  "from the kv_store record's (%zu written)", n, diff, kv_bytes, written);
        mx_plan_free(be, p);
        be->ops->release(be, dq), be->ops->release(be, dk), be->ops->release(be, dv), be->ops->release(be, ds);
        be->ops->release(be, dp), be->ops->release(be, fused), be->ops->release(be, plain);
        free(q), free(k), free(v), free(zero), free(hf), free(hp);
    }
    be->ops->release(be, dtable), be->ops->release(be, dinv), be->ops->release(be, dqw), be->ops->release(be, dkw);
    free(inv), free(qw), free(kw);
}

// ---- MoE routing and combination, gather, argmax ----------------------------------------------------

// Whether routing ids/weights [n * k] match the reference's: the same experts, weights within 1e-5
// and NaN where the reference's are NaN.
static void check_route(const char *who, const int32_t *ids, const float *w, const int32_t *ids_ref,
                        const float *w_ref, int n, int k, int norm) {
    for (int i = 0; i < n * k; i++) {
        CHECK_MSG(ids[i] == ids_ref[i], "moe_route non-finite (%s) row %d choice %d (norm=%d): expert %d, ref %d", who,
                  i / k, i % k, norm, ids[i], ids_ref[i]);
        bool same = isnan(w_ref[i]) ? isnan(w[i]) : fabsf(w[i] - w_ref[i]) <= 1e-5f;
        CHECK_MSG(same, "moe_route non-finite (%s) row %d choice %d (norm=%d): weight %g, ref %g", who, i / k, i % k,
                  norm, w[i], w_ref[i]);
    }
}

// NaN and infinite router logits (NaN weights, a degenerate RoPE base) against the reference, like the
// finite cases: a NaN or +-inf logit makes every probability NaN and each pass takes the first expert
// not yet taken (NaN weights); -inf alone is probability 0. The kernel used to write expert
// 0x7fffffff. The CPU backend (when given) is held to the same reference, so the GPU routes like it.
static void test_moe_route_nonfinite(mx_backend *be, mx_backend *cpu, ref_rng *rng) {
    for (int norm = 0; norm <= 1; norm++) {
        const int rows = 9, E = norm ? 128 : 60, k = norm ? 8 : 4;
        float *l = fmalloc(rows * E);
        ref_fill(rng, l, rows * E, -4, 4);
        l[0] = NAN;                                                    // NaN first
        l[E + E / 2] = NAN;                                            // NaN inside
        for (int e = 0; e < E; e++) l[2 * E + e] = NAN;                // all NaN
        l[3 * E + 7] = INFINITY;                                       // one +inf
        l[4 * E + 1] = l[4 * E + E - 1] = INFINITY;                    // two +inf
        l[5 * E] = -INFINITY, l[5 * E + 5] = INFINITY;                 // +inf and -inf
        for (int e = 0; e < E; e++) l[6 * E + e] = -INFINITY;          // all -inf
        for (int e = 0; e < E; e++)                                    // fewer finite than k
            if (e != 11 && e != E - 3) l[7 * E + e] = -INFINITY;
        l[8 * E + 2] = -INFINITY;                                      // one -inf
        int32_t ids_ref[72], ids_got[72];
        float w_ref[72], w_got[72];
        ref_moe_route(ids_ref, w_ref, l, rows, E, k, norm);
        if (cpu) {
            op_moe_route(cpu, ids_got, w_got, l, rows, E, k, norm);
            check_route("cpu", ids_got, w_got, ids_ref, w_ref, rows, k, norm);
        }
        float *dl = dev_from(be, l, sizeof(float) * rows * E), *dw = dev_alloc(be, sizeof(float) * rows * k);
        int32_t *dids = dev_alloc(be, sizeof(int32_t) * rows * k);
        op_moe_route(be, dids, dw, dl, rows, E, k, norm);
        dev_to(be, ids_got, dids, sizeof(int32_t) * rows * k);
        dev_to(be, w_got, dw, sizeof(float) * rows * k);
        check_route(be->ops->name, ids_got, w_got, ids_ref, w_ref, rows, k, norm);
        be->ops->release(be, dl), be->ops->release(be, dw), be->ops->release(be, dids);
        free(l);
    }
}

static void test_moe_route_combine(mx_backend *be, ref_rng *rng, group_stat *g) {
    for (int norm = 0; norm <= 1; norm++) {
        const int n = 5, E = norm ? 128 : 60, k = norm ? 8 : 4;
        float *logits = fmalloc(n * E);
        ref_fill(rng, logits, n * E, -4, 4);
        int32_t ids_ref[40], ids_got[40];
        float w_ref[40], w_got[40];
        ref_moe_route(ids_ref, w_ref, logits, n, E, k, norm);
        float *dl = dev_from(be, logits, sizeof(float) * n * E), *dw = dev_alloc(be, sizeof(float) * n * k);
        int32_t *dids = dev_alloc(be, sizeof(int32_t) * n * k);
        op_moe_route(be, dids, dw, dl, n, E, k, norm);
        dev_to(be, ids_got, dids, sizeof(int32_t) * n * k);
        dev_to(be, w_got, dw, sizeof(float) * n * k);
        CHECK_MSG(memcmp(ids_got, ids_ref, sizeof(int32_t) * n * k) == 0, "moe_route ids differ (norm=%d)", norm);
        double e = ref_rel_err(w_got, w_ref, n * k);
        CHECK_MSG(e <= 1e-5, "moe_route weights norm=%d: rel err %.3e", norm, e);
        stat_add(g, e);
        be->ops->release(be, dl), be->ops->release(be, dw), be->ops->release(be, dids);
        free(logits);
    }
    const int n = 3, k = 4, dim = 200;
    float *out = fmalloc(n * dim), *y = fmalloc(n * k * dim), *w = fmalloc(n * k), *ref = fmalloc(n * dim);
    ref_fill(rng, out, n * dim, -1, 1);
    ref_fill(rng, y, n * k * dim, -1, 1);
    ref_fill(rng, w, n * k, 0, 1);
    float *dout = dev_from(be, out, sizeof(float) * n * dim), *dy = dev_from(be, y, sizeof(float) * n * k * dim);
    float *dw = dev_from(be, w, sizeof(float) * n * k);
    op_moe_combine(be, dout, dy, dw, n, k, dim);
    for (int t = 0; t < n; t++)
        for (int d = 0; d < dim; d++) {
            double acc = out[t * dim + d];
            for (int j = 0; j < k; j++) acc += (double)w[t * k + j] * y[(t * k + j) * dim + d];
            ref[t * dim + d] = (float)acc;
        }
    dev_to(be, out, dout, sizeof(float) * n * dim);
    double e = ref_rel_err(out, ref, n * dim);
    CHECK_MSG(e <= 1e-6, "moe_combine: rel err %.3e", e);
    stat_add(g, e);
    be->ops->release(be, dout), be->ops->release(be, dy), be->ops->release(be, dw);
    free(out), free(y), free(w), free(ref);
}

static void test_rows(mx_backend *be, ref_rng *rng, group_stat *g) {
    const int n = 70, dim = 130, src_rows = 100;
    float *x = fmalloc(src_rows * dim), *got = fmalloc(n * dim), *ref = fmalloc(n * dim);
    int32_t rows[70];
    ref_fill(rng, x, src_rows * dim, -1, 1);
    for (int i = 0; i < n; i++) {
        rows[i] = (int32_t)(ref_next(rng) % src_rows);
        memcpy(ref + i * dim, x + rows[i] * dim, sizeof(float) * dim);
    }
    float *dx = dev_from(be, x, sizeof(float) * src_rows * dim), *dout = dev_alloc(be, sizeof(float) * n * dim);
    dev_poison(be, dout, sizeof(float) * n * dim);
    op_gather_rows(be, dout, dx, rows, n, dim);
    dev_to(be, got, dout, sizeof(float) * n * dim);
    double e = ref_rel_err(got, ref, n * dim);
    CHECK_MSG(e == 0.0, "gather_rows: rel err %.3e", e);
    stat_add(g, e);
    be->ops->release(be, dx), be->ops->release(be, dout);
    free(x), free(got), free(ref);

    const int vocab = 151936, nr = 3;
    float *l = fmalloc((int64_t)nr * vocab);
    ref_fill(rng, l, (int64_t)nr * vocab, -10, 10);
    l[vocab + 7] = 50.0f, l[vocab + 100000] = 50.0f;  // a tie: the first wins
    l[2 * (int64_t)vocab + vocab - 1] = 60.0f;        // the last element
    int32_t want[3] = {0, 7, vocab - 1}, ids[3];
    for (int i = 1; i < vocab; i++)
        if (l[i] > l[want[0]]) want[0] = i;
    float *dl = dev_from(be, l, sizeof(float) * nr * vocab);
    int32_t *dids = dev_alloc(be, sizeof ids);
    op_argmax(be, dids, dl, nr, vocab);
    dev_to(be, ids, dids, sizeof ids);
    for (int i = 0; i < nr; i++) CHECK_MSG(ids[i] == want[i], "argmax row %d: %d, want %d", i, ids[i], want[i]);
    stat_add(g, 0.0);
    be->ops->release(be, dl), be->ops->release(be, dids);
    free(l);
}

// ---- plans and graphs -----------------------------------------------------------------------------

// A plan of three records run four times: directly, recorded then replayed, replayed twice; every
// replay must equal the direct run. After plan_release the backend holds no graph for it.
// copy_runs (the KV cache's copy-on-write of a block in every layer): each run lands at its place,
// byte for byte, and nothing between the runs or around the destination changes.
static void test_copy_runs(mx_backend *be, ref_rng *rng) {
    const size_t bytes = 4608, stride = 7 * bytes, count = 28, total = stride * count;
    uint8_t *h = malloc(total), *got = malloc(total), *want = malloc(total);
    for (size_t i = 0; i < total; i++) h[i] = (uint8_t)(ref_next(rng) >> 56);
    void *d = dev_from(be, h, total);
    const size_t src = 2 * bytes, dst = 5 * bytes;
    CHECK_MSG(be->ops->copy_runs(be, (uint8_t *)d + dst, (uint8_t *)d + src, bytes, count, stride, &err) == 0,
              "copy_runs: %s", err.msg);
    dev_to(be, got, d, total);
    memcpy(want, h, total);
    for (size_t r = 0; r < count; r++) memcpy(want + r * stride + dst, h + r * stride + src, bytes);
    CHECK_MSG(memcmp(got, want, total) == 0, "copy_runs: %zu runs of %zu bytes differ from the expected memory", count, bytes);
    be->ops->release(be, d);
    free(h), free(got), free(want);
}

static void test_graph(mx_backend *be, ref_rng *rng, group_stat *g) {
    const int dim = 512, rows = 512;
    mx_matrix hw = ref_matrix_random(rng, (mx_quant){MX_QUANT_AFFINE, 4, 64}, MX_DTYPE_U32, MX_DTYPE_BF16, 1, rows, dim), dw;
    be->ops->upload_matrix(be, &hw, &dw, &err);
    float *x = fmalloc(dim), *nw = fmalloc(dim), *direct = fmalloc(rows), *replay = fmalloc(rows);
    ref_fill(rng, x, dim, -1, 1);
    ref_fill(rng, nw, dim, 0.5f, 1.5f);
    float *dx = dev_from(be, x, sizeof(float) * dim), *dnw = dev_from(be, nw, sizeof(float) * dim);
    float *dh = dev_alloc(be, sizeof(float) * dim), *dout = dev_alloc(be, sizeof(float) * rows);
    // step: h = rmsnorm(x); out = W h; out += x
    mx_plan *p = mx_plan_create(&err);
    CHECK(p != NULL);
    if (!p) return;
    mx_plan_add(p, (mx_op){.kind = MX_OP_RMSNORM, .rmsnorm = {dh, dx, dnw, 1, dim, 1e-6f}});
    mx_plan_add(p, (mx_op){.kind = MX_OP_MATMUL, .matmul = {dout, dh, &dw, NULL, 1}});
    mx_plan_add(p, (mx_op){.kind = MX_OP_ADD, .add = {dout, dx, rows}});
    int graphs_before = mx_gpu_graph_count(be);
    for (int run = 0; run < 4; run++) {
        dev_poison(be, dout, sizeof(float) * rows);
        CHECK_MSG(mx_plan_run(be, p, &err) == 0, "plan run %d: %s", run, err.msg);
        dev_to(be, run == 0 ? direct : replay, dout, sizeof(float) * rows);
        if (run == 0) continue;
        double e = ref_rel_err(replay, direct, rows);
        CHECK_MSG(e == 0.0, "plan run %d (recorded) differs from the direct run: %.3e", run, e);
        stat_add(g, e);
    }
    CHECK_MSG(mx_gpu_graph_count(be) == graphs_before + 1, "a plan run 4 times has %d graphs (want %d)",
              mx_gpu_graph_count(be), graphs_before + 1);
    mx_plan_free(be, p);
    CHECK_MSG(mx_gpu_graph_count(be) == graphs_before, "plan_release left a graph");
    be->ops->release(be, dx), be->ops->release(be, dnw), be->ops->release(be, dh), be->ops->release(be, dout);
    be->ops->release_matrix(be, &dw);
    ref_matrix_free(&hw);
    free(x), free(nw), free(direct), free(replay);
}

// The GPU backend made with `var`=`value` set (left set: the caller unsets it), or NULL after a
// failed check naming the setting.
static mx_backend *backend_with(const mx_backend_options *opt, const char *var, const char *value) {
    setenv(var, value, 1);
    mx_backend *be = mx_gpu_backend_create(opt, &err);
    CHECK_MSG(be != NULL, "backend with %s=%s: %s", var, value, err.msg);
    return be;
}

int main(void) {
    char desc[2048];
    mx_gpu_describe(desc, sizeof desc);
    fputs(desc, stdout);
    mx_backend_options opt = {.name = mx_gpu_backend_name()};
    // The streaming kernel on every row length it can take (by default only from 4096 weights on),
    // so its short-row tasks stay checked; the other paths have their own backends below.
    setenv("MLXCEL_GPU_STREAM_MIN_COLS", "0", 1);
    mx_backend *be = mx_gpu_backend_create(&opt, &err);
    if (!be) {
        printf("skipped: %s\n", err.msg);
        return strstr(err.msg, "GPU found") ? 77 : 1;
    }
    printf("device: %s, KV cache %s\n", be->device_name, mx_dtype_name(be->kv_dtype));
    ref_rng rng = {0x9e3779b97f4a7c15ull};
    const char *mma_env = getenv("MLXCEL_GPU_ATTN_MMA");
    const bool mma_set = mma_env != NULL;
    char mma_saved[32] = "";  // (setenv may move the variable's string)
    if (mma_set) snprintf(mma_saved, sizeof mma_saved, "%s", mma_env);
    attn_mma = !(mma_set && strcmp(mma_saved, "0") == 0);  // gpu_backend.c: on unless 0 (unset or empty: 1)
    group_stat mv = {"matmul matrix-vector (n<=8)", 0, 0, 0}, tc = {"matmul tiled, matrix units", 0, 0, 0};
    group_stat tf = {"matmul tiled, float32", 0, 0, 0}, unused = {"", 0, 0, 0};
    group_stat emb = {"embed", 0, 0, 0}, moe = {"moe_matmul", 0, 0, 0}, norm = {"rmsnorm", 0, 0, 0};
    group_stat rope = {"rope", 0, 0, 0}, elt = {"swiglu/geglu/scale/add", 0, 0, 0}, attn = {"kv_store + attention", 0, 0, 0};
    group_stat attn_f16 = {"kv_store + attention, f16 cache", 0, 0, 0};
    group_stat attn_old = {"attention, MLXCEL_GPU_ATTN_DECODE=0", 0, 0, 0};
    group_stat attn_tc = {"attention, the other MLXCEL_GPU_ATTN_MMA setting", 0, 0, 0};
    group_stat route = {"moe_route/moe_combine", 0, 0, 0}, rows = {"gather_rows/argmax", 0, 0, 0};
    group_stat graph = {"plan graph record/replay", 0, 0, 0};
    group_stat mvs = {"matrix-vector shapes", 0, 0, 0}, mvo = {"matrix-vector, old path", 0, 0, 0};
    group_stat mvn = {"matrix-vector, no streaming kernel", 0, 0, 0};
    group_stat mvf = {"matrix-vector, MLXCEL_GPU_TC_DECODE=0", 0, 0, 0};
    group_stat mv2 = {"matrix-vector, streaming 2 rows per task", 0, 0, 0};
    group_stat mv4 = {"matrix-vector, streaming 4 rows per task", 0, 0, 0};
    group_stat tcp = {"matmul tiled, wmma128 / pipe / wgmma", 0, 0, 0};
    test_matmul(be, &rng, true, ALL_N, &mv, &tc, &tf);
    test_matmul_tiles(be, &rng, &tc);
    test_matvec_shapes(be, &rng, "default", true, true, 64, &mvs);
    test_embed(be, &rng, &emb);
    test_moe_matmul(be, &rng, &moe);
    test_rmsnorm(be, &rng, &norm);
    test_rope(be, &rng, &rope);
    test_elementwise(be, &rng, &elt);
    // The CPU backend's cache bytes are compared when it has the GPU's cache type (its default
    // is I16 like the GPU's; MLXCEL_CPU_KV may change it).
    mx_backend_options copt = {.name = "cpu", .threads = 1};
    mx_backend *cpu = mx_backend_create(&copt, &err);
    CHECK_MSG(cpu != NULL, "cpu backend: %s", err.msg);
    test_attention(be, cpu && cpu->kv_dtype == be->kv_dtype ? cpu : NULL, &rng, &attn);
    test_attention_long(be, &rng, &attn, false);
    test_attention_batch(be, &rng, &attn);
    test_qk_norm_rope_store(be, &rng);
    test_moe_route_combine(be, &rng, &route);
    test_moe_route_nonfinite(be, cpu, &rng);
    test_rows(be, &rng, &rows);
    test_copy_runs(be, &rng);
    test_graph(be, &rng, &graph);
    CHECK_MSG(be->ops->sync(be, &err) == 0, "sync: %s", err.msg);
    mx_backend_free(be);

    setenv("MLXCEL_GPU_NO_MMA", "1", 1);
    be = backend_with(&opt, "MLXCEL_GPU_MATVEC_TOKENS", "8");
    if (be) {
        matvec_tokens = 8;
        test_matmul(be, &rng, false, ALL_N, &unused, &unused, &tf);
        matvec_tokens = 63;
        mx_backend_free(be);
    }
    unsetenv("MLXCEL_GPU_MATVEC_TOKENS");
    unsetenv("MLXCEL_GPU_NO_MMA");
    // The float32 matrix-vector kernels for every batch (MLXCEL_GPU_TC_DECODE=0: by default affine
    // 4/8-bit batches of 4-64 tokens take the tensor-core decode product, checked above), and the
    // A/B switches of those kernels below, all with that product off.
    be = backend_with(&opt, "MLXCEL_GPU_TC_DECODE", "0");
    if (be) {
        test_matmul(be, &rng, true, MATVEC_N, &mvf, &unused, &unused);
        test_matvec_shapes(be, &rng, "MLXCEL_GPU_TC_DECODE=0", true, true, 64, &mvf);
        mx_backend_free(be);
    }
    // The matrix-vector kernels of kernels/matvec.cuh for every product (MLXCEL_GPU_NO_STREAM_MATVEC=1,
    // the A/B switch of the streaming kernel; the default of runs 9-10): the shapes above up to 8
    // tokens (the switch changes nothing above).
    be = backend_with(&opt, "MLXCEL_GPU_NO_STREAM_MATVEC", "1");
    if (be) {
        test_matvec_shapes(be, &rng, "MLXCEL_GPU_NO_STREAM_MATVEC=1", true, false, 8, &mvn);
        mx_backend_free(be);
    }
    unsetenv("MLXCEL_GPU_NO_STREAM_MATVEC");
    // The streaming kernel's two task shapes for one token over long rows, each forced for every
    // launch (MLXCEL_GPU_STREAM_ROWS=2: two rows per task and twice the chunks per step; =4: four rows;
    // by default each launch takes one by its size): the shapes above at one token.
    be = backend_with(&opt, "MLXCEL_GPU_STREAM_ROWS", "2");
    if (be) {
        test_matvec_shapes(be, &rng, "MLXCEL_GPU_STREAM_ROWS=2", true, true, 1, &mv2);
        mx_backend_free(be);
    }
    be = backend_with(&opt, "MLXCEL_GPU_STREAM_ROWS", "4");
    if (be) {
        test_matvec_shapes(be, &rng, "MLXCEL_GPU_STREAM_ROWS=4", true, true, 1, &mv4);
        mx_backend_free(be);
    }
    unsetenv("MLXCEL_GPU_STREAM_ROWS");
    // The previous matrix-vector kernels (MLXCEL_GPU_OLD_MATVEC=1, the A/B switch; the default of
    // runs 1-8): the shapes above in the formats whose path the switch changes.
    be = backend_with(&opt, "MLXCEL_GPU_OLD_MATVEC", "1");
    if (be) {
        test_matvec_shapes(be, &rng, "MLXCEL_GPU_OLD_MATVEC=1", false, false, 64, &mvo);
        mx_backend_free(be);
    }
    unsetenv("MLXCEL_GPU_OLD_MATVEC");
    unsetenv("MLXCEL_GPU_TC_DECODE");
    // The other tensor-core prefill products (MLXCEL_GPU_PREFILL_KERNEL, kernels.h): WMMA always on
    // 128 x 128 tiles, the pipelined kernel (vendor/cuda/matmul_pipe.cu; affine 4-bit, the rest
    // on WMMA), and the wgmma kernel
    // (vendor/cuda/matmul_wgmma.cu; affine 4-bit on an sm_90a build and device, the rest on pipe
    // and WMMA; elsewhere the backend says so on stderr and runs pipe): the tiled batch
    // sizes in every format and the prefill-sized shapes.
    const char *const prefill_kernels[] = {"wmma128", "pipe", "wgmma"};
    for (int k = 0; k < 3; k++) {
        be = backend_with(&opt, "MLXCEL_GPU_PREFILL_KERNEL", prefill_kernels[k]);
        if (be) {
            char sw[64];
            snprintf(sw, sizeof sw, " (MLXCEL_GPU_PREFILL_KERNEL=%s)", prefill_kernels[k]);
            backend_switch = sw;
            test_matmul(be, &rng, true, TILED_N, &unused, &tcp, &tf);
            test_matmul_tiles(be, &rng, &tcp);
            backend_switch = "";
            mx_backend_free(be);
        }
    }
    setenv("MLXCEL_GPU_PREFILL_KERNEL", "nonsense", 1);
    be = mx_gpu_backend_create(&opt, &err);
    CHECK_MSG(be == NULL && strstr(err.msg, "MLXCEL_GPU_PREFILL_KERNEL"), "MLXCEL_GPU_PREFILL_KERNEL=nonsense not refused by name");
    if (be) mx_backend_free(be);
    unsetenv("MLXCEL_GPU_PREFILL_KERNEL");
    // The f16 cache (MLXCEL_GPU_KV=f16, the A/B switch and fallback): kv_store and attention, and an
    // unknown cache type refused by name.
    be = backend_with(&opt, "MLXCEL_GPU_KV", "f16");
    if (be) {
        CHECK_MSG(be->kv_dtype == MX_DTYPE_F16, "MLXCEL_GPU_KV=f16 gave a %s cache", mx_dtype_name(be->kv_dtype));
        test_attention(be, NULL, &rng, &attn_f16);
        test_attention_long(be, &rng, &attn_f16, false);
        test_attention_batch(be, &rng, &attn_f16);
        test_qk_norm_rope_store(be, &rng);
        mx_backend_free(be);
    }
    unsetenv("MLXCEL_GPU_KV");
    // Decode attention on the general kernel (MLXCEL_GPU_ATTN_DECODE=0, the A/B switch of the
    // flash-decoding kernel), both cache types.
    for (int f16 = 0; f16 <= 1; f16++) {
        if (f16) setenv("MLXCEL_GPU_KV", "f16", 1);
        be = backend_with(&opt, "MLXCEL_GPU_ATTN_DECODE", "0");
        if (be) {
            test_attention(be, NULL, &rng, &attn_old);
            test_attention_long(be, &rng, &attn_old, false);
            test_attention_batch(be, &rng, &attn_old);
            mx_backend_free(be);
        }
    }
    unsetenv("MLXCEL_GPU_ATTN_DECODE");
    // The other setting of the tensor-core prefill attention (vendor/cuda/attn_mma.cu; records of 64
    // tokens or more at head sizes 64 and 128) than the one above (by default on, so here the SIMT
    // kernel), both cache types: the attention cases above and prefill chunks at long context, each
    // at its bound (attn_tol).
    const bool mma_before = attn_mma;
    attn_mma = !mma_before;
    unsetenv("MLXCEL_GPU_KV");  // (left at f16 by the loop above)
    for (int f16 = 0; f16 <= 1; f16++) {
        if (f16) setenv("MLXCEL_GPU_KV", "f16", 1);
        be = backend_with(&opt, "MLXCEL_GPU_ATTN_MMA", attn_mma ? "1" : "0");
        if (be) {
            test_attention(be, NULL, &rng, &attn_tc);
            test_attention_long(be, &rng, &attn_tc, true);
            test_attention_long(be, &rng, &attn_tc, false);
            mx_backend_free(be);
        }
        unsetenv("MLXCEL_GPU_KV");
    }
    if (mma_set) {
        setenv("MLXCEL_GPU_ATTN_MMA", mma_saved, 1);
    } else {
        unsetenv("MLXCEL_GPU_ATTN_MMA");
    }
    attn_mma = mma_before;
    setenv("MLXCEL_GPU_KV", "f8", 1);
    be = mx_gpu_backend_create(&opt, &err);
    CHECK_MSG(be == NULL && strstr(err.msg, "MLXCEL_GPU_KV='f8'"), "MLXCEL_GPU_KV=f8 not refused by name: %s",
              be ? "accepted" : err.msg);
    if (be) mx_backend_free(be);
    unsetenv("MLXCEL_GPU_KV");
    mx_backend_free(cpu);
    stat_print(&mv, 2e-5);
    stat_print(&mvs, 2e-5);
    stat_print(&mvn, 2e-5);
    stat_print(&mvf, 2e-5);
    stat_print(&mv2, 2e-5);
    stat_print(&mv4, 2e-5);
    stat_print(&mvo, 2e-5);
    stat_print(&tc, 2e-5);  // plus twice the host-measured bf16 input rounding error, per case
    stat_print(&tcp, 2e-5);
    stat_print(&tf, 2e-5);
    stat_print(&emb, 1e-6);
    stat_print(&moe, 2e-5);
    stat_print(&norm, 1e-6);
    stat_print(&rope, 1e-5);
    stat_print(&elt, 1e-6);
    stat_print(&attn, 1e-5);
    stat_print(&attn_f16, 1e-5);
    stat_print(&attn_old, 1e-5);
    stat_print(&attn_tc, 2e-3);
    stat_print(&route, 1e-5);
    stat_print(&rows, 0);
    stat_print(&graph, 0);
    return check_finish();
}
