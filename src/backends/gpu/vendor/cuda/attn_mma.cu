// SPDX-License-Identifier: MIT
// NVIDIA tensor-core attention for prefill (FlashAttention-2 style, mma.sync m16n8k16 with f16
// inputs and float32 accumulators; sm_80+), over the paged KV cache of kernels/attention.cu, which
// dispatches prefill-shaped records here when L->attn_mma (MLXCEL_GPU_ATTN_MMA=1; off by default
// until measured). Head sizes 64 and 128 on warps of 32; anything else declines (-1) to the SIMT
// kernel. ROCm builds have vendor/hip/attn_mma.cu, which declines.
//
// A block of 4 warps takes 64 consecutive tokens of the record (16 per warp) for one query head.
// Each lane keeps the A fragments of its rows' queries (times scale * log2(e), as f16) for the whole
// kernel. Key tiles of 64 positions are found through the slot's block table (kv_block.cuh) and
// dequantized into shared memory as f16 (I16: code times its chunk's scale; f16: copied): K as
// [key][head_dim] (the B operand of S = Q K^T, one 32-bit load per register), V transposed as
// [head_dim][key] (the B operand of O += P V), both rows padded by 16 bytes so a fragment load of a
// warp hits 32 banks. S stays in registers: the online softmax (base 2) runs on the accumulators,
// each row's four lanes trading their maxima by shuffles, and the probabilities become the A
// fragments of P V without going through shared memory. A warp skips the products of a tile that
// none of its rows sees (causal: the block's first warps stop earlier; sliding windows).
//
// Rows of a block that belong to different slots (mixed records) are handled as kernels/attention.cu
// does: one group of rows of the same slot after the other, each group's key range loaded once; rows
// outside the current group see every key masked. Causality and the window follow from each token's
// position, GQA from the query head (KV head h / (n_heads / n_kv_heads)), attention sinks enter the
// softmax's denominator at the end.
//
// Precision: the queries (scaled), keys, values and probabilities are rounded to f16 (11-bit
// significands; the f16 cache's keys and values are exact), products summed in float32. The
// emulation test (tests/gpu/kv_emulation) holds the output to 2e-3 relative L2 of the CPU's.
#include <limits.h>

#include "backends/gpu/common.cuh"
#include "backends/gpu/kernels.h"
#include "backends/gpu/kv_block.cuh"
#include "backends/gpu/vendor/cuda/mma_m16n8k16.cuh"

