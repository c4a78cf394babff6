// SPDX-License-Identifier: MIT
// Every CPU kernel set (the scalar one and each SIMD set this CPU supports) against an independent
// reference: the tests' own dequantizer written from the format description (format_ref.h) and
// dot products in double precision. Every weight format: affine 2,3,4,5,6,8 bit x groups 32/64/128
// x scale dtypes bf16/f16/f32, mxfp4, mxfp8, nvfp4, dense bf16/f16/f32. Random data, odd row
// counts, column counts that are not multiples of the vector width (dense), buffers at odd byte
// offsets, and every gemm tile shape (1-4 rows x 1-13 tokens). Attention heads of several sizes and
// key ranges are compared with a double-precision softmax (on the I8 cache with integer scores, the
// VNNI sets', of the query rounded as the kernel rounds it, and within what that rounding can move
// a softmax of the float query's; every other cache type, the 4-bit I4 included, bit-identical to
// the AVX-512 set's), SwiGLU with a double-precision one, the I16
// KV row conversion bit for bit with the scalar one, and the integer (VNNI) gemv and integer
// batched product (VNNI or AMX tiles) of the sets that have them, for every format they cover: 1 to 40
// tokens (partial 16-token tiles), row blocks at odd offsets, and a product over a later token chunk
// of the prepared activations, as the backend splits them.
//
// Bounds, per element: a dequantized value within 4 float32 roundings of its evaluation magnitude;
// a float32 dot product within 1e-6 * sum |w||x| and an attention output within 2e-6 * max |v|
// (about 5x what the kernels measure, ~1.3e-7 and ~4e-7; the measured worst is printed per set).
// A CPU without any SIMD set still checks the scalar set, then exits 77 (ctest: skipped) saying so.
#define _POSIX_C_SOURCE 200809L  // setenv
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_kernels.h"
#include "check.h"
#include "format_ref.h"
#include "test_rng.h"

static test_rng rng = {0x1234567};
static uint32_t rnd(void) { return test_rng_u32(&rng); }
static float rndf(void) { return test_rng_unit(&rng); }

// One test matrix; the buffers are allocated with `misalign` extra bytes in front.
typedef struct tmat {
    mx_matrix m;
    uint8_t *bufs[3];
} tmat;

static void *alloc_at(size_t bytes, int misalign, uint8_t **keep) {
    *keep = malloc(bytes + 64);
    return *keep + misalign;
}

static void store_float(void *p, mx_dtype t, int64_t i, float v) {
    uint8_t *b = p;
    if (t == MX_DTYPE_F32) {
        memcpy(b + 4 * i, &v, 4);
    } else {
        uint16_t h = t == MX_DTYPE_BF16 ? mx_f32_to_bf16(v) : mx_f32_to_f16(v);
        memcpy(b + 2 * i, &h, 2);
    }
}

static tmat make(mx_quant q, mx_dtype dtype, mx_dtype sdt, int64_t rows, int64_t cols, int misalign) {
    tmat t = {0};
    mx_matrix *m = &t.m;
    m->q = q;
    m->dtype = dtype;
    m->scale_dtype = sdt;
    m->n_experts = 1;
    m->rows = rows;
    m->cols = cols;
    int64_t data_bytes = mx_matrix_data_bytes(m);
    uint8_t *d = alloc_at((size_t)data_bytes, misalign, &t.bufs[0]);
    if (q.mode == MX_QUANT_NONE) {
        for (int64_t i = 0; i < rows * cols; i++) store_float(d, dtype, i, rndf() * 0.1f);
    } else {
        for (int64_t i = 0; i < data_bytes; i++) d[i] = (uint8_t)rnd();
        int64_t ns = rows * (cols / q.group_size);
        if (q.mode == MX_QUANT_AFFINE) {
            uint8_t *s = alloc_at((size_t)ns * 4, misalign, &t.bufs[1]);
            uint8_t *b = alloc_at((size_t)ns * 4, misalign, &t.bufs[2]);
            for (int64_t i = 0; i < ns; i++) {
                store_float(s, sdt, i, rndf() * 0.05f);
                store_float(b, sdt, i, rndf() * 0.2f);
            }
            m->scales = s;
            m->biases = b;
        } else {
            uint8_t *s = alloc_at((size_t)ns, misalign, &t.bufs[1]);
            for (int64_t i = 0; i < ns; i++)
                s[i] = q.mode == MX_QUANT_NVFP4 ? (uint8_t)(0x20 + rnd() % 0x20) : (uint8_t)(118 + rnd() % 10);
            m->scales = s;
        }
    }
    m->data = d;
    return t;
}

static void tfree(tmat *t) {
    for (int i = 0; i < 3; i++) free(t->bufs[i]);
}

static int q_tested;  // matrices that went through an integer path

// Worst error seen per kernel set, as a fraction of each check's scale (printed, not a bound).
typedef struct worst {
    double deq, dot, q, qb, attn, attn_i8q, attn_pv, act;
} worst;
static worst seen;

#define DOT_TOL 1e-6                   // float32 dot products, relative to sum |w||x|
#define DEQ_TOL (4.0 / 16777216.0)     // dequantized values: 4 float32 roundings of their magnitude
#define ATTN_TOL 2e-6                  // attention outputs, relative to max |v| over the keys
#define ACT_TOL (8.0 / 16777216.0)     // SwiGLU outputs: 8 float32 roundings of the result's magnitude

// |a - ref| within tol * scale; records the ratio in *w.
static int within(double a, double ref, double scale, double tol, double *w) {
    double e = fabs(a - ref), r = scale > 0 ? e / scale : (e > 0 ? INFINITY : 0);
    if (r > *w || isnan(a)) *w = isnan(a) ? INFINITY : r;
    return e <= tol * scale;
}

