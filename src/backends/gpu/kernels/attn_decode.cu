// SPDX-License-Identifier: MIT
// Decode attention over the paged KV cache (flash-decoding): steps of at most kDecodeMaxTokens
// tokens, or kDecodeHintMaxTokens when the record's decode hint says each token (but a few) is its
// own sequence's, head sizes 64, 128 and 256 (other shapes, and prefill, take kernels/attention.cu).
// Each token attends to its own slot and positions, so the two differ only in speed: a prefill
// chunk's tokens share key tiles in the general kernel, a batched decode step's tokens share nothing. The
// work is bound by reading the cache, so the kernel is laid out for bytes in flight:
// - one block per (token, KV head, part of its query-head group, split of the context): the
//   block's G (1, 2, 4 or 8) query heads of one KV head share every key and value read, so a cache
//   byte is read once per KV head, not once per query head; the context is split over enough blocks
//   for one wave (2 per multiprocessor, 1 for groups of 8) to keep every multiprocessor streaming;
// - no shared-memory tile and no barrier in the loop: a key row is read by D / 8 lanes with one
//   16-byte load each, straight into registers; a warp reads W / (D / 8) rows at once and C of those
//   sets per step (a "unit" of positions inside one cache block, so one block-table read per unit),
//   the values with the keys, all issued before the first use;
// - each group of D / 8 lanes keeps its own online softmax (scores in log2 units, exp2) over the
//   keys it read; they are merged in registers across the warp and in shared memory across the
//   block's warps at the end, and across splits by attn_decode_combine_kernel (the partials are
//   (m, l, o[D]) per head and split, in L->scratch).
// I16 codes become floats by integer and add instructions (kv_block.cuh, kv_unpack8); a key's
// partial dot over its lane's 8 elements is multiplied by that chunk's scale, a value's weight by
// its row's scale. Positions outside [window start, position] read nothing and weigh 0. Sinks
// enter at the normalization (single split) or in the combine.
// Short form (L->attn_short; the default, MLXCEL_GPU_ATTN_SHORT=0 turns it off): where every
// sequence's cache holds at most kDecodeShortCtx positions and the step has at most a wave of query
// heads, one block per query head (G = 1, parts = the group) and one split. At a few positions the
// kernel reads almost nothing and its time is its own chain: G heads' scores, merges and a
// 2-barrier epilogue per head done one after another in one block, in code that grows with G
// (124 KB of sm_90 instructions at G = 8, D = 128, I16, against 35 KB at G = 1, each run once per
// launch), plus a combine launch wherever the cache is longer than one split's minimum. The short form runs the G heads in
// G blocks side by side, each reading the (few) keys again from L2, and no combine. Each head's
// arithmetic is that of today's form at G <= 4 (same unit, same order: bit for bit where today's
// form also has one split); groups of 8 take units of 4 sets instead of 2 (another summation order).
// With RoPE folded in (L->attn_rope, MLXCEL_GPU_ATTN_ROPE=1; mxg_attention_decode_rope, a step of
// one token): the launch also does the q/k norm + RoPE + KV store launch before it
// (kernels/qk_norm_rope.cu). Each block turns its own query heads and its KV head's k row from the
// raw q and k (head_norm_rope's arithmetic, a warp per head) into shared memory, and makes the cache row of
// the token's position from that k row and the token's v row, in the cache's element format
// (kv_store_chunk's codes and scales, or f16): the loop takes that position's key and value from it
// instead of from the cache, so its values are exactly those the cache would return, and the
// outputs are bit for bit those of the two launches. One block per KV head (split 0, part 0) writes
// the row into the cache at its end, the bytes the store would write; no block reads that position
// from the cache (one token: no other token of its sequence in the step). The raw q and k stay in
// place (the plan checks that no later record reads them rotated).
// MLXCEL_GPU_PDL=3 (L->pdl_rest): the kernel and the combine are programmatic dependent launches
// (mxg_launch_dep) that wait for the previous kernel (mxg_grid_wait) and then release the next one
// at once, as the matrix-vector kernels do at level 2; below level 3 they are the plain launches
// they were. Before its wait a block reads only the step's slots, positions and block table (the
// host's copies, made before the step's first kernel; no kernel writes them), and in the RoPE form
// lane 0 of each warp asks L2 for its first unit's key and value rows (codes and I16 scales) of
// the positions before the token's own: rows earlier steps wrote, which neither the previous
// kernel (the q/k/v product, which writes no cache row) nor this launch (it writes the token's
// own row, at its end) writes. Prefetching is a hint: the loop reads them again after the wait.
// The cap is level 2's (L->pdl_prefetch, over the launch's warps).
#include "backends/gpu/common.cuh"
#include "backends/gpu/kernels.h"
#include "backends/gpu/kernels_fused.h"
#include "backends/gpu/kv_block.cuh"

