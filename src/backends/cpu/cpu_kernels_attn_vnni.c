// SPDX-License-Identifier: MIT
// Decode attention scores on the 8-bit and 4-bit KV caches with integer dot products (AVX-512 VNNI),
// for the attention kernel's integer-score mode (cpu_kernels_attn.c, cpu_avx512vnni_attn_rows). Each
// query is quantized once per call exactly as an I8 cache row is (cpu_avx512_kv_i8_row: per 16 values
// a scale s = max|q| / 127 and codes round(q / s), bit-identical to the scalar reference), so a score is
//   sum over the 16-value groups g of  kscale[g] * qscale[g] * (integer sum of 16 code products)
// (on the I4 cache kscale[g] is the scale of the 32-value group holding g). `vpdpbusd` multiplies
// unsigned by signed bytes, so the key's codes are the unsigned operand: an I8 key's made unsigned by
// flipping their top bit (k + 128), an I4 key's as the cache holds them (c + 8), and each int32 sum
// starts at -128 (-8) times the sum of the query codes it meets, so it ends holding the exact sum of
// the products k * q.
// I8 (scores_body): lanes = values. A block's keys are flipped and their scales spread to lanes once,
// into scratch, for all the queries; per query and 64 values of a key one vpdpbusd, one conversion,
// one multiply and one FMA; a key's lanes are summed by one FMA chain and the 16 keys of a block by
// one transpose-and-add (cpu_reduce16_ps).
// I4 (scores4_body): lanes = keys. A block's 16 packed rows are transposed once, 16 x 16 dwords per
// 128 values (cpu_transpose16x16), so vector t holds dword t (values 8t..8t+7, two a byte) of every
// key; its low nibbles (values 8t, 8t+2, 8t+4, 8t+6) and high nibbles (the odd ones) are two operands
// of four codes a lane. The query's codes are laid out in the same order once per call, so per query
// and 16 values of all 16 keys: four vpdpbusd with a broadcast dword of the query, one conversion
// and one FMA, and the 16 scores come out in lanes (no reduction): about a third of the I8 form's
// work per query, for a transpose per block shared by the queries.
// The only new error against float scores is the query's rounding to 8 bits per group (max|q| / 254
// per element, like the I8 cache's keys).
// Head sizes: those of cpu_attn_int_ok (cpu_kernels_attn_int_scores says which calls take it).
// A 64-value chunk past a head size that is not a multiple of 64 holds zero codes and scales.
#include "backends/cpu/cpu_kernels_table.h"

#if defined(__x86_64__)
#include <immintrin.h>
#include <string.h>

#include "backends/cpu/cpu_simd_targets.h"
#include "backends/cpu/cpu_simd_transpose.h"

// Group scales (floats at s, those of mask m) spread to the 16 int32 lanes of 64 products: lanes
// 4g..4g+3 get s[g] (0 past the mask).
CPU_TARGET_VNNI_INLINE static __m512 spread4(const float *s, __mmask8 m) {
    const __m512i idx = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    return _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(_mm_maskz_loadu_ps(m, s)));
}

// The masks of 64-value chunk c of c64 for head size hd (a multiple of 16): bytes, and groups of 16.
CPU_TARGET_VNNI_INLINE static __mmask64 chunk_bytes(int hd, int c, int c64) {
    return c < c64 - 1 || hd % 64 == 0 ? ~(__mmask64)0 : ((__mmask64)1 << (hd % 64)) - 1;
}
CPU_TARGET_VNNI_INLINE static __mmask8 chunk_groups(int hd, int c, int c64) {
    return c < c64 - 1 || hd % 64 == 0 ? 0xf : (__mmask8)((1u << (hd % 64 / 16)) - 1);
}

