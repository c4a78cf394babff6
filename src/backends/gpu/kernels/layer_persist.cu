// SPDX-License-Identifier: MIT
// The persistent decode layer (MLXCEL_GPU_MEGA=1, L->mega; the plan runner, gpu_plan.c, finds the
// records): one token through a whole dense Qwen3/Llama-style layer in ONE launch, where the
// default path takes five (norm + q/k/v, attention with q/k norm + RoPE + KV store, o + residual,
// norm + gate/up + SwiGLU, down + residual), each of which spends its few microseconds on its own
// chain (wait, fetch the row, fetch weights, reduce, write) rather than on bytes. The grid is as
// many blocks as fit on the device at once (the occupancy API), all resident, and walks six
// phases separated by a software grid barrier:
//   1. every block normalizes the residual stream h into shared memory (block 0 also writes the
//      norm's output); the block's contiguous share of the q, k and v rows, a row per warp task;
//   2. per (query head, split of its positions) task, grid-stride: the head's q and its KV head's
//      k normed and rotated, the token's cache row (the cache's element format) built in shared
//      memory; split 0 of the first query head of each KV head writes that row into the cache;
//      attention over the split's positions, from the cache and (the token's own) from shared
//      memory; the split's partial softmax (m, l, o) into L->scratch;
//   3. per query head: its partials merged into the attention row;
//   4. the attention row staged; the o rows, o[r] and h[r] += o[r];
//   5. h normalized again (block 0 writes the norm's output); gate and up rows (a warp computes
//      row r of both), gate[r], up[r] and act[r] = silu(gate[r]) * up[r];
//   6. act staged; the down rows, down[r] and h[r] += down[r].
// Before each barrier wait every block asks L2 for the weights of its rows of the next phase
// (weights never depend on activations; mxg_prefetch_l2, at most L->pdl_prefetch bytes per phase
// over the grid), so the barrier's latency hides their fetch.
// The barrier: a counter and a generation in L->mega_barrier (zeroed at start). Each block's
// thread 0 reads the generation, fences its block's writes, and arrives; the last arrival resets
// the counter and bumps the generation (release); the others spin until the generation moves,
// then fence (acquire). The counter is 0 again after every barrier, so the state is right for the
// next launch and across CUDA graph replays; the generation only ever grows (wrap-around is fine).
// The launch is an ordinary (dependent) one, not cooperative: every block is resident because the
// grid is the occupancy API's count and the backend's one stream has the device (the blocks of an
// earlier kernel, still running under programmatic dependent launch, only delay residency: no block
// reaches a barrier before its grid wait, which returns once that kernel has finished).
// Outputs: every buffer the records write, with the values they would leave up to float32
// summation order (the dot products are matvec.cuh's scaled 4/8-bit dot over the same staged
// activations; attention is a plain online softmax, a warp per position stride), except q and k,
// which stay unrotated as with the decode attention's folded RoPE (the plan checks that no later
// record reads them). Affine 4/8-bit weights, one token, head sizes up to 256 (even), no sinks;
// the caller (mxg_layer_persist_ok) checks the rest. `phased`: one launch per phase and no
// barrier, for the host emulation (tests/gpu/kv_emulation), whose blocks run one after another.
#include "backends/gpu/kernels/matvec.cuh"
#include "backends/gpu/kernels_fused.h"
#include "backends/gpu/kv_block.cuh"

#include <type_traits>

