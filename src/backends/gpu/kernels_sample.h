// SPDX-License-Identifier: MIT
// The C interface of the sampling kernel (kernels/sample.cu), beside kernels.h: backend.h `sample`
// on the device. Arguments are device pointers; the op enqueues on L->stream and returns.
#ifndef MXG_KERNELS_SAMPLE_H
#define MXG_KERNELS_SAMPLE_H

#include "backends/gpu/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

// ids[n] drawn from logits[n, vocab] under *params with positions pos[n] (see backend.h).
void mxg_sample(const mxg_launch *L, int32_t *ids, const float *logits, int n, int vocab,
                const mx_sample_params *params, const int32_t *pos);

#ifdef __cplusplus
}
#endif

#endif
