// SPDX-License-Identifier: MIT
// The C interface of the sampling kernel (kernels/sample.cu), beside kernels.h: backend.h `sample`
// on the device. Arguments are device pointers; the op enqueues on L->stream and returns.
#ifndef MXG_KERNELS_SAMPLE_H
#define MXG_KERNELS_SAMPLE_H

#include "backends/gpu/kernels.h"
#include "core/sample_rows.h"

#ifdef __cplusplus
extern "C" {
#endif

// out[n]: the token choice of each row of logits[n, vocab] under rows[n] and mods (see backend.h
// `sample` and core/sample_rows.h); the logits are edited in place.
void mxg_sample(const mxg_launch *L, mx_sample_out *out, float *logits, int n, int vocab, const mx_sample_row *rows,
                const mx_logit_mod *mods);

#ifdef __cplusplus
}
#endif

#endif
