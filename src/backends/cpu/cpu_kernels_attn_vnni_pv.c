// SPDX-License-Identifier: MIT
// Decode attention's value side (P.V) on the 8-bit and 4-bit KV caches with integer dot products
// (AVX-512 VNNI), for the attention kernel's integer-P.V mode (cpu_kernels_attn.c;
// MLXCEL_CPU_ATTN_I8=pv). The 8-bit cache first, then what differs on the 4-bit one.
// A value row's codes carry one scale per 16 values and key, which does not factor out of a sum
// over keys; so it goes into the weight: for a block of 16 keys i and a 16-value group g the weight
// w[i][g] = p[i] * vscale[i][g] is rounded to 16 bits on a step of
//   s[g] = max_i p[i] * max_i vscale[i][g] / 65280     (one step per query, block and group),
// both maxima over the keys i of the block that the query sees (not the call's: a query's bits must
// not depend on the queries beside it, group_steps),
// and out[d] += s[g] * (exact integer sum over the 16 keys of code(w[i][g]) * vcode[i][d]), the
// code's two bytes summed apart (`vpdpbusd` multiplies unsigned bytes by signed ones) and combined
// as 256 * high + low (|sum| < 2^27). `vpdpbusd` sums four byte products into an int32 lane, so the
// block's value codes are laid out once per block, for all the queries, with lanes = values and the
// four bytes of a lane = four consecutive keys (byte unpacks of four rows: a 64-value chunk's 16
// lanes per 128-bit lane L hold values 16L + 4m + e of sub-vector m, i.e. each 128-bit lane is one
// scale group), and the scales transposed to lanes = keys and multiplied by 65280 / their group's
// largest. A query then needs per 64 values: 4 multiplies, 4 conversions and 8 packs or masks for
// its weight bytes, 8 `vpermd` to put the four keys of a quad and group in every lane of that group,
// 32 `vpdpbusd` (16 keys x 64 values x 2 bytes), and per 16 values a combine, one conversion and one
// FMA into the output, against the float path's conversion of every value (load, convert, scale,
// store per 16 values and key) and 64 FMAs. 8-bit weights (one byte, half the `vpdpbusd`) were as
// fast in the lab but moved a fixture past the 8e-2 bound (bench/RESULTS.md).
// Outputs are kept in that permuted order (value 16L + 4m + e of a chunk of G groups at 4Gm + 4L + e;
// G = 4 but in a last chunk of a head size that is not a multiple of 64) for the whole call and put
// back in order at its end (cpu_vnni_attn_i8_pv_order).
// Error: a weight moves by at most s[g] / 2 (plus float roundings of its multipliers), so an output,
// as |v| <= 127 vscale, by at most
//   sum over blocks (live keys x max p x max|v| of the block's keys) / (130560 x sum p)
// plus ~2^-20 of sum |p v| (test_cpu_kernels checks it).
// Head sizes: multiples of 16 from 32 to 512 (cpu_attn_int_ok); a last chunk's missing groups
// have zero codes and scales.
// The I4 cache (cpu_kv_i4.c) has tiles of the same form of its unsigned codes u = c + 8 (0..15,
// `vpdpbusd`'s unsigned operand as they are; tiles4 builds them from the packed bytes, in another
// order of values), and its scales, one per 32 values and key, signed (m / -8), go into the
// weights the same way, but rounded to signed bytes: w[i][h] = p[i] * vscale[i][h] on a step of
//   s[h] = max_i p[i] * max_i |vscale[i][h]| / 127     (one step per query, block and 32-value group),
// one `vpdpbusd` per four keys and 64 values (the values unsigned, the weights signed) instead of
// two, and out[d] += s[h] * (sum_i code(w[i][h]) * u[i][d] - 8 * sum_i code(w[i][h])), the second
// sum (the codes' offset) from four more `vpdpbusd` of the weight bytes with 8s. An output moves by
// at most, summed over the blocks, (live keys) x (max p) x (max |v| of the block's keys) / (254 x
// sum p) (|c| <= 8, so max |v| = 8 max |vscale|): half a step of 1/127 of the largest weight per
// key, against the cache's own 1/16 of a group's largest value per element.
#include "backends/cpu/cpu_kernels_table.h"