// Compares the kernel set `set` against the independent reference on matrix t.
static void compare(const char *set, const char *label, const tmat *t) {
    const mx_matrix *w = &t->m;
    int64_t rows = w->rows, cols = w->cols;
    int nmax = 40;  // tokens of x: gemm tiles use up to 13, the integer batched path all 40
    float *x = malloc(sizeof(float) * cols * nmax);
    float *scratch = aligned_alloc(64, (sizeof(float) * CPU_KERNELS_SCRATCH(cols) + 63) & ~(size_t)63);
    float *deq_ref = malloc(sizeof(float) * cols * rows), *deq = malloc(sizeof(float) * cols);
    double *deq_mag = malloc(sizeof(double) * cols * rows);
    float *ref = malloc(sizeof(float) * rows * nmax), *got = malloc(sizeof(float) * rows * nmax);
    double *mag = malloc(sizeof(double) * rows * nmax);  // sum |w||x|: the scale of rounding error
    for (int64_t i = 0; i < cols * nmax; i++) x[i] = rndf();

    for (int64_t r = 0; r < rows; r++) fref_dequant_row(w, r, deq_ref + r * cols, deq_mag + r * cols);
    for (int t2 = 0; t2 < nmax; t2++)
        for (int64_t r = 0; r < rows; r++) {
            double s = 0, a = 0;
            for (int64_t k = 0; k < cols; k++) {
                s += (double)deq_ref[r * cols + k] * x[t2 * cols + k];
                a += fabs((double)deq_ref[r * cols + k] * x[t2 * cols + k]);
            }
            ref[t2 * rows + r] = (float)s;
            mag[t2 * rows + r] = a;
        }
    CHECK_MSG(cpu_kernels_select(set) == 0, "kernel set %s", set);

    int bad_deq = 0, bad_dot = 0, bad_gemv = 0, bad_gemm = 0, compared = 0;
    for (int64_t r = 0; r < rows; r++) {
        cpu_kernels_dequant_row(w, r, deq);
        for (int64_t k = 0; k < cols; k++, compared++)
            if (!within(deq[k], deq_ref[r * cols + k], deq_mag[r * cols + k], DEQ_TOL, &seen.deq)) bad_deq++;
        float v = cpu_kernels_row_dot(w, r, x, scratch);
        if (!within(v, ref[r], mag[r], DOT_TOL, &seen.dot)) bad_dot++;
        compared++;
    }
    // gemv over every row, then over an odd sub-range.
    cpu_kernels_gemv(w, 0, rows, x, got, scratch);
    for (int64_t r = 0; r < rows; r++, compared++)
        if (!within(got[r], ref[r], mag[r], DOT_TOL, &seen.dot)) bad_gemv++;
    cpu_kernels_gemv(w, 1, rows - 1, x + cols, got, scratch);
    for (int64_t r = 1; r < rows - 1; r++, compared++)
        if (!within(got[r - 1], ref[rows + r], mag[rows + r], DOT_TOL, &seen.dot)) bad_gemv++;
    // gemm tiles: nr rows from r0, n tokens, written with stride rows.
    for (int nr = 1; nr <= CPU_KERNELS_GEMM_ROWS; nr++)
        for (int n = 1; n <= 13; n += (n < 8 ? 1 : 5)) {
            int64_t r0 = rows - nr;
            for (int64_t i = 0; i < rows * nmax; i++) got[i] = NAN;
            cpu_kernels_gemm(w, r0, nr, x, n, got + r0, rows, scratch);
            for (int t2 = 0; t2 < n; t2++)
                for (int i = 0; i < nr; i++, compared++) {
                    int64_t o = t2 * rows + r0 + i;
                    if (!within(got[o], ref[o], mag[o], DOT_TOL, &seen.dot)) bad_gemm++;
                }
            if (r0 > 0 && !isnan(got[r0 - 1])) bad_gemm++;  // nothing written outside the tile
        }
    // Integer path (sets that have one for this format): quantize 3 rows of x, gemv_q over every row
    // for each, then an odd sub-range; tolerance as above (x keeps ~16 bits per group). Both the
    // plain kernels and the bit-equal pair (eq; cpu_kernels.h), where the set has them.
    int bad_q = 0, bad_qb = 0;
    for (int eq = 0; eq < 2; eq++) {
    size_t qb = cpu_kernels_qx_row_bytes(w, eq);
    if (qb) {
        CHECK(qb % 64 == 0);
        uint8_t *qx = aligned_alloc(64, qb * 3);
        cpu_kernels_quantize_x(w, x, 3, qx, eq);
        for (int t2 = 0; t2 < 3; t2++) {
            cpu_kernels_gemv_q(w, 0, rows, qx + qb * t2, got, eq);
            for (int64_t r = 0; r < rows; r++, compared++)
                if (!within(got[r], ref[t2 * rows + r], mag[t2 * rows + r], DOT_TOL, &seen.q)) bad_q++;
        }
        cpu_kernels_gemv_q(w, 2, rows - 3, qx + qb, got, eq);
        for (int64_t r = 2; r < rows - 3; r++, compared++)
            if (!within(got[r - 2], ref[rows + r], mag[rows + r], DOT_TOL, &seen.q)) bad_q++;
        free(qx);
        q_tested++;
    }
    // Integer batched path: x prepared for n tokens, products over rows [r0, r0 + nr), then over the
    // token chunk that starts at the second 16-token tile (the backend's split).
    // Token counts: partial tiles, and every remainder shape of the VNNI kernel's token sweeps
    // (6, 4, 2, 1 tokens at a time).
    const int ns[] = {1, 2, 3, 5, 7, 13, 16, 21, 40};
    for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
        int n = ns[ni];
        size_t bytes = cpu_kernels_qx_tiles_bytes(w, n, eq);
        if (!bytes) break;
        int tiles = (n + 15) / 16;
        CHECK(bytes % (size_t)tiles == 0);
        uint8_t *qx = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
        void *scr = aligned_alloc(64, (cpu_kernels_gemm_q_scratch_bytes(w) + 63) & ~(size_t)63);
        for (int tile = 0; tile < tiles; tile++) cpu_kernels_quantize_x_tiles(w, x, n, tile, qx);
        int64_t blocks[][2] = {{0, rows < CPU_KERNELS_GEMM_Q_ROWS ? rows : CPU_KERNELS_GEMM_Q_ROWS}, {3, rows - 5}};
        for (int b = 0; b < 2; b++) {
            int64_t r0 = blocks[b][0], nr = blocks[b][1];
            for (int64_t i = 0; i < rows * nmax; i++) got[i] = NAN;
            cpu_kernels_gemm_q(w, r0, (int)nr, qx, n, got, rows, scr, eq);
            for (int t2 = 0; t2 < nmax; t2++)
                for (int64_t r = 0; r < rows; r++, compared++) {
                    int64_t o = t2 * rows + r;
                    bool inside = t2 < n && r >= r0 && r < r0 + nr;
                    if (inside ? !within(got[o], ref[o], mag[o], DOT_TOL, &seen.qb) : !isnan(got[o])) bad_qb++;
                }
        }
        if (tiles > 1) {
            size_t per_tile = bytes / (size_t)tiles;
            for (int64_t i = 0; i < rows * nmax; i++) got[i] = NAN;
            cpu_kernels_gemm_q(w, 0, (int)(rows < 16 ? rows : 16), qx + per_tile, n - 16, got + 16 * rows, rows, scr,
                               eq);
            for (int t2 = 16; t2 < n; t2++)
                for (int64_t r = 0; r < (rows < 16 ? rows : 16); r++, compared++)
                    if (!within(got[t2 * rows + r], ref[t2 * rows + r], mag[t2 * rows + r], DOT_TOL, &seen.qb)) bad_qb++;
        }
        free(qx), free(scr);
        if (ni == 0) q_tested++;
    }
    }
    CHECK_MSG(bad_qb == 0, "%s %s: %d integer batched outputs differ", set, label, bad_qb);
    CHECK_MSG(compared > rows * 3, "%s %s: only %d comparisons", set, label, compared);
    CHECK_MSG(bad_q == 0, "%s %s: %d integer gemv outputs differ", set, label, bad_q);
    CHECK_MSG(bad_deq == 0, "%s %s: %d dequantized values differ", set, label, bad_deq);
    CHECK_MSG(bad_dot == 0, "%s %s: %d row dots differ", set, label, bad_dot);
    CHECK_MSG(bad_gemv == 0, "%s %s: %d gemv outputs differ", set, label, bad_gemv);
    CHECK_MSG(bad_gemm == 0, "%s %s: %d gemm outputs differ", set, label, bad_gemm);
    free(x), free(scratch), free(deq_ref), free(deq_mag), free(deq), free(ref), free(got), free(mag);
}

