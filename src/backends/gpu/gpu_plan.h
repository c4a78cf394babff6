// SPDX-License-Identifier: MIT
// The GPU plan runner: enqueues a plan's records, replacing runs of records it recognizes by fused
// kernels (gpu_plan.c). Private to src/backends/gpu/.
#ifndef MXG_GPU_PLAN_H
#define MXG_GPU_PLAN_H

#include "backends/gpu/kernels.h"

// Enqueues every record of `plan` on L->stream (fusing where it can unless `fuse` is false).
void mxg_enqueue_plan(const mxg_launch *L, const mx_plan *plan, bool fuse);

#endif
