// SPDX-License-Identifier: MIT
// One set of CPU inner kernels (scalar, AVX2, AVX-512...). Private to src/backends/cpu/. A set may
// leave gemv/gemm/attn_rows and the integer path NULL: the scalar versions built on its dequant_row/dot are used then.
// The SIMD kernels declared below the set are defined on x86-64 only, where cpu_kernels_x86.c's sets
// use them. Other CPUs build only the four whose addresses cpu_kernels.c compares
// (cpu_avx512_attn_rows, cpu_avx512vnni_attn_rows, cpu_avx2_attn_rows, cpu_vnni_gemm_q_eq), as
// no-ops never called.
#ifndef MX_BACKENDS_CPU_KERNELS_TABLE_H
#define MX_BACKENDS_CPU_KERNELS_TABLE_H

#include <stddef.h>

#include "backends/cpu/cpu_kernels.h"
#include "core/quant.h"

typedef struct cpu_kernel_set {
    const char *name;
    void (*dequant_row)(const mx_matrix *w, int64_t row, float *out);
    float (*dot)(const float *a, const float *b, int64_t n);
    float (*row_dot)(const mx_matrix *w, int64_t row, const float *x, float *scratch);
    void (*gemv)(const mx_matrix *w, int64_t r0, int64_t r1, const float *x, float *out, float *scratch);
    void (*gemm)(const mx_matrix *w, int64_t r0, int nr, const float *x, int n, float *out, int64_t ldo,
                 float *scratch);
    void (*attn_rows)(const cpu_attn_args *a, float *scratch);
    void (*swiglu)(float *out, const float *gate, const float *up, int64_t count);  // may be NULL
    void (*kv_i16_row)(int16_t *dst, float *scales, const float *src, int hd);       // may be NULL
    void (*kv_i8_row)(int8_t *dst, float *scales, const float *src, int hd);         // may be NULL
    // Integer path (may be NULL): see cpu_kernels.h, cpu_kernels_qx_row_bytes and after.
    size_t (*qx_row_bytes)(const mx_matrix *w);
    void (*quantize_x)(const mx_matrix *w, const float *x, int n, void *qx);
    void (*gemv_q)(const mx_matrix *w, int64_t r0, int64_t r1, const void *qx, float *out);
    // Integer batched path (may be NULL): see cpu_kernels.h, cpu_kernels_qx_tiles_bytes and after.
    size_t (*qx_tiles_bytes)(const mx_matrix *w, int n);
    void (*quantize_x_tiles)(const mx_matrix *w, const float *x, int n, int tile, void *qx);
    size_t (*gemm_q_scratch_bytes)(const mx_matrix *w);
    void (*gemm_q)(const mx_matrix *w, int64_t r0, int nr, const void *qx, int n, float *out, int64_t ldo,
                   void *scratch);
    // Bit-equal integer pair (may be NULL): a gemv and a batched product (on quantize_x_tiles' x) whose
    // outputs for the same row of x are the same bits; see cpu_kernels.h, the `eq` arguments.
    size_t (*qx_row_bytes_eq)(const mx_matrix *w);
    void (*quantize_x_eq)(const mx_matrix *w, const float *x, int n, void *qx);
    void (*gemv_q_eq)(const mx_matrix *w, int64_t r0, int64_t r1, const void *qx, float *out);
    void (*gemm_q_eq)(const mx_matrix *w, int64_t r0, int nr, const void *qx, int n, float *out, int64_t ldo,
                      void *scratch);
} cpu_kernel_set;

// The best x86 set this CPU supports, or NULL (non-x86 or no AVX2+FMA).
const cpu_kernel_set *cpu_kernels_x86_best(void);
// A named x86 set if the CPU supports it, else NULL.
const cpu_kernel_set *cpu_kernels_x86_named(const char *name);

// AVX-512 attention for several queries of one KV head (cpu_kernels_attn.c); see cpu_kernels_attn_rows.
void cpu_avx512_attn_rows(const cpu_attn_args *a, float *scratch);