// The I4 form's query (scores4_body): int32 qd[hd / 4], qd[2t] the codes of values 8t, 8t + 2,
// 8t + 4, 8t + 6 (bytes of one dword) and qd[2t + 1] those of 8t + 1, 8t + 3, 8t + 5, 8t + 7 (the
// order of a transposed key dword's low and high nibbles); then int32 bias[hd / 16], -8 x the sum of
// group g's codes; then float qs[hd / 16], the groups' scales.
CPU_TARGET_VNNI_INLINE static void prepare4(const float *q, int hd, uint8_t *qj) {
    int8_t codes[512];
    float qs[CPU_KV_SCALES(512)];
    cpu_avx512_kv_i8_row(codes, qs, q, hd);
    int8_t *qd = (int8_t *)qj;
    int32_t *bias = (int32_t *)(qj + hd);
    float *scale = (float *)(qj + hd + hd / 4);
    for (int t = 0; t < hd / 8; t++)
        for (int e = 0; e < 4; e++) qd[8 * t + e] = codes[8 * t + 2 * e], qd[8 * t + 4 + e] = codes[8 * t + 2 * e + 1];
    for (int g = 0; g < hd / 16; g++) {
        int32_t sum = 0;
        for (int d = 16 * g; d < 16 * g + 16; d++) sum += codes[d];
        bias[g] = -8 * sum;
        scale[g] = qs[g];
    }
}

CPU_TARGET_VNNI void cpu_vnni_attn_int_prepare(const cpu_attn_args *a, uint8_t *qprep) {
    int hd = a->hd, c64 = (hd + 63) / 64;
    const __m512i u128 = _mm512_set1_epi8((char)0x80);
    for (int j = 0; j < a->nq; j++) {
        uint8_t *qj = qprep + (size_t)j * CPU_ATTN_INT_QBYTES(hd);
        if (a->kv_dtype == MX_DTYPE_I4) {
            prepare4(a->q[j], hd, qj);
            continue;
        }
        float qs[CPU_KV_SCALES(512)];
        memset(qj + hd, 0, (size_t)64 * c64 - hd);  // codes past hd: 0
        cpu_avx512_kv_i8_row((int8_t *)qj, qs, a->q[j], hd);
        __m512i *bias = (__m512i *)(qj + 64 * c64);
        __m512 *qsl = (__m512 *)(qj + 128 * c64);
        for (int c = 0; c < c64; c++) {
            __m512i sum128 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u128, _mm512_load_si512(qj + 64 * c));
            bias[c] = _mm512_sub_epi32(_mm512_setzero_si512(), sum128);
            qsl[c] = spread4(qs + 4 * c, chunk_groups(hd, c, c64));
        }
    }
}

// Where the next block's rows are, for the prefetches: its first pf_rows rows (positions up to
// pf_last), row i at element nat0 + i * stride, its scales at nsat0 + i * scale_stride. Per key, the
// table look-up and index arithmetic cost more than the row's loads (cpu_kernels_attn.c), so once
// per block.
typedef struct next_rows {
    int64_t nat0, nsat0;
    int pf_rows;
} next_rows;

CPU_TARGET_VNNI_INLINE static next_rows next_block(const cpu_attn_args *a, int p0, int pf_last) {
    next_rows n = {0, 0, pf_last - (p0 + 16) + 1};
    if (n.pf_rows > 0) n.nat0 = cpu_attn_key(a, p0 + 16), n.nsat0 = cpu_attn_scale(a, p0 + 16);
    return n;
}

// Prefetches row i of the next block (`lines` 64-byte lines of codes) and its scales into L2 where
// that row is wanted, as load_block does (cpu_kernels_attn.c). i4 and lines (constants where inlined):
// codes are half bytes, else bytes (I8). (With the element size from mx_kv_elem_bytes, then a call per
// row, and the line count from the head size, the I8 form ran 5-15% slower.)
CPU_TARGET_VNNI_INLINE static void prefetch_next(const cpu_attn_args *a, const next_rows *n, int i, bool i4,
                                                 int lines) {
    if (i >= n->pf_rows) return;
    int64_t at = n->nat0 + i * a->stride;
    const uint8_t *row = (const uint8_t *)a->K + (i4 ? at / 2 : at);
    for (int b = 0; b < lines; b++) _mm_prefetch((const char *)(row + 64 * b), _MM_HINT_T1);
    _mm_prefetch((const char *)(a->K_scale + n->nsat0 + i * a->scale_stride), _MM_HINT_T1);
}

