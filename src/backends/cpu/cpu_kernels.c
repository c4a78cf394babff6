// SPDX-License-Identifier: MIT
// Kernel selection and the scalar reference kernels (see cpu_kernels.h). SIMD versions live in
// cpu_kernels_x86.c and register themselves through cpu_kernels_x86_best()/_named().
#include "backends/cpu/cpu_kernels.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_kernels_table.h"

static float scalar_dot(const float *a, const float *b, int64_t n) {
    float acc[4] = {0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        acc[0] += a[i] * b[i];
        acc[1] += a[i + 1] * b[i + 1];
        acc[2] += a[i + 2] * b[i + 2];
        acc[3] += a[i + 3] * b[i + 3];
    }
    for (; i < n; i++) acc[0] += a[i] * b[i];
    return (acc[0] + acc[1]) + (acc[2] + acc[3]);
}

static void scalar_dequant_row(const mx_matrix *w, int64_t row, float *out) { mx_matrix_dequant_row(w, row, out); }

static float scalar_row_dot(const mx_matrix *w, int64_t row, const float *x, float *scratch) {
    scalar_dequant_row(w, row, scratch);
    return scalar_dot(scratch, x, w->cols);
}

static void scalar_attn_head(const float *q, const float *K, const float *V, int64_t stride, int first, int last,
                             int hd, float scale, float *out) {
    float m = -INFINITY, l = 0.0f;
    memset(out, 0, sizeof(float) * hd);
    for (int p = first; p <= last; p++) {
        float s = scalar_dot(q, K + p * stride, hd) * scale;
        const float *vp = V + p * stride;
        if (s > m) {
            float corr = expf(m - s);  // exp(-inf) = 0 on the first key
            l *= corr;
            for (int d = 0; d < hd; d++) out[d] *= corr;
            m = s;
        }
        float e = expf(s - m);
        l += e;
        for (int d = 0; d < hd; d++) out[d] += e * vp[d];
    }
    float inv = 1.0f / l;
    for (int d = 0; d < hd; d++) out[d] *= inv;
}

// Reference for attn_rows: each query on its own, each key row converted to float32 in scratch.
static void scalar_attn_rows(const cpu_attn_args *a, float *scratch) {
    int hd = a->hd;
    float *kr = scratch, *vr = scratch + hd;
    for (int j = 0; j < a->nq; j++) {
        const float *q = a->q[j];
        float *out = a->out[j];
        float m = -INFINITY, l = 0.0f;
        memset(out, 0, sizeof(float) * hd);
        for (int p = a->first[j]; p <= a->last[j]; p++) {
            const uint8_t *krow = (const uint8_t *)a->K + mx_kv_elem_bytes(a->kv_dtype, (size_t)cpu_attn_key(a, p));
            const uint8_t *vrow = (const uint8_t *)a->V + mx_kv_elem_bytes(a->kv_dtype, (size_t)cpu_attn_key(a, p));
            bool scaled = mx_kv_scaled(a->kv_dtype);
            const float *ks = scaled ? a->K_scale + cpu_attn_scale(a, p) : NULL;
            const float *vs = scaled ? a->V_scale + cpu_attn_scale(a, p) : NULL;
            for (int d = 0; d < hd; d++) {
                kr[d] = cpu_kv_value(krow, ks, a->kv_dtype, d);
                vr[d] = cpu_kv_value(vrow, vs, a->kv_dtype, d);
            }
            float s = scalar_dot(q, kr, hd) * a->scale;
            if (s > m) {
                float corr = expf(m - s);
                l *= corr;
                for (int d = 0; d < hd; d++) out[d] *= corr;
                m = s;
            }
            float e = expf(s - m);
            l += e;
            for (int d = 0; d < hd; d++) out[d] += e * vr[d];
        }
        float inv = cpu_attn_inv_denominator(m, l, a->sink ? a->sink[j] : -INFINITY);
        for (int d = 0; d < hd; d++) out[d] *= inv;
    }
}

