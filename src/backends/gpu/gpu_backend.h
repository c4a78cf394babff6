// SPDX-License-Identifier: MIT
// Extra entry points of the GPU backend beyond backend.h, for the GPU tests and benches.
#ifndef MXG_GPU_BACKEND_H
#define MXG_GPU_BACKEND_H

#include <stdbool.h>

#include "backends/backend.h"

// Turns graph recording of plans on (the default; MLXCEL_GPU_NO_GRAPHS=1 starts with it off) or
// off (plans then always run record by record, e.g. to time direct launches).
void mx_gpu_use_graphs(mx_backend *be, bool on);
// Turns the fused kernels of the plan runner on (the default; MLXCEL_GPU_NO_FUSION=1 starts with
// them off) or off (every record runs its own kernel).
void mx_gpu_use_fusion(mx_backend *be, bool on);
// Number of plans with a recorded graph right now.
int mx_gpu_graph_count(mx_backend *be);

// Whether the sample record's split form runs its fast form (kernels/sample_fast.cu) on this
// backend: MLXCEL_GPU_SAMPLE_FAST and the scratch, as the record decides it.
bool mx_gpu_sample_fast(mx_backend *be);

// The backend's stream (gpuStream_t as void *), for timing with gpu_rt.h events in tests/benches.
void *mx_gpu_stream(mx_backend *be);

#endif