// Bit equality of the integer gemv and the integer batched product (sets that have both for this
// format): each token's row of x through gemv_q (quantize_x of that row alone) must give the very
// bits that the batched product gives for that token, over row blocks of 16 as the backend splits
// them and the partial last one. A decode step and a recomputed prompt (after a preemption) take the
// two kernels for the same rows; the integer attention modes on the I8 cache round what comes out,
// so a last-bit difference can become a whole code step (bench/RESULTS.md). x has groups of very
// different magnitudes, an all-zero group and negative zeros. Returns the outputs compared (0: the
// set has not both kernels for this format). The comparison's own check: one output moved by one
// ulp is reported (plant = 1).
static int64_t bit_equal_rows(const char *set, const char *label, const tmat *t, const int *ns, int n_ns, int plant) {
    const mx_matrix *w = &t->m;
    int64_t rows = w->rows, cols = w->cols, compared = 0;
    size_t qb = cpu_kernels_qx_row_bytes(w, true);
    int nmax = 0;
    for (int i = 0; i < n_ns; i++) nmax = ns[i] > nmax ? ns[i] : nmax;
    if (!qb || !cpu_kernels_has_bit_equal() || !cpu_kernels_qx_tiles_bytes(w, nmax, true)) return 0;
    float *x = malloc(sizeof(float) * cols * nmax);
    int gs = w->q.group_size;
    for (int t2 = 0; t2 < nmax; t2++)
        for (int64_t k = 0; k < cols; k++) {
            int64_t g = k / gs;
            float mag = g % 3 == 0 ? 1.0f : g % 3 == 1 ? 3e-3f : 40.0f;
            float v = rndf() * mag;
            if (g == 1 && t2 % 2 == 0) v = 0.0f;                  // a group of zeros
            if ((k + t2) % 29 == 0) v = -0.0f;                    // negative zeros
            x[(int64_t)t2 * cols + k] = v;
        }
    float *gemv = malloc(sizeof(float) * rows * nmax), *batch = malloc(sizeof(float) * rows * nmax);
    uint8_t *qx1 = aligned_alloc(64, qb);
    for (int t2 = 0; t2 < nmax; t2++) {
        cpu_kernels_quantize_x(w, x + (int64_t)t2 * cols, 1, qx1, true);
        cpu_kernels_gemv_q(w, 0, rows, qx1, gemv + (int64_t)t2 * rows, true);
    }
    void *scr = aligned_alloc(64, (cpu_kernels_gemm_q_scratch_bytes(w) + 63) & ~(size_t)63);
    int bad = 0;
    for (int ni = 0; ni < n_ns; ni++) {
        int n = ns[ni], tiles = (n + 15) / 16;
        size_t bytes = cpu_kernels_qx_tiles_bytes(w, n, true);
        uint8_t *qx = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
        for (int tile = 0; tile < tiles; tile++) cpu_kernels_quantize_x_tiles(w, x, n, tile, qx);
        for (int64_t r0 = 0; r0 < rows; r0 += CPU_KERNELS_GEMM_Q_ROWS) {
            int nr = rows - r0 < CPU_KERNELS_GEMM_Q_ROWS ? (int)(rows - r0) : CPU_KERNELS_GEMM_Q_ROWS;
            cpu_kernels_gemm_q(w, r0, nr, qx, n, batch, rows, scr, true);
        }
        if (plant && ni == 0) {  // one ulp up on one output: must be reported
            uint32_t u;
            memcpy(&u, &batch[rows / 2], 4);
            u++;
            memcpy(&batch[rows / 2], &u, 4);
        }
        for (int64_t i = 0; i < (int64_t)n * rows; i++, compared++)
            if (memcmp(&gemv[i], &batch[i], sizeof(float)) != 0) {
                if (!plant && bad < 3)
                    printf("%s %s: token %lld row %lld: gemv %.9g != batched %.9g (n = %d)\n", set, label,
                           (long long)(i / rows), (long long)(i % rows), gemv[i], batch[i], n);
                bad++;
            }
        free(qx);
    }
    free(x), free(gemv), free(batch), free(qx1), free(scr);
    if (plant) {
        CHECK_MSG(bad == 1, "%s %s: a planted one-ulp difference was reported %d times (want 1)", set, label, bad);
        return compared;
    }
    CHECK_MSG(bad == 0, "%s %s: %d outputs of the integer gemv and the batched product differ in their bits", set,
              label, bad);
    return compared;
}

// The shapes of bit_equal_rows: 4- and 8-bit, groups 32/64/128 (the VNNI batched product takes 64 and
// 128, the avx2 set's 8-bit groups of 32 too; a shape is left out only where the set has no batched
// product for it), 1 to 37 groups (partial 16-group blocks, a last
// half 128-column chunk), more rows than a 16-row block, odd token counts.
static void compare_bit_equal(const char *set) {
    const int ns[] = {1, 3, 7, 13, 21, 40};
    const int group_counts[] = {1, 5, 16, 17, 37};
    const mx_dtype sdts[] = {MX_DTYPE_BF16, MX_DTYPE_F16, MX_DTYPE_F32};
    int64_t total = 0;
    int shapes = 0;
    char label[96];
    for (int bits = 4; bits <= 8; bits += 4)
        for (int gs = 32; gs <= 128; gs *= 2)
            for (int gc = 0; gc < 5; gc++) {
                int64_t rows = 19 + 14 * (gc % 2), cols = (int64_t)gs * group_counts[gc];
                tmat t = make((mx_quant){MX_QUANT_AFFINE, bits, gs}, MX_DTYPE_U32, sdts[(gc + bits) % 3], rows, cols,
                              gc % 4);
                snprintf(label, sizeof label, "affine %d-bit g%d, %d groups, %lld rows", bits, gs, group_counts[gc],
                         (long long)rows);
                int64_t c = bit_equal_rows(set, label, &t, ns, 6, 0);
                if (!c && cpu_kernels_has_bit_equal())
                    CHECK_MSG(!cpu_kernels_qx_tiles_bytes(&t.m, 40, true) || !cpu_kernels_qx_row_bytes(&t.m, true),
                              "%s %s: a batched product is not compared", set, label);
                if (c && gc == 2) bit_equal_rows(set, label, &t, ns, 1, 1);
                total += c;
                shapes += c > 0;
                tfree(&t);
            }
    if (shapes) printf("kernel set %s: integer gemv and batched product bit-equal on %d shapes, %lld outputs\n", set,
                       shapes, (long long)total);
}