// The first packed byte of lane group L of the I4 cache's tiles 2z and 2z + 1 (tiles4).
#define I4_BYTE(z, L) (((L) & 1) * 4 + ((L) >> 1) * 16 + (z) * 8)

#if defined(__x86_64__)
#include <immintrin.h>

#include "backends/cpu/cpu_simd_targets.h"

// The block scratch (vbuf) per 64-value chunk c: 16 tiles of value codes [quad k][sub-vector m],
// then 4 vectors of weight multipliers [group g] (lane i: vscale[i][4c + g] * 65280 / the group's
// largest), then the steps' vector (lane 4L + e: group L's largest / 65280). 21 vectors, 1344 bytes.
// On the I4 cache 2 vectors of weight multipliers (the chunk's two 32-value groups), then the steps'.
#define PV_CHUNK_VECS 21

// Scale steps of the 16 keys in `keys` (bit i: key p0 + i; sat: their scale offsets, the others
// taken as zero) for scale groups first .. first + n - 1 (n <= 4) of their rows: wmul[g] lane i =
// vscale[i][first + g] * code_max / (the group's largest |vscale|), 0 for an all-zero group and for
// g >= n (all four are written); returns
// those largest ([g0 g1 g2 g3] in every 128-bit lane). A query's steps must not depend on which other
// queries share its call (a decode step's query and the same query in a recomputed prompt must give
// the same bits; bench/RESULTS.md), so they come from the keys the query sees: the block's keys for
// a query that sees all of them, else the query's own (pv_body).
CPU_TARGET_VNNI_INLINE static __m512 scale_steps(const cpu_attn_args *a, const int64_t *sat, unsigned keys, int first,
                                                 int n, float code_max, __m512 *wmul) {
    __mmask8 groups = (__mmask8)((1u << n) - 1);
    // The 16 keys' scales of the n groups: s[m] lanes 4q + g = key 4m + q, group g.
    const float *vs = a->V_scale + first;
    __m512 s[4];
    for (int m = 0; m < 4; m++) {
        __m512 x = _mm512_castps128_ps512(_mm_maskz_loadu_ps(keys >> (4 * m) & 1 ? groups : 0, vs + sat[4 * m]));
        x = _mm512_insertf32x4(x, _mm_maskz_loadu_ps(keys >> (4 * m + 1) & 1 ? groups : 0, vs + sat[4 * m + 1]), 1);
        x = _mm512_insertf32x4(x, _mm_maskz_loadu_ps(keys >> (4 * m + 2) & 1 ? groups : 0, vs + sat[4 * m + 2]), 2);
        s[m] = _mm512_insertf32x4(x, _mm_maskz_loadu_ps(keys >> (4 * m + 3) & 1 ? groups : 0, vs + sat[4 * m + 3]), 3);
    }
    // The largest |scale| of each group in every 128-bit lane, and code_max / it (0 for an all-zero
    // group). (The I8 cache's scales are positive: the absolute value leaves their bits.)
    __m512 mx = _mm512_max_ps(_mm512_max_ps(_mm512_abs_ps(s[0]), _mm512_abs_ps(s[1])),
                              _mm512_max_ps(_mm512_abs_ps(s[2]), _mm512_abs_ps(s[3])));
    mx = _mm512_max_ps(mx, _mm512_shuffle_f32x4(mx, mx, 0xb1));
    mx = _mm512_max_ps(mx, _mm512_shuffle_f32x4(mx, mx, 0x4e));
    __m512 inv = _mm512_maskz_div_ps(_mm512_cmp_ps_mask(mx, _mm512_setzero_ps(), _CMP_GT_OQ),
                                     _mm512_set1_ps(code_max), mx);
    // Transposed to lanes = keys: group g's 16 scales times code_max / the group's largest.
    const __m512i lo8 = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28);
    for (int g = 0; g < 4; g++) {  // all four (those past n come out 0), so the loop unrolls
        __m512i idx = _mm512_add_epi32(lo8, _mm512_set1_epi32(g));
        __m512 x = _mm512_permutex2var_ps(s[0], idx, s[1]), y = _mm512_permutex2var_ps(s[2], idx, s[3]);
        wmul[g] = _mm512_mul_ps(_mm512_shuffle_f32x4(x, y, 0x44), _mm512_permutexvar_ps(_mm512_set1_epi32(g), inv));
    }
    return mx;
}

