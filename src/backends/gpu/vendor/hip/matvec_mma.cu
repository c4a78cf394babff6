// SPDX-License-Identifier: MIT
// AMD matrix-unit product for decode batches: not written yet. It declines, so MLXCEL_GPU_TC_DECODE
// leaves ROCm builds on the float32 matrix-vector kernels (kernels/matvec.cu dispatches). The
// entry point exists so the dispatch is the same for both vendors (vendor/cuda/matvec_mma.cu).
#include "backends/gpu/compat.h"
#include "backends/gpu/kernels.h"
#include "backends/gpu/kernels_fused.h"

extern "C" int mxg_matvec_mma(const mxg_launch *L, float *out, const float *x, const mx_matrix *w, const float *bias,
                              int n) {
    (void)L, (void)out, (void)x, (void)w, (void)bias, (void)n;
    return -1;
}

extern "C" int mxg_matvec_mma_add(const mxg_launch *L, float *out, const float *x, const mx_matrix *w,
                                  const float *bias, int n, float *res) {
    (void)L, (void)out, (void)x, (void)w, (void)bias, (void)n, (void)res;
    return -1;
}

extern "C" int mxg_matvec_mma_group(const mxg_launch *L, const mxg_fused_matvec *f, int n) {
    (void)L, (void)f, (void)n;
    return -1;
}
