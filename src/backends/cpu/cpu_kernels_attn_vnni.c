// SPDX-License-Identifier: MIT
// Decode attention scores on the 8-bit and 4-bit KV caches with integer dot products (AVX-512 VNNI),
// for the attention kernel's integer-score mode (cpu_kernels_attn.c, cpu_avx512vnni_attn_rows). Each
// query is quantized once per call exactly as an I8 cache row is (cpu_avx512_kv_i8_row: per 16 values
// a scale s = max|q| / 127 and codes round(q / s), bit-identical to the scalar reference), so a score is
//   sum over the 16-value groups g of  kscale[g] * qscale[g] * (integer sum of 16 code products).
// `vpdpbusd` multiplies unsigned by signed bytes, so the key's codes are the unsigned operand: an I8
// key's codes made unsigned by flipping their top bit (k + 128), an I4 key's as the cache holds them
// (c + 8, cpu_kv_i4_unpack.h), and the accumulator of each int32 lane starts at -128 (-8) times the
// sum of its four query codes, so a lane ends holding the exact sum of its four products k * q
// (|sum| <= 4 * 128 * 127). On the I4 cache kscale[g] is the scale of the 32-value group holding
// group g. The four lanes of a group are converted to float and multiplied by the group's kscale *
// qscale; a key's lanes are summed by one FMA chain and the 16 keys of a block by one
// transpose-and-add (cpu_reduce16_ps). A block's keys are made unsigned and their scales spread to
// lanes once, into scratch, for all the queries. Per query and 64 values of a key: one vpdpbusd, one
// conversion, one multiply and one FMA, against four FMAs on float keys that each block first
// converts (load, convert, scale, store per 16 values). The only new error against float scores is
// the query's rounding to 8 bits per group (max|q| / 254 per element, like the I8 cache's keys).
// Head sizes: those of cpu_attn_int_ok (cpu_kernels_attn_int_scores says which calls take it).
// A 64-value chunk past a head size that is not a multiple of 64 holds zero codes and scales.
#include "backends/cpu/cpu_kernels_table.h"

#if defined(__x86_64__)
#include <immintrin.h>
#include <string.h>

#include "backends/cpu/cpu_kv_i4_unpack.h"
#include "backends/cpu/cpu_simd_targets.h"
#include "backends/cpu/cpu_simd_transpose.h"

// Group scales (floats at s, those of mask m) spread to the 16 int32 lanes of 64 products: lanes
// 4g..4g+3 get s[g] (0 past the mask).
CPU_TARGET_VNNI_INLINE static __m512 spread4(const float *s, __mmask8 m) {
    const __m512i idx = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    return _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(_mm_maskz_loadu_ps(m, s)));
}

// The same for the I4 cache's 32-value groups: lanes 0..7 get s[0], lanes 8..15 s[1] (0 past the mask).
CPU_TARGET_VNNI_INLINE static __m512 spread8(const float *s, __mmask8 m) {
    const __m512i idx = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    return _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(_mm_maskz_loadu_ps(m, s)));
}

// The masks of 64-value chunk c of c64 for head size hd (a multiple of 16): bytes, and groups of 16.
CPU_TARGET_VNNI_INLINE static __mmask64 chunk_bytes(int hd, int c, int c64) {
    return c < c64 - 1 || hd % 64 == 0 ? ~(__mmask64)0 : ((__mmask64)1 << (hd % 64)) - 1;
}
CPU_TARGET_VNNI_INLINE static __mmask8 chunk_groups(int hd, int c, int c64) {
    return c < c64 - 1 || hd % 64 == 0 ? 0xf : (__mmask8)((1u << (hd % 64 / 16)) - 1);
}

CPU_TARGET_VNNI void cpu_vnni_attn_int_prepare(const cpu_attn_args *a, uint8_t *qprep) {
    int hd = a->hd, c64 = (hd + 63) / 64;
    // The offset of the keys' unsigned codes: 128 (I8, top bit flipped) or 8 (I4).
    const __m512i offset = _mm512_set1_epi8((char)(a->kv_dtype == MX_DTYPE_I4 ? 8 : 0x80));
    for (int j = 0; j < a->nq; j++) {
        uint8_t *qj = qprep + (size_t)j * CPU_ATTN_INT_QBYTES(hd);
        float qs[CPU_KV_SCALES(512)];
        memset(qj + hd, 0, (size_t)64 * c64 - hd);  // codes past hd: 0
        cpu_avx512_kv_i8_row((int8_t *)qj, qs, a->q[j], hd);
        __m512i *bias = (__m512i *)(qj + 64 * c64);
        __m512 *qsl = (__m512 *)(qj + 128 * c64);
        for (int c = 0; c < c64; c++) {
            __m512i sum = _mm512_dpbusd_epi32(_mm512_setzero_si512(), offset, _mm512_load_si512(qj + 64 * c));
            bias[c] = _mm512_sub_epi32(_mm512_setzero_si512(), sum);
            qsl[c] = spread4(qs + 4 * c, chunk_groups(hd, c, c64));
        }
    }
}