namespace {

constexpr int kWarps = 4, kThreads = kWarps * 32;
constexpr int BQ = kWarps * 16;  // query rows per block
constexpr int BK = 64;           // keys per tile
constexpr int VST = BK + 8;      // f16 elements per transposed V row in shared memory
constexpr float kLog2e = 1.4426950408889634f;

struct MmaArgs {
    float *out;          // [n, n_heads, D]
    const float *q;      // [n, n_heads, D]
    const float *sinks;  // [n_heads] or NULL
    const uint16_t *kv;  // int16 codes (I16) or f16 bits
    const int32_t *slot, *pos;
    KvPages pg;
    int n, n_heads, n_kv_heads, window;
    float qscale;  // scale * log2(e)
};

__device__ __forceinline__ uint32_t pack_f16(float lo, float hi) {
    return (uint32_t)f32_to_f16_bits(lo) | ((uint32_t)f32_to_f16_bits(hi) << 16);
}

// Eight elements of a cache row at element offset d (a multiple of 8) as f16 bits: I16 codes times
// the scale of their chunk, f16 as stored.
template <bool I16>
__device__ __forceinline__ void row8_f16(const MmaArgs &a, int64_t row, int d, int D, uint16_t (&h)[8]) {
    const uint4 w = *(const uint4 *)(a.kv + row * D + d);
    if constexpr (I16) {
        float x[8];
        kv_unpack8<true>(w, x);
        const float s = a.pg.scales[row * a.pg.n_scales + d / MX_KV_SCALE_BLOCK];
#pragma unroll
        for (int i = 0; i < 8; i++) h[i] = f32_to_f16_bits(x[i] * s);
    } else {
        const uint32_t ws[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
        for (int i = 0; i < 4; i++) h[2 * i] = (uint16_t)(ws[i] & 0xffffu), h[2 * i + 1] = (uint16_t)(ws[i] >> 16);
    }
}

template <int D, bool I16>
__global__ void __launch_bounds__(kThreads) attn_mma_kernel(MmaArgs a) {
    constexpr int KST = D + 8;  // f16 elements per K row in shared memory
    constexpr int KD = D / 16;  // k steps of S = Q K^T
    constexpr int ND = D / 8;   // n tiles of O
    constexpr int NK = BK / 8;  // n tiles of S
    extern __shared__ __align__(16) unsigned char smem_raw[];
    uint16_t *ks = (uint16_t *)smem_raw;  // [BK][KST]
    uint16_t *vt = ks + BK * KST;         // [D][VST]
    __shared__ int s_slot[BQ], s_lo[BQ], s_hi[BQ], s_done[BQ];
    __shared__ int64_t s_row[BK];
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, tq = lane % 4;
    const int h = blockIdx.y, kvh = h / (a.n_heads / a.n_kv_heads), t0 = blockIdx.x * BQ;
    const int64_t vrows = (int64_t)a.n_kv_heads * MX_KV_BLOCK;
    if (tid < BQ) {
        const int t = t0 + tid;
        if (t < a.n) {
            const int p = a.pos[t];
            s_slot[tid] = a.slot[t], s_hi[tid] = p, s_lo[tid] = a.window > 0 ? max(0, p - a.window + 1) : 0;
            s_done[tid] = 0;
        } else {
            s_slot[tid] = -1, s_hi[tid] = -1, s_lo[tid] = 0, s_done[tid] = 1;
        }
    }
    // This lane's rows: r[0] = warp * 16 + g, r[1] = r[0] + 8; their query A fragments.
    const int r0 = warp * 16 + g;
    uint32_t qa[KD][4];
#pragma unroll
    for (int kk = 0; kk < KD; kk++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int t = t0 + r0 + 8 * (i & 1), d = kk * 16 + 2 * tq + 8 * (i >> 1);
            float x0 = 0.0f, x1 = 0.0f;
            if (t < a.n) {
                const float *qr = a.q + ((int64_t)t * a.n_heads + h) * D + d;
                x0 = qr[0] * a.qscale, x1 = qr[1] * a.qscale;
            }
            qa[kk][i] = pack_f16(x0, x1);
        }
    float o[ND][4];
#pragma unroll
    for (int j = 0; j < ND; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) o[j][e] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    __syncthreads();

    for (;;) {
        // The next group: unfinished rows sharing the first unfinished row's slot (block-uniform).
        int first = -1;
        for (int r = BQ - 1; r >= 0; r--)
            if (!s_done[r]) first = r;
        if (first < 0) break;
        const int cur = s_slot[first];
        int klo = INT_MAX, khi = -1, wlo = INT_MAX, whi = -1;
        for (int r = 0; r < BQ; r++)
            if (!s_done[r] && s_slot[r] == cur) {
                klo = min(klo, s_lo[r]), khi = max(khi, s_hi[r]);
                if (r / 16 == warp) wlo = min(wlo, s_lo[r]), whi = max(whi, s_hi[r]);
            }
        bool in[2];
        int lo[2], hi[2];
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const int r = r0 + 8 * i;
            in[i] = !s_done[r] && s_slot[r] == cur, lo[i] = s_lo[r], hi[i] = s_hi[r];
        }
        __syncthreads();
        if (tid < BQ && !s_done[tid] && s_slot[tid] == cur) s_done[tid] = 1;

        for (int k0 = klo; k0 <= khi; k0 += BK) {
            const int nk = min(BK, khi - k0 + 1);
            if (tid < nk) s_row[tid] = kv_row_index(a.pg, cur, k0 + tid, 0, kvh);
            __syncthreads();
            // K: key j's elements 8 oc.. (consecutive threads along a row: coalesced reads).
            for (int i = tid; i < BK * (D / 8); i += kThreads) {
                const int j = i / (D / 8), oc = i % (D / 8);
                uint16_t x[8] = {0, 0, 0, 0, 0, 0, 0, 0};
                if (j < nk) row8_f16<I16>(a, s_row[j], oc * 8, D, x);
                *(uint4 *)(ks + j * KST + oc * 8) =
                    make_uint4(x[0] | ((uint32_t)x[1] << 16), x[2] | ((uint32_t)x[3] << 16), x[4] | ((uint32_t)x[5] << 16),
                               x[6] | ((uint32_t)x[7] << 16));
            }
            // V transposed: keys 2 kp and 2 kp + 1, elements 8 oc.. -> eight words of vt (consecutive
            // threads along the keys: the stores of a warp hit 32 banks).
            for (int i = tid; i < (BK / 2) * (D / 8); i += kThreads) {
                const int kp = i % (BK / 2), oc = i / (BK / 2);
                uint16_t x0[8] = {0, 0, 0, 0, 0, 0, 0, 0}, x1[8] = {0, 0, 0, 0, 0, 0, 0, 0};
                if (2 * kp < nk) row8_f16<I16>(a, s_row[2 * kp] + vrows, oc * 8, D, x0);
                if (2 * kp + 1 < nk) row8_f16<I16>(a, s_row[2 * kp + 1] + vrows, oc * 8, D, x1);
#pragma unroll
                for (int e = 0; e < 8; e++) *(uint32_t *)(vt + (oc * 8 + e) * VST + 2 * kp) = x0[e] | ((uint32_t)x1[e] << 16);
            }
            __syncthreads();
            if (k0 <= whi && k0 + nk - 1 >= wlo) {  // warp-uniform: some row of this warp sees a key of the tile
                float s[NK][4];
#pragma unroll
                for (int j = 0; j < NK; j++)
#pragma unroll
                    for (int e = 0; e < 4; e++) s[j][e] = 0.0f;
#pragma unroll
                for (int kk = 0; kk < KD; kk++)
#pragma unroll
                    for (int j = 0; j < NK; j++) {
                        const uint16_t *kr = ks + (j * 8 + g) * KST + kk * 16 + 2 * tq;
                        mxg_mma_f16_m16n8k16(s[j], qa[kk], *(const uint32_t *)kr, *(const uint32_t *)(kr + 8));
                    }
                // Mask, then each row's maximum over its quad of lanes.
                float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
                for (int j = 0; j < NK; j++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const int i = e >> 1, key = k0 + j * 8 + 2 * tq + (e & 1);
                        if (!(in[i] && key >= lo[i] && key <= hi[i])) s[j][e] = -INFINITY;
                        mx[i] = fmaxf(mx[i], s[j][e]);
                    }
                float base[2];
#pragma unroll
                for (int i = 0; i < 2; i++) {
                    mx[i] = fmaxf(mx[i], mxg_shfl_xor<32>(mx[i], 1));
                    mx[i] = fmaxf(mx[i], mxg_shfl_xor<32>(mx[i], 2));
                    const float mn = fmaxf(m[i], mx[i]);
                    // No key yet for this row: nothing to rescale, and every p below is 0.
                    const float corr = mn == -INFINITY ? 1.0f : exp2f(m[i] - mn);
                    base[i] = mn == -INFINITY ? 0.0f : mn;
                    m[i] = mn, l[i] *= corr;
#pragma unroll
                    for (int j = 0; j < ND; j++) o[j][2 * i] *= corr, o[j][2 * i + 1] *= corr;
                }
                // P (f16 A fragments: the accumulators of n tiles 2c and 2c + 1 are the 16 keys of k step c).
                uint32_t pa[BK / 16][4];
#pragma unroll
                for (int j = 0; j < NK; j++) {
                    float p[4];
#pragma unroll
                    for (int e = 0; e < 4; e++) p[e] = exp2f(s[j][e] - base[e >> 1]);
                    l[0] += p[0] + p[1], l[1] += p[2] + p[3];
                    pa[j / 2][2 * (j % 2)] = pack_f16(p[0], p[1]);
                    pa[j / 2][2 * (j % 2) + 1] = pack_f16(p[2], p[3]);
                }
#pragma unroll
                for (int c = 0; c < BK / 16; c++)
#pragma unroll
                    for (int j = 0; j < ND; j++) {
                        const uint16_t *vr = vt + (j * 8 + g) * VST + c * 16 + 2 * tq;
                        mxg_mma_f16_m16n8k16(o[j], pa[c], *(const uint32_t *)vr, *(const uint32_t *)(vr + 8));
                    }
            }
            __syncthreads();
        }
    }

    // Epilogue: each row's sum over its quad, the sink, the store.
    const float sink = a.sinks ? a.sinks[h] * kLog2e : -INFINITY;
#pragma unroll
    for (int i = 0; i < 2; i++) {
        l[i] += mxg_shfl_xor<32>(l[i], 1);
        l[i] += mxg_shfl_xor<32>(l[i], 2);
        const int t = t0 + r0 + 8 * i;
        if (t >= a.n) continue;
        float inv = 0.0f;
        if (m[i] != -INFINITY) {
            if (sink > m[i]) {
                const float r = exp2f(m[i] - sink);
                inv = r / (l[i] * r + 1.0f);
            } else {
                inv = 1.0f / (l[i] + exp2f(sink - m[i]));
            }
        }
        float *orow = a.out + ((int64_t)t * a.n_heads + h) * D;
#pragma unroll
        for (int j = 0; j < ND; j++) orow[j * 8 + 2 * tq] = o[j][2 * i] * inv, orow[j * 8 + 2 * tq + 1] = o[j][2 * i + 1] * inv;
    }
}

template <int D, bool I16>
void launch(const mxg_launch *L, const MmaArgs &a) {
    const size_t smem = ((size_t)BK * (D + 8) + (size_t)D * VST) * sizeof(uint16_t);  // D 128: 35,840 bytes
    dim3 grid((unsigned)((a.n + BQ - 1) / BQ), (unsigned)a.n_heads);
    attn_mma_kernel<D, I16><<<grid, kThreads, smem, (gpuStream_t)L->stream>>>(a);
}

}  // namespace

extern "C" int mxg_attention_mma(const mxg_launch *L, float *out, const float *q, const mx_kv_ref *r, int n,
                                 int n_heads, float scale, int window, const float *sinks) {
    const int D = r->lay.head_dim;
    if (L->cc < 80 || L->warp != 32 || (D != 64 && D != 128) || n <= 0 || n_heads > 65535) return -1;
    MmaArgs a;
    a.out = out, a.q = q, a.sinks = sinks, a.kv = (const uint16_t *)r->kv, a.slot = r->slot, a.pos = r->pos;
    a.pg = kv_pages(r, L->kv_i16);
    a.n = n, a.n_heads = n_heads, a.n_kv_heads = r->lay.n_kv_heads, a.window = window;
    a.qscale = scale * kLog2e;
    if (D == 64) {
        if (L->kv_i16) launch<64, true>(L, a);
        else launch<64, false>(L, a);
    } else {
        if (L->kv_i16) launch<128, true>(L, a);
        else launch<128, false>(L, a);
    }
    return 0;
}