namespace {

using namespace mxg;

constexpr int kLayerThreads = 128;  // 4 warps of 32 (2 of 64)
constexpr int kLayerMaxD = 256;     // longest head
constexpr int kLayerPhases = 6;
constexpr int kLayerMaxSplits = 64;  // splits of one head's positions (phase 2)

struct LayerArgs {
    float *h;                                   // [hidden] the residual stream (read, += o, += down)
    const float *norm1_w, *norm2_w;             // [hidden]
    float eps1, eps2;
    float *xn1, *xn2;                           // [hidden] the norms' outputs
    MatView w[3];                               // q, k, v [rows_k, hidden]
    float *qkv[3];                              // [rows_k] q, k, v (q and k stay unrotated: see above)
    const float *qkv_bias[3];
    const float *qn_w, *kn_w;                   // [D] the per-head norms (both NULL: none)
    float qk_eps;
    const int32_t *rope_pos;                    // [1]
    const float *inv_freq;                      // [D / 2]
    float attn_factor;
    uint16_t *kv;                               // the cache (int16 codes or f16 bits)
    const int32_t *slot, *pos;                  // [1]
    KvPages pg;
    int n_heads, n_kv_heads, D, window;
    float scale;
    bool i16;
    float *attn;                                // [n_heads * D]
    MatView wo;                                 // [hidden, n_heads * D]
    float *o;                                   // [hidden]
    const float *o_bias;
    MatView wg, wu;                             // [inter, hidden]
    float *gate, *up, *act;                     // [inter]
    const float *g_bias, *u_bias;
    MatView wd;                                 // [hidden, inter]
    float *down;                                // [hidden]
    const float *d_bias;
    float *part;                                // [n_heads, splits, D + 2] attention partials (m, l, o)
    int splits;                                 // splits of the positions per head
    unsigned *bar;                              // [2] arrivals, generation
    unsigned prefetch;                          // L2 prefetch bytes per block per phase (0: none)
};

// The block's contiguous share [lo, hi) of `total` tasks.
__device__ __forceinline__ void block_share(int64_t total, int64_t &lo, int64_t &hi) {
    const int64_t per = (total + gridDim.x - 1) / gridDim.x;
    lo = min(total, (int64_t)blockIdx.x * per);
    hi = min(total, lo + per);
}

// Stages x [cols] (normalized by 1/rms * norm_w when norm_w; block 0 then also writes the
// normalized row to norm_out) into xs4 for the scaled dot of F (matvec.cuh's swizzled layout).
template <int W, class F>
__device__ void stage_row(float4 *xs4, float *red, const float *x, int cols, const float *norm_w, float eps,
                          float *norm_out) {
    const int n4 = (cols >> 5) * 8;
    float scale = 1.0f;
    if (norm_w) {
        float ss = 0.0f;
        for (int i = threadIdx.x; i < cols; i += blockDim.x) ss = fmaf(x[i], x[i], ss);
        ss = block_sum<W>(ss, red);
        scale = 1.0f / sqrtf(ss / (float)cols + eps);
    }
    for (int i = threadIdx.x; i < n4; i += blockDim.x) {
        float4 v = ((const float4 *)x)[i];
        if (norm_w) {
            const float4 w = ((const float4 *)norm_w)[i];
            v = make_float4(v.x * scale * w.x, v.y * scale * w.y, v.z * scale * w.z, v.w * scale * w.w);
            if (blockIdx.x == 0) ((float4 *)norm_out)[i] = v;
        }
        const int c = i >> 3, q = i & 7;
        xs4[c * 8 + (q ^ (c & 7))] = scaled_slot<F::bits>(v, q);
    }
    __syncthreads();
}

// One warp's dot products of row `row` of the NM matrices m[] with the staged row: the scaled
// dot of matvec.cuh, lane l over chunks l, l + W, ..., the next chunk's words in flight.
template <int W, class F, int NM>
__device__ __forceinline__ void warp_rows_dot(const MatView *m, int64_t row, const float4 *xs4, float (&acc)[NM]) {
    const int lane = threadIdx.x % W, nchunks = m[0].cols >> 5;
    typename F::Raw cur[NM], nxt[NM];
#pragma unroll
    for (int k = 0; k < NM; k++) acc[k] = 0.0f;
    if (lane < nchunks) {
#pragma unroll
        for (int k = 0; k < NM; k++) F::load_raw(m[k], row, lane, cur[k]);
    }
    for (int c = lane; c < nchunks; c += W) {
        if (c + W < nchunks) {
#pragma unroll
            for (int k = 0; k < NM; k++) F::load_raw(m[k], row, c + W, nxt[k]);
        }
        float xv[32];
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const float4 v = xs4[c * 8 + (i ^ (c & 7))];
            xv[4 * i] = v.x, xv[4 * i + 1] = v.y, xv[4 * i + 2] = v.z, xv[4 * i + 3] = v.w;
        }
        const float xs = scaled_sum<F::bits>(xv);
#pragma unroll
        for (int k = 0; k < NM; k++) acc[k] += scaled_dot<F>(cur[k], xv, xs);
#pragma unroll
        for (int k = 0; k < NM; k++) cur[k] = nxt[k];
    }
#pragma unroll
    for (int k = 0; k < NM; k++) acc[k] = warp_sum<W>(acc[k]);
}