// Unnormalized softmax weights in double precision: w[p] = exp(scale * q . K[p] - max) for keys
// [first, last] (w indexed by key, up to 64); returns their sum.
static double softmax_ref(const float *q, const float *K, int64_t stride, int first, int last, int hd, float scale,
                          double *w) {
    double mx = -INFINITY, sum = 0;
    for (int p = first; p <= last; p++) {
        double d = 0;
        for (int i = 0; i < hd; i++) d += (double)q[i] * K[p * stride + i];
        w[p] = d * scale;
        mx = w[p] > mx ? w[p] : mx;
    }
    for (int p = first; p <= last; p++) sum += (w[p] = exp(w[p] - mx));
    return sum;
}

// One attention head in double precision: softmax(scale * q . K[p]) V over keys [first, last].
static void attn_ref(const float *q, const float *K, const float *V, int64_t stride, int first, int last, int hd,
                     float scale, double *out, double *vmax) {
    double sc[64];
    const double sum = softmax_ref(q, K, stride, first, last, hd, scale, sc);
    *vmax = 0;
    for (int i = 0; i < hd; i++) {
        double acc = 0;
        for (int p = first; p <= last; p++) {
            acc += sc[p] * V[p * stride + i];
            *vmax = fabs(V[p * stride + i]) > *vmax ? fabs(V[p * stride + i]) : *vmax;
        }
        out[i] = acc / sum;
    }
}

// The query as the integer-score attention rounds it (cpu_kernels_attn_int_scores), decoded: per 16
// values s = max|q| / 127 and q = s * round(q / s), as the test's I8 cache rows are made.
static void q8_ref(const float *q, int hd, float *out) {
    for (int b0 = 0; b0 < hd; b0 += 16) {
        int b1 = b0 + 16 < hd ? b0 + 16 : hd;
        float amax = 0;
        for (int d = b0; d < b1; d++) amax = fmaxf(amax, fabsf(q[d]));
        for (int d = b0; d < b1; d++)
            out[d] = amax > 0 ? (float)lrintf(q[d] * (127.0f / amax)) * (amax / 127.0f) : 0.0f;
    }
}

static int int_paths, pv_paths;  // attn_rows calls that took integer scores, integer P.V

// The integer P.V's error bound (cpu_kernels_attn_vnni_pv.c), absolute: a weight p * vscale of a
// block of 16 keys (the call's blocks: from lo, the smallest first of its queries, to hi) is rounded
// to 16 bits (I8 cache) on a step of (max p over the block) x (max vscale of the group over the
// block's keys that the query sees, at most that over all of them) / 65280,
// so the output moves by at most, summed over the blocks, (live keys) x (max p) x (max |v| of the
// block's keys) / (130560 x sum p), plus 2^-20 of the sum of |p v| (float roundings of the weights'
// multipliers, the 27-bit integer sum's conversion). On the I4 cache the weights are rounded to
// signed bytes on a step of max p x max |vscale| / 127, and max |v| = 8 max |vscale|: the same with
// 254 for 130560 (`steps`). The weights come from a double softmax of the scores of q (the query
// the kernel's scores use).
static double pv_bound(const float *q, const float *K, const float *V, int64_t stride, int first, int last, int lo,
                       int hi, int hd, float scale, double steps) {
    double w[64], b = 0, pv = 0;
    const double sum = softmax_ref(q, K, stride, first, last, hd, scale, w);
    for (int p0 = lo; p0 <= hi; p0 += 16) {
        double pm = 0, vm = 0;
        int n = 0;
        for (int p = p0; p <= hi && p < p0 + 16; p++) {
            double kv = 0;
            for (int i = 0; i < hd; i++) kv = fmax(kv, fabs(V[p * stride + i]));
            vm = fmax(vm, kv);
            if (p >= first && p <= last) n++, pm = fmax(pm, w[p]), pv += w[p] * kv;
        }
        b += n * pm * vm;
    }
    return (b / steps + pv * 0x1p-20) / sum;
}

