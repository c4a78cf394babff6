// SPDX-License-Identifier: MIT
// The "scaled activation" dot product of the matrix-vector kernels (kernels/matvec.cuh,
// kernels/matvec_fused.cu) for affine 4-bit and 8-bit weights: one integer instruction per weight
// and exact float32 products (the default path; MLXCEL_GPU_OLD_MATVEC=1 selects the previous one,
// Fmt::dot_raw in dequant.cuh, three instructions per weight and ~2 bits lost to a subtraction).
//
// A code c masked in place inside its packed word, c << k, read as a float is c * 2^(k - 149)
// exactly, for any integer below 2^24 (the denormals and the first normal binade are both
// "integer * 2^-149"). So `v & (0xF << k)` reinterpreted is the code, times a power of two that
// depends only on where the code sits in its word. The activations are staged in shared memory
// already multiplied by the inverse power, x'_e = x_e * 2^(kScaledExp - k_e), so that
// fmaf(as_float(v & mask_e), x'_e, acc) adds c_e * x_e * 2^(kScaledExp - 149) with no conversion and
// no rounding of the product. Codes whose bits lie above bit 23 are shifted down first (4-bit:
// codes 6 and 7 of a word, 8-bit: code 3), so a 4-bit word of 8 codes costs 9 integer ops and 8
// FMAs (the previous path: 16 and 8). Requirements: float32 denormals are kept (not flushed), which
// is the default of nvcc and hipcc (no fast-math); |x| < 2^43 so the staged values stay finite
// (products land at 2^-65 times their value, far above the float32 underflow for any term that matters).
// The bias term needs sum(x) of the chunk, rebuilt from the staged values grouped by shift.
#ifndef MXG_MATVEC_SCALED_CUH
#define MXG_MATVEC_SCALED_CUH

#include "backends/gpu/dequant.cuh"

#if defined(__USE_FAST_MATH__)
#error "the scaled-activation dot needs float32 denormals; build without -use_fast_math"
#endif

namespace mxg {

// Staged activations are x * 2^(kScaledExp - shift); products come out as c x 2^(kScaledExp - 149).
constexpr int kScaledExp = 84;

// Whether a format takes the scaled path.
template <class F>
struct Scaled {
    static constexpr bool on = F::kind == KIND_AFFINE && (F::bits == 4 || F::bits == 8);
};

// 2^e as a float (e in -126..127).
__device__ __forceinline__ float pow2f(int e) { return __uint_as_float((uint32_t)(127 + e) << 23); }

// Bit offset that element e (0..31) of a chunk keeps after its extraction (see scaled_dot).
template <int BITS>
__device__ __forceinline__ int scaled_shift(int e) {
    if (BITS == 4) return (e & 7) < 6 ? 4 * (e & 7) : 0;
    return (e & 3) < 3 ? 8 * (e & 3) : 0;
}

// The staged form of the 16-byte slot q (elements 4q..4q+3) of a chunk.
template <int BITS>
__device__ __forceinline__ float4 scaled_slot(float4 v, int q) {
    const int e = 4 * q;
    return make_float4(v.x * pow2f(kScaledExp - scaled_shift<BITS>(e)), v.y * pow2f(kScaledExp - scaled_shift<BITS>(e + 1)),
                       v.z * pow2f(kScaledExp - scaled_shift<BITS>(e + 2)), v.w * pow2f(kScaledExp - scaled_shift<BITS>(e + 3)));
}

// sum(x) over a chunk from its staged values: one partial sum per shift, then recombined exactly
// by powers of two (Horner with exact multiplications).
template <int BITS>
__device__ __forceinline__ float scaled_sum(const float (&x)[32]) {
    if constexpr (BITS == 4) {
        float s0 = 0.0f, s4 = 0.0f, s8 = 0.0f, s12 = 0.0f, s16 = 0.0f, s20 = 0.0f;
#pragma unroll
        for (int w = 0; w < 4; w++) {
            s0 += x[8 * w] + (x[8 * w + 6] + x[8 * w + 7]);
            s4 += x[8 * w + 1];
            s8 += x[8 * w + 2];
            s12 += x[8 * w + 3];
            s16 += x[8 * w + 4];
            s20 += x[8 * w + 5];
        }
        float h = fmaf(s20, 16.0f, s16);
        h = fmaf(h, 16.0f, s12);
        h = fmaf(h, 16.0f, s8);
        h = fmaf(h, 16.0f, s4);
        h = fmaf(h, 16.0f, s0);
        return h * pow2f(-kScaledExp);
    } else {
        float s0 = 0.0f, s8 = 0.0f, s16 = 0.0f;
#pragma unroll
        for (int w = 0; w < 8; w++) {
            s0 += x[4 * w] + x[4 * w + 3];
            s8 += x[4 * w + 1];
            s16 += x[4 * w + 2];
        }
        return fmaf(fmaf(s16, 256.0f, s8), 256.0f, s0) * pow2f(-kScaledExp);
    }
}

// sum(c_e x'_e) over a chunk's 32 codes (packed words q), in units of 2^(kScaledExp - 149).
template <int BITS>
__device__ __forceinline__ float scaled_codes_dot(const uint32_t (&q)[BITS], const float (&x)[32]) {
    float a[2] = {0.0f, 0.0f};  // two chains: half the FMA latency on the critical path
    if constexpr (BITS == 4) {
#pragma unroll
        for (int w = 0; w < 4; w++) {
            const uint32_t v = q[w];
            float &s = a[w & 1];
            s = fmaf(__uint_as_float(v & 0xfu), x[8 * w], s);
            s = fmaf(__uint_as_float(v & 0xf0u), x[8 * w + 1], s);
            s = fmaf(__uint_as_float(v & 0xf00u), x[8 * w + 2], s);
            s = fmaf(__uint_as_float(v & 0xf000u), x[8 * w + 3], s);
            s = fmaf(__uint_as_float(v & 0xf0000u), x[8 * w + 4], s);
            s = fmaf(__uint_as_float(v & 0xf00000u), x[8 * w + 5], s);
            s = fmaf(__uint_as_float((v >> 24) & 0xfu), x[8 * w + 6], s);
            s = fmaf(__uint_as_float(v >> 28), x[8 * w + 7], s);
        }
    } else {
#pragma unroll
        for (int w = 0; w < 8; w++) {
            const uint32_t v = q[w];
            float &s = a[w & 1];
            s = fmaf(__uint_as_float(v & 0xffu), x[4 * w], s);
            s = fmaf(__uint_as_float(v & 0xff00u), x[4 * w + 1], s);
            s = fmaf(__uint_as_float(v & 0xff0000u), x[4 * w + 2], s);
            s = fmaf(__uint_as_float(v >> 24), x[4 * w + 3], s);
        }
    }
    return a[0] + a[1];
}

// dot(dequantized chunk, x) for a raw chunk of an affine format (Fmt::Raw: codes, scale s0, bias
// b), x staged (scaled_slot) and xsum = scaled_sum(x): s * sum(c x) + b * sum(x).
template <class F>
__device__ __forceinline__ float scaled_dot(const typename F::Raw &r, const float (&x)[32], float xsum) {
    const float qx = scaled_codes_dot<F::bits>(r.q, x);
    return fmaf(r.s0 * pow2f(149 - kScaledExp), qx, r.b * xsum);
}

}  // namespace mxg

#endif
