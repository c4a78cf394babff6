// SPDX-License-Identifier: MIT
// The two full passes over a logit row that the host token choice (sample_rows.c) makes besides the
// exponentials: the best token, and the tokens at or above a threshold. Each has a scalar and, on
// x86-64 with AVX2, a vector implementation (8 logits a compare); both give the same results bit for
// bit (the same first maximum, the same NaN logits set to -inf, the same candidates in id order and
// their mass added in the same order), which tests/unit/test_sample_passes.c checks. The host
// sampler uses mx_sample_passes_host(); the tests ask for each set by name.
#ifndef MX_CORE_SAMPLE_PASSES_H
#define MX_CORE_SAMPLE_PASSES_H

#include <stdint.h>

typedef struct mx_sample_passes {
    const char *name;  // "scalar" or "avx2"
    // The best token of l[vocab] (the first maximum; vocab >= 1). NaN logits are set to -inf on the
    // way (they then carry no mass and are never kept); a row of -inf (or NaN) gives token 0.
    int32_t (*best_token)(float *l, int vocab);
    // The tokens with l >= t0, in id order, into cand[vocab]; returns their count and sets *mass to
    // the sum of their e[] (exp(l - max), by token id), added in id order in double precision.
    int (*collect)(const float *l, const float *e, int vocab, float t0, int32_t *cand, double *mass);
} mx_sample_passes;

// The scalar passes (every CPU).
const mx_sample_passes *mx_sample_passes_scalar(void);
// The AVX2 passes; NULL when this CPU lacks AVX2 (core/avx2_target.h) or is not x86-64.
const mx_sample_passes *mx_sample_passes_avx2(void);
// The passes the host sampler runs: AVX2 where the CPU has it, else scalar.
const mx_sample_passes *mx_sample_passes_host(void);

#endif