// The weight multipliers wmul[4] and the steps' vector *dq of chunk c (see PV_CHUNK_VECS) on the I8
// cache: groups 4c.. of 16 values, dq lane 4L + e = group L's largest / 65280.
CPU_TARGET_VNNI_INLINE static void group_steps(const cpu_attn_args *a, const int64_t *sat, unsigned keys, int c,
                                               __m512 *wmul, __m512 *dq) {
    int hd = a->hd, G = hd - 64 * c >= 64 ? 4 : (hd - 64 * c) / 16;  // groups in this chunk
    const __m512i grp4 = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    __m512 mx = scale_steps(a, sat, keys, 4 * c, G, 65280.0f, wmul);
    *dq = _mm512_div_ps(_mm512_permutexvar_ps(grp4, mx), _mm512_set1_ps(65280.0f));  // lane 4L + e: group L's
}

// The I4 cache's steps of chunks c and c + 1 (c even; the 32-value groups 2c .. 2c + 3, fewer at the
// row's end): wmul[h] lane i = vscale[i][2c + h] * 127 / the group's largest |vscale|, dq[0] (dq[1])
// lane 4L + e = the largest of the group holding chunk c's (c + 1's) 16-value group L, / 127.
CPU_TARGET_VNNI_INLINE static void group_steps4(const cpu_attn_args *a, const int64_t *sat, unsigned keys, int c,
                                                __m512 *wmul, __m512 *dq) {
    int n = (a->hd - 64 * c) / 32;
    n = n < 4 ? n : 4;
    __m512 mx = _mm512_div_ps(scale_steps(a, sat, keys, 2 * c, n, 127.0f, wmul), _mm512_set1_ps(127.0f));
    dq[0] = _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1), mx);
    dq[1] = _mm512_permutexvar_ps(_mm512_setr_epi32(2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3), mx);
}

// The output update of chunk c from its integer sums (sums[m] lane 4L + e: the chunk's output at
// 4Gm + 4L + e, the kernel's order): out = out * vc + sum * scale (scale lane 4L + e: group L's step
// times the query's largest weight).
CPU_TARGET_VNNI_INLINE static void update_chunk(float *out, int hd, int c, const __m512i *sums, __m512 scale, __m512 vc) {
    int G = hd - 64 * c >= 64 ? 4 : (hd - 64 * c) / 16;
    __mmask16 lanes = (__mmask16)((1u << (4 * G)) - 1);
#pragma GCC unroll 4
    for (int m = 0; m < 4; m++) {
        float *o = out + 64 * c + 4 * G * m;
        _mm512_mask_storeu_ps(o, lanes, _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums[m]), scale,
                                                       _mm512_mul_ps(_mm512_maskz_loadu_ps(lanes, o), vc)));
    }
}

