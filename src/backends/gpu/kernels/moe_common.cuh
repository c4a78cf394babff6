// SPDX-License-Identifier: MIT
// What the fused MoE decode kernels share (kernels/moe_stream.cu: the expert products;
// kernels/moe_router.cu: the router product and routing): the formats they take, the checks every
// launcher makes, the staged-chunk read and dot product of the scaled 4/8-bit and mxfp4 paths, and
// the dependent launch.
#ifndef MXG_MOE_COMMON_CUH
#define MXG_MOE_COMMON_CUH

#include "backends/gpu/kernels/matvec_stream.cuh"
#include "backends/gpu/kernels/moe_route.cuh"
#include "backends/gpu/kernels_fused.h"

namespace {

using namespace mxg;

constexpr int kMoeMaxTokens = MXG_MOE_MAX_TOKENS;  // decode steps; longer batches keep the records

template <class F>
constexpr bool moe_format() {
    return Scaled<F>::on || F::kind == KIND_MXFP4;
}

// The staged chunk c of a row (xs4 at the row's start) and, for the scaled dot, its sum.
template <class F>
__device__ __forceinline__ float moe_chunk(const float4 *xs4, int c, float (&xv)[32]) {
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const float4 v = xs4[c * 8 + (i ^ (c & 7))];
        xv[4 * i] = v.x, xv[4 * i + 1] = v.y, xv[4 * i + 2] = v.z, xv[4 * i + 3] = v.w;
    }
    if constexpr (Scaled<F>::on) return scaled_sum<F::bits>(xv);
    return 0.0f;
}

template <class F>
__device__ __forceinline__ float moe_dot(const typename F::Raw &b, const float (&xv)[32], float xs) {
    if constexpr (Scaled<F>::on) return scaled_dot<F>(b, xv, xs);
    else return F::dot_raw(b, xv, 0.0f);
}

// Calls fn(Fmt<...>{}) for the formats these kernels take; false for the others.
template <class Fn>
bool dispatch_moe_format(const mx_matrix *w, Fn &&fn) {
    bool taken = false;
    dispatch_format(w, [&](auto fmt) {
        using F = decltype(fmt);
        if constexpr (moe_format<F>()) {
            fn(fmt);
            taken = true;
        }
    });
    return taken;
}

// What the fused MoE kernels need: the switch, the format, aligned whole chunks, `rows` staged
// input rows within the default shared memory, rows across experts counted in 32 bits.
inline bool moe_fits(const mxg_launch *L, const mx_matrix *w, const float *x, int rows) {
    return L->moe_fused && !L->matvec_old && dispatch_moe_format(w, [](auto) {}) && matvec_fast(w, x) &&
           w->cols >= 32 && (size_t)rows * w->cols * sizeof(float) <= kMatvecStageBytes &&
           w->rows * w->n_experts < INT32_MAX;
}

// A fused MoE kernel's launch on the plan's stream, dependent when the plan asks for it (the
// kernels wait for the grid before they read what an earlier kernel wrote).
template <class Args>
void moe_launch(const mxg_launch *L, void (*kernel)(Args), unsigned blocks, int threads, size_t smem, const Args &a) {
    mxg_launch_dep(kernel, dim3(blocks), dim3(threads), smem, (gpuStream_t)L->stream, L->dependent_launch, a);
}

}  // namespace

#endif
