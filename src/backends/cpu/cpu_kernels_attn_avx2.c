// SPDX-License-Identifier: MIT
// AVX2 attention for a few queries that share one KV head (cpu_kernels_attn_rows), for CPUs without
// AVX-512. Keys go 8 at a time, in blocks that start at multiples of 8 whatever the call's queries
// (so a query's output bits do not depend on which queries share its call): the block's K and V
// rows are converted once from the cache's element type into float32 scratch that stays in L1, then
// each query takes its 8 scores from 8 independent FMA chains and one transpose-and-add reduction,
// their exponentials from one vector exp (cpu_simd_exp.h), and adds the block's P.V to its output
// row a pass of up to 8 chunks at a time. Head sizes that are not a multiple of 8 take a masked last
// chunk (the keys' last chunk converted element by element, zero padded). On the 4-bit cache the
// scores come from the key codes with integer dot products instead (below, before attn_body).
#include "backends/cpu/cpu_kernels_table.h"

#if defined(__x86_64__)
#include <immintrin.h>
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "backends/cpu/cpu_simd_exp.h"
#include "backends/cpu/cpu_simd_reduce8.h"
#include "backends/cpu/cpu_simd_targets.h"

#define KEYS 8  // keys per block

// Chunk c (8 elements) of the key or value row at element `at` of src as float32, the row's I16, I8
// or I4 elements times their scale (sc[sat + element / mx_kv_scale_block]). Whole chunks only.
CPU_TARGET_AVX2_INLINE static __m256 load_chunk(mx_dtype dt, const void *src, const float *sc, int64_t at, int64_t sat,
                                                int c) {
    int64_t e = at + (int64_t)c * 8;
    if (dt == MX_DTYPE_I16)
        return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi16_epi32(_mm_loadu_si128((const __m128i *)((const int16_t *)src + e)))),
                             _mm256_set1_ps(sc[sat + c * 8 / CPU_KV_SCALE_BLOCK]));
    if (dt == MX_DTYPE_I8)
        return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)((const int8_t *)src + e)))),
                             _mm256_set1_ps(sc[sat + c * 8 / CPU_KV_SCALE_BLOCK]));
    if (dt == MX_DTYPE_I4) {  // 4 bytes, low nibble first: codes 0..15 stand for -8..7
        int32_t word;
        memcpy(&word, (const uint8_t *)src + e / 2, 4);
        __m128i b = _mm_cvtsi32_si128(word), nib = _mm_set1_epi8(15);
        __m128i u = _mm_unpacklo_epi8(_mm_and_si128(b, nib), _mm_and_si128(_mm_srli_epi16(b, 4), nib));
        __m256i codes = _mm256_sub_epi32(_mm256_cvtepu8_epi32(u), _mm256_set1_epi32(8));
        return _mm256_mul_ps(_mm256_cvtepi32_ps(codes), _mm256_set1_ps(sc[sat + c * 8 / MX_KV_I4_GROUP]));
    }
    if (dt == MX_DTYPE_F16) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)src + e)));
    if (dt == MX_DTYPE_BF16)
        return _mm256_castsi256_ps(
            _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)((const uint16_t *)src + e))), 16));
    return _mm256_loadu_ps((const float *)src + e);
}

// Keys p0 .. p0 + nb - 1 as float32 rows of `chunks` x 8 (zero padded past hd; rows past nb zero).
// p0 is a multiple of 8, so the block's rows are one cache block's, key p0 + i at at0 + i * stride.
CPU_TARGET_AVX2_INLINE static void load_block(float *dst, const cpu_attn_args *a, const void *src, const float *sc,
                                              int p0, int nb, int chunks) {
    mx_dtype dt = a->kv_dtype;
    int hd = a->hd, whole = hd / 8;
    bool scaled = mx_kv_scaled(dt);
    int64_t at0 = cpu_attn_key(a, p0), sat0 = scaled ? cpu_attn_scale(a, p0) : 0;
    for (int i = 0; i < KEYS; i++) {
        float *d = dst + i * chunks * 8;
        if (i >= nb) {
            for (int c = 0; c < chunks; c++) _mm256_store_ps(d + c * 8, _mm256_setzero_ps());
            continue;
        }
        int64_t at = at0 + i * a->stride, sat = sat0 + i * a->scale_stride;
        if (i + 1 < nb) {  // the next row into L1 while this one converts
            const char *next = (const char *)src + mx_kv_elem_bytes(dt, (size_t)(at + a->stride));
            for (size_t b = 0; b < mx_kv_elem_bytes(dt, (size_t)hd); b += 64) _mm_prefetch(next + b, _MM_HINT_T0);
        }
        for (int c = 0; c < whole; c++) _mm256_store_ps(d + c * 8, load_chunk(dt, src, sc, at, sat, c));
        if (whole < chunks) {  // a last partial chunk, element by element
            const void *row = (const uint8_t *)src + mx_kv_elem_bytes(dt, (size_t)at);
            for (int k = 0; k < 8; k++)
                d[whole * 8 + k] = whole * 8 + k < hd ? cpu_kv_value(row, scaled ? sc + sat : NULL, dt, whole * 8 + k) : 0.0f;
        }
    }
}