// Asks L2 for the block's rows [lo, hi) of the concatenation of `count` matrices (the weights of
// its next phase), at most `budget` bytes.
template <class F>
__device__ void prefetch_share_rows(const MatView *m, int count, int64_t lo, int64_t hi, unsigned budget) {
    if (threadIdx.x != 0 || budget == 0) return;
    int64_t base = 0;
    for (int k = 0; k < count && lo < hi; k++) {
        const int64_t a = max(lo, base), b = min(hi, base + m[k].rows);
        if (a < b) prefetch_rows<F>(m[k], a - base, (int)(b - a), budget);
        base += m[k].rows;
    }
}

// Phases 1, 3, 4 and 5's row work: the block's share of `count` matrices' rows (q/k/v; o; down) or
// of the shared rows of gate and up (NM 2), against the staged row xs4.
template <int W, class F, int NM>
__device__ void rows_phase(const LayerArgs &a, const MatView *m, int count, float *const *out,
                           const float *const *bias, float *res, const float4 *xs4) {
    int64_t total = 0;
    for (int k = 0; k < (NM == 2 ? 1 : count); k++) total += m[k].rows;
    int64_t lo, hi;
    block_share(total, lo, hi);
    const int warp = threadIdx.x / W, lane = threadIdx.x % W;
    constexpr int warps = kLayerThreads / W;
    for (int64_t t = lo + warp; t < hi; t += warps) {
        int mi = 0;
        int64_t r = t;
        if (NM == 1)
            while (mi + 1 < count && r >= m[mi].rows) r -= m[mi].rows, mi++;
        float acc[NM];
        warp_rows_dot<W, F, NM>(NM == 2 ? m : m + mi, r, xs4, acc);
        if (lane != 0) continue;
        if (NM == 2) {
            const float g = acc[0] + (bias[0] ? bias[0][r] : 0.0f);
            const float u = acc[NM - 1] + (bias[1] ? bias[1][r] : 0.0f);
            out[0][r] = g;
            out[1][r] = u;
            a.act[r] = silu_mul(g, u);
        } else {
            const float v = acc[0] + (bias[mi] ? bias[mi][r] : 0.0f);
            out[mi][r] = v;
            if (res) res[r] += v;
        }
    }
}

