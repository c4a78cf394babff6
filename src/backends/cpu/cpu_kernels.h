// SPDX-License-Identifier: MIT
// The inner loops of the CPU backend that decide its speed: decoding one weight row to float32,
// dot products, the fused decode-and-dot used at batch 1 (gemv), the tiled product used for
// batches of tokens (gemm) and one attention head. Each has a scalar reference version (kept for
// tests) and SIMD versions selected once at run time from the CPU's features.
#ifndef MX_BACKENDS_CPU_KERNELS_H
#define MX_BACKENDS_CPU_KERNELS_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backends/backend.h"
#include "core/quant.h"

// Rows of w one gemm call handles at most.
#define CPU_KERNELS_GEMM_ROWS 4
// Floats of per-thread scratch gemv/gemm need for a matrix of `cols` columns (the CPU backend
// reserves cols * 4 + 1024 at upload time).
#define CPU_KERNELS_SCRATCH(cols) ((size_t)(cols) * 4 + 1024)

// out[cols] = row `row` of w (row counts across experts), float32.
void cpu_kernels_dequant_row(const mx_matrix *w, int64_t row, float *out);
// sum a[i] * b[i].
float cpu_kernels_dot(const float *a, const float *b, int64_t n);
// Row `row` of w dotted with x[cols]; scratch has room for cols floats.
float cpu_kernels_row_dot(const mx_matrix *w, int64_t row, const float *x, float *scratch);
// out[r - r0] = row r of w . x for r in [r0, r1).   x: [cols], out: [r1 - r0]
void cpu_kernels_gemv(const mx_matrix *w, int64_t r0, int64_t r1, const float *x, float *out, float *scratch);
// out[t * ldo + i] = row (r0 + i) of w . x[t] for i < nr (nr <= CPU_KERNELS_GEMM_ROWS), t < n.
// x: [n, cols] contiguous; out: [n, ldo].
void cpu_kernels_gemm(const mx_matrix *w, int64_t r0, int nr, const float *x, int n, float *out, int64_t ldo,
                      float *scratch);
// One attention head of one token: out[hd] = softmax(scale * q . K[p]) V over keys p in
// [first, last]; key p of K and V starts at p * stride floats. Online softmax, no scratch.
void cpu_kernels_attn_head(const float *q, const float *K, const float *V, int64_t stride, int first, int last, int hd,
                           float scale, float *out);

// I16 and I8 KV rows: one float scale per block of this many elements (the layout every backend shares).
#define CPU_KV_SCALE_BLOCK MX_KV_SCALE_BLOCK
#define CPU_KV_SCALES(hd) (((hd) + CPU_KV_SCALE_BLOCK - 1) / CPU_KV_SCALE_BLOCK)
// One row of hd floats in the I16 layout: per block b of CPU_KV_SCALE_BLOCK values (the last may be
// shorter), scales[b] = max|x| / 32767 and dst = x * (32767 / max|x|) rounded half to even (0 where
// max|x| is 0). The SIMD versions are bit-identical to the scalar reference.
void cpu_kernels_kv_i16_row(int16_t *dst, float *scales, const float *src, int hd);
// The same in the I8 layout (the opt-in 8-bit cache, --kv-bits 8): scales[b] = max|x| / 127 and
// dst = x * (127 / max|x|) rounded half to even, so |dst| <= 127 and the error of an element is at
// most max|x| / 254 of its block. The SIMD versions are bit-identical to the scalar reference.
void cpu_kernels_kv_i8_row(int8_t *dst, float *scales, const float *src, int hd);
// The same in the I4 layout (the opt-in 4-bit cache, --kv-bits 4; cpu_kv_i4.c): per group of
// MX_KV_I4_GROUP values scales[g] = m / -8 (m the group's value of largest magnitude) and codes
// round(x / scales[g]) in -8..7, stored + 8 two a byte (hd / 2 bytes, hd even); the error of an
// element is at most max|x| / 16 of its group (max|x| / 8 for -m, clamped to code 7).
void cpu_kernels_kv_i4_row(uint8_t *dst, float *scales, const float *src, int hd);
// Element i of I4 codes (element 2k in the low nibble of byte k), -8..7, before its scale.
static inline int cpu_kv_i4_code(const void *codes, int64_t i) {
    return ((((const uint8_t *)codes)[i >> 1] >> ((i & 1) * 4)) & 15) - 8;
}
// Element i of a cache row of type dt (row: its first element; scales: its scales, NULL unless
// mx_kv_scaled) as float32, for the scalar readers (the reference attention, the latent cache).
static inline float cpu_kv_value(const void *row, const float *scales, mx_dtype dt, int64_t i) {
    if (dt == MX_DTYPE_I16) return (float)((const int16_t *)row)[i] * scales[i / CPU_KV_SCALE_BLOCK];
    if (dt == MX_DTYPE_I8) return (float)((const int8_t *)row)[i] * scales[i / CPU_KV_SCALE_BLOCK];
    if (dt == MX_DTYPE_I4) return (float)cpu_kv_i4_code(row, i) * scales[i / MX_KV_I4_GROUP];
    return mx_load_float(row, dt, i);
}