// The same with integer scores and P.V on the I8 and I4 caches where cpu_kernels_attn_int_scores and
// cpu_kernels_attn_int_pv say so (cpu_kernels_attn.c; the AVX-512 VNNI sets), else exactly
// cpu_avx512_attn_rows.
void cpu_avx512vnni_attn_rows(const cpu_attn_args *a, float *scratch);
// Its integer scores (cpu_kernels_attn_vnni.c). Rows are padded to whole 64-byte chunks
// (CPU_ATTN_INT_ROW(hd) bytes). The scratch's float block of 16 keys (unused in this mode: 16 * hd
// floats, hd >= 32) holds the block's key codes as unsigned bytes and their scale lanes (32 *
// CPU_ATTN_INT_ROW(hd) bytes); each query's prepared codes, lane sums and scale lanes
// (CPU_ATTN_INT_QBYTES each) follow the two blocks (CPU_ATTN_SCRATCH). Every call on the I8 or I4
// cache takes them where the head size allows, a prefill's as a decode's (a query's output does not
// depend on the queries that share its call).
#define CPU_ATTN_INT_ROW(hd) (((size_t)(hd) + 63) / 64 * 64)
#define CPU_ATTN_INT_QBYTES(hd) ((size_t)3 * CPU_ATTN_INT_ROW(hd))
// Head sizes of the integer modes: multiples of 16 (I8; of 32 for I4: a 16-value group of the query
// must lie in one 32-value group of the keys) from 32 to 512.
static inline int cpu_attn_int_ok(const cpu_attn_args *a) {
    int hd = a->hd, step = a->kv_dtype == MX_DTYPE_I8 ? 16 : a->kv_dtype == MX_DTYPE_I4 ? 32 : 0;
    return step && hd % step == 0 && hd >= 32 && hd <= 512;
}
// The avx2 set's integer scores (cpu_kernels_attn_avx2.c): the 4-bit cache, in whole 64-value halves
// of a row (one 32-byte load of codes).
#define CPU_AVX2_ATTN_INT_HALF 64
static inline int cpu_avx2_attn_int_ok(const cpu_attn_args *a) {
    return a->kv_dtype == MX_DTYPE_I4 && a->hd % CPU_AVX2_ATTN_INT_HALF == 0 && cpu_attn_int_ok(a);
}
void cpu_vnni_attn_int_prepare(const cpu_attn_args *a, uint8_t *qprep);
// The integer modes MLXCEL_CPU_ATTN_I8 turns on (cpu_kernels.c): bits of the two below.
#define CPU_ATTN_I8_SCORES 1
#define CPU_ATTN_I8_PV 2
int cpu_kernels_attn_i8_mode(void);
// One block's P.V update for the queries with live[j] != 0 (cpu_kernels_attn_vnni_pv.c; the head
// sizes of cpu_attn_int_ok): the block's value codes as integer tiles in vbuf (the float V block's
// scratch, 64-byte aligned; 1344 bytes per 64 values or part), then for each such query
// out[j] = out[j] * corr[j] + (its weights p[j][0..15], rounded per group) . values, out[j] in the
// kernel's permuted order; prefetches the next block's values up to pf_last.
void cpu_vnni_attn_int_pv(const cpu_attn_args *a, int p0, int nb, int pf_last, const uint16_t *live,
                          const float (*p)[16], const float *corr, uint8_t *vbuf);
// Puts an output row of hd values back in order after the integer P.V on a cache of kv_dtype (in place).
void cpu_vnni_attn_int_pv_order(float *out, int hd, mx_dtype kv_dtype);
// Raw scores (before a->scale) of the queries with live[j] != 0 against keys p0 .. p0 + nb - 1 into
// sp[j][0..15] (lanes past nb finite and meaningless); prefetches the next block's keys up to pf_last.
void cpu_vnni_attn_int_scores(const cpu_attn_args *a, const uint8_t *qprep, int p0, int nb, int pf_last,
                              const uint16_t *live, float (*sp)[16], uint8_t *kbuf);

// AVX-512 SwiGLU (cpu_kernels_swiglu.c); see cpu_kernels_swiglu.
void cpu_avx512_swiglu(float *out, const float *gate, const float *up, int64_t count);
void cpu_avx2_swiglu(float *out, const float *gate, const float *up, int64_t count);
// AVX2 attention (cpu_kernels_attn_avx2.c); see cpu_kernels_attn_rows.
void cpu_avx2_attn_rows(const cpu_attn_args *a, float *scratch);

