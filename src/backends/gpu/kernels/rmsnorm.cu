// SPDX-License-Identifier: MIT
// RMSNorm: out[r, :] = x[r, :] * rsqrt(mean(x^2) + eps) * w, one block per row, float32. The
// per-head q/k norm is the same op with rows = tokens * heads and dim = head_dim. In place is fine:
// each thread rewrites only the elements it read.
#include "backends/gpu/common.cuh"
#include "backends/gpu/kernels.h"

namespace {

template <int W>
__global__ void rmsnorm_kernel(float *out, const float *x, const float *__restrict__ w, int dim, float eps, bool early) {
    __shared__ float scratch[1024 / W];
    mxg_grid_wait_release(early);  // a dependent launch: nothing before reads what earlier kernels wrote
    const float *xr = x + (int64_t)blockIdx.x * dim;
    float *orow = out + (int64_t)blockIdx.x * dim;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) ss = fmaf(xr[i], xr[i], ss);
    ss = block_sum<W>(ss, scratch);
    const float r = 1.0f / sqrtf(ss / (float)dim + eps);
    for (int i = threadIdx.x; i < dim; i += blockDim.x) orow[i] = xr[i] * r * w[i];
}

}  // namespace

extern "C" void mxg_rmsnorm(const mxg_launch *L, float *out, const float *x, const float *w, int n, int dim, float eps) {
    MX_ASSERT(n >= 0 && dim > 0);
    if (n == 0) return;
    MXG_WARP_DISPATCH(L->warp, {
        int threads = (dim + W - 1) / W * W;
        threads = threads > 1024 ? 1024 : threads;
        mxg_launch_dep(rmsnorm_kernel<W>, dim3((unsigned)n), dim3(threads), 0, (gpuStream_t)L->stream, L->pdl_early, out,
                       x, w, dim, eps, L->pdl_early);
    });
}
