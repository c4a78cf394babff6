// SPDX-License-Identifier: MIT
// AMD matrix-unit product (MFMA on CDNA, WMMA on RDNA3+), compiled only in ROCm builds. Not written
// yet: it declines, and mxg_matmul falls back to the portable float32 tiled kernel
// (kernels/matmul_tiled.cu). The entry points exist so the dispatch in kernels/matvec.cu and the
// scratch sizing in gpu_backend.c are the same for both vendors.
#include "backends/gpu/compat.h"
#include "backends/gpu/kernels.h"

extern "C" int mxg_matmul_mma(const mxg_launch *L, float *out, const float *x, const mx_matrix *w,
                              const float *bias, int n) {
    (void)L, (void)out, (void)x, (void)w, (void)bias, (void)n;
    return -1;
}

// No pipelined prefill product on ROCm (vendor/cuda/matmul_pipe.cu): no scratch for it.
extern "C" size_t mxg_matmul_pipe_scratch_bytes(int prefill_kernel) {
    (void)prefill_kernel;
    return 0;
}

// No wgmma prefill product on ROCm (vendor/cuda/matmul_wgmma.cu).
extern "C" int mxg_wgmma_probe(void *stream) {
    (void)stream;
    return 0;
}