// Integer scores on the 4-bit cache (cpu_kernels_attn_int_scores: MLXCEL_CPU_ATTN_I8 int, the
// default on this set, cpu_avx2_attn_int_ok's head sizes). The query is rounded as an I8 cache row is
// (cpu_avx2_kv_i8_row: per 16 values s = max|q| / 127, codes round(q / s)) and laid out once per call
// per 64-value half of the row: the codes of its even values (32 bytes) and of its odd ones, the
// order of a key's low and high nibbles; 8 int32 lane biases, -8 x the sum of the codes of values
// 8n..8n+7 (a key code c stands for c - 8); 8 float lane scales, the query scale of value 8n's group.
// A block's keys are split into low and high nibbles and their two 32-value group scales spread to
// lanes once, for all the queries (96 bytes a half-row). Per query, key and half: two `vpmaddubsw`
// (unsigned codes times signed query codes, pairs into int16: at most 2 x 15 x 127 each, so the two
// add in int16), one `vpmaddwd` to the 8 lanes of 8 values, the bias, a conversion and the two scales:
// each lane's sum is exact, and the only new error against float scores is the query's rounding.
#define HALF CPU_AVX2_ATTN_INT_HALF  // 64 values
#define Q4_HALF_BYTES 128            // a prepared query's bytes per half
#define K4_HALF_BYTES 96             // a decoded key's bytes per half

CPU_TARGET_AVX2_INLINE static void prepare_q4(const float *q, int hd, uint8_t *dst) {
    int8_t codes[512];
    float qs[512 / CPU_KV_SCALE_BLOCK];
    cpu_avx2_kv_i8_row(codes, qs, q, hd);
    for (int h = 0; h < hd / HALF; h++) {
        const int8_t *c = codes + HALF * h;
        uint8_t *d = dst + h * Q4_HALF_BYTES;
        int32_t bias[8];
        float lanes[8];
        for (int i = 0; i < 32; i++) d[i] = (uint8_t)c[2 * i], d[32 + i] = (uint8_t)c[2 * i + 1];
        for (int n = 0; n < 8; n++) {
            int sum = 0;
            for (int e = 0; e < 8; e++) sum += c[8 * n + e];
            bias[n] = -8 * sum;
            lanes[n] = qs[(HALF * h + 8 * n) / CPU_KV_SCALE_BLOCK];
        }
        memcpy(d + 64, bias, sizeof bias);
        memcpy(d + 96, lanes, sizeof lanes);
    }
}

// Keys p0 .. p0 + nb - 1 of the 4-bit cache as nibbles and scale lanes (rows past nb zero).
CPU_TARGET_AVX2_INLINE static void load_block_q4(uint8_t *dst, const cpu_attn_args *a, int p0, int nb) {
    const int halves = a->hd / HALF;
    const __m256i m4 = _mm256_set1_epi8(15), spread = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1);
    int64_t at0 = cpu_attn_key(a, p0), sat0 = cpu_attn_scale(a, p0);
    for (int i = 0; i < KEYS; i++) {
        uint8_t *d = dst + (size_t)i * halves * K4_HALF_BYTES;
        if (i >= nb) {
            memset(d, 0, (size_t)halves * K4_HALF_BYTES);
            continue;
        }
        const int64_t at = at0 + i * a->stride;
        const uint8_t *row = (const uint8_t *)a->K + mx_kv_elem_bytes(MX_DTYPE_I4, (size_t)at);
        const float *sc = a->K_scale + sat0 + i * a->scale_stride;
        if (i + 1 < nb) _mm_prefetch((const char *)row + mx_kv_elem_bytes(MX_DTYPE_I4, (size_t)a->stride), _MM_HINT_T0);
        for (int h = 0; h < halves; h++) {
            __m256i v = _mm256_loadu_si256((const __m256i *)(row + 32 * h));
            uint8_t *dh = d + h * K4_HALF_BYTES;
            _mm256_store_si256((__m256i *)dh, _mm256_and_si256(v, m4));
            _mm256_store_si256((__m256i *)(dh + 32), _mm256_and_si256(_mm256_srli_epi16(v, 4), m4));
            __m128 two = _mm_castsi128_ps(_mm_loadl_epi64((const __m128i *)(sc + 2 * h)));
            _mm256_store_ps((float *)(dh + 64), _mm256_permutevar8x32_ps(_mm256_castps128_ps256(two), spread));
        }
    }
}