// Phase 2 for task (query head hq, split sp): the head's q and its KV head's k normed and rotated
// (warps 0 and 1, the decode attention's folded arithmetic: head_norm_factor, rope_pair), the
// token's cache row in the cache's format in shared memory (written to the cache by split 0 of the
// KV head's first query head; no block reads that position from the cache), then the split's share
// of the positions [window start, pos]: warp w takes positions w, w + warps, ... of it, kU at a time
// (their loads issued together), each warp an online softmax of its own (natural-log units), merged
// across warps into the split's partial (m, l, o[D]) in a.part.
template <int W, bool I16>
__device__ void attention_split(const LayerArgs &a, int hq, int sp, float *s_q, float *s_k, int16_t *s_codes,
                                float *s_sc, float *s_m, float *s_l, float *s_o) {
    constexpr int warps = kLayerThreads / W, PL = kLayerMaxD / W, kU = 4;
    const int warp = threadIdx.x / W, lane = threadIdx.x % W, D = a.D, half = D / 2;
    const int group = a.n_heads / a.n_kv_heads, kvh = hq / group;
    const float p = (float)a.rope_pos[0];
    if (warp < 2) {  // warp 0: the query head, warp 1: the k row
        const float *src = warp == 0 ? a.qkv[0] + (int64_t)hq * D : a.qkv[1] + (int64_t)kvh * D;
        const float *w = warp == 0 ? a.qn_w : a.kn_w;
        float *dst = warp == 0 ? s_q : s_k;
        float x0[PL / 2], x1[PL / 2];
        float ss = 0.0f;
#pragma unroll
        for (int c = 0; c < PL / 2; c++) {
            const int j = c * W + lane;
            x0[c] = x1[c] = 0.0f;
            if (j < half) x0[c] = src[j], x1[c] = src[j + half];
            ss += warp_sum<W>(fmaf(x1[c], x1[c], fmaf(x0[c], x0[c], 0.0f)));
        }
        const float r = w ? head_norm_factor(ss, half, a.qk_eps) : 1.0f;
#pragma unroll
        for (int c = 0; c < PL / 2; c++) {
            const int j = c * W + lane;
            if (j >= half) continue;
            if (w) x0[c] = x0[c] * r * w[j], x1[c] = x1[c] * r * w[j + half];
            rope_pair(x0[c], x1[c], p, a.inv_freq[j], a.attn_factor);
            dst[j] = x0[c], dst[j + half] = x1[c];
        }
    }
    __syncthreads();
    // The token's cache row (K then V) as the store makes it.
    const float *vsrc = a.qkv[2] + (int64_t)kvh * D;
    const int slot = a.slot[0], hi = a.pos[0], lo = a.window > 0 ? max(0, hi - a.window + 1) : 0;
    const int nsc = a.pg.n_scales;
    if constexpr (I16) {
        KvPages rowp = a.pg;
        rowp.scales = s_sc;
        for (int i = threadIdx.x; i < 2 * nsc; i += blockDim.x)
            kv_store_chunk(s_codes, rowp, i / nsc, i % nsc, i / nsc ? vsrc : s_k);
    } else {
        uint16_t *rowh = (uint16_t *)s_codes;
        for (int d = threadIdx.x; d < D; d += blockDim.x)
            rowh[d] = f32_to_f16_bits(s_k[d]), rowh[D + d] = f32_to_f16_bits(vsrc[d]);
    }
    __syncthreads();
    if (hq % group == 0 && sp == 0) {  // the KV head's first query head writes the row into the cache
        for (int which = 0; which < 2; which++) {
            const int64_t row = kv_row_index(a.pg, slot, hi, which, kvh);
            for (int d = threadIdx.x; d < D; d += blockDim.x) a.kv[row * D + d] = (uint16_t)s_codes[which * D + d];
            if constexpr (I16)
                for (int c = threadIdx.x; c < nsc; c += blockDim.x) a.pg.scales[row * nsc + c] = s_sc[which * nsc + c];
        }
    }
    // This split's positions.
    const int per = (hi - lo + a.splits) / a.splits, p0 = lo + sp * per, p1 = min(hi, p0 + per - 1);
    float q[PL], o[PL];
#pragma unroll
    for (int i = 0; i < PL; i++) q[i] = i * W + lane < D ? s_q[i * W + lane] : 0.0f, o[i] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    for (int base = p0 + warp; base <= p1; base += warps * kU) {  // warp-uniform
        float kk[kU][PL], vv[kU][PL];
#pragma unroll
        for (int u = 0; u < kU; u++) {
            const int ps = base + u * warps;
#pragma unroll
            for (int i = 0; i < PL; i++) kk[u][i] = vv[u][i] = 0.0f;
            if (ps > p1) continue;
            if (ps == hi) {
#pragma unroll
                for (int i = 0; i < PL; i++) {
                    const int d = i * W + lane;
                    if (d >= D) continue;
                    if constexpr (I16) {
                        kk[u][i] = (float)s_codes[d] * s_sc[d / MX_KV_SCALE_BLOCK];
                        vv[u][i] = (float)s_codes[D + d] * s_sc[nsc + d / MX_KV_SCALE_BLOCK];
                    } else {
                        kk[u][i] = f16_to_f32((uint16_t)s_codes[d]), vv[u][i] = f16_to_f32((uint16_t)s_codes[D + d]);
                    }
                }
            } else {
                const int64_t kr = kv_row_index(a.pg, slot, ps, 0, kvh), vr = kv_row_index(a.pg, slot, ps, 1, kvh);
#pragma unroll
                for (int i = 0; i < PL; i++) {
                    const int d = i * W + lane;
                    if (d < D) kk[u][i] = kv_value<I16>(a.pg, a.kv, kr, d), vv[u][i] = kv_value<I16>(a.pg, a.kv, vr, d);
                }
            }
        }
        float sc[kU];
#pragma unroll
        for (int u = 0; u < kU; u++) {
            float d = 0.0f;
#pragma unroll
            for (int i = 0; i < PL; i++) d = fmaf(q[i], kk[u][i], d);
            sc[u] = d;
        }
#pragma unroll
        for (int u = 0; u < kU; u++) sc[u] = warp_sum<W>(sc[u]) * a.scale;
#pragma unroll
        for (int u = 0; u < kU; u++) {
            if (base + u * warps > p1) break;
            const float mn = fmaxf(m, sc[u]), c = expf(m - mn), e = expf(sc[u] - mn);
            l = l * c + e;
#pragma unroll
            for (int i = 0; i < PL; i++) o[i] = fmaf(o[i], c, e * vv[u][i]);
            m = mn;
        }
    }
    if (lane == 0) s_m[warp] = m, s_l[warp] = l;
#pragma unroll
    for (int i = 0; i < PL; i++)
        if (i * W + lane < D) s_o[warp * kLayerMaxD + i * W + lane] = o[i];
    __syncthreads();
    float M = -INFINITY;
    for (int w = 0; w < warps; w++) M = fmaxf(M, s_m[w]);
    float *part = a.part + ((int64_t)hq * a.splits + sp) * (D + 2);  // (m, l, o[D])
    for (int d = threadIdx.x; d < D + 2; d += blockDim.x) {
        float acc = 0.0f;
        for (int w = 0; w < warps; w++) {
            if (s_m[w] == -INFINITY) continue;
            const float f = expf(s_m[w] - M);
            acc = d == 0 ? 0.0f : fmaf(d == 1 ? s_l[w] : s_o[w * kLayerMaxD + d - 2], f, acc);
        }
        part[d] = d == 0 ? M : acc;
    }
    __syncthreads();  // the shared rows are reused by the block's next task
}