// The I4 cache's tiles of one quad of keys (rows[q]: key q's 32 bytes of codes of the chunk, NULL
// past the block's keys; n: 64 values, or 32 in a last chunk): the rows' bytes interleaved four keys
// a dword by byte and word unpacks, the 128-bit lanes put in order of values, then each dword's low
// nibbles (the even values) and high nibbles (the odd ones) as tiles. Tile 2z + h, lane 4L + e holds
// value 2 (I4_BYTE(z, L) + e) + h, in the 32-value group L / 2 as the weights' lanes want it (the
// outputs keep this order until cpu_vnni_attn_int_pv_order). Half the instructions of unpacking each
// row to bytes and interleaving those.
CPU_TARGET_VNNI_INLINE static void tiles4(const uint8_t *const rows[4], int n, __m512i *tiles) {
    __mmask32 m = n >= 64 ? 0xffffffffu : 0xffffu;
    __m256i r[4];
    for (int q = 0; q < 4; q++) r[q] = rows[q] ? _mm256_maskz_loadu_epi8(m, rows[q]) : _mm256_setzero_si256();
    __m256i lo01 = _mm256_unpacklo_epi8(r[0], r[1]), hi01 = _mm256_unpackhi_epi8(r[0], r[1]);
    __m256i lo23 = _mm256_unpacklo_epi8(r[2], r[3]), hi23 = _mm256_unpackhi_epi8(r[2], r[3]);
    // Dword b of every key: bytes 0..3 | 16..19, 4..7 | 20..23, 8..11 | 24..27, 12..15 | 28..31.
    __m256i d0 = _mm256_unpacklo_epi16(lo01, lo23), d1 = _mm256_unpackhi_epi16(lo01, lo23);
    __m256i d2 = _mm256_unpacklo_epi16(hi01, hi23), d3 = _mm256_unpackhi_epi16(hi01, hi23);
    __m512i z0 = _mm512_inserti64x4(_mm512_castsi256_si512(d0), d1, 1);
    __m512i z1 = _mm512_inserti64x4(_mm512_castsi256_si512(d2), d3, 1);
    z0 = _mm512_shuffle_i64x2(z0, z0, _MM_SHUFFLE(3, 1, 2, 0));  // bytes 0..3, 4..7, 16..19, 20..23
    z1 = _mm512_shuffle_i64x2(z1, z1, _MM_SHUFFLE(3, 1, 2, 0));  // bytes 8..11, 12..15, 24..27, 28..31
    const __m512i nib = _mm512_set1_epi8(15);
    _mm512_store_si512(tiles + 0, _mm512_and_si512(z0, nib));
    _mm512_store_si512(tiles + 1, _mm512_and_si512(_mm512_srli_epi16(z0, 4), nib));
    _mm512_store_si512(tiles + 2, _mm512_and_si512(z1, nib));
    _mm512_store_si512(tiles + 3, _mm512_and_si512(_mm512_srli_epi16(z1, 4), nib));
}

// One query's P.V update on the I4 cache's tiles (pv_body): e its weights p / pmax, vp = pmax, vc its
// softmax correction; steps from the block's keys (wmul, dq in vbuf) or, for a query that does not
// see all of them, from its own (`keys`).
CPU_TARGET_VNNI_INLINE static void pv4_query(const cpu_attn_args *a, const int64_t *sat, unsigned keys, bool own,
                                             __m512 e, __m512 vp, __m512 vc, float *out, const uint8_t *vbuf, int c64) {
    const __m512i grp4 = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    const __m512i eight = _mm512_set1_epi8(8);
    int hd = a->hd;
    __m512 mine[6];  // own steps of two chunks: wmul[4], dq[2]
    for (int c = 0; c < c64; c++) {
        const __m512i *tiles = (const __m512i *)vbuf + PV_CHUNK_VECS * c;
        if (own && c % 2 == 0) group_steps4(a, sat, keys, c, mine, mine + 4);
        const __m512 *wmul = own ? mine + 2 * (c % 2) : (const __m512 *)(tiles + 16);
        const __m512 *dq = own ? mine + 4 + c % 2 : wmul + 2;
        // Signed byte weight codes: dword 4L + g of w = group g's codes of keys 4L..4L+3 (groups 0
        // and 1 from the first 32-value group, 2 and 3 from the second).
        __m512i c0 = _mm512_cvtps_epi32(_mm512_mul_ps(wmul[0], e));
        __m512i c1 = _mm512_cvtps_epi32(_mm512_mul_ps(wmul[1], e));
        __m512i w = _mm512_packs_epi16(_mm512_packs_epi32(c0, c0), _mm512_packs_epi32(c1, c1));
        __m512i acc[4], offset = _mm512_setzero_si512();
        for (int m = 0; m < 4; m++) acc[m] = _mm512_setzero_si512();
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            // Lane 4L + e: quad k's four weight codes of group L.
            __m512i wk = _mm512_permutexvar_epi32(_mm512_add_epi32(grp4, _mm512_set1_epi32(4 * k)), w);
            offset = _mm512_dpbusd_epi32(offset, eight, wk);
#pragma GCC unroll 4
            for (int m = 0; m < 4; m++) acc[m] = _mm512_dpbusd_epi32(acc[m], _mm512_load_si512(tiles + 4 * k + m), wk);
        }
        for (int m = 0; m < 4; m++) acc[m] = _mm512_sub_epi32(acc[m], offset);  // |sum| <= 16 x 8 x 127
        update_chunk(out, hd, c, acc, _mm512_mul_ps(*dq, vp), vc);
    }
}

