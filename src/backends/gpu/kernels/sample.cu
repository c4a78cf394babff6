// SPDX-License-Identifier: MIT
// Token sampling on the device (backend.h `sample`), the same rule as the CPU reference
// (src/backends/cpu/cpu_sample.c): the top-p, min-p and top-k filters become one threshold on the
// logits (bisection over the float order, each step one block-wide count or sum), then Gumbel-max
// over the kept tokens with the counter-based noise of src/core/sample_noise.h. One block per row;
// parameters and positions are read from device memory, so the op replays inside a graph.
#include <math.h>

#include "backends/gpu/common.cuh"
#include "backends/gpu/kernels_sample.h"
#include "core/sample_noise.h"

namespace {

constexpr int kThreads = 1024;

// (value, index) order: larger value first, then the smaller index (as argmax on the CPU).
__device__ __forceinline__ unsigned long long pick_key(float v, int idx) {
    return ((unsigned long long)mx_order_key(v) << 32) | (0xffffffffu - (uint32_t)idx);
}

template <int W>
__device__ unsigned long long block_max_key(unsigned long long k, unsigned long long *scratch) {
    const int lane = threadIdx.x % W, warp = threadIdx.x / W, nw = blockDim.x / W;
#pragma unroll
    for (int o = W / 2; o > 0; o >>= 1) {
        const uint32_t hi = (uint32_t)mxg_shfl_xor<W>((int)(uint32_t)(k >> 32), o);
        const uint32_t lo = (uint32_t)mxg_shfl_xor<W>((int)(uint32_t)k, o);
        const unsigned long long other = ((unsigned long long)hi << 32) | lo;
        k = other > k ? other : k;
    }
    __syncthreads();
    if (lane == 0) scratch[warp] = k;
    __syncthreads();
    unsigned long long best = scratch[0];
    for (int i = 1; i < nw; i++) best = scratch[i] > best ? scratch[i] : best;
    __syncthreads();
    return best;
}

template <int W>
__global__ void __launch_bounds__(kThreads) sample_kernel(int32_t *ids, const float *__restrict__ logits, int vocab,
                                                          const mx_sample_params *__restrict__ params,
                                                          const int32_t *__restrict__ pos) {
    __shared__ float fs[kThreads / 32];
    __shared__ unsigned long long ks[kThreads / 32];
    const float *l = logits + (int64_t)blockIdx.x * vocab;
    const mx_sample_params p = *params;
    const int32_t position = pos[blockIdx.x];

    float m = -INFINITY, mn = INFINITY;
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
        m = fmaxf(m, l[i]);
        mn = fminf(mn, l[i]);
    }
    m = block_max<W>(m, fs);
    mn = -block_max<W>(-mn, fs);

    float thr = -INFINITY;
    if (p.min_p > 0.0f) thr = fmaxf(thr, m + logf(p.min_p));
    if (p.top_k > 0 && p.top_k < vocab) {  // largest t with count(l >= t) >= k
        uint32_t lo = mx_order_key(mn), hi = mx_order_key(m);
        while (lo < hi) {
            const uint32_t mid = lo + (hi - lo + 1) / 2;
            const float t = mx_order_value(mid);
            float c = 0.0f;
            for (int i = threadIdx.x; i < vocab; i += blockDim.x) c += l[i] >= t ? 1.0f : 0.0f;
            c = block_sum<W>(c, fs);
            if (c >= (float)p.top_k) lo = mid;
            else hi = mid - 1;
        }
        thr = fmaxf(thr, mx_order_value(lo));
    }
    if (p.top_p > 0.0f && p.top_p < 1.0f) {  // largest t with mass(l >= t) >= top_p * total
        float z = 0.0f;
        for (int i = threadIdx.x; i < vocab; i += blockDim.x) z += expf(l[i] - m);
        const float want = p.top_p * block_sum<W>(z, fs);
        uint32_t lo = mx_order_key(mn), hi = mx_order_key(m);
        while (lo < hi) {
            const uint32_t mid = lo + (hi - lo + 1) / 2;
            const float t = mx_order_value(mid);
            float s = 0.0f;
            for (int i = threadIdx.x; i < vocab; i += blockDim.x) s += l[i] >= t ? expf(l[i] - m) : 0.0f;
            s = block_sum<W>(s, fs);
            if (s >= want) lo = mid;
            else hi = mid - 1;
        }
        thr = fmaxf(thr, mx_order_value(lo));
    }

    unsigned long long best = 0;
    const float inv_temp = 1.0f / p.temp;
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
        if (l[i] < thr) continue;
        const float key = l[i] * inv_temp + mx_gumbel_noise(p.seed, position, i);
        const unsigned long long k = pick_key(key, i);
        best = k > best ? k : best;
    }
    best = block_max_key<W>(best, ks);
    if (threadIdx.x == 0) ids[blockIdx.x] = (int32_t)(0xffffffffu - (uint32_t)(best & 0xffffffffu));
}

}  // namespace

extern "C" void mxg_sample(const mxg_launch *L, int32_t *ids, const float *logits, int n, int vocab,
                           const mx_sample_params *params, const int32_t *pos) {
    if (n <= 0) return;
    MXG_WARP_DISPATCH(L->warp, {
        sample_kernel<W><<<(unsigned)n, kThreads, 0, (gpuStream_t)L->stream>>>(ids, logits, vocab, params, pos);
    });
}
