// SPDX-License-Identifier: MIT
// The largest (value, index) pair of many threads as one 64-bit key: the value's order-preserving
// bits (core/sample_noise.h mx_order_key) in the high word, the complemented index in the low word,
// so a larger value wins and, among equal values, the smaller index (argmax on the CPU). Keys
// compare as integers, so a warp reduces them with two 32-bit shuffles per step and blocks merge
// them with 64-bit atomicMax. Used by argmax (kernels/rows.cu) and the token choice
// (kernels/sample_rule.cuh). A real value's key is never 0, so 0 means "none".
#ifndef MXG_KERNELS_MAX_KEY_CUH
#define MXG_KERNELS_MAX_KEY_CUH

#include "backends/gpu/common.cuh"
#include "core/sample_noise.h"

__device__ __forceinline__ unsigned long long pick_key(float v, int idx) {
    return ((unsigned long long)mx_order_key(v) << 32) | (0xffffffffu - (uint32_t)idx);
}
__device__ __forceinline__ int32_t key_index(unsigned long long k) {
    return (int32_t)(0xffffffffu - (uint32_t)(k & 0xffffffffu));
}

// The largest key of the warp (every lane gets it).
template <int W>
__device__ __forceinline__ unsigned long long warp_max_key(unsigned long long k) {
#pragma unroll
    for (int o = W / 2; o > 0; o >>= 1) {
        const uint32_t hi = (uint32_t)mxg_shfl_xor<W>((int)(uint32_t)(k >> 32), o);
        const uint32_t lo = (uint32_t)mxg_shfl_xor<W>((int)(uint32_t)k, o);
        const unsigned long long other = ((unsigned long long)hi << 32) | lo;
        k = other > k ? other : k;
    }
    return k;
}

// The largest key of the block (every thread gets it). scratch: blockDim.x / W entries.
template <int W>
__device__ unsigned long long block_max_key(unsigned long long k, unsigned long long *scratch) {
    const int lane = threadIdx.x % W, warp = threadIdx.x / W, nw = blockDim.x / W;
    k = warp_max_key<W>(k);
    __syncthreads();
    if (lane == 0) scratch[warp] = k;
    __syncthreads();
    unsigned long long best = scratch[0];
    for (int i = 1; i < nw; i++) best = scratch[i] > best ? scratch[i] : best;
    __syncthreads();
    return best;
}

#endif
