// SPDX-License-Identifier: MIT
// gpt_oss's MLP ops (backend.h): the clamped SwiGLU of its experts and the per-expert bias added to
// MoE rows. Grid-stride loops with the arithmetic of the CPU reference (cpu_gpt_oss.c).
#include "backends/gpu/common.cuh"
#include "backends/gpu/kernels.h"

namespace {

__global__ void swiglu_clamped_kernel(float *out, const float *gate, const float *__restrict__ up, int64_t count,
                                      float limit, float alpha) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < count; i += (int64_t)gridDim.x * blockDim.x) {
        const float g = fminf(gate[i], limit), u = fminf(fmaxf(up[i], -limit), limit);
        out[i] = g / (1.0f + expf(-alpha * g)) * (u + 1.0f);
    }
}

__global__ void expert_bias_kernel(float *x, const float *__restrict__ bias, const int32_t *__restrict__ ids, int m,
                                   int dim) {
    const int64_t count = (int64_t)m * dim;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < count; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / dim, c = i % dim;
        x[i] += bias[(int64_t)ids[r] * dim + c];
    }
}

unsigned grid_for(const mxg_launch *L, int64_t items, int threads) {
    int64_t blocks = (items + threads - 1) / threads, cap = (int64_t)L->sm_count * 8;
    return (unsigned)(blocks < 1 ? 1 : blocks > cap ? cap : blocks);
}

}  // namespace

extern "C" void mxg_swiglu_clamped(const mxg_launch *L, float *out, const float *gate, const float *up, int64_t count,
                                   float limit, float alpha) {
    if (count <= 0) return;
    swiglu_clamped_kernel<<<grid_for(L, count, 256), 256, 0, (gpuStream_t)L->stream>>>(out, gate, up, count, limit,
                                                                                        alpha);
}

extern "C" void mxg_expert_bias(const mxg_launch *L, float *x, const float *bias, const int32_t *ids, int m, int dim) {
    if (m <= 0 || dim <= 0) return;
    expert_bias_kernel<<<grid_for(L, (int64_t)m * dim, 256), 256, 0, (gpuStream_t)L->stream>>>(x, bias, ids, m, dim);
}