static const cpu_kernel_set scalar_set = {
    /* .name = */ "scalar",
    /* .dequant_row = */ scalar_dequant_row,
    /* .dot = */ scalar_dot,
    /* .row_dot = */ scalar_row_dot,
    /* .gemv = */ NULL,
    /* .gemm = */ NULL,
    /* .attn_rows = */ scalar_attn_rows,
    /* .swiglu = */ NULL,
    /* .kv_i16_row = */ NULL,
    /* .kv_i8_row = */ NULL,
    /* .qx_row_bytes = */ NULL,
    /* .quantize_x = */ NULL,
    /* .gemv_q = */ NULL,
    /* .qx_tiles_bytes = */ NULL,
    /* .quantize_x_tiles = */ NULL,
    /* .gemm_q_scratch_bytes = */ NULL,
    /* .gemm_q = */ NULL,
    /* .qx_row_bytes_eq = */ NULL,
    /* .quantize_x_eq = */ NULL,
    /* .gemv_q_eq = */ NULL,
    /* .gemm_q_eq = */ NULL,
};

static const cpu_kernel_set *active;

// The set `name` stands for when this CPU supports it, else NULL.
static const cpu_kernel_set *named_set(const char *name) {
    return strcmp(name, "scalar") == 0 ? &scalar_set : cpu_kernels_x86_named(name);
}

// The best set the CPU supports, unless MLXCEL_CPU_KERNELS names another one it supports (for
// comparing sets on one machine). The backend's start refuses any other value
// (cpu_kernels_env_check); code that runs kernels without starting a backend gets the best set.
static const cpu_kernel_set *pick_default(void) {
    const char *want = getenv("MLXCEL_CPU_KERNELS");
    const cpu_kernel_set *k = want && *want ? named_set(want) : NULL;
    if (k) return k;
    const cpu_kernel_set *best = cpu_kernels_x86_best();
    return best ? best : &scalar_set;
}

int cpu_kernels_env_check(mx_error *err) {
    static const char *const sets[] = {"amx", "avx512vnni", "avx512", "avx2", "scalar"};
    const char *want = getenv("MLXCEL_CPU_KERNELS");
    if (!want || !*want || named_set(want)) return 0;
    char have[64] = "";
    bool known = false;
    for (size_t i = 0; i < sizeof sets / sizeof sets[0]; i++) {
        known |= strcmp(want, sets[i]) == 0;
        size_t n = strlen(have);
        if (named_set(sets[i])) snprintf(have + n, sizeof have - n, "%s%s", n ? ", " : "", sets[i]);
    }
    return mx_fail(err, "MLXCEL_CPU_KERNELS='%s': %s; this CPU supports %s (unset: the best of them)", want,
                   known ? "this CPU does not support that kernel set"
                         : "not a kernel set (amx, avx512vnni, avx512, avx2 or scalar)",
                   have);
}

static inline const cpu_kernel_set *kernels(void) {
    const cpu_kernel_set *k = __atomic_load_n(&active, __ATOMIC_ACQUIRE);
    if (!k) {
        k = pick_default();
        __atomic_store_n(&active, k, __ATOMIC_RELEASE);
    }
    return k;
}

void cpu_kernels_dequant_row(const mx_matrix *w, int64_t row, float *out) { kernels()->dequant_row(w, row, out); }

float cpu_kernels_dot(const float *a, const float *b, int64_t n) { return kernels()->dot(a, b, n); }

float cpu_kernels_row_dot(const mx_matrix *w, int64_t row, const float *x, float *scratch) {
    return kernels()->row_dot(w, row, x, scratch);
}

