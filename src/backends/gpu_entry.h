// SPDX-License-Identifier: MIT
// The two entry points a GPU backend (CUDA or ROCm, src/backends/gpu/) exports to the registry.
// They exist only in GPU builds (MLXCEL_HAVE_GPU defined).
#ifndef MX_BACKENDS_GPU_ENTRY_H
#define MX_BACKENDS_GPU_ENTRY_H

#include <stddef.h>

#include "backends/backend.h"

// Creates the GPU backend on opt->device_index. Fails with a clear message when no device is
// present or its architecture is not among those compiled in (what was built, what was found,
// how to rebuild).
mx_backend *mx_gpu_backend_create(const mx_backend_options *opt, mx_error *err);

// Writes a human-readable description for `mlxcel info`: runtime ("CUDA 13.0"/"HIP 6.2"), the
// architectures compiled in, and the devices found (or why none). Returns bytes written.
size_t mx_gpu_describe(char *buf, size_t cap);

// "cuda" or "rocm".
const char *mx_gpu_backend_name(void);

#endif