// The 8 lanes of each of v[0..7] summed: lane i of the result is the sum of v[i].
CPU_TARGET_AVX2_INLINE static __m256 reduce8(const __m256 v[8]) {
    __m256 t0 = _mm256_hadd_ps(v[0], v[1]), t1 = _mm256_hadd_ps(v[2], v[3]);
    __m256 t2 = _mm256_hadd_ps(v[4], v[5]), t3 = _mm256_hadd_ps(v[6], v[7]);
    __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);  // per 128-bit half: v0..v3, v4..v7
    return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

// The raw scores (before the softmax scale) of one prepared query against a decoded block.
CPU_TARGET_AVX2_INLINE static __m256 scores_q4(const uint8_t *kb, const uint8_t *qj, int halves) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 dots[KEYS];
    for (int i = 0; i < KEYS; i++) {
        const uint8_t *k = kb + (size_t)i * halves * K4_HALF_BYTES;
        __m256 acc = _mm256_setzero_ps();
        for (int h = 0; h < halves; h++) {
            const uint8_t *kh = k + h * K4_HALF_BYTES, *qh = qj + h * Q4_HALF_BYTES;
            __m256i lo = _mm256_maddubs_epi16(_mm256_load_si256((const __m256i *)kh), _mm256_load_si256((const __m256i *)qh));
            __m256i hi = _mm256_maddubs_epi16(_mm256_load_si256((const __m256i *)(kh + 32)),
                                              _mm256_load_si256((const __m256i *)(qh + 32)));
            __m256i sum = _mm256_add_epi32(_mm256_madd_epi16(_mm256_add_epi16(lo, hi), ones),
                                           _mm256_load_si256((const __m256i *)(qh + 64)));
            __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(sum), _mm256_load_ps((const float *)(qh + 96)));
            acc = _mm256_fmadd_ps(f, _mm256_load_ps((const float *)(kh + 64)), acc);
        }
        dots[i] = acc;
    }
    return reduce8(dots);
}