void cpu_kernels_gemv(const mx_matrix *w, int64_t r0, int64_t r1, const float *x, float *out, float *scratch) {
    const cpu_kernel_set *k = kernels();
    if (k->gemv) {
        k->gemv(w, r0, r1, x, out, scratch);
        return;
    }
    for (int64_t r = r0; r < r1; r++) out[r - r0] = k->row_dot(w, r, x, scratch);
}

void cpu_kernels_gemm(const mx_matrix *w, int64_t r0, int nr, const float *x, int n, float *out, int64_t ldo,
                      float *scratch) {
    const cpu_kernel_set *k = kernels();
    if (k->gemm) {
        k->gemm(w, r0, nr, x, n, out, ldo, scratch);
        return;
    }
    for (int i = 0; i < nr; i++) {
        k->dequant_row(w, r0 + i, scratch);
        for (int t = 0; t < n; t++) out[(int64_t)t * ldo + i] = k->dot(scratch, x + (int64_t)t * w->cols, w->cols);
    }
}

void cpu_kernels_attn_head(const float *q, const float *K, const float *V, int64_t stride, int first, int last, int hd,
                           float scale, float *out) {
    const cpu_kernel_set *k = kernels();
    if (!k->attn_rows || k == &scalar_set) {
        scalar_attn_head(q, K, V, stride, first, last, hd, scale, out);
        return;
    }
    float scratch[CPU_ATTN_BLOCK_SCRATCH(512)];  // F32 keys: float scores
    cpu_attn_args a = {.q = &q, .out = &out, .nq = 1, .first = &first, .last = &last,
                       .K = K, .V = V, .stride = stride, .kv_dtype = MX_DTYPE_F32, .hd = hd, .scale = scale};
    k->attn_rows(&a, scratch);
}

// MLXCEL_CPU_ATTN_I8 picks the I8 and I4 caches' attention where the set has integer modes: "int" the
// scores, "pv" the P.V, "int,pv" both, "float" neither. Unset (or empty), both where the set's
// batched product is the VNNI one, whose outputs for a row of x are bit-equal to the one-token
// product's (cpu_int8_activations.h): a preempted request's recomputed tokens are then those of its
// uninterrupted decode (server_engine_kv_i8), which the integer modes' rounding needs; the avx2
// set's scores on the 4-bit cache (its batch there is the bit-equal pair; it has no integer P.V);
// the amx set's tile product is not (yet) bit-equal to the gemv, so it keeps the float path unless asked.
// Read once; cpu_kernels_attn_i8_select sets it for tests.
#define I8_MODE_UNSET (-2)  // the set's default
static int i8_mode_parse(const char *spec) {
    if (!spec || !*spec) return I8_MODE_UNSET;
    int mode = 0;
    char buf[32];
    if (strlen(spec) >= sizeof buf) return -1;
    snprintf(buf, sizeof buf, "%s", spec);
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (strcmp(t, "int") == 0) mode |= CPU_ATTN_I8_SCORES;
        else if (strcmp(t, "pv") == 0) mode |= CPU_ATTN_I8_PV;
        else if (strcmp(t, "float") != 0) return -1;
    }
    return mode;
}

static int i8_mode = -1;  // -1: not read yet

int cpu_kernels_attn_i8_mode(void) {
    int v = __atomic_load_n(&i8_mode, __ATOMIC_RELAXED);
    if (v == -1) {
        v = i8_mode_parse(getenv("MLXCEL_CPU_ATTN_I8"));
        if (v == -1) {  // the backend refuses to start on such a value; a lone kernel call takes the default
            fprintf(stderr, "mlxcel: MLXCEL_CPU_ATTN_I8=%s not understood (int, pv, int,pv or float); ignored\n",
                    getenv("MLXCEL_CPU_ATTN_I8"));
            v = I8_MODE_UNSET;
        }
        __atomic_store_n(&i8_mode, v, __ATOMIC_RELAXED);
    }
    if (v == I8_MODE_UNSET) {
        if (kernels()->gemm_q_eq == cpu_vnni_gemm_q_eq) return CPU_ATTN_I8_SCORES | CPU_ATTN_I8_PV;
        return kernels()->attn_rows == cpu_avx2_attn_rows ? CPU_ATTN_I8_SCORES : 0;  // its batch is bit-equal too
    }
    return v;
}