// Phase 3 for query head hq: its splits' partials merged, attn = o / l.
__device__ void attention_combine(const LayerArgs &a, int hq) {
    const int D = a.D;
    const float *part = a.part + (int64_t)hq * a.splits * (D + 2);
    float M = -INFINITY;
    for (int sp = 0; sp < a.splits; sp++) M = fmaxf(M, part[(int64_t)sp * (D + 2)]);
    float L = 0.0f;
    for (int sp = 0; sp < a.splits; sp++) {
        const float m = part[(int64_t)sp * (D + 2)];
        if (m != -INFINITY) L = fmaf(part[(int64_t)sp * (D + 2) + 1], expf(m - M), L);
    }
    for (int d = threadIdx.x; d < D; d += blockDim.x) {
        float acc = 0.0f;
        for (int sp = 0; sp < a.splits; sp++) {
            const float m = part[(int64_t)sp * (D + 2)];
            if (m != -INFINITY) acc = fmaf(part[(int64_t)sp * (D + 2) + 2 + d], expf(m - M), acc);
        }
        a.attn[(int64_t)hq * D + d] = acc / L;
    }
}

// The grid barrier (see the top of the file). Every thread of every block calls it.
__device__ __forceinline__ void grid_barrier(unsigned *bar) {
    __syncthreads();
    if (threadIdx.x == 0) {
        volatile unsigned *gen = bar + 1;
        const unsigned g = *gen;
        __threadfence();
        if (atomicAdd(bar, 1u) == gridDim.x - 1) {
            *(volatile unsigned *)bar = 0u;
            __threadfence();
            atomicAdd(bar + 1, 1u);
        } else {
            while (*gen == g) {
            }
        }
        __threadfence();
    }
    __syncthreads();
}

