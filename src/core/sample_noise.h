// SPDX-License-Identifier: MIT
// The random numbers of token choice, shared by the host and the GPU kernels (plain C that nvcc and
// hipcc also compile for the device). A counter-based generator: the number for the row at
// position pos is a pure function of (seed, pos), so a sampler needs no state, a replayed graph
// draws fresh numbers as positions advance, and batching never changes a draw.
#ifndef MX_CORE_SAMPLE_NOISE_H
#define MX_CORE_SAMPLE_NOISE_H

#include <math.h>
#include <stdint.h>

#if defined(__CUDACC__) || defined(__HIPCC__)
#define MX_HD __host__ __device__
#else
#define MX_HD
#endif

// splitmix64's finalizer: every input bit moves every output bit (also the mixer of the KV
// prefix hash and of the clock seed).
MX_HD static inline uint64_t mx_noise_mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

// A uniform number in [0, 1) with 24 random bits for the row at position pos: the one random draw of
// a sampled token (inverse CDF over the kept tokens in id order).
MX_HD static inline float mx_uniform_noise(uint64_t seed, int32_t pos) {
    uint64_t h = mx_noise_mix(seed ^ mx_noise_mix((uint64_t)(uint32_t)pos * 0xd1b54a32d192ed03ull + 0x9e3779b97f4a7c15ull));
    return (float)(h >> 40) * (1.0f / 16777216.0f);
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
