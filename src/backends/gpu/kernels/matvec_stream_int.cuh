// SPDX-License-Identifier: MIT
// The integer form of the streaming one-token product (kernels/matvec_stream.cuh, FORM 1;
// MLXCEL_GPU_STREAM_FORM=1, off by default): affine 4-bit and 8-bit weights against activations
// staged as 16-bit integers per chunk of 32 (one float scale each), split into two int8 planes, so
// that the codes meet the activations in dp4a (four byte products and a sum in one instruction)
// instead of one integer op and one FFMA per weight with float32 activations (kernels/matvec_scaled.cuh).
//
// Why (an H100 runs the 8B's products at ~2 TB/s, the H200 at the same speed: not DRAM bound). Per
// lane and chunk (32 weights) of a row, the float32 form issues ~36 integer ops + 32 FFMA for the
// codes, ~19 for the chunk's sum of x (shared by the task's two rows), 8 LDS.128 of activations
// (128 bytes, shared by two rows) and ~15 for the loads and scales: ~110 instructions, 3.4 per
// weight, 2 bytes of shared memory per weight. Here: per 4-bit word (8 codes) 3 ops to split the
// nibbles into two bytes-of-4 (v & 0x0f0f0f0f, (v >> 4) & 0x0f0f0f0f) and 4 dp4a (two planes x
// even/odd codes), so 28 for the codes, 5 to combine (one IMAD, one I2F, two FMUL/FFMA, the add),
// 4 LDS.128 + 1 LDS.64 per chunk shared by the rows (64 + 8 bytes: 1.1 bytes of shared memory per
// weight per row, half the float32 form's), the chunk's sum of x precomputed at staging: ~50, 1.6
// per weight, and 18 registers of activations per chunk instead of 32. The staging costs more (~300
// instructions per chunk, one thread per chunk, against ~80 for the float32 form's scaling): ~0.3
// per weight at one task per warp over 4096-wide rows, overlapping the first weights' DRAM trip.
// ncu on the H200 (q 4096x4096, float32 form): 5.9 instructions per weight in all, issue slots 36%
// busy, 1.08 eligible warps per scheduler, DRAM 24%. The same weight bytes in flight per lane (U
// chunks x R rows, the streaming kernel's task shapes), fewer issue slots and stalls between them:
// the prediction is in bench/RESULTS.md ("One-token streaming product, integer form").
//
// Numerics (changed, opt-in; stated bound): activation e of chunk k is q_e = rint(x_e * i_k) with
// s_k = max|x| over the chunk / 32639 and i_k = 32639 / max|x| (each correctly rounded, so s_k i_k
// is within 2^-23 of 1), so |x_e - s_k q_e| <= s_k (1/2 + 32639 * 2^-22) < 0.508 s_k (a relative
// 1.56e-5 of the chunk's largest magnitude). q = 256 h + l with h = (q + 128) >> 8 in -127..127 and l in
// -128..127; the codes c (4-bit: 0..15; 8-bit: c - 128, the bias taking + 128 s) times h and l are
// summed exactly in int32 (4-bit: |256 sum(c h) + sum(c l)| < 2^24, so also exact as a float;
// 8-bit: < 2^28, one float rounding), then one rounding for the scale product s_w s_k and the
// bias term b s_k sum(q) (sum(q) exact). So each output is the float32 dot product of the
// dequantized weights with the activations rounded to s_k q_e: its error against the exact product
// is at most sum_k 0.508 s_k sum_e |w_e| plus float32 summation. tests/gpu/kv_emulation
// (test_stream_form_emulated.cpp) holds every output within that bound on 8B-sized and odd shapes;
// bench_gpu_matvec within 1e-4 relative L2 of the float32 form.
// Layout in shared memory: per chunk k, 4 uint4 (the 16-byte slot j at k * 4 + (j ^ ((k >> 1) & 3)):
// eight lanes reading one slot of eight consecutive chunks hit eight different 16-byte bank
// groups), then one float2 per chunk (s_k, s_k sum(q)). 4-bit: slot w = (h of codes 0,2,4,6 of
// word w, h of codes 1,3,5,7, l of 0,2,4,6, l of 1,3,5,7), bytes in code order, matching the
// nibbles that v & 0x0f0f0f0f and (v >> 4) & 0x0f0f0f0f leave in the bytes of word w. 8-bit: slot j
// = (h of word 2j, l of word 2j, h of word 2j + 1, l of word 2j + 1).
#ifndef MXG_MATVEC_STREAM_INT_CUH
#define MXG_MATVEC_STREAM_INT_CUH

#include "backends/gpu/kernels/matvec_scaled.cuh"