static void compare_attention(const char *set) {
    int hds[] = {64, 72, 128, 256, 32, 80};  // the last two after the others: their data stays as it was
    for (size_t h = 0; h < sizeof hds / sizeof hds[0]; h++) {
        int hd = hds[h], n_keys = 45;
        int64_t stride = hd * 3 + 5;  // keys interleaved with other heads, odd stride
        float *K = malloc(sizeof(float) * stride * n_keys), *V = malloc(sizeof(float) * stride * n_keys);
        float *q = malloc(sizeof(float) * hd), *got = malloc(sizeof(float) * hd);
        double *ref = malloc(sizeof(double) * hd), vmax;
        for (int64_t i = 0; i < stride * n_keys; i++) K[i] = rndf() * 3, V[i] = rndf();
        for (int i = 0; i < hd; i++) q[i] = rndf();
        int ranges[][2] = {{0, 0}, {0, 15}, {0, 16}, {3, 44}, {20, 37}};
        for (size_t k = 0; k < sizeof ranges / sizeof ranges[0]; k++) {
            attn_ref(q, K, V, stride, ranges[k][0], ranges[k][1], hd, 0.3f, ref, &vmax);
            cpu_kernels_select(set);
            cpu_kernels_attn_head(q, K, V, stride, ranges[k][0], ranges[k][1], hd, 0.3f, got);
            int bad = 0;
            for (int i = 0; i < hd; i++)
                if (!within(got[i], ref[i], vmax, ATTN_TOL, &seen.attn)) bad++;
            CHECK_MSG(bad == 0, "%s attention hd %d keys %d-%d: %d values differ", set, hd, ranges[k][0],
                      ranges[k][1], bad);
        }
        // Several queries in one call (a GQA group x tokens), each with its own key range, over a
        // cache in each element type: the reference runs on the values the cache holds (decoded
        // here from the layout cpu_kernels.h describes), so this measures the kernel, not rounding.
        // I4 codes (cpu_kv_i4.c) are converted by the cache's own row conversion, whose bound
        // test_cpu_kv_i4 checks, and decoded here from the nibbles; their rows sit an even number of
        // elements apart (cs: a row starts on a byte, as in the cache, whose stride is head_dim).
        const mx_dtype kvts[] = {MX_DTYPE_F32, MX_DTYPE_F16, MX_DTYPE_I16, MX_DTYPE_I8, MX_DTYPE_I4};
        for (int kt = 0; kt < 5; kt++) {
            mx_dtype dt = kvts[kt];
            int nsc = mx_kv_row_scales(dt, hd);
            int64_t cs = dt == MX_DTYPE_I4 ? stride + 1 : stride;
            uint8_t *Kc = malloc(4 * stride * n_keys), *Vc = malloc(4 * stride * n_keys);
            float *Kd = malloc(sizeof(float) * stride * n_keys), *Vd = malloc(sizeof(float) * stride * n_keys);
            float *Ks = malloc(sizeof(float) * nsc * n_keys), *Vs = malloc(sizeof(float) * nsc * n_keys);
            for (int which = 0; which < 2; which++) {
                const float *src = which ? V : K;
                uint8_t *dst = which ? Vc : Kc;
                float *dec = which ? Vd : Kd, *sc = which ? Vs : Ks;
                for (int p = 0; p < n_keys && dt == MX_DTYPE_I4; p++) {
                    cpu_kernels_kv_i4_row(dst + p * cs / 2, sc + p * nsc, src + p * stride, hd);
                    for (int d = 0; d < hd; d++) {
                        int64_t at = p * cs + d;
                        int u = (dst[at / 2] >> (at % 2 ? 4 : 0)) & 15;
                        dec[p * stride + d] = (float)(u - 8) * sc[p * nsc + d / MX_KV_I4_GROUP];
                    }
                }
                for (int p = 0; p < n_keys && dt != MX_DTYPE_I4; p++)
                    for (int b = 0; b < nsc; b++) {
                        int d0 = b * CPU_KV_SCALE_BLOCK, d1 = d0 + CPU_KV_SCALE_BLOCK < hd ? d0 + CPU_KV_SCALE_BLOCK : hd;
                        float amax = 0;
                        for (int d = d0; d < d1; d++) amax = fmaxf(amax, fabsf(src[p * stride + d]));
                        sc[p * nsc + b] = amax / (dt == MX_DTYPE_I8 ? 127.0f : 32767.0f);
                        for (int d = d0; d < d1; d++) {
                            int64_t at = p * stride + d;
                            float x = src[at];
                            if (dt == MX_DTYPE_F32) {
                                memcpy(dst + 4 * at, &x, 4);
                                dec[at] = x;
                            } else if (dt == MX_DTYPE_F16) {
                                uint16_t h16 = mx_f32_to_f16(x);
                                memcpy(dst + 2 * at, &h16, 2);
                                dec[at] = mx_f16_to_f32(h16);
                            } else if (dt == MX_DTYPE_I8) {
                                int8_t c8 = (int8_t)lrintf(amax > 0 ? x * (127.0f / amax) : 0.0f);
                                dst[at] = (uint8_t)c8;
                                dec[at] = c8 * sc[p * nsc + b];
                            } else {
                                int16_t c16 = (int16_t)lrintf(amax > 0 ? x * (32767.0f / amax) : 0.0f);
                                memcpy(dst + 2 * at, &c16, 2);
                                dec[at] = c16 * sc[p * nsc + b];
                            }
                        }
                    }
            }
            // 6 queries (a decode step's GQA group: one query at a time) and 19 (a prefill's tokens x
            // heads: P.V eight queries per pass, and three left for the one-query loop).
            enum { MAXQ = 19 };
            static float qs[MAXQ * 256], outs[MAXQ * 256];
            const float *qp[MAXQ];
            float *op[MAXQ];
            int first[MAXQ] = {0, 0, 3, 20, 44, 7}, last[MAXQ] = {0, 16, 44, 37, 44, 30};
            for (int j = 6; j < MAXQ; j++) {  // ranges that start and end inside, on and across blocks
                first[j] = (j * 5) % 21;
                last[j] = first[j] + (j * 11) % 25 < 44 ? first[j] + (j * 11) % 25 : 44;
            }
            // The added queries from a formula, not from rndf(), so the data of every other case stays
            // as it was (the bound has little room at head size 256: the scalar set reaches 1.9e-6).
            for (int j = 0; j < MAXQ; j++) {
                for (int i = 0; i < hd; i++) qs[j * 256 + i] = j < 6 ? rndf() : 0.5f * sinf(0.7f * (float)(j * 131 + i));
                qp[j] = qs + j * 256;
                op[j] = outs + j * 256;
            }
            float *scr = aligned_alloc(64, sizeof(float) * CPU_ATTN_SCRATCH(256));
            int bad = 0, int_bad = 0, planted_missed = 0, alone_differ = 0;
            // On the I8 and I4 caches each integer mode on its own and both (the VNNI sets; others
            // ignore it).
            const char *i8_modes[] = {"int", "pv", "int,pv", "float"};
            const bool int_cache = dt == MX_DTYPE_I8 || dt == MX_DTYPE_I4;
            for (int md = 0; md < (int_cache ? 4 : 1); md++)
            for (int nq = 6; nq <= MAXQ; nq += MAXQ - 6) {
                if (int_cache) CHECK(cpu_kernels_attn_i8_select(i8_modes[md]) == 0);
                cpu_attn_args a = {.q = qp, .out = op, .nq = nq, .first = first, .last = last, .K = Kc, .V = Vc,
                                   .stride = cs, .kv_dtype = dt, .K_scale = Ks, .V_scale = Vs,
                                   .scale_stride = nsc, .hd = hd, .scale = 0.3f};
                cpu_kernels_attn_rows(&a, scr);
                // Integer scores (I8 cache, VNNI sets): the reference's query is the query rounded as
                // the kernel rounds it (q8_ref); against the float query the kernel must be within
                // the bound of that rounding (below) and must not be within ATTN_TOL (the planted
                // fault: a reference that skips the rounding is caught). Integer P.V: within its
                // bound (pv_bound; it can be below ATTN_TOL, so its planted faults are in RESULTS).
                int iq = cpu_kernels_attn_int_scores(&a), ipv = cpu_kernels_attn_int_pv(&a);
                int_paths += iq, pv_paths += ipv;
                int lo = first[0], hi = last[0];
                for (int j = 0; j < nq; j++) lo = first[j] < lo ? first[j] : lo, hi = last[j] > hi ? last[j] : hi;
                for (int j = 0; j < nq; j++) {
                    float qr[256];
                    q8_ref(qp[j], hd, qr);
                    const float *qe = iq ? qr : qp[j];
                    attn_ref(qe, Kd, Vd, stride, first[j], last[j], hd, 0.3f, ref, &vmax);
                    double pvb = ipv ? pv_bound(qe, Kd, Vd, stride, first[j], last[j], lo, hi, hd, 0.3f,
                                                dt == MX_DTYPE_I4 ? 254 : 130560)
                                     : 0;
                    for (int i = 0; i < hd; i++) {
                        if (!ipv) {
                            bad += !within(op[j][i], ref[i], vmax, ATTN_TOL, &seen.attn);
                            continue;
                        }
                        double e = fabs(op[j][i] - ref[i]);
                        bad += !(e <= ATTN_TOL * vmax + pvb);
                        seen.attn_pv = fmax(seen.attn_pv, e / (ATTN_TOL * vmax + pvb));
                    }
                    if (!iq) continue;
                    // Scores that move by at most D scale every softmax weight by a factor within
                    // e^(+-2D), so the output moves by at most (e^(2D) - 1) * max|v|: D from the
                    // query's actual rounding, plus the float bound (and the P.V's, if on).
                    double dmax = 0;
                    for (int p = first[j]; p <= last[j]; p++) {
                        double d = 0;
                        for (int i = 0; i < hd; i++) d += ((double)qp[j][i] - qr[i]) * Kd[p * stride + i];
                        dmax = fmax(dmax, fabs(0.3 * d));
                    }
                    double tol = expm1(2 * dmax) + ATTN_TOL;
                    attn_ref(qp[j], Kd, Vd, stride, first[j], last[j], hd, 0.3f, ref, &vmax);
                    int far = 0;
                    for (int i = 0; i < hd; i++) {
                        double e = fabs(op[j][i] - ref[i]);
                        int_bad += !(e <= tol * vmax + pvb);
                        seen.attn_i8q = fmax(seen.attn_i8q, e / (tol * vmax + pvb));
                        far += e > ATTN_TOL * vmax;
                    }
                    planted_missed += first[j] < last[j] && far == 0;
                }
                // Each query alone in a call (a decode step's) gives the bits it got among the others
                // (a prompt's): a preempted request's recomputed tokens must be those of its decode.
                // Calls of one and two queries (a decode step's GQA group) read K and V from the cache
                // without the block copy (cpu_kernels_attn.c), so pairs are checked too.
                for (int j = 0; j < nq; j++) {
                    static float one[256];
                    float *onep = one;
                    cpu_attn_args a1 = a;
                    a1.q = &qp[j], a1.out = &onep, a1.nq = 1, a1.first = &first[j], a1.last = &last[j];
                    cpu_kernels_attn_rows(&a1, scr);
                    alone_differ += memcmp(one, op[j], sizeof(float) * (size_t)hd) != 0;
                }
                for (int j = 0; j + 1 < nq; j += 2) {
                    static float two[2][256];
                    float *twop[2] = {two[0], two[1]};
                    cpu_attn_args a2 = a;
                    a2.q = &qp[j], a2.out = twop, a2.nq = 2, a2.first = &first[j], a2.last = &last[j];
                    cpu_kernels_attn_rows(&a2, scr);
                    for (int k = 0; k < 2; k++)
                        alone_differ += memcmp(two[k], op[j + k], sizeof(float) * (size_t)hd) != 0;
                }
            }
            if (int_cache) {
                // Unset, both integer modes on the avx512vnni set (its batched product is bit-equal to
                // its gemv), integer scores on the avx2 set's 4-bit cache at head sizes a multiple of
                // 64 (its batch is bit-equal too), the float path on every other set (amx: tile products).
                CHECK(cpu_kernels_attn_i8_select("") == 0);
                cpu_attn_args a = {.q = qp, .out = op, .nq = 6, .first = first, .last = last, .K = Kc, .V = Vc,
                                   .stride = cs, .kv_dtype = dt, .K_scale = Ks, .V_scale = Vs,
                                   .scale_stride = nsc, .hd = hd, .scale = 0.3f};
                int want = strcmp(set, "avx512vnni") == 0 && hd % (dt == MX_DTYPE_I4 ? 32 : 16) == 0;
                int want_q = want || (strcmp(set, "avx2") == 0 && dt == MX_DTYPE_I4 && hd % 64 == 0);
                CHECK_MSG(cpu_kernels_attn_int_scores(&a) == want_q && cpu_kernels_attn_int_pv(&a) == want,
                          "%s hd %d: the %s cache's default attention is not %s", set, hd, mx_dtype_name(dt),
                          want ? "int,pv" : want_q ? "int" : "float");
                CHECK(cpu_kernels_attn_i8_select("int,pv") == 0);
            }
            CHECK_MSG(bad == 0, "%s attention rows hd %d cache %s: %d values differ", set, hd, mx_dtype_name(dt), bad);
            CHECK_MSG(int_bad == 0, "%s attention rows hd %d, integer scores: %d values beyond the query rounding's "
                      "bound from float scores", set, hd, int_bad);
            CHECK_MSG(alone_differ == 0, "%s attention rows hd %d cache %s: %d queries alone or in pairs in a call differ "
                      "in their bits from the same queries among others", set, hd, mx_dtype_name(dt), alone_differ);
            // Every other cache type (and I4 rows of a head size the integer modes do not take) takes
            // the same code in the VNNI sets as in the AVX-512 set: the same bits (the default I16
            // cache must not move).
            if (dt != MX_DTYPE_I8 && !(dt == MX_DTYPE_I4 && hd % 32 == 0) &&
                (strcmp(set, "avx512vnni") == 0 || strcmp(set, "amx") == 0)) {
                static float mine[MAXQ * 256];
                int differ = 0;
                for (int nq = 6; nq <= MAXQ; nq += MAXQ - 6) {
                    cpu_attn_args a = {.q = qp, .out = op, .nq = nq, .first = first, .last = last, .K = Kc, .V = Vc,
                                       .stride = cs, .kv_dtype = dt, .K_scale = Ks, .V_scale = Vs,
                                       .scale_stride = nsc, .hd = hd, .scale = 0.3f};
                    cpu_kernels_select(set);
                    cpu_kernels_attn_rows(&a, scr);
                    memcpy(mine, outs, sizeof outs);
                    CHECK(cpu_kernels_select("avx512") == 0);
                    cpu_kernels_attn_rows(&a, scr);
                    differ += memcmp(mine, outs, sizeof outs) != 0;
                }
                cpu_kernels_select(set);
                CHECK_MSG(differ == 0, "%s attention rows hd %d cache %s: not bit-identical to the avx512 set", set, hd,
                          mx_dtype_name(dt));
            }
            CHECK_MSG(planted_missed == 0, "%s attention rows hd %d, integer scores: %d queries where a reference "
                      "without the query's rounding was not caught", set, hd, planted_missed);
            free(Kc), free(Vc), free(Kd), free(Vd), free(Ks), free(Vs), free(scr);
        }
        free(K), free(V), free(q), free(ref), free(got);
    }
}