// Queries one attn_rows call takes at most (query heads of a GQA group times a few tokens). Each
// block of keys is converted once per call, so a prefill's calls take many queries: 64 instead of 16
// ran the attention lab 11% faster (bench/RESULTS.md CPU round 9).
#define CPU_ATTN_MAX_ROWS 64
// Floats of scratch attn_rows needs for head_dim hd: two 16-key blocks of floats, 64-byte aligned
// inside (CPU_ATTN_BLOCK_SCRATCH: all a float-score call uses), then, for integer scores on the I8
// cache (cpu_kernels_attn_int_scores), each query's codes, lane sums and scale lanes (3 rows padded
// to 64 bytes).
#define CPU_ATTN_BLOCK_SCRATCH(hd) ((size_t)32 * (((hd) + 15) / 16 * 16) + 16)
#define CPU_ATTN_SCRATCH(hd) (CPU_ATTN_BLOCK_SCRATCH(hd) + (size_t)CPU_ATTN_MAX_ROWS * 3 * (((hd) + 63) / 64 * 16))

// Several queries that read the same KV head: for j < nq,
//   out[j][hd] = softmax(scale * q[j] . K[p]) V  over keys p in [first[j], last[j]],
// with key p of K and V at cpu_attn_key(a, p) elements of kv_dtype (F32, F16, BF16, or I16/I8/I4: element
// d of key p times K_scale[cpu_attn_scale(a, p) + d / mx_kv_scale_block(kv_dtype)], V likewise; I4
// elements are half bytes, cpu_kv_i4_code). Keys come in
// blocks of MX_KV_BLOCK rows `stride` elements apart; block i of the sequence is blocks[i] (NULL:
// block0 + i), block_stride elements from block to block (0: MX_KV_BLOCK * stride, so the rows of
// consecutive blocks are contiguous). Reading the keys once for all the queries is the point.
// sink (NULL: none): query j's attention sink logit (backend.h, attention), which adds e^(sink[j])
// to its softmax's denominator.
typedef struct cpu_attn_args {
    const float *const *q;  // [nq] pointers to query rows [hd]
    float *const *out;      // [nq] pointers to output rows [hd]
    int nq;                 // 1 .. CPU_ATTN_MAX_ROWS
    const int *first, *last;  // [nq] key ranges, first <= last
    const void *K, *V;     // rows of block 0
    int64_t stride;
    mx_dtype kv_dtype;
    const float *K_scale, *V_scale;  // I16, I8 and I4 only: mx_kv_row_scales(kv_dtype, hd) scales per key
    int64_t scale_stride;
    int hd;
    float scale;
    const int32_t *blocks;  // the sequence's block table row, or NULL
    int32_t block0;
    int64_t block_stride, scale_block_stride;
    const float *sink;      // [nq] or NULL
} cpu_attn_args;

// The factor that ends an online softmax: 1 / (l + e^(sink - m)) for scores of maximum m whose
// e^(s - m) sum to l, i.e. 1 / l without a sink (sink -inf). Written so that a sink far above every
// score cannot overflow.
static inline float cpu_attn_inv_denominator(float m, float l, float sink) {
    if (sink > m) {
        float r = expf(m - sink);
        return r / (l * r + 1.0f);
    }
    return 1.0f / (l + expf(sink - m));
}

static inline int64_t cpu_attn_block(const cpu_attn_args *a, int p) {
    return a->blocks ? a->blocks[p / MX_KV_BLOCK] : a->block0 + p / MX_KV_BLOCK;
}
static inline int64_t cpu_attn_key(const cpu_attn_args *a, int p) {
    int64_t bs = a->block_stride ? a->block_stride : MX_KV_BLOCK * a->stride;
    return cpu_attn_block(a, p) * bs + (int64_t)(p % MX_KV_BLOCK) * a->stride;
}
static inline int64_t cpu_attn_scale(const cpu_attn_args *a, int p) {
    int64_t bs = a->scale_block_stride ? a->scale_block_stride : MX_KV_BLOCK * a->scale_stride;
    return cpu_attn_block(a, p) * bs + (int64_t)(p % MX_KV_BLOCK) * a->scale_stride;
}
// scratch: CPU_ATTN_SCRATCH(hd) floats.
void cpu_kernels_attn_rows(const cpu_attn_args *a, float *scratch);
// 1 when the active set computes this call's scores from integer dot products: I8 cache with head_dim
// a multiple of 16 from 32 to 512, or I4 cache with head_dim a multiple of 32 from 32 to 512, AVX-512
// VNNI, and MLXCEL_CPU_ATTN_I8 int or int,pv, or unset on the
// avx512vnni set (read once; cpu_kernels.c says why that set and not amx); or the avx2 set's I4 cache
// with head_dim a multiple of 64 up to 512, MLXCEL_CPU_ATTN_I8 int, int,pv or unset. The
// query is then rounded as a cache row is (cpu_kernels_kv_i8_row)
// and each 16-value group's exact integer sum of code products is scaled by the two groups' scales;
// otherwise the scores are float products of the query with the decoded keys.
int cpu_kernels_attn_int_scores(const cpu_attn_args *a);
// 1 when the active set computes this call's P.V from integer dot products: the caches and head sizes
// of cpu_kernels_attn_int_scores, AVX-512 VNNI, and MLXCEL_CPU_ATTN_I8 pv or int,pv, or unset on the
// avx512vnni set. Each block's
// weights p times the value scales are rounded to 16 bits on one step per query, block of 16 keys and
// 16-value group (max p x max value scale / 65280), and summed exactly with the int8 value codes as
// two byte digits; on the I4 cache to signed bytes (a step of max p x max |value scale| / 127 per
// 32-value group) summed exactly with the 4-bit codes (cpu_kernels_attn_vnni_pv.c, which states the
// error bounds).
int cpu_kernels_attn_int_pv(const cpu_attn_args *a);
// Sets the integer modes as MLXCEL_CPU_ATTN_I8 would ("int", "pv", "int,pv", "float", or "" or NULL
// for the set's default; tests);
// -1 for anything else.
int cpu_kernels_attn_i8_select(const char *spec);
// Whether spec (MLXCEL_CPU_ATTN_I8's value; NULL: unset) is one of those: the backend refuses to
// start on any other value.
bool cpu_kernels_attn_i8_valid(const char *spec);

