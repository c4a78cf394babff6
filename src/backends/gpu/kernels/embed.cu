// SPDX-License-Identifier: MIT
// Embedding lookup: out[t, :] = dequantized row ids[t] of the embedding matrix (any weight format),
// one block per token, 8 weights per thread step.
#include "backends/gpu/dequant.cuh"
#include "backends/gpu/kernels.h"

namespace {

template <class F>
__global__ void embed_kernel(float *__restrict__ out, MatView m, const int32_t *__restrict__ ids, bool early) {
    mxg_grid_wait_release(early);  // a dependent launch: nothing before reads what earlier kernels wrote
    const int64_t row = ids[blockIdx.x];
    float *o = out + (int64_t)blockIdx.x * m.cols;
    for (int j0 = threadIdx.x * 8; j0 < m.cols; j0 += blockDim.x * 8) {
        float w[8];
        F::oct(m, row, j0, w);
#pragma unroll
        for (int i = 0; i < 8; i++)
            if (j0 + i < m.cols) o[j0 + i] = w[i];
    }
}

}  // namespace

extern "C" void mxg_embed(const mxg_launch *L, float *out, const mx_matrix *w, const int32_t *ids, int n) {
    MX_ASSERT(mxg_matrix_supported(w) && n > 0);
    MatView m = mat_view(w);
    int threads = (int)((m.cols / 8 + 63) / 64 * 64);
    threads = threads < 64 ? 64 : threads > 256 ? 256 : threads;
    dispatch_format(w, [&](auto fmt) {
        mxg_launch_dep(embed_kernel<decltype(fmt)>, dim3((unsigned)n), dim3(threads), 0, (gpuStream_t)L->stream,
                       L->pdl_early, out, m, ids, L->pdl_early);
    });
}