// The weights of phase `ph` (1..6) of this block, into L2.
template <class F>
__device__ void prefetch_phase(const LayerArgs &a, int ph) {
    int64_t lo, hi;
    if (ph == 1) {
        block_share(a.w[0].rows + a.w[1].rows + a.w[2].rows, lo, hi);
        prefetch_share_rows<F>(a.w, 3, lo, hi, a.prefetch);
    } else if (ph == 3) {  // o's rows, a phase early: the combine reads little
        block_share(a.wo.rows, lo, hi);
        prefetch_share_rows<F>(&a.wo, 1, lo, hi, a.prefetch);
    } else if (ph == 5) {
        block_share(a.wg.rows, lo, hi);
        prefetch_share_rows<F>(&a.wg, 1, lo, hi, a.prefetch / 32 * 16);
        prefetch_share_rows<F>(&a.wu, 1, lo, hi, a.prefetch / 32 * 16);
    } else if (ph == 6) {
        block_share(a.wd.rows, lo, hi);
        prefetch_share_rows<F>(&a.wd, 1, lo, hi, a.prefetch);
    }
}

template <int W, class F, bool I16>
__device__ void run_phase(const LayerArgs &a, int ph, float4 *xs4, float *red) {
    if (ph == 1) {
        stage_row<W, F>(xs4, red, a.h, a.w[0].cols, a.norm1_w, a.eps1, a.xn1);
        rows_phase<W, F, 1>(a, a.w, 3, a.qkv, a.qkv_bias, NULL, xs4);
    } else if (ph == 2) {
        constexpr int warps = kLayerThreads / W;
        float *s_q = (float *)xs4, *s_k = s_q + kLayerMaxD, *s_sc = s_k + kLayerMaxD;
        float *s_m = s_sc + 2 * kLayerMaxD, *s_l = s_m + warps, *s_o = s_l + warps;
        int16_t *s_codes = (int16_t *)(s_o + warps * kLayerMaxD);  // [2 * D]
        for (int t = blockIdx.x; t < a.n_heads * a.splits; t += gridDim.x)
            attention_split<W, I16>(a, t / a.splits, t % a.splits, s_q, s_k, s_codes, s_sc, s_m, s_l, s_o);
    } else if (ph == 3) {
        for (int hq = blockIdx.x; hq < a.n_heads; hq += gridDim.x) attention_combine(a, hq);
    } else if (ph == 4) {
        stage_row<W, F>(xs4, red, a.attn, a.wo.cols, NULL, 0.0f, NULL);
        float *out[1] = {a.o};
        const float *bias[1] = {a.o_bias};
        rows_phase<W, F, 1>(a, &a.wo, 1, out, bias, a.h, xs4);
    } else if (ph == 5) {
        stage_row<W, F>(xs4, red, a.h, a.wg.cols, a.norm2_w, a.eps2, a.xn2);
        const MatView m[2] = {a.wg, a.wu};
        float *out[2] = {a.gate, a.up};
        const float *bias[2] = {a.g_bias, a.u_bias};
        rows_phase<W, F, 2>(a, m, 2, out, bias, NULL, xs4);
    } else {
        stage_row<W, F>(xs4, red, a.act, a.wd.cols, NULL, 0.0f, NULL);
        float *out[1] = {a.down};
        const float *bias[1] = {a.d_bias};
        rows_phase<W, F, 1>(a, &a.wd, 1, out, bias, a.h, xs4);
    }
    __syncthreads();  // the staged row is reused by the next phase
}

// Phases first..last; a grid barrier between two (never when first == last). Bounded to 3 blocks a
// multiprocessor (168 registers at sm_90a, a few bytes spilled by the attention phase's four
// positions in flight; unbounded it took 160-205 and 2 blocks): the streaming phases want warps.
template <int W, class F, bool I16>
__global__ void __launch_bounds__(kLayerThreads, 3) layer_persist_kernel(LayerArgs a, int first, int last) {
    MXG_WARP_ONLY(W) {
    extern __shared__ float4 xs4[];  // the staged row (matvec.cuh's layout); phase 2's head rows
    float *red = (float *)xs4;       // the norm's reduction scratch, before the row is staged
    prefetch_phase<F>(a, first);
    mxg_grid_wait();  // a dependent launch: nothing an earlier kernel wrote is read before this
    for (int ph = first; ph <= last; ph++) {
        run_phase<W, F, I16>(a, ph, xs4, red);
        if (ph < last) {
            prefetch_phase<F>(a, ph + 1);
            if (ph + 1 == last) mxg_grid_release();  // the next layer's launch may come and prefetch
            grid_barrier(a.bar);
        }
    }
    }
}