CPU_TARGET_VNNI_INLINE static void pv_body(const cpu_attn_args *a, int p0, int nb, int pf_last, const uint16_t *live,
                                           const float (*p)[16], const float *corr, uint8_t *vbuf, int c64,
                                           bool i4) {
    const uint8_t *V = a->V;
    int hd = a->hd;
    // 64-byte lines of a row (a constant where inlined; see prefetch_next in cpu_kernels_attn_vnni.c)
    const int lines = i4 ? (c64 + 1) / 2 : c64;
    // p0 is a multiple of 16, so the block's keys are one cache block's rows: key p0 + i at
    // at0 + i * stride, its scales at sat0 + i * scale_stride (the next block's likewise).
    int64_t at[16], sat[16], at0 = cpu_attn_key(a, p0), sat0 = cpu_attn_scale(a, p0);
    int pf_rows = pf_last - (p0 + 16) + 1;  // rows of the next block to prefetch
    int64_t nat0 = pf_rows > 0 ? cpu_attn_key(a, p0 + 16) : 0, nsat0 = pf_rows > 0 ? cpu_attn_scale(a, p0 + 16) : 0;
    for (int i = 0; i < 16; i++) {
        at[i] = i < nb ? at0 + i * a->stride : 0;
        sat[i] = i < nb ? sat0 + i * a->scale_stride : 0;
        if (i < pf_rows) {  // the same row of the next block into L2, as load_block does
            int64_t next_at = nat0 + i * a->stride;
            const uint8_t *next = V + (i4 ? next_at / 2 : next_at);
            for (int b = 0; b < lines; b++) _mm_prefetch((const char *)(next + 64 * b), _MM_HINT_T1);
            _mm_prefetch((const char *)(a->V_scale + nsat0 + i * a->scale_stride), _MM_HINT_T1);
        }
    }
    const __m512i grp4 = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    const unsigned all = (1u << nb) - 1;  // the block's keys
    for (int c = 0; c < c64; c++) {
        __m512i *tiles = (__m512i *)vbuf + PV_CHUNK_VECS * c;
        __m512 *wmul = (__m512 *)(tiles + 16), *dq = wmul + 4;
        int G = hd - 64 * c >= 64 ? 4 : (hd - 64 * c) / 16;  // groups in this chunk
        __mmask64 bytes = G == 4 ? ~(__mmask64)0 : ((__mmask64)1 << (16 * G)) - 1;
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            if (i4) {
                const uint8_t *rows[4];
                for (int q = 0; q < 4; q++) rows[q] = 4 * k + q < nb ? V + (at[4 * k + q] + 64 * c) / 2 : NULL;
                tiles4(rows, 16 * G, tiles + 4 * k);
                continue;
            }
            __m512i r[4];
            for (int q = 0; q < 4; q++)
                r[q] = _mm512_maskz_loadu_epi8(4 * k + q < nb ? bytes : 0, V + at[4 * k + q] + 64 * c);
            __m512i lo01 = _mm512_unpacklo_epi8(r[0], r[1]), hi01 = _mm512_unpackhi_epi8(r[0], r[1]);
            __m512i lo23 = _mm512_unpacklo_epi8(r[2], r[3]), hi23 = _mm512_unpackhi_epi8(r[2], r[3]);
            _mm512_store_si512(tiles + 4 * k + 0, _mm512_unpacklo_epi16(lo01, lo23));  // values 16L + 0..3
            _mm512_store_si512(tiles + 4 * k + 1, _mm512_unpackhi_epi16(lo01, lo23));  // 16L + 4..7
            _mm512_store_si512(tiles + 4 * k + 2, _mm512_unpacklo_epi16(hi01, hi23));  // 16L + 8..11
            _mm512_store_si512(tiles + 4 * k + 3, _mm512_unpackhi_epi16(hi01, hi23));  // 16L + 12..15
        }
        if (!i4) {
            group_steps(a, sat, all, c, wmul, dq);
        } else if (c % 2 == 0) {  // chunks c and c + 1 at once: wmul[2], dq of each
            __m512 w4[4], dq2[2];
            group_steps4(a, sat, all, c, w4, dq2);
            wmul[0] = w4[0], wmul[1] = w4[1], wmul[2] = dq2[0];
            if (c + 1 < c64) {
                __m512 *next = (__m512 *)((__m512i *)vbuf + PV_CHUNK_VECS * (c + 1) + 16);
                next[0] = w4[2], next[1] = w4[3], next[2] = dq2[1];
            }
        }
    }
    for (int j = 0; j < a->nq; j++) {
        if (!live[j]) continue;
        __m512 e = _mm512_load_ps(p[j]);
        float pmax = _mm512_reduce_max_ps(e), *out = a->out[j];
        if (!(pmax > 0.0f)) {  // every weight underflowed to 0: only the rescale
            for (int d = 0; d < hd; d++) out[d] *= corr[j];
            continue;
        }
        __m512 vc = _mm512_set1_ps(corr[j]), vp = _mm512_set1_ps(pmax);
        e = _mm512_mul_ps(e, _mm512_set1_ps(1.0f / pmax));  // the largest 1 to within an ulp or two
        if (i4) {
            pv4_query(a, sat, live[j], live[j] != all, e, vp, vc, out, vbuf, c64);
            continue;
        }
        // A query that does not see every key of the block (a prompt's query before the call's
        // last keys, or past a window's first) takes steps from its own keys (group_steps).
        __m512 own[8][5];
        if (live[j] != all)
            for (int c = 0; c < c64; c++) group_steps(a, sat, live[j], c, own[c], own[c] + 4);
        for (int c = 0; c < c64; c++) {
            const __m512i *tiles = (const __m512i *)vbuf + PV_CHUNK_VECS * c;
            const __m512 *wmul = live[j] != all ? own[c] : (const __m512 *)(tiles + 16), *dq = wmul + 4;
            // 16-bit weight codes, then their two bytes: dword 4L + g of lo (hi) = the low (high)
            // bytes of group g's keys 4L..4L+3.
            __m512i c0 = _mm512_cvtps_epi32(_mm512_mul_ps(wmul[0], e));
            __m512i c1 = _mm512_cvtps_epi32(_mm512_mul_ps(wmul[1], e));
            __m512i c2 = _mm512_cvtps_epi32(_mm512_mul_ps(wmul[2], e));
            __m512i c3 = _mm512_cvtps_epi32(_mm512_mul_ps(wmul[3], e));
            __m512i w01 = _mm512_packus_epi32(c0, c1), w23 = _mm512_packus_epi32(c2, c3);
            const __m512i low = _mm512_set1_epi16(0xff);
            __m512i lo = _mm512_packus_epi16(_mm512_and_si512(w01, low), _mm512_and_si512(w23, low));
            __m512i hi = _mm512_packus_epi16(_mm512_srli_epi16(w01, 8), _mm512_srli_epi16(w23, 8));
            __m512i acl[4], ach[4];
            for (int m = 0; m < 4; m++) acl[m] = ach[m] = _mm512_setzero_si512();
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++) {
                // Lane 4L + e: quad k's four weight bytes of group L.
                __m512i idx = _mm512_add_epi32(grp4, _mm512_set1_epi32(4 * k));
                __m512i wl = _mm512_permutexvar_epi32(idx, lo), wh = _mm512_permutexvar_epi32(idx, hi);
#pragma GCC unroll 4
                for (int m = 0; m < 4; m++) {
                    __m512i t = _mm512_load_si512(tiles + 4 * k + m);
                    acl[m] = _mm512_dpbusd_epi32(acl[m], wl, t);
                    ach[m] = _mm512_dpbusd_epi32(ach[m], wh, t);
                }
            }
            __m512i sums[4];
            for (int m = 0; m < 4; m++) sums[m] = _mm512_add_epi32(_mm512_slli_epi32(ach[m], 8), acl[m]);  // |sum| < 2^27
            update_chunk(out, hd, c, sums, _mm512_mul_ps(*dq, vp), vc);
        }
    }
}

