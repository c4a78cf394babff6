// SPDX-License-Identifier: MIT
// Row utilities: gather_rows (row indices come from the host: they travel as kernel arguments, 64
// per launch, so the op can be captured in a graph) and argmax over the vocabulary (one block per
// row; the first maximum wins, as on the CPU).
#include "backends/gpu/common.cuh"
#include "backends/gpu/kernels.h"

namespace {

constexpr int kRowsPerLaunch = 64;

struct RowList {
    int32_t r[kRowsPerLaunch];
};

__global__ void gather_kernel(float *out, const float *__restrict__ x, RowList rows, int dim) {
    const float *src = x + (int64_t)rows.r[blockIdx.x] * dim;
    float *dst = out + (int64_t)blockIdx.x * dim;
    for (int d = threadIdx.x; d < dim; d += blockDim.x) dst[d] = src[d];
}

template <int W>
__global__ void argmax_kernel(int32_t *ids, const float *__restrict__ logits, int vocab) {
    __shared__ float sv[1024 / W];
    __shared__ int si[1024 / W];
    const float *l = logits + (int64_t)blockIdx.x * vocab;
    float best = -INFINITY;
    int bi = 0x7fffffff;
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
        float v = l[i];
        if (v > best || bi == 0x7fffffff) best = v, bi = i;
    }
    const int lane = threadIdx.x % W, warp = threadIdx.x / W, nw = blockDim.x / W;
#pragma unroll
    for (int o = W / 2; o > 0; o >>= 1) {
        float ov = mxg_shfl_xor<W>(best, o);
        int oi = mxg_shfl_xor<W>(bi, o);
        if (ov > best || (ov == best && oi < bi)) best = ov, bi = oi;
    }
    if (lane == 0) sv[warp] = best, si[warp] = bi;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < nw; w++)
            if (sv[w] > best || (sv[w] == best && si[w] < bi)) best = sv[w], bi = si[w];
        ids[blockIdx.x] = bi;
    }
}

}  // namespace

extern "C" void mxg_gather_rows(const mxg_launch *L, float *out, const float *x, const int32_t *rows_host, int n,
                                int dim) {
    int threads = dim > 256 ? 256 : (dim + 31) / 32 * 32;
    for (int i0 = 0; i0 < n; i0 += kRowsPerLaunch) {
        RowList rl;
        int cnt = n - i0 < kRowsPerLaunch ? n - i0 : kRowsPerLaunch;
        for (int i = 0; i < kRowsPerLaunch; i++) rl.r[i] = i < cnt ? rows_host[i0 + i] : 0;
        gather_kernel<<<(unsigned)cnt, threads, 0, (gpuStream_t)L->stream>>>(out + (int64_t)i0 * dim, x, rl, dim);
    }
}

extern "C" void mxg_argmax(const mxg_launch *L, int32_t *ids, const float *logits, int n, int vocab) {
    if (n == 0) return;
    MXG_WARP_DISPATCH(L->warp, {
        argmax_kernel<W><<<(unsigned)n, 1024, 0, (gpuStream_t)L->stream>>>(ids, logits, vocab);
    });
}