// Shared memory: the widest staged row, or phase 2's head rows.
size_t layer_smem(const LayerArgs &a, int warps) {
    int cols = a.w[0].cols;
    cols = max(cols, a.wo.cols);
    cols = max(cols, a.wd.cols);
    const size_t stage = (size_t)(cols / 32) * 128;
    const size_t heads = sizeof(float) * (4 * kLayerMaxD + 2 * warps + (size_t)warps * kLayerMaxD) +
                         sizeof(int16_t) * 2 * kLayerMaxD;
    return stage > heads ? stage : heads;
}

template <class Fn>
bool dispatch_layer_format(const mx_matrix *w, Fn &&fn) {
    if (w->q.mode != MX_QUANT_AFFINE || (w->q.bits != 4 && w->q.bits != 8)) return false;
    if (w->q.group_size != 32 && w->q.group_size != 64 && w->q.group_size != 128) return false;
    if (w->scale_dtype != MX_DTYPE_BF16 && w->scale_dtype != MX_DTYPE_F16) return false;
    const bool bf = w->scale_dtype == MX_DTYPE_BF16;
    if (w->q.bits == 4) {
        if (bf) fn(Fmt<KIND_AFFINE, 4, ST_BF16>{});
        else fn(Fmt<KIND_AFFINE, 4, ST_F16>{});
    } else {
        if (bf) fn(Fmt<KIND_AFFINE, 8, ST_BF16>{});
        else fn(Fmt<KIND_AFFINE, 8, ST_F16>{});
    }
    return true;
}

bool same_layer_format(const mx_matrix *a, const mx_matrix *b) {
    return a->q.mode == b->q.mode && a->q.bits == b->q.bits && a->q.group_size == b->q.group_size &&
           a->scale_dtype == b->scale_dtype && a->n_experts == 1 && b->n_experts == 1;
}

bool aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

// Blocks of the kernel resident on one multiprocessor (the occupancy API), at least 1. Asked once
// per kernel and shared memory size: every context of the process runs the same build's kernels.
template <int W, class F, bool I16>
int layer_blocks_per_sm(size_t smem) {
    static int per_sm = 0;
    static size_t asked = 0;
    if (per_sm == 0 || asked != smem) {
        int n = 0;
        if (gpuOccupancyMaxActiveBlocksPerMultiprocessor(&n, layer_persist_kernel<W, F, I16>, kLayerThreads, smem) !=
                gpuSuccess || n < 1)
            n = 1;
        per_sm = n, asked = smem;
    }
    return per_sm;
}

}  // namespace

extern "C" bool mxg_layer_persist_ok(const mxg_launch *L, const mxg_layer *f) {
    const mx_matrix *w0 = f->w[0];
    const int D = f->rope->head_dim;
    if (!L->mega || !L->mega_barrier || !dispatch_layer_format(w0, [](auto) {})) return false;
    if (!L->scratch || L->scratch_bytes < sizeof(float) * (size_t)f->n_heads * (size_t)(D + 2)) return false;
    const mx_matrix *all[7] = {f->w[0], f->w[1], f->w[2], f->wo, f->wg, f->wu, f->wd};
    for (int k = 0; k < 7; k++)
        if (!same_layer_format(all[k], w0) || all[k]->cols % 32 != 0 || !aligned16(all[k]->data) ||
            (size_t)(all[k]->cols / 32) * 128 > kMatvecStageBytes)
            return false;
    const int64_t hidden = w0->cols, qd = (int64_t)f->n_heads * D, kd = (int64_t)f->n_kv_heads * D;
    if (D % 2 != 0 || D > kLayerMaxD || f->n_kv_heads <= 0 || f->n_heads % f->n_kv_heads != 0 || f->sinks ||
        f->w[0]->rows != qd || f->w[1]->rows != kd || f->w[2]->rows != kd || f->w[1]->cols != hidden ||
        f->w[2]->cols != hidden || f->wo->cols != qd || f->wo->rows != hidden || f->wg->cols != hidden ||
        f->wu->cols != hidden || f->wu->rows != f->wg->rows || f->wd->cols != f->wg->rows || f->wd->rows != hidden)
        return false;
    if (f->kv->lay.n_kv_heads != f->n_kv_heads || f->kv->lay.head_dim != D || (f->q_norm == NULL) != (f->k_norm == NULL))
        return false;
    const void *rows[] = {f->h, f->norm1_w, f->norm2_w, f->xn1, f->xn2, f->q, f->k, f->v, f->attn, f->gate, f->up, f->act};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        if (!aligned16(rows[i])) return false;
    return true;
}