// The scores for c64 (a constant where inlined) 64-value chunks per row, the last one partial where
// hd is not a multiple of 64 (its missing codes and scales are zero in kbuf and qprep); i4 (a
// constant): the I4 cache, else I8.
CPU_TARGET_VNNI_INLINE static void scores_body(const cpu_attn_args *a, const uint8_t *qprep, int p0, int nb,
                                               int pf_last, const uint16_t *live, float (*sp)[16], uint8_t *kbuf,
                                               int c64, bool i4) {
    int hd = a->hd, hdp = 64 * c64;
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    __m512 *ksl = (__m512 *)(kbuf + 16 * hdp);  // [16 keys][c64] scale lanes
    const uint8_t *K = a->K;
    const int64_t row_bytes = (int64_t)mx_kv_elem_bytes(a->kv_dtype, (size_t)hd);
    // p0 is a multiple of 16, so the block's keys are one cache block's rows: key p0 + i at
    // at0 + i * stride, its scales at sat0 + i * scale_stride (the next block's likewise).
    int64_t at0 = cpu_attn_key(a, p0), sat0 = cpu_attn_scale(a, p0);
    int pf_rows = pf_last - (p0 + 16) + 1;  // rows of the next block to prefetch
    int64_t nat0 = pf_rows > 0 ? cpu_attn_key(a, p0 + 16) : 0, nsat0 = pf_rows > 0 ? cpu_attn_scale(a, p0 + 16) : 0;
    for (int i = 0; i < 16; i++) {
        if (i >= nb) {  // past the range: zero codes and scales, so the (masked) scores stay finite
            for (int c = 0; c < c64; c++) {
                _mm512_store_si512(kbuf + i * hdp + 64 * c, _mm512_setzero_si512());
                ksl[i * c64 + c] = _mm512_setzero_ps();
            }
            continue;
        }
        int64_t at = at0 + i * a->stride, sat = sat0 + i * a->scale_stride;
        if (i < pf_rows) {  // the same row of the next block into L2, as load_block does
            const uint8_t *next = K + mx_kv_elem_bytes(a->kv_dtype, (size_t)(nat0 + i * a->stride));
            for (int64_t b = 0; b < row_bytes; b += 64) _mm_prefetch((const char *)(next + b), _MM_HINT_T1);
            _mm_prefetch((const char *)(a->K_scale + nsat0 + i * a->scale_stride), _MM_HINT_T1);
        }
        for (int c = 0; c < c64; c++) {
            if (i4) {  // 32 bytes of codes a chunk (16 in a last chunk of 32 values), one scale per 32 values
                int n = hd - 64 * c >= 64 ? 64 : hd - 64 * c;
                _mm512_store_si512(kbuf + i * hdp + 64 * c, cpu_i4_unpack64(K + (at + 64 * c) / 2, n));
                ksl[i * c64 + c] = spread8(a->K_scale + sat + 2 * c, (__mmask8)(n == 64 ? 3 : 1));
                continue;
            }
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
        switch (c64) {
        case 1: scores_body(a, qprep, p0, nb, pf_last, live, sp, kbuf, 1, true); break;  // head_dim 64
        case 2: scores_body(a, qprep, p0, nb, pf_last, live, sp, kbuf, 2, true); break;  // head_dim 128
        case 4: scores_body(a, qprep, p0, nb, pf_last, live, sp, kbuf, 4, true); break;  // head_dim 256
        default: scores_body(a, qprep, p0, nb, pf_last, live, sp, kbuf, c64, true); break;
        }
        return;
    }
    switch (c64) {
    case 1: scores_body(a, qprep, p0, nb, pf_last, live, sp, kbuf, 1, false); break;  // head_dim 64
    case 2: scores_body(a, qprep, p0, nb, pf_last, live, sp, kbuf, 2, false); break;  // head_dim 128
    case 4: scores_body(a, qprep, p0, nb, pf_last, live, sp, kbuf, 4, false); break;  // head_dim 256
    default: scores_body(a, qprep, p0, nb, pf_last, live, sp, kbuf, c64, false); break;
    }
}

#endif
