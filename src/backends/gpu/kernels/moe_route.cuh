// SPDX-License-Identifier: MIT
// The MoE routing of one token by one warp (the moe_route record's arithmetic, backend.h): softmax
// over the expert logits (float32), the k largest probabilities (first index wins ties; NaN ranks
// above numbers), optionally renormalized to sum 1. Run by kernels/moe.cu's routing kernel (one
// warp per token) and by the fused MoE decode launches (kernels/moe_stream.cu at level 2,
// kernels/moe_router.cu at level 3: their block's first warp), all with the same bits, which are
// those of the block form of 128 threads it replaced (its summation order, kMoeRouteThreads).
#ifndef MXG_MOE_ROUTE_CUH
#define MXG_MOE_ROUTE_CUH

#include "backends/gpu/common.cuh"

namespace mxg {

constexpr int kMoeRouteThreads = 128;  // the threads whose summation order the routing keeps

// (value, index) pair reduction: larger value wins, then smaller index. NaN ranks above every number
// (then smaller index wins among NaNs), a total order, so the reduction's result does not depend on
// its order. The router's probabilities are all NaN or none (a NaN or infinite logit makes the
// softmax's sum NaN), and with all NaN each pass takes the first expert not yet taken: the CPU
// backend's choice (cpu_moe_route), where an index that matches nothing was written before.
__device__ __forceinline__ bool pair_better(float v, int i, float bv, int bi) {
    const bool v_nan = v != v, b_nan = bv != bv;
    if (v_nan != b_nan) return v_nan;
    return v_nan ? i < bi : v > bv || (v == bv && i < bi);
}

// One token's routing by one warp: ids[k] and weights[k] (global or shared memory) from the token's
// logits l[n_experts], with probs [n_experts] scratch (global or shared memory). Every lane of the
// warp calls it; k <= kMoeRouteThreads. The bits are those of the block form this replaced (a block
// of kMoeRouteThreads threads, block_max and block_sum, then k block-wide argmax passes with
// barriers): lane l stands for the threads l + p * W (p < kMoeRouteThreads / W) of that block, each
// thread's sum of the probabilities e = thread, thread + kMoeRouteThreads, ... in index order, each
// p's warp_sum, the p's added in order from 0 (block_sum's order); the max takes no order (fmaxf
// ignores NaN, and +0 against -0 gives the same differences and expf). The top-k: k passes, each a
// lane's best untaken expert among e = lane, lane + W, ... then the warp's best by xor shuffles on
// pair_better (a total order: every lane ends with the same pair); the owner lane (e % W) marks
// the expert taken (-1), so probs[e] is only ever touched by lane e % W and no barrier is needed.
// Lane j % W keeps pass j's pair and writes ids[j], weights[j] at the end, renormalized by the sum
// of the k picks in pass order (the CPU backend's cpu_moe_route order).
template <int W>
__device__ void moe_route_warp(int32_t *ids, float *weights, const float *__restrict__ l, int n_experts, int k,
                               bool norm_topk, float *probs) {
    constexpr int T = kMoeRouteThreads, P = T / W;
    const int lane = (int)threadIdx.x % W;
    float mx = -INFINITY;
    for (int e = lane; e < n_experts; e += W) mx = fmaxf(mx, l[e]);
    mx = warp_max<W>(mx);
    float part[P];
#pragma unroll
    for (int p = 0; p < P; p++) {
        part[p] = 0.0f;
        for (int e = p * W + lane; e < n_experts; e += T) {
            const float q = expf(l[e] - mx);
            probs[e] = q;
            part[p] += q;
        }
    }
    float sum = 0.0f;
#pragma unroll
    for (int p = 0; p < P; p++) sum += warp_sum<W>(part[p]);
    for (int e = lane; e < n_experts; e += W) probs[e] /= sum;
    float mine_v[P];  // pass p * W + lane's pick
    int mine_i[P];
#pragma unroll
    for (int p = 0; p < P; p++) mine_v[p] = 0.0f, mine_i[p] = 0;
    float picked = 0.0f;
    for (int j = 0; j < k; j++) {
        float v = -INFINITY;
        int idx = 0x7fffffff;
        for (int e = lane; e < n_experts; e += W)  // taken experts hold -1
            if (!(probs[e] < 0.0f) && pair_better(probs[e], e, v, idx)) v = probs[e], idx = e;
#pragma unroll
        for (int o = W / 2; o > 0; o >>= 1) {
            const float ov = mxg_shfl_xor<W>(v, o);
            const int oi = mxg_shfl_xor<W>(idx, o);
            if (pair_better(ov, oi, v, idx)) v = ov, idx = oi;
        }
        if (idx % W == lane) probs[idx] = -1.0f;
#pragma unroll
        for (int p = 0; p < P; p++)
            if (j == p * W + lane) mine_v[p] = v, mine_i[p] = idx;
        picked += v;
    }
#pragma unroll
    for (int p = 0; p < P; p++) {
        const int j = p * W + lane;
        if (j < k) ids[j] = mine_i[p], weights[j] = norm_topk ? mine_v[p] / picked : mine_v[p];
    }
}

// The most experts the rank form takes (each thread ranks its experts against all of them: n^2 / 128
// comparisons); wider routers take the warp form.
constexpr int kMoeRankMaxExperts = 1024;

// One token's routing by a block of kMoeRouteThreads threads (every thread calls it; the routing
// launch of kernels/moe.cu under MLXCEL_GPU_MOE_ROUTE_RANK=1): moe_route_warp's ids and weight bits
// with a shorter chain. Thread t stands for the warp form's thread t: its sum of the probabilities
// e = t, t + kMoeRouteThreads, ... in index order, block_sum's warp sums added from warp 0 (the warp
// form's p order), the max by block_max (fmaxf: no order). The k picks: the warp form's passes take
// the experts in pair_better's order, a total order, so pass j's pick is the expert with exactly j
// experts before it: each thread counts, for each of its experts, the experts ranked above it in
// one pass over probs (shared memory, read by every thread at once), and the experts of rank < k
// go to sel_v/sel_i[rank]. The probabilities are all NaN or none (moe_route_warp's note), so
// with a NaN sum the ranks are the indices (the NaN order); else the comparison is of numbers. The
// picks' sum is taken in rank order (pass order) by each of the k writing threads. sm: [n_experts]
// probabilities, then [k] values, [k] indices, [kMoeRouteThreads / W] block_sum scratch.
template <int W>
__device__ void moe_route_rank(int32_t *ids, float *weights, const float *__restrict__ l, int n_experts, int k,
                               bool norm_topk, float *sm) {
    constexpr int T = kMoeRouteThreads;
    const int t = (int)threadIdx.x;
    float *probs = sm, *sel_v = sm + n_experts, *scratch = sel_v + 2 * k;
    int *sel_i = (int *)(sel_v + k);
    float mx = -INFINITY;
    for (int e = t; e < n_experts; e += T) mx = fmaxf(mx, l[e]);
    mx = block_max<W>(mx, scratch);
    float part = 0.0f;
    for (int e = t; e < n_experts; e += T) {
        const float q = expf(l[e] - mx);
        probs[e] = q;
        part += q;
    }
    const float sum = block_sum<W>(part, scratch);  // its barriers also publish probs
    for (int e = t; e < n_experts; e += T) probs[e] /= sum;
    __syncthreads();
    const bool all_nan = sum != sum;
    for (int e = t; e < n_experts; e += T) {
        const float v = probs[e];
        int rank = e;  // all NaN: the first index first
        if (!all_nan) {
            rank = 0;
            for (int o = 0; o < n_experts; o++) {
                const float u = probs[o];
                rank += u > v || (u == v && o < e);
            }
        }
        if (rank < k) sel_v[rank] = v, sel_i[rank] = e;
    }
    __syncthreads();
    if (t < k) {
        float picked = 0.0f;
        for (int j = 0; j < k; j++) picked += sel_v[j];
        ids[t] = sel_i[t];
        weights[t] = norm_topk ? sel_v[t] / picked : sel_v[t];
    }
}

// Shared memory moe_route_rank needs (bytes).
__host__ __device__ constexpr size_t moe_route_rank_smem(int n_experts, int k, int warp) {
    return ((size_t)n_experts + 2 * (size_t)k + (size_t)(kMoeRouteThreads / warp)) * sizeof(float);
}

// One token's routing in a block (every thread calls it; it ends after a barrier, so the block then
// reads ids and weights): by its first warp (moe_route_warp).
template <int W>
__device__ void moe_route_row(int32_t *ids, float *weights, const float *__restrict__ l, int n_experts, int k,
                              bool norm_topk, float *probs) {
    if ((int)threadIdx.x < W) moe_route_warp<W>(ids, weights, l, n_experts, k, norm_topk, probs);
    __syncthreads();
}

}  // namespace mxg

#endif