extern "C" void mxg_layer_persist(const mxg_launch *L, const mxg_layer *f, bool phased) {
    MX_ASSERT(mxg_layer_persist_ok(L, f));
    LayerArgs a = {};
    a.h = f->h, a.norm1_w = f->norm1_w, a.norm2_w = f->norm2_w, a.eps1 = f->eps1, a.eps2 = f->eps2;
    a.xn1 = f->xn1, a.xn2 = f->xn2;
    const mx_matrix *qkv[3] = {f->w[0], f->w[1], f->w[2]};
    float *outs[3] = {f->q, f->k, f->v};
    for (int k = 0; k < 3; k++) a.w[k] = mat_view(qkv[k]), a.qkv[k] = outs[k], a.qkv_bias[k] = f->bias[k];
    a.qn_w = f->q_norm, a.kn_w = f->k_norm, a.qk_eps = f->qk_eps;
    a.rope_pos = f->rope_pos, a.inv_freq = f->rope->inv_freq, a.attn_factor = f->rope->attn_factor;
    a.kv = (uint16_t *)f->kv->kv, a.slot = f->kv->slot, a.pos = f->kv->pos, a.pg = kv_pages(f->kv, L->kv_i16);
    a.n_heads = f->n_heads, a.n_kv_heads = f->n_kv_heads, a.D = f->rope->head_dim, a.window = f->window;
    a.scale = f->scale, a.i16 = L->kv_i16, a.attn = f->attn;
    a.wo = mat_view(f->wo), a.o = f->o, a.o_bias = f->o_bias;
    a.wg = mat_view(f->wg), a.wu = mat_view(f->wu), a.gate = f->gate, a.up = f->up, a.act = f->act;
    a.g_bias = f->g_bias, a.u_bias = f->u_bias;
    a.wd = mat_view(f->wd), a.down = f->down, a.d_bias = f->d_bias;
    a.bar = (unsigned *)L->mega_barrier;
    a.part = (float *)L->scratch;
    gpuStream_t s = (gpuStream_t)L->stream;
    dispatch_layer_format(f->w[0], [&](auto fmt) {
        using F = decltype(fmt);
        MXG_WARP_DISPATCH(L->warp, {
            const size_t smem = layer_smem(a, kLayerThreads / W);
            auto run = [&](auto i16) {
                constexpr bool I16 = decltype(i16)::value;
                // One grid for every phase: as many blocks as are resident at once (phased: two per
                // multiprocessor, any number would do).
                const unsigned blocks =
                    (unsigned)(L->sm_count * (phased ? 2 : layer_blocks_per_sm<W, F, I16>(smem)));
                a.prefetch = L->pdl_prefetch ? (unsigned)(L->pdl_prefetch / blocks) & ~15u : 0u;
                // Splits of each head's positions: the grid's blocks over the heads (at most
                // kLayerMaxSplits), as many partials as the scratch holds.
                const size_t part_bytes = sizeof(float) * (size_t)a.n_heads * (size_t)(a.D + 2);
                int splits = (int)blocks / a.n_heads;
                splits = max(1, min(splits, kLayerMaxSplits));
                while (splits > 1 && part_bytes * (size_t)splits > L->scratch_bytes) splits--;
                a.splits = splits;
                if (phased) {
                    const dim3 grid(blocks), block(kLayerThreads);
                    for (int ph = 1; ph <= kLayerPhases; ph++)
                        layer_persist_kernel<W, F, I16><<<grid, block, smem, s>>>(a, ph, ph);
                } else {
                    mxg_launch_dep(layer_persist_kernel<W, F, I16>, dim3(blocks),
                                   dim3(kLayerThreads), smem, s, L->dependent_launch, a, 1, kLayerPhases);
                }
            };
            if (L->kv_i16) run(std::true_type{});
            else run(std::false_type{});
        });
    });
}
