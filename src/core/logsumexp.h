// SPDX-License-Identifier: MIT
// log(sum(exp(x))) over a float vector, the heart of log-softmax scoring (perplexity, logprobs).
// Uses an AVX2 exponential when the CPU has it (relative error ~2e-7 per term), else libm.
#ifndef MX_CORE_LOGSUMEXP_H
#define MX_CORE_LOGSUMEXP_H

#include <stdint.h>

double mx_logsumexp(const float *x, int64_t n);
// The same with the scalar libm path only (the tests' reference).
double mx_logsumexp_ref(const float *x, int64_t n);
// out[i] = exp((x[i] - shift) * scale) for i < n (x[i] <= shift; terms below e^-87 are 0), returning
// their sum in double. The same vector exponential as mx_logsumexp (token choice's weights).
double mx_exp_sum(const float *x, int64_t n, float shift, float scale, float *out);

#endif