namespace {

constexpr int kDecodeThreads = 256;   // threads per block (8 warps of 32, 4 of 64)
constexpr int kDecodeMaxTokens = 16;  // steps of at most this many tokens (as the head rows before) ...
constexpr int kDecodeHintMaxTokens = 64;  // ... or this many with the decode hint (a token per sequence)
constexpr int kDecodeMaxSplits = 64;  // splits of one token's context (the combine's block holds them)
constexpr float kLog2e = 1.4426950408889634f;
constexpr int kDecodeShortCtx = 128;  // the short form's longest cache (positions per sequence)

// Positions of one unit: W / (D / 8) key rows at once, C times. C: 4, or 2 for 8 heads (their
// registers), and no more than fits in a cache block of MX_KV_BLOCK positions.
__host__ __device__ constexpr int decode_rows_at_once(int w, int d) { return w / (d / 8); }
__host__ __device__ constexpr int decode_sets(int w, int d, int g) {
    return (g >= 8 ? 2 : 4) * decode_rows_at_once(w, d) <= MX_KV_BLOCK ? (g >= 8 ? 2 : 4)
                                                                           : MX_KV_BLOCK / decode_rows_at_once(w, d);
}
__host__ __device__ constexpr int decode_unit(int w, int d, int g) { return decode_rows_at_once(w, d) * decode_sets(w, d, g); }
// Blocks resident per multiprocessor, the register bound the kernel is compiled to (at most 128
// registers for 2 blocks of 256 threads); groups of 8 heads keep 2 x 64 accumulators and take 1.
__host__ __device__ constexpr int decode_blocks_per_sm(int g) { return g >= 8 ? 1 : 2; }

struct DecodeArgs {
    float *out;          // [n, n_heads, D]
    float *part;         // [n, n_heads, splits, D + 2]: (m in log2 units, l, o[D]) when splits > 1
    const float *q;      // [n, n_heads, D]
    const float *sinks;  // [n_heads] (natural log units) or NULL
    const uint16_t *kv;  // int16 codes (I16) or f16 bits
    const int32_t *slot, *pos;  // [n]
    KvPages pg;
    int n_heads, window, splits;
    int group, parts;  // query heads per KV head; blocks per group (of G heads each)
    float qscale;      // scale * log2(e): scores in log2 units
    // ROPE (the folded q/k norm + RoPE + KV store; q above is then the raw q):
    const float *k, *v;             // [n, n_kv_heads, D] the raw k and the v rows
    const float *qw, *kw;           // [D] the norms' weights (both NULL: no norm)
    const int32_t *rope_pos;        // [n] RoPE positions
    const float *inv_freq;          // [D / 2]
    float eps, attn_factor;
    uint16_t *kv_out;               // the cache the row is written to (kv)
    bool early;                     // MLXCEL_GPU_PDL=3: a dependent launch, which releases the next one
    unsigned prefetch;              // ... and (ROPE) each warp's L2 prefetch budget in bytes (0: none)
};

// 1 / (l + 2^(sink - m)) for an online softmax in log2 units (sink -inf: none); no overflow.
__device__ __forceinline__ float inv_denominator2(float m, float l, float sink) {
    if (sink > m) {
        const float r = exp2f(m - sink);
        return r / (l * r + 1.0f);
    }
    return 1.0f / (l + exp2f(sink - m));
}

// Weight of a partial softmax of maximum m in one whose maximum is mx (0 for an empty partial).
__device__ __forceinline__ float rescale(float m, float mx) { return m == -INFINITY ? 0.0f : exp2f(m - mx); }

// Merges the splits of one (token, head): weights 2^(m_s - M) computed once into shared memory (s_m,
// s_l, s_w: kDecodeMaxSplits each), then each thread sums its columns over the splits in split order.
// nthreads >= splits.
__device__ void combine_splits(float *out, const float *__restrict__ pp, int D, int splits, float sink2, float *s_m,
                               float *s_l, float *s_w, int nthreads) {
    const int i = threadIdx.x;
    if (i < splits) s_m[i] = pp[(int64_t)i * (D + 2)], s_l[i] = pp[(int64_t)i * (D + 2) + 1];
    __syncthreads();
    float M = -INFINITY;
    for (int s = 0; s < splits; s++) M = fmaxf(M, s_m[s]);
    if (i < splits) s_w[i] = rescale(s_m[i], M);
    __syncthreads();
    float L = 0.0f;
    for (int s = 0; s < splits; s++) L += s_l[s] * s_w[s];
    const float inv = inv_denominator2(M, L, sink2);
    for (int d = i; d < D; d += nthreads) {
        float acc = 0.0f;
#pragma unroll 8
        for (int s = 0; s < splits; s++) acc = fmaf(s_w[s], pp[(int64_t)s * (D + 2) + 2 + d], acc);
        out[d] = acc * inv;
    }
}

template <int W, int D, int G, bool I16, bool ROPE>
__global__ void __launch_bounds__(kDecodeThreads, decode_blocks_per_sm(G)) attn_decode_kernel(DecodeArgs a) {
    MXG_WARP_ONLY(W) {
    constexpr int TPK = D / 8;                   // lanes per key row
    constexpr int KG = W / TPK;                  // key rows a warp reads at once
    constexpr int C = decode_sets(W, D, G);      // ... times per unit
    constexpr int UW = KG * C;                   // positions per unit
    constexpr int NW = kDecodeThreads / W;
    static_assert(MX_KV_BLOCK % UW == 0 && TPK <= W, "a unit lies in one cache block");
    __shared__ float s_m[NW][G], s_l[NW][G];
    __shared__ float s_o[NW][D];
    constexpr int NSC = (D + MX_KV_SCALE_BLOCK - 1) / MX_KV_SCALE_BLOCK;
    __shared__ float s_q[ROPE ? G : 1][ROPE ? D : 1];        // ROPE: the rotated query heads
    __shared__ float s_k[ROPE ? D : 1];                      // ... the rotated k row
    __shared__ uint4 s_row[2][ROPE ? D / 8 : 1];              // ... the position's cache row, K and V
    __shared__ float s_sc[2][ROPE ? NSC : 1];                // ... and its I16 scales
    const int warp = threadIdx.x / W, lane = threadIdx.x % W, kg = lane / TPK, li = lane % TPK;
    const int t = blockIdx.x, kvh = blockIdx.y / a.parts, g0 = (int)(blockIdx.y % a.parts) * G;
    const int split = blockIdx.z, gcount = min(G, a.group - g0), h0 = kvh * a.group + g0;
    const int hi = a.pos[t], lo = a.window > 0 ? max(0, hi - a.window + 1) : 0, slot = a.slot[t];
    // This split's units: at least one per warp, so short contexts use few splits.
    const int u_lo = lo / UW, u_hi = hi / UW, per = max(NW, (u_hi - u_lo + a.splits) / a.splits);
    const int su0 = u_lo + split * per, su1 = min(u_hi, su0 + per - 1);
    const int64_t vrows = (int64_t)a.pg.n_kv_heads * MX_KV_BLOCK;  // a block's V rows follow its K rows
    const int nsc = a.pg.n_scales;
    if (ROPE && a.prefetch && lane == 0 && su0 + warp <= su1) {
        // Level 3, before the grid wait (top of the file): this warp's first unit, the positions
        // before the token's own (consecutive rows: a unit lies in one cache block).
        const int u = su0 + warp, p0 = max(lo, u * UW), p1 = min(hi - 1, u * UW + UW - 1);
        if (p0 <= p1) {
            const int64_t r0 = kv_row_index(a.pg, slot, p0, 0, kvh), rows = p1 - p0 + 1;
            unsigned budget = a.prefetch;
            for (int which = 0; which < 2; which++) {
                const int64_t r = r0 + which * vrows;
                prefetch_span(a.kv + r * D, rows * D * (int64_t)sizeof(uint16_t), budget);
                if constexpr (I16) prefetch_span(a.pg.scales + r * nsc, rows * nsc * (int64_t)sizeof(float), budget);
            }
        }
    }
    mxg_grid_wait_release(a.early);  // level 3: nothing above reads what earlier kernels wrote

    if constexpr (ROPE) {
        // The G query heads, then (g == G) the KV head's k row, one warp per head (head g on warp
        // g % NW), lane l holding the pairs j = c W + l: head_norm_rope's arithmetic, its block sum
        // taken chunk by chunk (warp_sum of each W pairs, the chunks added from 0 in order, the order
        // of its warps), so the same bits without a block barrier per head.
        constexpr int HALF = D / 2, HC = (HALF + W - 1) / W;  // pairs per lane
        const float p = (float)a.rope_pos[t];
        for (int g = warp; g <= G; g += NW) {  // warp-uniform
            if (g < G && g >= gcount) continue;
            const float *src = g == G ? a.k + ((int64_t)t * a.pg.n_kv_heads + kvh) * D
                                      : a.q + ((int64_t)t * a.n_heads + h0 + g) * D;
            const float *w = g == G ? a.kw : a.qw;
            float *dst = g == G ? s_k : s_q[g];
            float x0[HC], x1[HC];
#pragma unroll
            for (int c = 0; c < HC; c++) {
                const int j = c * W + lane;
                x0[c] = x1[c] = 0.0f;
                if (j < HALF) x0[c] = src[j], x1[c] = src[j + HALF];
            }
            if (w) {
                float ss = 0.0f;
#pragma unroll
                for (int c = 0; c < HC; c++) ss += warp_sum<W>(fmaf(x1[c], x1[c], fmaf(x0[c], x0[c], 0.0f)));
                const float r = head_norm_factor(ss, HALF, a.eps);
#pragma unroll
                for (int c = 0; c < HC; c++) {
                    const int j = c * W + lane;
                    if (j < HALF) x0[c] = x0[c] * r * w[j], x1[c] = x1[c] * r * w[j + HALF];
                }
            }
#pragma unroll
            for (int c = 0; c < HC; c++) {
                const int j = c * W + lane;
                if (j < HALF) {
                    rope_pair(x0[c], x1[c], p, a.inv_freq[j], a.attn_factor);
                    dst[j] = x0[c], dst[j + HALF] = x1[c];
                }
            }
        }
        __syncthreads();
        // The position's cache row in the cache's format, as the store makes it (kernels/qk_norm_rope.cu).
        const float *vsrc = a.v + ((int64_t)t * a.pg.n_kv_heads + kvh) * D;
        if constexpr (I16) {
            KvPages rowp = a.pg;
            rowp.scales = &s_sc[0][0];
            for (int i = threadIdx.x; i < 2 * NSC; i += kDecodeThreads)
                kv_store_chunk((int16_t *)s_row, rowp, i / NSC, i % NSC, i / NSC ? vsrc : s_k);
        } else {
            __half *rowh = (__half *)s_row;
            for (int d = threadIdx.x; d < D; d += kDecodeThreads)
                rowh[d] = __float2half_rn(s_k[d]), rowh[D + d] = __float2half_rn(vsrc[d]);
        }
        __syncthreads();
    }
    float q[G][8];  // this lane's 8 columns of each head, times scale * log2(e)
#pragma unroll
    for (int g = 0; g < G; g++) {
        const float *qr;
        if constexpr (ROPE)
            qr = &s_q[g][li * 8];
        else
            qr = a.q + ((int64_t)t * a.n_heads + h0 + g) * D + li * 8;
#pragma unroll
        for (int e = 0; e < 8; e++) q[g][e] = g < gcount ? qr[e] * a.qscale : 0.0f;
    }
    float o[G][8], m[G], l[G];
#pragma unroll
    for (int g = 0; g < G; g++) {
        m[g] = -INFINITY, l[g] = 0.0f;
#pragma unroll
        for (int e = 0; e < 8; e++) o[g][e] = 0.0f;
    }

    for (int u = su0 + warp; u <= su1; u += NW) {  // warp-uniform
        const int base = u * UW;
        const int64_t row0 = kv_row_index(a.pg, slot, base, 0, kvh);  // the unit's rows are consecutive
        uint4 kw[C], vw[C];
        float ksc[C], vsc[C];
        bool ok[C];
#pragma unroll
        for (int c = 0; c < C; c++) {
            const int p = base + c * KG + kg;
            const int64_t row = row0 + c * KG + kg;
            ok[c] = p >= lo && p <= hi;
            kw[c] = vw[c] = make_uint4(0u, 0u, 0u, 0u);
            ksc[c] = vsc[c] = 0.0f;
            if (ROPE && p == hi) {  // the token's own position: the row made above, not the cache's
                kw[c] = s_row[0][li];
                vw[c] = s_row[1][li];
                if constexpr (I16) ksc[c] = s_sc[0][li * 8 / MX_KV_SCALE_BLOCK], vsc[c] = s_sc[1][li * 8 / MX_KV_SCALE_BLOCK];
            } else if (ok[c]) {
                kw[c] = ((const uint4 *)(a.kv + row * D))[li];
                vw[c] = ((const uint4 *)(a.kv + (row + vrows) * D))[li];
                if constexpr (I16) {
                    ksc[c] = a.pg.scales[row * nsc + li * 8 / MX_KV_SCALE_BLOCK];
                    vsc[c] = a.pg.scales[(row + vrows) * nsc + li * 8 / MX_KV_SCALE_BLOCK];
                }
            }
        }
        float s[C][G];
#pragma unroll
        for (int c = 0; c < C; c++) {
            float kf[8];
            kv_unpack8<I16>(kw[c], kf);
#pragma unroll
            for (int g = 0; g < G; g++) {
                float acc = 0.0f;
#pragma unroll
                for (int e = 0; e < 8; e++) acc = fmaf(q[g][e], kf[e], acc);
                s[c][g] = I16 ? acc * ksc[c] : acc;
            }
        }
#pragma unroll
        for (int off = TPK / 2; off > 0; off >>= 1)  // sum over the row's lanes (every lane gets it)
#pragma unroll
            for (int c = 0; c < C; c++)
#pragma unroll
                for (int g = 0; g < G; g++) s[c][g] += mxg_shfl_xor<W>(s[c][g], off);
        // s becomes each value row's weight per head (times its I16 scale), in place (registers).
#pragma unroll
        for (int g = 0; g < G; g++) {
            float mx = -INFINITY;
#pragma unroll
            for (int c = 0; c < C; c++) mx = ok[c] ? fmaxf(mx, s[c][g]) : mx;
            const float mn = fmaxf(m[g], mx), corr = rescale(m[g], mn);
            l[g] *= corr;
#pragma unroll
            for (int e = 0; e < 8; e++) o[g][e] *= corr;
#pragma unroll
            for (int c = 0; c < C; c++) {
                const float p = ok[c] ? exp2f(s[c][g] - mn) : 0.0f;
                l[g] += p;
                s[c][g] = I16 ? p * vsc[c] : p;
            }
            m[g] = mn;
        }
#pragma unroll
        for (int c = 0; c < C; c++) {
            float vf[8];
            kv_unpack8<I16>(vw[c], vf);
#pragma unroll
            for (int g = 0; g < G; g++)
#pragma unroll
                for (int e = 0; e < 8; e++) o[g][e] = fmaf(s[c][g], vf[e], o[g][e]);
        }
    }

    // Merge the warp's row groups (lanes li of every kg) ...
#pragma unroll
    for (int off = TPK; off < W; off <<= 1)
#pragma unroll
        for (int g = 0; g < G; g++) {
            const float mo = mxg_shfl_xor<W>(m[g], off), lt = mxg_shfl_xor<W>(l[g], off);
            const float mn = fmaxf(m[g], mo), f1 = rescale(m[g], mn), f2 = rescale(mo, mn);
            l[g] = l[g] * f1 + lt * f2;
#pragma unroll
            for (int e = 0; e < 8; e++) o[g][e] = o[g][e] * f1 + mxg_shfl_xor<W>(o[g][e], off) * f2;
            m[g] = mn;
        }
    // ... then the block's warps, one head at a time through shared memory.
    if (lane == 0)
#pragma unroll
        for (int g = 0; g < G; g++) s_m[warp][g] = m[g], s_l[warp][g] = l[g];
    __syncthreads();
#pragma unroll
    for (int g = 0; g < G; g++) {
        if (g >= gcount) continue;  // block-uniform; continue, not break: clang unrolls no loop that exits early
        float M = -INFINITY, L = 0.0f;
        for (int w = 0; w < NW; w++) M = fmaxf(M, s_m[w][g]);
        for (int w = 0; w < NW; w++) L += s_l[w][g] * rescale(s_m[w][g], M);
        const float f = rescale(m[g], M);
        if (kg == 0)
#pragma unroll
            for (int e = 0; e < 8; e++) s_o[warp][li * 8 + e] = o[g][e] * f;
        __syncthreads();
        const int h = h0 + g;
        if (a.splits == 1) {
            const float inv = inv_denominator2(M, L, a.sinks ? a.sinks[h] * kLog2e : -INFINITY);
            for (int d = threadIdx.x; d < D; d += kDecodeThreads) {
                float acc = 0.0f;
                for (int w = 0; w < NW; w++) acc += s_o[w][d];
                a.out[((int64_t)t * a.n_heads + h) * D + d] = acc * inv;
            }
        } else {
            float *pp = a.part + (((int64_t)t * a.n_heads + h) * a.splits + split) * (D + 2);
            if (threadIdx.x == 0) pp[0] = M, pp[1] = L;
            for (int d = threadIdx.x; d < D; d += kDecodeThreads) {
                float acc = 0.0f;
                for (int w = 0; w < NW; w++) acc += s_o[w][d];
                pp[2 + d] = acc;
            }
        }
        __syncthreads();
    }
    if constexpr (ROPE) {
        // One block per (token, KV head) writes the position's row into the cache (at the end: no
        // block of the launch reads it from there).
        if (split == 0 && g0 == 0) {
            const int64_t krow = kv_row_index(a.pg, slot, hi, 0, kvh), vrow = kv_row_index(a.pg, slot, hi, 1, kvh);
            for (int i = threadIdx.x; i < 2 * D; i += kDecodeThreads)
                a.kv_out[(i < D ? krow : vrow) * D + i % D] = ((const uint16_t *)s_row)[i];
            if constexpr (I16)
                for (int i = threadIdx.x; i < 2 * NSC; i += kDecodeThreads)
                    a.pg.scales[(i < NSC ? krow : vrow) * NSC + i % NSC] = s_sc[i / NSC][i % NSC];
        }
    }
    }
}

// Merges the splits of one (token, head) (blockIdx.x); blockDim.x >= splits.
__global__ void attn_decode_combine_kernel(float *out, const float *__restrict__ part, int D, int splits,
                                           const float *__restrict__ sinks, int n_heads, bool early) {
    __shared__ float s_m[kDecodeMaxSplits], s_l[kDecodeMaxSplits], s_w[kDecodeMaxSplits];
    mxg_grid_wait_release(early);  // level 3: a dependent launch; the partials come from the kernel before
    combine_splits(out + (int64_t)blockIdx.x * D, part + (int64_t)blockIdx.x * splits * (D + 2), D, splits,
                   sinks ? sinks[blockIdx.x % n_heads] * kLog2e : -INFINITY, s_m, s_l, s_w, (int)blockDim.x);
}

template <int W, int D, int G, bool I16>
void launch_decode(const mxg_launch *L, const DecodeArgs &a, dim3 grid, bool rope) {
    void (*kernel)(DecodeArgs) = rope ? attn_decode_kernel<W, D, G, I16, true> : attn_decode_kernel<W, D, G, I16, false>;
    if (a.early)
        mxg_launch_dep(kernel, grid, dim3(kDecodeThreads), 0, (gpuStream_t)L->stream, true, a);
    else
        kernel<<<grid, kDecodeThreads, 0, (gpuStream_t)L->stream>>>(a);
}

template <int W, int D, bool I16>
void launch_decode_g(const mxg_launch *L, const DecodeArgs &a, dim3 grid, int g, bool rope) {
    if (g == 1)
        launch_decode<W, D, 1, I16>(L, a, grid, rope);
    else if (g == 2)
        launch_decode<W, D, 2, I16>(L, a, grid, rope);
    else if (g == 4)
        launch_decode<W, D, 4, I16>(L, a, grid, rope);
    else
        launch_decode<W, D, 8, I16>(L, a, grid, rope);
}

template <int W, bool I16>
void launch_decode_d(const mxg_launch *L, const DecodeArgs &a, dim3 grid, int d, int g, bool rope) {
    if (d == 64)
        launch_decode_g<W, 64, I16>(L, a, grid, g, rope);
    else if (d == 128)
        launch_decode_g<W, 128, I16>(L, a, grid, g, rope);
    else
        launch_decode_g<W, 256, I16>(L, a, grid, g, rope);
}

// Whether the kernel takes the step's shape.
bool decode_takes(const mxg_launch *L, const mx_kv_ref *r, int n, bool decode) {
    const int D = r->lay.head_dim;
    return n >= 1 && n <= (decode ? kDecodeHintMaxTokens : kDecodeMaxTokens) && (D == 64 || D == 128 || D == 256) &&
           (L->warp == 32 || L->warp == 64);
}

// Fills a's launch shape (form, group parts, splits) and launches the kernel, with the combine
// where it splits; the caller has set the rest of a (and, for `rope`, the ROPE fields).
void decode_launch(const mxg_launch *L, DecodeArgs &a, const mx_kv_ref *r, int n, int n_heads, float scale,
                   int window, const float *sinks, bool rope) {
    const mx_kv_layout *lay = &r->lay;
    const int D = lay->head_dim;
    const int group = n_heads / lay->n_kv_heads;
    // The short form (top of the file): a block per query head, at most one wave of them, one split.
    const bool short_form = L->attn_short && lay->max_ctx <= kDecodeShortCtx &&
                            (int64_t)n * n_heads <= (int64_t)decode_blocks_per_sm(1) * L->sm_count;
    // heads per block: a power of two, at most 8
    const int G = short_form ? 1 : group >= 8 ? 8 : group > 2 ? 4 : group;
    const int parts = (group + G - 1) / G;
    a.part = (float *)L->scratch, a.sinks = sinks, a.kv = (const uint16_t *)r->kv;
    a.slot = r->slot, a.pos = r->pos, a.pg = kv_pages(r, L->kv_i16);
    a.n_heads = n_heads, a.window = window, a.group = group, a.parts = parts, a.qscale = scale * kLog2e;
    // Splits: enough blocks for one wave of decode_blocks_per_sm per multiprocessor, no more than the context has units for one
    // per warp (the kernel's minimum per split), and partials that fit in the scratch. None where the
    // step's blocks already fill 3/4 of that wave (batched decode: 32 sequences of 8 KV heads on 132
    // multiprocessors): splitting would make a second, partial wave and a combine launch.
    const int64_t blocks = (int64_t)n * lay->n_kv_heads * parts, target = (int64_t)decode_blocks_per_sm(G) * L->sm_count;
    const int64_t min_split = (int64_t)(kDecodeThreads / L->warp) * decode_unit(L->warp, D, G);
    int64_t s = short_form || 4 * blocks >= 3 * target ? 1 : (target + blocks - 1) / blocks;
    const int64_t by_ctx = (lay->max_ctx + min_split - 1) / min_split;
    s = s < by_ctx ? s : by_ctx;
    s = s < kDecodeMaxSplits ? s : kDecodeMaxSplits;
    while (s > 1 && (size_t)n * n_heads * s * (D + 2) * sizeof(float) > L->scratch_bytes) s--;
    a.splits = (int)(s < 1 ? 1 : s);
    dim3 grid((unsigned)n, (unsigned)(lay->n_kv_heads * parts), (unsigned)a.splits);
    // MLXCEL_GPU_PDL=3: a dependent launch; the RoPE form's prefetch budget, level 2's cap over the
    // launch's warps (a multiple of 16).
    a.early = L->pdl_rest;
    const uint64_t warps = (uint64_t)grid.x * grid.y * grid.z * (kDecodeThreads / L->warp);
    const uint64_t per_warp = a.early && rope ? (uint64_t)L->pdl_prefetch / warps : 0;
    a.prefetch = (unsigned)((per_warp < (1u << 30) ? per_warp : (1u << 30)) & ~(uint64_t)15);
    if (L->kv_i16) {
        MXG_WARP_DISPATCH(L->warp, launch_decode_d<W, true>(L, a, grid, D, G, rope));
    } else {
        MXG_WARP_DISPATCH(L->warp, launch_decode_d<W, false>(L, a, grid, D, G, rope));
    }
    if (a.splits > 1 && a.early)
        mxg_launch_dep(attn_decode_combine_kernel, dim3((unsigned)(n * n_heads)), dim3(128), 0,
                       (gpuStream_t)L->stream, true, a.out, a.part, D, a.splits, sinks, n_heads, true);
    else if (a.splits > 1)
        attn_decode_combine_kernel<<<(unsigned)(n * n_heads), 128, 0, (gpuStream_t)L->stream>>>(
            a.out, a.part, D, a.splits, sinks, n_heads, false);
}

}  // namespace