// AVX-512 conversion of a KV row to I16 (cpu_kernels_kv.c); see cpu_kernels_kv_i16_row.
void cpu_avx512_kv_i16_row(int16_t *dst, float *scales, const float *src, int hd);
// AVX-512 and AVX2 conversions of a KV row to I8 (cpu_kernels_kv.c); see cpu_kernels_kv_i8_row.
void cpu_avx512_kv_i8_row(int8_t *dst, float *scales, const float *src, int hd);
void cpu_avx2_kv_i8_row(int8_t *dst, float *scales, const float *src, int hd);
// The AVX2 row decoder (cpu_kernels_x86.c; also the AVX-512 sets') and float product for batches
// (cpu_kernels_avx2_gemm.c).
void cpu_avx2_dequant_row(const mx_matrix *w, int64_t row, float *out);
void cpu_avx2_gemm(const mx_matrix *w, int64_t r0, int nr, const float *x, int n, float *out, int64_t ldo,
                   float *scratch);
// AVX2 integer kernels for affine 4/8-bit (cpu_kernels_avx2_int.c): the gemv, and batches as the
// same row kernel token by token (so the pair is bit-equal; the set's batches use it only then).
size_t cpu_avx2_qx_row_bytes(const mx_matrix *w);
void cpu_avx2_quantize_x(const mx_matrix *w, const float *x, int n, void *qx);
void cpu_avx2_gemv_q(const mx_matrix *w, int64_t r0, int64_t r1, const void *qx, float *out);
size_t cpu_avx2_qx_tiles_bytes(const mx_matrix *w, int n);
void cpu_avx2_quantize_x_tiles(const mx_matrix *w, const float *x, int n, int tile, void *qx);
size_t cpu_avx2_gemm_q_scratch_bytes(const mx_matrix *w);
void cpu_avx2_gemm_q(const mx_matrix *w, int64_t r0, int nr, const void *qx, int n, float *out, int64_t ldo,
                     void *scratch);
// AVX-512 VNNI integer kernels (cpu_kernels_vnni.c).
int cpu_vnni_supported(void);
size_t cpu_vnni_qx_row_bytes(const mx_matrix *w);
void cpu_vnni_quantize_x(const mx_matrix *w, const float *x, int n, void *qx);
void cpu_vnni_gemv_q(const mx_matrix *w, int64_t r0, int64_t r1, const void *qx, float *out);

// The gemv bit-equal to cpu_vnni_gemm_q_eq (cpu_kernels_vnni_eq.c).
size_t cpu_vnni_eq_qx_row_bytes(const mx_matrix *w);
void cpu_vnni_eq_quantize_x(const mx_matrix *w, const float *x, int n, void *qx);
void cpu_vnni_eq_gemv_q(const mx_matrix *w, int64_t r0, int64_t r1, const void *qx, float *out);

// AVX-512 VNNI kernels for batches (cpu_kernels_vnni_gemm.c), for CPUs without AMX; _eq: bit-equal
// to cpu_vnni_eq_gemv_q.
size_t cpu_vnni_qx_tiles_bytes(const mx_matrix *w, int n);
void cpu_vnni_quantize_x_tiles(const mx_matrix *w, const float *x, int n, int tile, void *qx);
size_t cpu_vnni_gemm_scratch_bytes(const mx_matrix *w);
void cpu_vnni_gemm_q(const mx_matrix *w, int64_t r0, int nr, const void *qx, int n, float *out, int64_t ldo,
                     void *scratch);
void cpu_vnni_gemm_q_eq(const mx_matrix *w, int64_t r0, int nr, const void *qx, int n, float *out, int64_t ldo,
                        void *scratch);

// AMX tile kernels for batches (cpu_kernels_amx.c).
int cpu_amx_supported(void);
size_t cpu_amx_qx_tiles_bytes(const mx_matrix *w, int n);
void cpu_amx_quantize_x_tiles(const mx_matrix *w, const float *x, int n, int tile, void *qx);
size_t cpu_amx_scratch_bytes(const mx_matrix *w);
void cpu_amx_gemm_q(const mx_matrix *w, int64_t r0, int nr, const void *qx, int n, float *out, int64_t ldo,
                    void *scratch);

#endif
