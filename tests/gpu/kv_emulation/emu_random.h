// SPDX-License-Identifier: MIT
// The random stream of the GPU emulation tests (kv_emulation, mma_emulation, sample_emulation): a
// xorshift64 generator per test program, the same numbers on every run, so a failing case can be
// rerun. Each test draws its inputs from it in a fixed order: a test that seeds it (emu_seed, first
// thing in main) or changes what it draws gets other cases.
#pragma once
#include <cstddef>
#include <cstdint>

static uint64_t emu_rs = 0x9e3779b97f4a7c15ull;

static inline void emu_seed(uint64_t s) { emu_rs = s; }
static inline uint64_t emu_next() {
    emu_rs ^= emu_rs << 13;
    emu_rs ^= emu_rs >> 7;
    emu_rs ^= emu_rs << 17;
    return emu_rs;
}
// Uniform in [0, 1) on a 2^-24 grid.
static inline float emu_unit() { return (float)((emu_next() >> 40) * (1.0 / 16777216.0)); }
// Uniform in [lo, hi).
static inline float emu_uniform(float lo, float hi) { return lo + (hi - lo) * emu_unit(); }
// Uniform in 0..n-1.
static inline int emu_below(int n) { return (int)(emu_next() % (uint64_t)n); }
// x[0..n) uniform in [lo, hi).
static inline void emu_fill(float *x, size_t n, float lo, float hi) {
    for (size_t i = 0; i < n; i++) x[i] = emu_uniform(lo, hi);
}
