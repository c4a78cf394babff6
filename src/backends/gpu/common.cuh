// SPDX-License-Identifier: MIT
// Device helpers shared by every kernel file: warp and block reductions templated on the warp
// width W (never a literal 32), scalar conversions from the stored weight types (bf16, f16, the FP8
// and FP4 codes of the microscaling formats), matching src/core/dtype.c bit for bit.
#ifndef MXG_COMMON_CUH
#define MXG_COMMON_CUH

#include <stdint.h>

#include "backends/gpu/compat.h"

// A programmatic dependent launch's L2 prefetch of [p, p + bytes) before its grid wait
// (MLXCEL_GPU_PDL=2's matrix-vector weights, kernels/matvec.cuh; level 3's KV cache rows,
// kernels/attn_decode.cu): the range shrunk to the whole 16-byte units inside it, so it never
// leaves the caller's buffer and meets the bulk prefetch's rules (mxg_prefetch_l2), and cut to the
// caller's `budget` (bytes, a multiple of 16), which it lowers by what it asked for.
__device__ __forceinline__ void prefetch_span(const void *p, int64_t bytes, unsigned &budget) {
    const uintptr_t lo = ((uintptr_t)p + 15) & ~(uintptr_t)15, hi = ((uintptr_t)p + (uintptr_t)bytes) & ~(uintptr_t)15;
    if (bytes <= 0 || hi <= lo || budget < 16) return;
    const unsigned n = hi - lo < budget ? (unsigned)(hi - lo) : budget;
    mxg_prefetch_l2((const void *)lo, n);
    budget -= n;
}

// SwiGLU's product: silu(g) * u (the swiglu record, and every epilogue that folds it in).
__device__ __forceinline__ float silu_mul(float g, float u) { return g / (1.0f + expf(-g)) * u; }

template <int W>
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = W / 2; o > 0; o >>= 1) v += mxg_shfl_xor<W>(v, o);
    return v;
}

template <int W>
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = W / 2; o > 0; o >>= 1) v = fmaxf(v, mxg_shfl_xor<W>(v, o));
    return v;
}

// Sum over the whole block (blockDim.x a multiple of W, at most 1024 threads). Every thread gets
// the result. `scratch` holds at least blockDim.x / W floats; the call begins and ends with a
// barrier so it can be used back to back.
template <int W>
__device__ __forceinline__ float block_sum(float v, float *scratch) {
    int lane = threadIdx.x % W, warp = threadIdx.x / W, nw = blockDim.x / W;
    v = warp_sum<W>(v);
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    float t = 0.0f;
    for (int i = 0; i < nw; i++) t += scratch[i];
    __syncthreads();
    return t;
}

template <int W>
__device__ __forceinline__ float block_max(float v, float *scratch) {
    int lane = threadIdx.x % W, warp = threadIdx.x / W, nw = blockDim.x / W;
    v = warp_max<W>(v);
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    float t = scratch[0];
    for (int i = 1; i < nw; i++) t = fmaxf(t, scratch[i]);
    __syncthreads();
    return t;
}

__device__ __forceinline__ float bf16_to_f32(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }

__device__ __forceinline__ float f16_to_f32(uint16_t h) {
    __half_raw r;
    r.x = h;
    return __half2float(__half(r));
}

__device__ __forceinline__ uint16_t f32_to_f16_bits(float f) {
    __half_raw r = __half_raw(__float2half_rn(f));
    return r.x;
}

// E2M1 nibble (bit 3 sign): 0, 0.5, 1, 1.5, 2, 3, 4, 6.
__device__ __forceinline__ float e2m1_to_f32(uint32_t c) {
    uint32_t m = c & 7u;
    float v = m < 2u ? 0.5f * (float)m : __uint_as_float((((m >> 1) + 126u) << 23) | ((m & 1u) << 22));
    return (c & 8u) ? -v : v;
}

// E4M3 byte, no NaN (0x7f decodes as 480, like MLX).
__device__ __forceinline__ float e4m3_to_f32(uint32_t b) {
    uint32_t e = (b >> 3) & 15u, m = b & 7u;
    float v = e == 0u ? (float)m * 0.001953125f : __uint_as_float(((e + 120u) << 23) | (m << 20));
    return (b & 0x80u) ? -v : v;
}

// E8M0 scale: 2^(s-127); s = 0 is 2^-127 (a float32 subnormal), s = 255 is +inf.
__device__ __forceinline__ float e8m0_to_f32(uint32_t s) {
    if (s == 255u) return __uint_as_float(0x7f800000u);
    if (s == 0u) return __uint_as_float(0x00400000u);
    return __uint_as_float(s << 23);
}

// sin and cos of p * f with the product carried in two floats (hi + lo, exact by fmaf), so the
// angle is as accurate as a double product (the CPU's): at position 5000 a float product alone is
// off by up to 2.4e-4 rad. First order in lo: sin(hi + lo) = sin hi + lo cos hi.
__device__ __forceinline__ void rope_sincos(float p, float f, float *s, float *c) {
    const float hi = p * f, lo = fmaf(p, f, -hi);
    float sh, ch;
    sincosf(hi, &sh, &ch);
    *s = fmaf(lo, ch, sh);
    *c = fmaf(-lo, sh, ch);
}

// The per-head RMSNorm factor of a head of 2 * half elements whose squares sum to ss:
// 1 / sqrt(mean(x^2) + eps).
__device__ __forceinline__ float head_norm_factor(float ss, int half, float eps) {
    return 1.0f / sqrtf(ss / (float)(2 * half) + eps);
}

// RoPE of the rotate-half pair (a, b) by the angle p * f (rope_sincos), cos and sin times attn_factor.
__device__ __forceinline__ void rope_pair(float &a, float &b, float p, float f, float attn_factor) {
    float s, c;
    rope_sincos(p, f, &s, &c);
    c *= attn_factor;
    s *= attn_factor;
    const float x0 = a * c - b * s, x1 = b * c + a * s;
    a = x0, b = x1;
}

// One head's per-head RMSNorm (w NULL: none) and RoPE at position p, in registers: the calling
// thread holds the rotate-half pair (a, b) = (x[j], x[j + half]) of a head of 2 * half elements
// (threads j >= half hold zeros and get them back). Norm: x * r * w (head_norm_factor); the squares
// summed by block_sum: fmaf(b, b, fmaf(a, a, 0)) per thread, warp_sum per warp, the warps added
// from 0 in order (the decode attention's warp form, kernels/attn_decode.cu, sums in that order
// too). Every thread of the block calls it (red holds blockDim.x / W floats).
template <int W>
__device__ __forceinline__ void head_norm_rope(float &a, float &b, int j, int half, const float *__restrict__ w,
                                               float eps, float p, const float *__restrict__ inv_freq,
                                               float attn_factor, float *red) {
    if (w) {  // block-uniform
        float ss = fmaf(a, a, 0.0f);
        ss = fmaf(b, b, ss);
        ss = block_sum<W>(ss, red);
        const float r = head_norm_factor(ss, half, eps);
        if (j < half) a = a * r * w[j], b = b * r * w[j + half];
    }
    if (j < half) rope_pair(a, b, p, inv_freq[j], attn_factor);
}

#endif