CPU_TARGET_VNNI void cpu_vnni_attn_int_pv(const cpu_attn_args *a, int p0, int nb, int pf_last, const uint16_t *live,
                                          const float (*p)[16], const float *corr, uint8_t *vbuf) {
    int c64 = (a->hd + 63) / 64;
    if (a->kv_dtype == MX_DTYPE_I4) {
        switch (c64) {
        case 1: pv_body(a, p0, nb, pf_last, live, p, corr, vbuf, 1, true); break;  // head_dim 32, 64
        case 2: pv_body(a, p0, nb, pf_last, live, p, corr, vbuf, 2, true); break;  // head_dim 128
        case 4: pv_body(a, p0, nb, pf_last, live, p, corr, vbuf, 4, true); break;  // head_dim 256
        default: pv_body(a, p0, nb, pf_last, live, p, corr, vbuf, c64, true); break;
        }
        return;
    }
    switch (c64) {
    case 1: pv_body(a, p0, nb, pf_last, live, p, corr, vbuf, 1, false); break;  // head_dim 32, 48, 64
    case 2: pv_body(a, p0, nb, pf_last, live, p, corr, vbuf, 2, false); break;  // head_dim 128
    case 4: pv_body(a, p0, nb, pf_last, live, p, corr, vbuf, 4, false); break;  // head_dim 256
    default: pv_body(a, p0, nb, pf_last, live, p, corr, vbuf, c64, false); break;
    }
}

#endif

// Value 16L + 4m + e of each chunk of 64 values (G groups of 16) back from 4Gm + 4L + e; on the I4
// cache value 2 (I4_BYTE(m / 2, L) + e) + m % 2 (tiles4).
void cpu_vnni_attn_int_pv_order(float *out, int hd, mx_dtype kv_dtype) {
    for (int c = 0; c < hd; c += 64) {
        int G = hd - c >= 64 ? 4 : (hd - c) / 16;
        float t[64];
        for (int i = 0; i < 16 * G; i++) t[i] = out[c + i];
        for (int L = 0; L < G; L++)
            for (int m = 0; m < 4; m++)
                for (int e = 0; e < 4; e++) {
                    int v = kv_dtype == MX_DTYPE_I4 ? 2 * (I4_BYTE(m / 2, L) + e) + m % 2 : 16 * L + 4 * m + e;
                    out[c + v] = t[4 * G * m + 4 * L + e];
                }
    }
}
