// SPDX-License-Identifier: MIT
// Kernel selection and the scalar reference kernels (see cpu_kernels.h). SIMD versions live in
// cpu_kernels_x86.c and register themselves through cpu_kernels_x86_table().
#include "backends/cpu/cpu_kernels.h"

#include <string.h>

#include "backends/cpu/cpu_kernels_table.h"

static float scalar_dot(const float *a, const float *b, int64_t n) {
    float acc[4] = {0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        acc[0] += a[i] * b[i];
        acc[1] += a[i + 1] * b[i + 1];
        acc[2] += a[i + 2] * b[i + 2];
        acc[3] += a[i + 3] * b[i + 3];
    }
    for (; i < n; i++) acc[0] += a[i] * b[i];
    return (acc[0] + acc[1]) + (acc[2] + acc[3]);
}

static void scalar_dequant_row(const mx_matrix *w, int64_t row, float *out) { mx_matrix_dequant_row(w, row, out); }

static float scalar_row_dot(const mx_matrix *w, int64_t row, const float *x, float *scratch) {
    scalar_dequant_row(w, row, scratch);
    return scalar_dot(scratch, x, w->cols);
}

static const cpu_kernel_set scalar_set = {"scalar", scalar_dequant_row, scalar_dot, scalar_row_dot};

static const cpu_kernel_set *active;

static const cpu_kernel_set *pick_default(void) {
    const cpu_kernel_set *best = cpu_kernels_x86_best();
    return best ? best : &scalar_set;
}

static inline const cpu_kernel_set *kernels(void) {
    const cpu_kernel_set *k = __atomic_load_n(&active, __ATOMIC_ACQUIRE);
    if (!k) {
        k = pick_default();
        __atomic_store_n(&active, k, __ATOMIC_RELEASE);
    }
    return k;
}

void cpu_kernels_dequant_row(const mx_matrix *w, int64_t row, float *out) { kernels()->dequant_row(w, row, out); }

float cpu_kernels_dot(const float *a, const float *b, int64_t n) { return kernels()->dot(a, b, n); }

float cpu_kernels_row_dot(const mx_matrix *w, int64_t row, const float *x, float *scratch) {
    return kernels()->row_dot(w, row, x, scratch);
}

const char *cpu_kernels_name(void) { return kernels()->name; }

int cpu_kernels_select(const char *name) {
    if (strcmp(name, "scalar") == 0) {
        __atomic_store_n(&active, &scalar_set, __ATOMIC_RELEASE);
        return 0;
    }
    const cpu_kernel_set *k = cpu_kernels_x86_named(name);
    if (!k) return -1;
    __atomic_store_n(&active, k, __ATOMIC_RELEASE);
    return 0;
}