extern "C" int mxg_attention_decode(const mxg_launch *L, float *out, const float *q, const mx_kv_ref *r, int n,
                                    int n_heads, float scale, int window, const float *sinks, bool decode) {
    if (!decode_takes(L, r, n, decode)) return -1;
    DecodeArgs a = {};
    a.out = out, a.q = q;
    decode_launch(L, a, r, n, n_heads, scale, window, sinks, false);
    return 0;
}

extern "C" int mxg_attention_decode_rope(const mxg_launch *L, const mxg_attn_rope *f) {
    const mx_rope *rope = f->rope;
    const mx_kv_ref *r = f->kv;
    if (!L->attn_decode || f->n != 1 || !decode_takes(L, r, f->n, f->decode) || rope->head_dim != r->lay.head_dim ||
        (rope->rot_dim != 0 && rope->rot_dim != rope->head_dim) || rope->long_inv_freq != NULL ||
        (f->q_norm == NULL) != (f->k_norm == NULL) || f->n_kv_heads != r->lay.n_kv_heads ||
        f->n_heads % f->n_kv_heads != 0)
        return -1;
    DecodeArgs a = {};
    a.out = f->out, a.q = f->q, a.k = f->k, a.v = f->v, a.qw = f->q_norm, a.kw = f->k_norm, a.rope_pos = f->rope_pos;
    a.inv_freq = rope->inv_freq, a.eps = f->eps, a.attn_factor = rope->attn_factor, a.kv_out = (uint16_t *)r->kv;
    decode_launch(L, a, r, f->n, f->n_heads, f->scale, f->window, f->sinks, true);
    return 0;
}