// Lanes below n set (n in 0..8): the mask of a row's last chunk.
CPU_TARGET_AVX2_INLINE static __m256i lanes_below(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// The body for `chunks` 8-float chunks a row; inlined with chunks a constant for the common head sizes.
CPU_TARGET_AVX2_INLINE static void attn_body(const cpu_attn_args *a, float *scratch, int chunks) {
    int hd = a->hd, nq = a->nq;
    const __m256i tail = lanes_below(hd - (chunks - 1) * 8);  // the last chunk's lanes
    float *Kb = (float *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63), *Vb = Kb + KEYS * chunks * 8;
    // Integer scores: the decoded keys in Kb's place, the prepared queries after Vb (qbytes each).
    const bool intq = cpu_kernels_attn_int_scores(a);
    const int halves = hd / HALF;
    const size_t qbytes = (size_t)halves * Q4_HALF_BYTES;
    uint8_t *qprep = (uint8_t *)(Vb + KEYS * chunks * 8);
    float m[CPU_ATTN_MAX_ROWS], l[CPU_ATTN_MAX_ROWS];
    int lo = a->first[0], hi = a->last[0];
    for (int j = 0; j < nq; j++) {
        m[j] = -INFINITY, l[j] = 0.0f;
        memset(a->out[j], 0, sizeof(float) * hd);
        lo = a->first[j] < lo ? a->first[j] : lo;
        hi = a->last[j] > hi ? a->last[j] : hi;
        if (intq) prepare_q4(a->q[j], hd, qprep + (size_t)j * qbytes);
    }
    for (int p0 = lo - lo % KEYS; p0 <= hi; p0 += KEYS) {
        int nb = hi - p0 + 1 < KEYS ? hi - p0 + 1 : KEYS;
        if (intq) load_block_q4((uint8_t *)Kb, a, p0, nb);
        else load_block(Kb, a, a->K, a->K_scale, p0, nb, chunks);
        load_block(Vb, a, a->V, a->V_scale, p0, nb, chunks);
        for (int j = 0; j < nq; j++) {
            int from = a->first[j] - p0, to = a->last[j] - p0;
            if (to < 0 || from >= KEYS) continue;  // the block is outside this query's keys
            from = from < 0 ? 0 : from;
            to = to >= KEYS ? KEYS - 1 : to;
            __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
            __m256 live = _mm256_castsi256_ps(_mm256_and_si256(_mm256_cmpgt_epi32(idx, _mm256_set1_epi32(from - 1)),
                                                               _mm256_cmpgt_epi32(_mm256_set1_epi32(to + 1), idx)));
            // Scores: 8 chains (one a key) over the chunks, then one reduction.
            __m256 raw;
            if (intq) {
                raw = scores_q4((const uint8_t *)Kb, qprep + (size_t)j * qbytes, halves);
            } else {
                const float *q = a->q[j];
                __m256 dots[KEYS];
                for (int i = 0; i < KEYS; i++) dots[i] = _mm256_setzero_ps();
                for (int c = 0; c < chunks; c++) {
                    __m256 qv = c == chunks - 1 ? _mm256_maskload_ps(q + c * 8, tail) : _mm256_loadu_ps(q + c * 8);
                    for (int i = 0; i < KEYS; i++)
                        dots[i] = _mm256_fmadd_ps(qv, _mm256_load_ps(Kb + (i * chunks + c) * 8), dots[i]);
                }
                raw = reduce8(dots);
            }
            __m256 s = _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), _mm256_mul_ps(raw, _mm256_set1_ps(a->scale)), live);
            // Online softmax: the block's max, the correction of what came before, the exponentials.
            float bm = cpu_hmax8(s), corr = 1.0f;
            if (bm > m[j]) {
                corr = m[j] == -INFINITY ? 0.0f : expf(m[j] - bm);
                m[j] = bm;
            }
            __m256 e = _mm256_and_ps(cpu_exp8(_mm256_sub_ps(s, _mm256_set1_ps(m[j]))), live);
            l[j] = l[j] * corr + cpu_hsum8(e);
            float p[KEYS] __attribute__((aligned(32)));
            _mm256_store_ps(p, e);
            // P.V: keys outer, chunks inner, in passes of 8 chunks (each chunk's sum its own chain).
            float *out = a->out[j];
            __m256 vc = _mm256_set1_ps(corr);
            for (int c0 = 0; c0 < chunks; c0 += 8) {
                int cn = chunks - c0 < 8 ? chunks - c0 : 8;
                __m256 acc[8];
                for (int c = 0; c < cn; c++) {
                    float *o = out + (c0 + c) * 8;
                    acc[c] = _mm256_mul_ps(c0 + c == chunks - 1 ? _mm256_maskload_ps(o, tail) : _mm256_loadu_ps(o), vc);
                }
                for (int i = 0; i < KEYS; i++) {
                    __m256 pi = _mm256_set1_ps(p[i]);
                    for (int c = 0; c < cn; c++)
                        acc[c] = _mm256_fmadd_ps(pi, _mm256_load_ps(Vb + (i * chunks + c0 + c) * 8), acc[c]);
                }
                for (int c = 0; c < cn; c++) {
                    float *o = out + (c0 + c) * 8;
                    if (c0 + c == chunks - 1) _mm256_maskstore_ps(o, tail, acc[c]);
                    else _mm256_storeu_ps(o, acc[c]);
                }
            }
        }
    }
    for (int j = 0; j < nq; j++) {
        float inv = cpu_attn_inv_denominator(m[j], l[j], a->sink ? a->sink[j] : -INFINITY), *out = a->out[j];
        for (int d = 0; d < hd; d++) out[d] *= inv;
    }
}

CPU_TARGET_AVX2 void cpu_avx2_attn_rows(const cpu_attn_args *a, float *scratch) {
    switch ((a->hd + 7) / 8) {
    case 8: attn_body(a, scratch, 8); break;    // head_dim 64
    case 16: attn_body(a, scratch, 16); break;  // head_dim 128
    case 32: attn_body(a, scratch, 32); break;  // head_dim 256
    default: attn_body(a, scratch, (a->hd + 7) / 8); break;
    }
}

#else

// Not x86-64: never called, but cpu_kernels.c tells the kernel sets apart by this address.
void cpu_avx2_attn_rows(const cpu_attn_args *a, float *scratch) {
    (void)a, (void)scratch;
}

#endif
