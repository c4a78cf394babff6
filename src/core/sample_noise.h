// SPDX-License-Identifier: MIT
// The random numbers of on-backend sampling, shared by the CPU and GPU kernels (plain C that nvcc
// and hipcc also compile for the device). A counter-based generator: the noise for token i of the
// row at position pos is a pure function of (seed, pos, i), so a sampler needs no state and a
// replayed graph draws fresh numbers as positions advance. Sampling with Gumbel noise g_i picks
// argmax(l_i / temp + g_i), which draws i with probability softmax(l / temp)_i.
#ifndef MX_CORE_SAMPLE_NOISE_H
#define MX_CORE_SAMPLE_NOISE_H

#include <math.h>
#include <stdint.h>

#if defined(__CUDACC__) || defined(__HIPCC__)
#define MX_HD __host__ __device__
#else
#define MX_HD
#endif

MX_HD static inline uint64_t mx_noise_mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

// Standard Gumbel noise -log(-log(u)), u uniform in (0, 1) with 24 random bits.
MX_HD static inline float mx_gumbel_noise(uint64_t seed, int32_t pos, int32_t i) {
    uint64_t h = mx_noise_mix(seed ^ mx_noise_mix(((uint64_t)(uint32_t)pos << 32 | (uint32_t)i) + 0x9e3779b97f4a7c15ull));
    float u = ((float)(h >> 40) + 0.5f) * (1.0f / 16777216.0f);
    return -logf(-logf(u));
}

// Float -> unsigned key with the same order (for bisection over values).
MX_HD static inline uint32_t mx_order_key(float v) {
    union {
        float f;
        uint32_t u;
    } c;
    c.f = v;
    return (c.u & 0x80000000u) ? ~c.u : (c.u | 0x80000000u);
}

MX_HD static inline float mx_order_value(uint32_t k) {
    union {
        float f;
        uint32_t u;
    } c;
    c.u = (k & 0x80000000u) ? (k & 0x7fffffffu) : ~k;
    return c.f;
}

#endif