// SwiGLU against double precision: gate over [-100, 100] (both tails of the exponential), every
// tail length of a 16-lane vector, at an odd offset. Outputs below 1e-30 in magnitude (gate < -66)
// are compared absolutely: the SIMD version caps e^-gate at e^88 there.
static void compare_swiglu(const char *set) {
    enum { N = 1000 };
    float *g = malloc(sizeof(float) * (N + 1)), *u = malloc(sizeof(float) * (N + 1)), *o = malloc(sizeof(float) * (N + 1));
    for (int i = 0; i <= N; i++) {
        g[i] = i % 10 == 0 ? (rndf() * 2 - 1) * 100.0f : (rndf() * 2 - 1) * 8.0f;
        u[i] = rndf() * 4 - 2;
    }
    g[1] = 0.0f, g[2] = -0.0f, g[3] = 88.5f, g[4] = -88.5f;
    CHECK_MSG(cpu_kernels_select(set) == 0, "kernel set %s", set);
    int bad = 0;
    for (int count = 1; count <= N; count += count < 40 ? 1 : 480) {
        for (int i = 0; i <= N; i++) o[i] = NAN;
        cpu_kernels_swiglu(o + 1, g + 1, u + 1, count);
        for (int i = 1; i <= count; i++) {
            double ref = (double)g[i] / (1.0 + exp(-(double)g[i])) * u[i];
            if (!within(o[i], ref, fabs(ref) > 1e-30 ? fabs(ref) : 1e-30 / ACT_TOL, ACT_TOL, &seen.act)) bad++;
        }
        if (!isnan(o[0]) || (count < N && !isnan(o[count + 1]))) bad++;  // nothing written outside
    }
    CHECK_MSG(bad == 0, "%s swiglu: %d values differ", set, bad);
    free(g), free(u), free(o);
}

