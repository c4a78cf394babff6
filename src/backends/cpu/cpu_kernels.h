// SPDX-License-Identifier: MIT
// The inner loops of the CPU backend that decide its speed: decoding one weight row to float32,
// dot products, and the fused decode-and-dot used at batch 1. Each has a scalar reference version
// (kept for tests) and SIMD versions selected once at run time from the CPU's features.
#ifndef MX_BACKENDS_CPU_KERNELS_H
#define MX_BACKENDS_CPU_KERNELS_H

#include <stdint.h>

#include "core/quant.h"

// out[cols] = row `row` of w (row counts across experts), float32.
void cpu_kernels_dequant_row(const mx_matrix *w, int64_t row, float *out);
// sum a[i] * b[i].
float cpu_kernels_dot(const float *a, const float *b, int64_t n);
// Row `row` of w dotted with x[cols]; scratch has room for cols floats.
float cpu_kernels_row_dot(const mx_matrix *w, int64_t row, const float *x, float *scratch);

// Names the kernel set chosen at run time ("avx512", "avx2", "scalar").
const char *cpu_kernels_name(void);
// Forces a kernel set (tests compare them); returns -1 if the CPU lacks it.
int cpu_kernels_select(const char *name);

#endif