bool cpu_kernels_attn_i8_valid(const char *spec) { return i8_mode_parse(spec) != -1; }

int cpu_kernels_attn_i8_select(const char *spec) {
    int v = i8_mode_parse(spec);
    if (v == -1) return -1;
    __atomic_store_n(&i8_mode, v, __ATOMIC_RELAXED);
    return 0;
}

int cpu_kernels_attn_int_scores(const cpu_attn_args *a) {
    const cpu_kernel_set *k = kernels();
    if (!(cpu_kernels_attn_i8_mode() & CPU_ATTN_I8_SCORES)) return 0;
    if (k->attn_rows == cpu_avx2_attn_rows) return cpu_avx2_attn_int_ok(a);
    return k->attn_rows == cpu_avx512vnni_attn_rows && cpu_attn_int_ok(a);
}

int cpu_kernels_attn_int_pv(const cpu_attn_args *a) {
    return kernels()->attn_rows == cpu_avx512vnni_attn_rows && (cpu_kernels_attn_i8_mode() & CPU_ATTN_I8_PV) &&
           cpu_attn_int_ok(a);
}

void cpu_kernels_attn_rows(const cpu_attn_args *a, float *scratch) {
    const cpu_kernel_set *k = kernels();
    if (k->attn_rows == cpu_avx512vnni_attn_rows && !cpu_kernels_attn_i8_mode()) {
        cpu_avx512_attn_rows(a, scratch);
        return;
    }
    (k->attn_rows ? k->attn_rows : scalar_attn_rows)(a, scratch);
}