// The KV row conversions' cases: head sizes with a short last block; per head size six rows (rep):
// random values of four magnitudes with one large value per block, values that land exactly halfway
// between two integers where max|x| is qmax (the multiplier is 1), which rounding away from zero or
// toward zero would get wrong, and a zero block of signed zeros.
enum { KV_MAXD = 264 };
static const int kv_hds[] = {16, 40, 64, 72, 100, 128, 256};

// Row rep of the cases for head size hd into src; halfway values are n + 0.5 for n in [-span/2, span/2).
static void kv_case_row(float *src, int hd, int rep, float qmax, int span) {
    for (int i = 0; i < hd; i++) {
        float mag = rep == 0 ? 1e-3f : rep == 1 ? 1.0f : rep == 2 ? 50.0f : 3e4f;
        src[i] = (rndf() * 2 - 1) * mag;
        if (i % 16 == 5) src[i] *= 40.0f;  // one large value per block
    }
    if (rep == 3)  // ties: max|x| = qmax gives the multiplier 1
        for (int i = 0; i < hd; i++) src[i] = i % 16 == 0 ? qmax : (float)((int)(rndf() * span) - span / 2) + 0.5f;
    if (rep == 4)
        for (int i = 0; i < hd && i < 16; i++) src[i] = i % 2 ? 0.0f : -0.0f;  // a zero block
}

// One row converted by the scalar reference (ref) and by a kernel set (got). Codes are int16_t for
// the I16 layout; the I8 layout's int8_t codes take the first bytes. Every byte of the code buffers
// starts as 0x5a and every scale as -1, so a write past the row shows.
typedef struct kv_rows {
    int16_t ref[KV_MAXD + 8], got[KV_MAXD + 8];
    float ref_s[KV_MAXD / 16 + 2], got_s[KV_MAXD / 16 + 2];
} kv_rows;

static void kv_convert_both(const char *set, int bits, const float *src, int hd, kv_rows *r) {
    for (int pass = 0; pass < 2; pass++) {
        int16_t *d = pass ? r->got : r->ref;
        float *sc = pass ? r->got_s : r->ref_s;
        memset(d, 0x5a, sizeof r->ref);
        for (int i = 0; i < KV_MAXD / 16 + 2; i++) sc[i] = -1.0f;
        CHECK_MSG(cpu_kernels_select(pass ? set : "scalar") == 0, "kernel set %s", set);
        if (bits == 16) cpu_kernels_kv_i16_row(d, sc, src, hd);
        else cpu_kernels_kv_i8_row((int8_t *)d, sc, src, hd);
    }
}

// The I16 KV row conversion against the scalar reference, bit for bit (rows and scales), on the
// cases above (ties at max|x| 32767). Nothing may be written past the row.
static void compare_kv_i16(const char *set) {
    float src[KV_MAXD];
    kv_rows r;
    int bad = 0;
    for (size_t h = 0; h < sizeof kv_hds / sizeof kv_hds[0]; h++)
        for (int rep = 0; rep < 6; rep++) {
            int hd = kv_hds[h];
            kv_case_row(src, hd, rep, 32767.0f, 2000);
            kv_convert_both(set, 16, src, hd, &r);
            if (memcmp(r.ref, r.got, sizeof r.ref) != 0 || memcmp(r.ref_s, r.got_s, sizeof r.ref_s) != 0) bad++;
            if (r.got[hd] != 0x5a5a || r.got_s[CPU_KV_SCALES(hd)] != -1.0f) bad++;
        }
    CHECK_MSG(bad == 0, "%s kv i16 rows: %d rows differ from the scalar reference", set, bad);
}

// Values of an I8 row (codes d, scales sc, from src) further from src than half a step of their
// block (max|x| / 254, plus float rounding), or with a code outside [-127, 127]: the round trip's bound.
static int kv_i8_out_of_bound(const int8_t *d, const float *sc, const float *src, int hd) {
    int out = 0;
    for (int i = 0; i < hd; i++) {
        float s = sc[i / CPU_KV_SCALE_BLOCK];
        double err = fabs((double)d[i] * s - src[i]), bound = 0.5 * s * (1 + 1e-5) + 1e-30;
        if (err > bound || d[i] < -127) out++;
    }
    return out;
}

