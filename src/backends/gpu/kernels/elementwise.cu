// SPDX-License-Identifier: MIT
// Elementwise ops: SwiGLU (out = silu(gate) * up, out may alias gate) and the residual add
// (x += y). Grid-stride loops; float4 when every pointer is 16-byte aligned.
#include "backends/gpu/common.cuh"
#include "backends/gpu/kernels.h"

namespace {

__global__ void swiglu_kernel(float *out, const float *gate, const float *__restrict__ up, int64_t count, bool early) {
    mxg_grid_wait_release(early);  // a dependent launch: nothing before reads what earlier kernels wrote
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < count; i += (int64_t)gridDim.x * blockDim.x)
        out[i] = silu_mul(gate[i], up[i]);
}

__global__ void swiglu4_kernel(float4 *out, const float4 *gate, const float4 *__restrict__ up, int64_t count4, bool early) {
    mxg_grid_wait_release(early);  // a dependent launch: nothing before reads what earlier kernels wrote
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < count4; i += (int64_t)gridDim.x * blockDim.x) {
        float4 g = gate[i], u = up[i];
        out[i] = make_float4(silu_mul(g.x, u.x), silu_mul(g.y, u.y), silu_mul(g.z, u.z), silu_mul(g.w, u.w));
    }
}

__global__ void add_kernel(float *x, const float *__restrict__ y, int64_t count, bool early) {
    mxg_grid_wait_release(early);  // a dependent launch: nothing before reads what earlier kernels wrote
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < count; i += (int64_t)gridDim.x * blockDim.x)
        x[i] += y[i];
}

__global__ void add4_kernel(float4 *x, const float4 *__restrict__ y, int64_t count4, bool early) {
    mxg_grid_wait_release(early);  // a dependent launch: nothing before reads what earlier kernels wrote
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < count4; i += (int64_t)gridDim.x * blockDim.x) {
        float4 a = x[i], b = y[i];
        x[i] = make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
    }
}

unsigned grid_for(const mxg_launch *L, int64_t items, int threads) {
    int64_t blocks = (items + threads - 1) / threads, cap = (int64_t)L->sm_count * 8;
    return (unsigned)(blocks < 1 ? 1 : blocks > cap ? cap : blocks);
}

bool aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

}  // namespace

extern "C" void mxg_swiglu(const mxg_launch *L, float *out, const float *gate, const float *up, int64_t count) {
    if (count <= 0) return;
    gpuStream_t s = (gpuStream_t)L->stream;
    if (count % 4 == 0 && aligned16(out) && aligned16(gate) && aligned16(up))
        mxg_launch_dep(swiglu4_kernel, dim3(grid_for(L, count / 4, 256)), dim3(256), 0, s, L->pdl_early, (float4 *)out,
                       (const float4 *)gate, (const float4 *)up, count / 4, L->pdl_early);
    else
        mxg_launch_dep(swiglu_kernel, dim3(grid_for(L, count, 256)), dim3(256), 0, s, L->pdl_early, out, gate, up, count,
                       L->pdl_early);
}

extern "C" void mxg_add(const mxg_launch *L, float *x, const float *y, int64_t count) {
    if (count <= 0) return;
    gpuStream_t s = (gpuStream_t)L->stream;
    if (count % 4 == 0 && aligned16(x) && aligned16(y))
        mxg_launch_dep(add4_kernel, dim3(grid_for(L, count / 4, 256)), dim3(256), 0, s, L->pdl_early, (float4 *)x,
                       (const float4 *)y, count / 4, L->pdl_early);
    else
        mxg_launch_dep(add_kernel, dim3(grid_for(L, count, 256)), dim3(256), 0, s, L->pdl_early, x, y, count, L->pdl_early);
}
