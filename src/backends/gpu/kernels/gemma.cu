// SPDX-License-Identifier: MIT
// Gemma's elementwise ops: the GeLU-tanh gated MLP activation (out = gelu_tanh(gate) * up, out may
// alias gate) and the embedding scale (x *= scale). Simple grid-stride loops, the same arithmetic
// as the CPU reference (cpu_elementwise.c).
#include "backends/gpu/common.cuh"
#include "backends/gpu/kernels.h"

namespace {

__global__ void geglu_kernel(float *out, const float *gate, const float *__restrict__ up, int64_t count) {
    const float k = 0.7978845608028654f;  // sqrt(2 / pi)
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < count; i += (int64_t)gridDim.x * blockDim.x) {
        float g = gate[i];
        out[i] = 0.5f * g * (1.0f + tanhf(k * (g + 0.044715f * g * g * g))) * up[i];
    }
}

__global__ void scale_kernel(float *x, int64_t count, float scale) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < count; i += (int64_t)gridDim.x * blockDim.x)
        x[i] *= scale;
}

unsigned blocks_for(const mxg_launch *L, int64_t items, int threads) {
    int64_t blocks = (items + threads - 1) / threads, cap = (int64_t)L->sm_count * 8;
    return (unsigned)(blocks < 1 ? 1 : blocks > cap ? cap : blocks);
}

}  // namespace

extern "C" void mxg_geglu(const mxg_launch *L, float *out, const float *gate, const float *up, int64_t count) {
    if (count <= 0) return;
    geglu_kernel<<<blocks_for(L, count, 256), 256, 0, (gpuStream_t)L->stream>>>(out, gate, up, count);
}

extern "C" void mxg_scale(const mxg_launch *L, float *x, int64_t count, float scale) {
    if (count <= 0) return;
    scale_kernel<<<blocks_for(L, count, 256), 256, 0, (gpuStream_t)L->stream>>>(x, count, scale);
}