// The I8 KV row conversion against the scalar reference, bit for bit, on the cases above (ties at
// max|x| 127), with the round-trip bound checked on the reference's rows; one code off by one
// planted in a copy must fail both checks.
static void compare_kv_i8(const char *set) {
    float src[KV_MAXD];
    kv_rows r;
    const int8_t *ref = (const int8_t *)r.ref, *got = (const int8_t *)r.got;
    int bad = 0, outside = 0, planted_missed = 0;
    for (size_t h = 0; h < sizeof kv_hds / sizeof kv_hds[0]; h++)
        for (int rep = 0; rep < 6; rep++) {
            int hd = kv_hds[h];
            kv_case_row(src, hd, rep, 127.0f, 250);
            kv_convert_both(set, 8, src, hd, &r);
            if (memcmp(ref, got, KV_MAXD + 8) != 0 || memcmp(r.ref_s, r.got_s, sizeof r.ref_s) != 0) bad++;
            if (got[hd] != 0x5a || r.got_s[CPU_KV_SCALES(hd)] != -1.0f) bad++;
            outside += kv_i8_out_of_bound(ref, r.ref_s, src, hd);
            int8_t planted[KV_MAXD + 8];
            memcpy(planted, got, sizeof planted);
            int at = (int)(h * 37 + (size_t)rep * 11) % hd;
            // Away from the source value (a step further than the rounding went), or back from +-127.
            int step = (double)planted[at] * r.ref_s[at / CPU_KV_SCALE_BLOCK] >= src[at] ? 1 : -1;
            if (planted[at] + step > 127 || planted[at] + step < -127) step = -step;
            planted[at] = (int8_t)(planted[at] + step);
            if (r.ref_s[at / CPU_KV_SCALE_BLOCK] > 0 &&
                (memcmp(ref, planted, sizeof planted) == 0 || kv_i8_out_of_bound(planted, r.ref_s, src, hd) == 0))
                planted_missed++;
        }
    CHECK_MSG(bad == 0, "%s kv i8 rows: %d rows differ from the scalar reference", set, bad);
    CHECK_MSG(outside == 0, "kv i8 rows: %d values outside half a step of their block", outside);
    CHECK_MSG(planted_missed == 0, "kv i8 rows: %d planted one-code faults not caught", planted_missed);
}

// Every format and the attention head through one kernel set.
static void test_set(const char *set) {
    const mx_dtype sdts[] = {MX_DTYPE_BF16, MX_DTYPE_F16, MX_DTYPE_F32};
    const char *sdt_names[] = {"bf16", "f16", "f32"};
    char label[96];
    int bits[] = {2, 3, 4, 5, 6, 8}, groups[] = {32, 64, 128};
    memset(&seen, 0, sizeof seen);
    for (int b = 0; b < 6; b++)
        for (int g = 0; g < 3; g++)
            for (int d = 0; d < 3; d++) {
                int64_t cols = groups[g] * (b % 2 ? 3 : 5);
                tmat t = make((mx_quant){MX_QUANT_AFFINE, bits[b], groups[g]}, MX_DTYPE_U32, sdts[d], 11, cols,
                              (b + g + d) % 4);
                snprintf(label, sizeof label, "affine %d-bit g%d %s", bits[b], groups[g], sdt_names[d]);
                compare(set, label, &t);
                tfree(&t);
            }
    // Rows of more than 16 groups (the integer gemv walks groups in blocks of 16) and an odd group
    // count (a last half 128-column chunk for 4-bit g64).
    for (int g = 1; g < 3; g++) {
        tmat t = make((mx_quant){MX_QUANT_AFFINE, 4, groups[g]}, MX_DTYPE_U32, MX_DTYPE_BF16, 9, groups[g] * 37, g);
        snprintf(label, sizeof label, "affine 4-bit g%d bf16, 37 groups", groups[g]);
        compare(set, label, &t);
        tfree(&t);
    }
    struct {
        mx_quant q;
        const char *name;
    } fp[] = {{{MX_QUANT_MXFP4, 4, 32}, "mxfp4"}, {{MX_QUANT_MXFP8, 8, 32}, "mxfp8"}, {{MX_QUANT_NVFP4, 4, 16}, "nvfp4"}};
    for (int f = 0; f < 3; f++) {
        tmat t = make(fp[f].q, MX_DTYPE_U32, MX_DTYPE_U8, 9, 160, f + 1);
        compare(set, fp[f].name, &t);
        tfree(&t);
    }
    const mx_dtype dense[] = {MX_DTYPE_BF16, MX_DTYPE_F16, MX_DTYPE_F32};
    const int64_t dcols[] = {7, 64, 131};
    for (int d = 0; d < 3; d++)
        for (int c = 0; c < 3; c++) {
            tmat t = make((mx_quant){MX_QUANT_NONE, 0, 0}, dense[d], MX_DTYPE_F32, 10, dcols[c], (d + c) % 3);
            snprintf(label, sizeof label, "dense %s cols %lld", sdt_names[d], (long long)dcols[c]);
            compare(set, label, &t);
            tfree(&t);
        }
    compare_bit_equal(set);
    compare_attention(set);
    compare_swiglu(set);
    compare_kv_i16(set);
    compare_kv_i8(set);
    printf("kernel set %-11s worst error / bound scale: dequant %.2e (bound %.1e), dot %.2e (bound %.0e), "
           "integer gemv %.2e, integer batch %.2e, attention %.2e (bound %.0e), integer-score attention against float scores %.2f of its bound (%d calls), integer P.V %.2f of its bound (%d calls), "
           "swiglu %.2e (bound %.1e)\n",
           set, seen.deq, DEQ_TOL, seen.dot, DOT_TOL, seen.q, seen.qb, seen.attn, ATTN_TOL, seen.attn_i8q, int_paths,
           seen.attn_pv, pv_paths, seen.act, ACT_TOL);
    int_paths = 0, pv_paths = 0;
}

int main(void) {
    const char *simd_sets[] = {"avx2", "avx512", "avx512vnni", "amx"};
    setenv("MLXCEL_CPU_ATTN_I8", "int,pv", 1);  // the opt-in integer modes of the VNNI sets, tested here
    test_set("scalar");
    int tested = 0;
    for (size_t s = 0; s < sizeof simd_sets / sizeof simd_sets[0]; s++) {
        if (cpu_kernels_select(simd_sets[s]) != 0) {
            printf("kernel set %s: not supported by this CPU, not tested\n", simd_sets[s]);
            continue;
        }
        test_set(simd_sets[s]);
        tested++;
    }
    printf("scalar and %d SIMD kernel sets tested, %d matrices through an integer path\n", tested, q_tested);
    int rc = check_finish();
    if (rc == 0 && tested == 0) {
        printf("skipped: this CPU has none of the SIMD kernel sets (avx2, avx512, avx512vnni); only the scalar "
               "set was checked\n");
        return 77;
    }
    return rc;
}
