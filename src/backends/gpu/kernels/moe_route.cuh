// SPDX-License-Identifier: MIT
// The MoE routing of one token by one block (the moe_route record's arithmetic, backend.h): softmax
// over the expert logits (float32), the k largest probabilities (first index wins ties; NaN ranks
// above numbers), optionally renormalized to sum 1. Run by kernels/moe.cu's routing kernel (one
// block of 128 threads per token) and by the fused MoE decode launches (kernels/moe_stream.cu at
// level 2, kernels/moe_router.cu at level 3; blocks of 128 threads too, so all give the same bits).
#ifndef MXG_MOE_ROUTE_CUH
#define MXG_MOE_ROUTE_CUH

#include "backends/gpu/common.cuh"

namespace mxg {

constexpr int kMoeRouteThreads = 128;

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

template <int W>
__device__ void block_argmax_pair(float &v, int &idx, float *sv, int *si) {
    const int lane = threadIdx.x % W, warp = threadIdx.x / W, nw = blockDim.x / W;
#pragma unroll
    for (int o = W / 2; o > 0; o >>= 1) {
        float ov = mxg_shfl_xor<W>(v, o);
        int oi = mxg_shfl_xor<W>(idx, o);
        if (pair_better(ov, oi, v, idx)) v = ov, idx = oi;
    }
    __syncthreads();
    if (lane == 0) sv[warp] = v, si[warp] = idx;
    __syncthreads();
    v = sv[0], idx = si[0];
    for (int w = 1; w < nw; w++)
        if (pair_better(sv[w], si[w], v, idx)) v = sv[w], idx = si[w];
    __syncthreads();
}

// One token's routing by the whole block (every thread calls it; it ends after a barrier): ids[k] and
// weights[k] (global or shared memory) from the token's logits l[n_experts], with probs
// [n_experts], sv and si [blockDim / W] shared scratch. Thread 0 writes the choices, threads < k
// the renormalized weights (norm_topk: then k <= blockDim).
template <int W>
__device__ void moe_route_row(int32_t *ids, float *weights, const float *__restrict__ l, int n_experts, int k,
                              bool norm_topk, float *probs, float *sv, int *si) {
    float mx = -INFINITY;
    for (int e = threadIdx.x; e < n_experts; e += blockDim.x) mx = fmaxf(mx, l[e]);
    mx = block_max<W>(mx, sv);
    float sum = 0.0f;
    for (int e = threadIdx.x; e < n_experts; e += blockDim.x) {
        float p = expf(l[e] - mx);
        probs[e] = p;
        sum += p;
    }
    sum = block_sum<W>(sum, sv);
    for (int e = threadIdx.x; e < n_experts; e += blockDim.x) probs[e] /= sum;
    __syncthreads();
    float picked = 0.0f;
    for (int j = 0; j < k; j++) {
        float v = -INFINITY;
        int idx = 0x7fffffff;
        for (int e = threadIdx.x; e < n_experts; e += blockDim.x)  // taken experts hold -1
            if (!(probs[e] < 0.0f) && pair_better(probs[e], e, v, idx)) v = probs[e], idx = e;
        block_argmax_pair<W>(v, idx, sv, si);
        if (threadIdx.x == 0) {
            ids[j] = idx;
            weights[j] = v;
            probs[idx] = -1.0f;
        }
        picked += v;
        __syncthreads();
    }
    if (norm_topk && (int)threadIdx.x < k) weights[threadIdx.x] /= picked;
    __syncthreads();
}

}  // namespace mxg

#endif
