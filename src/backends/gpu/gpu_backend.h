// SPDX-License-Identifier: MIT
// Extra entry points of the GPU backend beyond backend.h, for the GPU tests and benches. The engine
// uses the keyed graph entries of mx_backend_ops (graph_begin/graph_end/graph_launch); the handle
// based calls below are the same capture without the key table.
#ifndef MXG_GPU_BACKEND_H
#define MXG_GPU_BACKEND_H

#include <stdbool.h>

#include "backends/backend.h"

// True when `be` was made by mx_gpu_backend_create (safe on any backend).
bool mx_gpu_is_backend(const mx_backend *be);

// Records the ops enqueued until mx_gpu_graph_end instead of running them. Between the two calls
// the engine may only call ops (no upload/download/sync/alloc); pointers and scalar arguments are
// frozen into the graph, so a replay must find its inputs in the same device buffers (upload the
// next token id and position into them before each launch).
int mx_gpu_graph_begin(mx_backend *be, mx_error *err);
int mx_gpu_graph_end(mx_backend *be, void **graph, mx_error *err);
// Enqueues one replay (asynchronous, like any op).
int mx_gpu_graph_launch(mx_backend *be, void *graph, mx_error *err);
void mx_gpu_graph_free(mx_backend *be, void *graph);

// The backend's stream (gpuStream_t as void *), for timing with gpu_rt.h events in tests/benches.
void *mx_gpu_stream(mx_backend *be);

#endif
