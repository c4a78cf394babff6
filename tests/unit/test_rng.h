// SPDX-License-Identifier: MIT
// The tests' one pseudo-random generator (xorshift64): cheap and reproducible, so each test that
// starts it from its own seed draws the same inputs on every run and every machine.
#ifndef MLXCEL_TEST_RNG_H
#define MLXCEL_TEST_RNG_H

#include <stdint.h>

typedef struct test_rng {
    uint64_t s;  // nonzero
} test_rng;

static inline uint64_t test_rng_next(test_rng *r) {
    r->s ^= r->s << 13;
    r->s ^= r->s >> 7;
    r->s ^= r->s << 17;
    return r->s;
}

// 32 bits from the middle of the state.
static inline uint32_t test_rng_u32(test_rng *r) { return (uint32_t)(test_rng_next(r) >> 16); }

// Uniform on [-1, 1] in steps of 1e-4.
static inline float test_rng_unit(test_rng *r) { return (float)(test_rng_u32(r) % 20001) / 10000.0f - 1.0f; }

#endif