void cpu_kernels_swiglu(float *out, const float *gate, const float *up, int64_t count) {
    const cpu_kernel_set *k = kernels();
    if (k->swiglu) {
        k->swiglu(out, gate, up, count);
        return;
    }
    for (int64_t i = 0; i < count; i++) {
        float g = gate[i];
        out[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

// The largest magnitude of one scale block's len values: the block's scale (the KV row references).
static float block_amax(const float *x, int len) {
    float amax = 0.0f;
    for (int i = 0; i < len; i++) amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax;
    return amax;
}

// One row to integer codes of `bits` (16: int16_t dst, |code| <= 32767; 8: int8_t dst, <= 127), per
// block of CPU_KV_SCALE_BLOCK values with the block's scale amax / qmax (the KV row references).
// Inlined into each caller with bits a constant, so the element type's branch folds away and the
// rounding loop vectorizes as in a copy written for one type.
static inline void scalar_kv_row(void *dst, float *scales, const float *src, int hd, int bits) {
    const float qmax = bits == 16 ? 32767.0f : 127.0f;
    for (int b0 = 0, b = 0; b0 < hd; b0 += CPU_KV_SCALE_BLOCK, b++) {
        const float *x = src + b0;
        int len = hd - b0 < CPU_KV_SCALE_BLOCK ? hd - b0 : CPU_KV_SCALE_BLOCK;
        float amax = block_amax(x, len);
        float inv = amax > 0.0f ? qmax / amax : 0.0f;
        // Round half to even (lrintf's rule in the default rounding mode) by adding and subtracting
        // 1.5 * 2^23: exact for |v| < 2^22 (here |v| <= 32767), and the loop vectorizes where a call
        // to lrintf per value did not (checked equal to lrintf for every float of magnitude <= 32768).
        // For 8 bits |x * inv| <= 127 up to one rounding of the product, which rounds to 127 at most.
        for (int i = 0; i < len; i++) {
            float code = (x[i] * inv + 12582912.0f) - 12582912.0f;
            if (bits == 16) ((int16_t *)dst)[b0 + i] = (int16_t)code;
            else ((int8_t *)dst)[b0 + i] = (int8_t)code;
        }
        scales[b] = amax / qmax;
    }
}

void cpu_kernels_kv_i16_row(int16_t *dst, float *scales, const float *src, int hd) {
    const cpu_kernel_set *k = kernels();
    if (k->kv_i16_row) k->kv_i16_row(dst, scales, src, hd);
    else scalar_kv_row(dst, scales, src, hd, 16);
}

void cpu_kernels_kv_i8_row(int8_t *dst, float *scales, const float *src, int hd) {
    const cpu_kernel_set *k = kernels();
    if (k->kv_i8_row) k->kv_i8_row(dst, scales, src, hd);
    else scalar_kv_row(dst, scales, src, hd, 8);
}

// The bit-equal pair where asked for and the set has it for w (formats with a batched product).
static bool use_eq(const cpu_kernel_set *k, const mx_matrix *w, bool eq) {
    return eq && k->qx_row_bytes_eq && k->qx_row_bytes_eq(w);
}

size_t cpu_kernels_qx_row_bytes(const mx_matrix *w, bool eq) {
    const cpu_kernel_set *k = kernels();
    if (use_eq(k, w, eq)) return k->qx_row_bytes_eq(w);
    return k->qx_row_bytes ? k->qx_row_bytes(w) : 0;
}

void cpu_kernels_quantize_x(const mx_matrix *w, const float *x, int n, void *qx, bool eq) {
    const cpu_kernel_set *k = kernels();
    (use_eq(k, w, eq) ? k->quantize_x_eq : k->quantize_x)(w, x, n, qx);
}

void cpu_kernels_gemv_q(const mx_matrix *w, int64_t r0, int64_t r1, const void *qx, float *out, bool eq) {
    const cpu_kernel_set *k = kernels();
    (use_eq(k, w, eq) ? k->gemv_q_eq : k->gemv_q)(w, r0, r1, qx, out);
}

bool cpu_kernels_has_bit_equal(void) { return kernels()->gemm_q_eq != NULL; }

// Whether the set has the batched integer product that eq asks for (the avx2 set has only the
// bit-equal one: its float product is faster for the others).
static bool has_gemm_q(const cpu_kernel_set *k, bool eq) {
    return k->qx_tiles_bytes && (eq && k->gemm_q_eq ? k->gemm_q_eq : k->gemm_q) != NULL;
}

size_t cpu_kernels_qx_tiles_bytes(const mx_matrix *w, int n, bool eq) {
    const cpu_kernel_set *k = kernels();
    return has_gemm_q(k, eq) ? k->qx_tiles_bytes(w, n) : 0;
}

void cpu_kernels_quantize_x_tiles(const mx_matrix *w, const float *x, int n, int tile, void *qx) {
    kernels()->quantize_x_tiles(w, x, n, tile, qx);
}

size_t cpu_kernels_gemm_q_scratch_bytes(const mx_matrix *w) {
    const cpu_kernel_set *k = kernels();
    return (has_gemm_q(k, false) || has_gemm_q(k, true)) && k->qx_tiles_bytes(w, 1) ? k->gemm_q_scratch_bytes(w) : 0;
}

void cpu_kernels_gemm_q(const mx_matrix *w, int64_t r0, int nr, const void *qx, int n, float *out, int64_t ldo,
                        void *scratch, bool eq) {
    const cpu_kernel_set *k = kernels();
    (eq && k->gemm_q_eq ? k->gemm_q_eq : k->gemm_q)(w, r0, nr, qx, n, out, ldo, scratch);
}

const char *cpu_kernels_name(void) { return kernels()->name; }

int cpu_kernels_select(const char *name) {
    const cpu_kernel_set *k = named_set(name);
    if (!k) return -1;
    __atomic_store_n(&active, k, __ATOMIC_RELEASE);
    return 0;
}