// The I4 cache's scores for `slices` (a constant where inlined) 128-value slices per row, the last
// one partial where hd is not a multiple of 128 (32, 64 or 96 values: its missing dwords are not read).
// kbuf: the transposed codes kt[hd / 8][2] (low, high nibbles), then the key scales ks[hd / 32]
// (lanes = keys; 0 past nb, so a masked score stays finite).
CPU_TARGET_VNNI_INLINE static void scores4_body(const cpu_attn_args *a, const uint8_t *qprep, int p0, int nb,
                                                int pf_last, const uint16_t *live, float (*sp)[16], uint8_t *kbuf,
                                                int slices) {
    int hd = a->hd;
    __m512i *kt = (__m512i *)kbuf;
    __m512 *ks = (__m512 *)(kbuf + 16 * (size_t)hd);
    const uint8_t *K = a->K;
    const int64_t at0 = cpu_attn_key(a, p0), sat0 = cpu_attn_scale(a, p0);
    const next_rows next = next_block(a, p0, pf_last);
    const __m512i nib = _mm512_set1_epi8(15);
    const __mmask16 keys = (__mmask16)((1u << nb) - 1);
    const __m512i by_key = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                              _mm512_set1_epi32((int)a->scale_stride));
    for (int s = 0; s < slices; s++) {
        int nd = (hd - 128 * s) / 8 < 16 ? (hd - 128 * s) / 8 : 16;  // dwords of this slice
        __mmask64 bytes = nd == 16 ? ~(__mmask64)0 : ((__mmask64)1 << (4 * nd)) - 1;
        __m512i r[16];
        for (int i = 0; i < 16; i++) {
            if (s == 0) prefetch_next(a, &next, i, true, slices);
            r[i] = i < nb ? _mm512_maskz_loadu_epi8(bytes, K + (at0 + i * a->stride) / 2 + 64 * s) : _mm512_setzero_si512();
        }
        cpu_transpose16x16(r);
        for (int t = 0; t < nd; t++) {
            kt[2 * (16 * s + t)] = _mm512_and_si512(r[t], nib);
            kt[2 * (16 * s + t) + 1] = _mm512_and_si512(_mm512_srli_epi16(r[t], 4), nib);
        }
        for (int g = 4 * s; g < 4 * s + nd / 4; g++)
            ks[g] = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), keys, by_key, a->K_scale + sat0 + g, 4);
    }
    for (int j = 0; j < a->nq; j++) {
        if (!live[j]) continue;
        const uint8_t *qj = qprep + (size_t)j * CPU_ATTN_INT_QBYTES(hd);
        const int32_t *qd = (const int32_t *)qj, *bias = (const int32_t *)(qj + hd);
        const float *qs = (const float *)(qj + hd + hd / 4);
        __m512 acc = _mm512_setzero_ps();
        for (int g = 0; g < hd / 16; g++) {  // 16 values: dwords 2g and 2g + 1, low and high nibbles
            __m512i d = _mm512_set1_epi32(bias[g]);
            d = _mm512_dpbusd_epi32(d, kt[4 * g], _mm512_set1_epi32(qd[4 * g]));
            d = _mm512_dpbusd_epi32(d, kt[4 * g + 1], _mm512_set1_epi32(qd[4 * g + 1]));
            d = _mm512_dpbusd_epi32(d, kt[4 * g + 2], _mm512_set1_epi32(qd[4 * g + 2]));
            d = _mm512_dpbusd_epi32(d, kt[4 * g + 3], _mm512_set1_epi32(qd[4 * g + 3]));
            acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), _mm512_mul_ps(ks[g / 2], _mm512_set1_ps(qs[g])), acc);
        }
        _mm512_store_ps(sp[j], acc);
    }
}