namespace mxg {

// Largest |q|: 127 * 256 + 127, so that h = (q + 128) >> 8 stays within int8.
constexpr int kIntQMax = 32639;

// Whether a format takes the integer form (one token, affine 4/8-bit).
template <class F>
struct IntStream {
    static constexpr bool on = F::kind == KIND_AFFINE && (F::bits == 4 || F::bits == 8);
};

// Shared-memory bytes of the staged row: 64 per chunk of codes' activations + 8 of (scale, sum).
__host__ __device__ constexpr size_t int_stage_bytes(int nchunks) { return (size_t)nchunks * 72; }

// c + the sum of the four signed byte products of a and b.
__device__ __forceinline__ int mxg_dp4a(uint32_t a, uint32_t b, int c) {
#if defined(__CUDA_ARCH__)
    return __dp4a((int)a, (int)b, c);
#else
#pragma unroll
    for (int k = 0; k < 4; k++) c += (int)(int8_t)(uint8_t)(a >> (8 * k)) * (int)(int8_t)(uint8_t)(b >> (8 * k));
    return c;
#endif
}

// The low bytes of a, b, c, d as one word (a in byte 0).
__device__ __forceinline__ uint32_t pack_bytes(int a, int b, int c, int d) {
    return __byte_perm(__byte_perm((uint32_t)a, (uint32_t)b, 0x0040u), __byte_perm((uint32_t)c, (uint32_t)d, 0x0040u), 0x5410u);
}

// Stages chunk c (x: its 32 activations) as one thread: the chunk's scale s = max|x| / kIntQMax, q_e
// = x_e * (kIntQMax / max|x|) rounded to nearest by the 1.5 * 2^23 addend (exact for |q| < 2^22; no
// conversion instruction, and |q| <= kIntQMax without a clamp since kIntQMax / max|x| is correctly
// rounded), its two planes, then the 4 slots (layout in the file's header) and (s, s sum(q)).
template <int BITS>
__device__ __forceinline__ void int_stage_chunk(const float4 (&v)[8], int c, uint4 *xi, float2 *meta) {
    float m = 0.0f;
#pragma unroll
    for (int k = 0; k < 8; k++) m = fmaxf(fmaxf(m, fmaxf(fabsf(v[k].x), fabsf(v[k].y))), fmaxf(fabsf(v[k].z), fabsf(v[k].w)));
    const float inv = m > 0.0f ? (float)kIntQMax / m : 0.0f;
    int h[32], l[32], qsum = 0;
#pragma unroll
    for (int k = 0; k < 8; k++) {
        const float e[4] = {v[k].x, v[k].y, v[k].z, v[k].w};
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int q = (int)__float_as_uint(fmaf(e[j], inv, 12582912.0f)) - 0x4b400000;
            qsum += q;
            h[4 * k + j] = (q + 128) >> 8;
            l[4 * k + j] = q - h[4 * k + j] * 256;
        }
    }
    const int sw = (c >> 1) & 3;
#pragma unroll
    for (int j = 0; j < 4; j++) {
        uint4 u;
        if constexpr (BITS == 4) {  // word j: codes 8j + (0, 2, 4, 6) and 8j + (1, 3, 5, 7)
            const int b = 8 * j;
            u = make_uint4(pack_bytes(h[b], h[b + 2], h[b + 4], h[b + 6]), pack_bytes(h[b + 1], h[b + 3], h[b + 5], h[b + 7]),
                           pack_bytes(l[b], l[b + 2], l[b + 4], l[b + 6]), pack_bytes(l[b + 1], l[b + 3], l[b + 5], l[b + 7]));
        } else {  // words 2j and 2j + 1: codes 8j .. 8j + 7
            const int b = 8 * j;
            u = make_uint4(pack_bytes(h[b], h[b + 1], h[b + 2], h[b + 3]), pack_bytes(l[b], l[b + 1], l[b + 2], l[b + 3]),
                           pack_bytes(h[b + 4], h[b + 5], h[b + 6], h[b + 7]), pack_bytes(l[b + 4], l[b + 5], l[b + 6], l[b + 7]));
        }
        xi[c * 4 + (j ^ sw)] = u;
    }
    const float s = m / (float)kIntQMax;
    meta[c] = make_float2(s, s * (float)qsum);
}

// acc[j][0] += dot(row j's chunk c, the staged chunk c) for every row of a task.
template <class F, int RR>
__device__ __forceinline__ void int_stream_dot(const uint4 *xi, const float2 *meta, int c, const typename F::Raw (&b)[RR],
                                               float (&acc)[RR][1]) {
    uint4 x[4];
#pragma unroll
    for (int j = 0; j < 4; j++) x[j] = xi[c * 4 + (j ^ ((c >> 1) & 3))];
    const float2 mt = meta[c];
#pragma unroll
    for (int r = 0; r < RR; r++) {
        int ih = 0, il = 0;
        float bias = b[r].b;
        if constexpr (F::bits == 4) {
#pragma unroll
            for (int w = 0; w < 4; w++) {
                const uint32_t v = b[r].q[w], lo = v & 0x0f0f0f0fu, hi = (v >> 4) & 0x0f0f0f0fu;
                ih = mxg_dp4a(lo, x[w].x, ih);
                ih = mxg_dp4a(hi, x[w].y, ih);
                il = mxg_dp4a(lo, x[w].z, il);
                il = mxg_dp4a(hi, x[w].w, il);
            }
        } else {  // codes - 128 as signed bytes; the bias takes the 128 s back
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const uint32_t v0 = b[r].q[2 * j] ^ 0x80808080u, v1 = b[r].q[2 * j + 1] ^ 0x80808080u;
                ih = mxg_dp4a(v0, x[j].x, ih);
                il = mxg_dp4a(v0, x[j].y, il);
                ih = mxg_dp4a(v1, x[j].z, ih);
                il = mxg_dp4a(v1, x[j].w, il);
            }
            bias = fmaf(128.0f, b[r].s0, bias);
        }
        const int sum = ih * 256 + il;
        acc[r][0] += fmaf((float)sum, b[r].s0 * mt.x, bias * mt.y);
    }
}

}  // namespace mxg

#endif