// out[i] = silu(gate[i]) * up[i] = gate[i] / (1 + e^-gate[i]) * up[i] for i < count (the scalar
// version is the reference; SIMD versions within a few float32 roundings of it).
void cpu_kernels_swiglu(float *out, const float *gate, const float *up, int64_t count);

// Integer path for batch 1 (AVX-512 VNNI and AVX2, affine 4-bit with group 64/128 and 8-bit with
// group 32/64/128): the activation row is quantized once per matmul per weight group, then any number
// of gemv_q calls (one per row block, from any thread) read it.
// eq (here and in cpu_kernels_gemm_q): the bit-equal pair where the set has it (AVX-512 VNNI, the
// formats its batched product takes; AVX2, whose bit-equal batched product is its gemv token by
// token): the gemv's output for a row of x is then the very bits the batched product gives for that
// row (cpu_int8_activations.h); the CPU backend asks for it on the int8 and 4-bit KV caches
// (cpu_matmul.c, set_bit_equal). Pass the same eq to all three calls of one product.
// Bytes of one quantized row of x for w; 0 when the active set has no integer path for w.
size_t cpu_kernels_qx_row_bytes(const mx_matrix *w, bool eq);
// Quantizes n rows of x[n, cols] into qx (n * qx_row_bytes bytes, 64-byte aligned).
void cpu_kernels_quantize_x(const mx_matrix *w, const float *x, int n, void *qx, bool eq);
// out[r - r0] = row r of w . (the quantized row qx) for r in [r0, r1).
void cpu_kernels_gemv_q(const mx_matrix *w, int64_t r0, int64_t r1, const void *qx, float *out, bool eq);
// Whether the active set has the bit-equal pair.
bool cpu_kernels_has_bit_equal(void);

// Integer path for batches (AMX tiles and VNNI: affine 4/8-bit, group 64/128; AVX2: its gemv's formats). x [n, cols] is prepared once
// per matmul, one tile of 16 tokens per quantize_x_tiles call (tiles are independent, so threads can
// share the work); then gemm_q calls (one per block of up to CPU_KERNELS_GEMM_Q_ROWS rows, from any
// thread) read it.
#define CPU_KERNELS_GEMM_Q_ROWS 16
// Bytes of prepared x for n tokens; 0 when the active set has no integer batch path for w (eq: the
// bit-equal one; the avx2 set has only that one).
size_t cpu_kernels_qx_tiles_bytes(const mx_matrix *w, int n, bool eq);
// Prepares tokens [16 * tile, 16 * tile + 16) of x (rows past n are zero) into qx.
void cpu_kernels_quantize_x_tiles(const mx_matrix *w, const float *x, int n, int tile, void *qx);
// Bytes of scratch one gemm_q call needs for w, either eq (0 when there is no integer batch path for w).
size_t cpu_kernels_gemm_q_scratch_bytes(const mx_matrix *w);
// out[t * ldo + r0 + i] = row (r0 + i) of w . x[t] for i < nr (<= CPU_KERNELS_GEMM_Q_ROWS), t < n,
// from the prepared qx (n must be the n it was prepared for). out: [n, ldo].
void cpu_kernels_gemm_q(const mx_matrix *w, int64_t r0, int nr, const void *qx, int n, float *out, int64_t ldo,
                        void *scratch, bool eq);

// Names the kernel set chosen at run time ("amx", "avx512vnni", "avx512", "avx2", "scalar").
const char *cpu_kernels_name(void);
// Forces a kernel set (tests compare them); returns -1 if the CPU lacks it.
int cpu_kernels_select(const char *name);
// MLXCEL_CPU_KERNELS: 0 when unset, empty or a set this CPU supports; else -1 with err naming the
// value, why (not a set, or one this CPU lacks) and the sets this CPU supports.
int cpu_kernels_env_check(mx_error *err);

#endif