// The I8 cache's scores for c64 (a constant where inlined) 64-value chunks per row, the last one
// partial where hd is not a multiple of 64 (its missing codes and scales are zero in kbuf and qprep).
CPU_TARGET_VNNI_INLINE static void scores_body(const cpu_attn_args *a, const uint8_t *qprep, int p0, int nb,
                                               int pf_last, const uint16_t *live, float (*sp)[16], uint8_t *kbuf,
                                               int c64) {
    int hd = a->hd, hdp = 64 * c64;
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    __m512 *ksl = (__m512 *)(kbuf + 16 * hdp);  // [16 keys][c64] scale lanes
    const int8_t *K = a->K;
    // p0 is a multiple of 16, so the block's keys are one cache block's rows: key p0 + i at
    // at0 + i * stride, its scales at sat0 + i * scale_stride.
    int64_t at0 = cpu_attn_key(a, p0), sat0 = cpu_attn_scale(a, p0);
    const next_rows next = next_block(a, p0, pf_last);
    for (int i = 0; i < 16; i++) {
        if (i >= nb) {  // past the range: zero codes and scales, so the (masked) scores stay finite
            for (int c = 0; c < c64; c++) {
                _mm512_store_si512(kbuf + i * hdp + 64 * c, _mm512_setzero_si512());
                ksl[i * c64 + c] = _mm512_setzero_ps();
            }
            continue;
        }
        int64_t at = at0 + i * a->stride, sat = sat0 + i * a->scale_stride;
        prefetch_next(a, &next, i, false, c64);
        for (int c = 0; c < c64; c++) {
            __m512i k = _mm512_maskz_loadu_epi8(chunk_bytes(hd, c, c64), K + at + 64 * c);
            _mm512_store_si512(kbuf + i * hdp + 64 * c, _mm512_xor_si512(k, flip));
            ksl[i * c64 + c] = spread4(a->K_scale + sat + 4 * c, chunk_groups(hd, c, c64));
        }
    }
    for (int j = 0; j < a->nq; j++) {
        if (!live[j]) continue;
        const uint8_t *qj = qprep + (size_t)j * CPU_ATTN_INT_QBYTES(hd);
        const __m512i *bias = (const __m512i *)(qj + hdp);
        const __m512 *qsl = (const __m512 *)(qj + 2 * hdp);
        __m512 dots[16];
        for (int i = 0; i < 16; i++) {
            __m512 acc = _mm512_setzero_ps();
            for (int c = 0; c < c64; c++) {
                __m512i d = _mm512_dpbusd_epi32(bias[c], _mm512_load_si512(kbuf + i * hdp + 64 * c),
                                                _mm512_load_si512(qj + 64 * c));
                acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), _mm512_mul_ps(ksl[i * c64 + c], qsl[c]), acc);
            }
            dots[i] = acc;
        }
        _mm512_store_ps(sp[j], cpu_reduce16_ps(dots));
    }
}

CPU_TARGET_VNNI void cpu_vnni_attn_int_scores(const cpu_attn_args *a, const uint8_t *qprep, int p0, int nb,
                                              int pf_last, const uint16_t *live, float (*sp)[16], uint8_t *kbuf) {
    int c64 = (a->hd + 63) / 64;
    if (a->kv_dtype == MX_DTYPE_I4) {
        switch (a->hd) {
        case 64: scores4_body(a, qprep, p0, nb, pf_last, live, sp, kbuf, 1); break;
        case 128: scores4_body(a, qprep, p0, nb, pf_last, live, sp, kbuf, 1); break;
        case 256: scores4_body(a, qprep, p0, nb, pf_last, live, sp, kbuf, 2); break;
        default: scores4_body(a, qprep, p0, nb, pf_last, live, sp, kbuf, (a->hd + 127) / 128); break;
        }
        return;
    }
    switch (c64) {
    case 1: scores_body(a, qprep, p0, nb, pf_last, live, sp, kbuf, 1); break;  // head_dim 64
    case 2: scores_body(a, qprep, p0, nb, pf_last, live, sp, kbuf, 2); break;  // head_dim 128
    case 4: scores_body(a, qprep, p0, nb, pf_last, live, sp, kbuf, 4); break;  // head_dim 256
    default: scores_body(a, qprep, p0, nb, pf_last, live, sp, kbuf, c64); break;
    }
}

#endif
