// SPDX-License-Identifier: MIT
// AMD matrix-unit prefill attention: not written yet. It declines, so MLXCEL_GPU_ATTN_MMA leaves
// ROCm builds on the general attention kernel (kernels/attention.cu dispatches). The entry point
// exists so the dispatch is the same for both vendors (vendor/cuda/attn_mma.cu).
#include "backends/gpu/compat.h"
#include "backends/gpu/kernels.h"

extern "C" int mxg_attention_mma(const mxg_launch *L, float *out, const float *q, const mx_kv_ref *r, int n,
                                 int n_heads, float scale, int window, const float *sinks) {
    (void)L, (void)out, (void)q, (void)r, (void)n, (void)n_heads, (void)scale, (void)window, (void)sinks;
    return -1;
}
