// SPDX-License-Identifier: MIT
// The GPU runtime as the C glue sees it: devices, streams, memory, copies, graphs, timing. Implemented
// once in runtime.cu over compat.h, so this header names no vendor type (streams, graphs and events
// are void *). Every function that can fail returns 0, or -1 with a message in err that names the
// runtime call and the runtime's own error string.
#ifndef MXG_GPU_RT_H
#define MXG_GPU_RT_H

#ifdef __cplusplus
extern "C" {
#endif

#include <stdbool.h>
#include <stddef.h>

#include "core/error.h"

typedef struct mxg_device_info {
    char name[128];      // "NVIDIA H200", "AMD Instinct MI300X"
    char arch[64];       // CUDA "90" (major*10+minor), ROCm "gfx942" (feature suffixes removed)
    int warp;            // 32 or 64
    int sm_count;
    int cc;              // CUDA major*10+minor, 0 on ROCm
    size_t total_mem;
    size_t smem_optin;   // largest dynamic shared memory a block may opt into
    size_t l2_bytes;     // L2 cache size (the L2 prefetch cap of MLXCEL_GPU_PDL=2; 0 if not reported)
} mxg_device_info;

// "CUDA runtime 13.0, driver 13.0" / "HIP runtime 5.2"
void mxg_rt_versions(char *buf, size_t cap);
// Number of devices; 0 with a reason in `why` (not an error: a GPU build on a machine without one).
int mxg_rt_device_count(int *count, char *why, size_t why_cap);
int mxg_rt_device_info(int dev, mxg_device_info *info, mx_error *err);
int mxg_rt_set_device(int dev, mx_error *err);
// Checks that this binary holds kernel code the current device can run (call only after the
// architecture list check: on ROCm a missing code object is fatal in some runtime versions).
int mxg_rt_probe_kernels(mx_error *err);

int mxg_rt_stream_create(void **stream, mx_error *err);
void mxg_rt_stream_destroy(void *stream);
// Zeroed device memory.
int mxg_rt_malloc(void **p, size_t bytes, void *stream, mx_error *err);
void mxg_rt_free(void *p);
// Host -> device. The source may be reused as soon as the call returns.
int mxg_rt_upload(void *dst, const void *src, size_t bytes, void *stream, mx_error *err);
// Device -> host, synchronous (waits for queued work first).
// `count` runs of `bytes` from src + i * stride to dst + i * stride, device to device, queued on the
// stream (one 2D copy).
int mxg_rt_copy_runs(void *dst, const void *src, size_t bytes, size_t count, size_t stride, void *stream, mx_error *err);
int mxg_rt_download(void *dst, const void *src, size_t bytes, void *stream, mx_error *err);
// Waits for the stream; reports launch and execution errors.
int mxg_rt_sync(void *stream, mx_error *err);
int mxg_rt_mem_info(size_t *free_bytes, size_t *total_bytes);

// Graphs: begin/end capture on the stream, replay, destroy. Work enqueued between begin and end is
// recorded, not run; it must not synchronize, allocate, or copy from pageable host memory.
int mxg_rt_graph_begin(void *stream, mx_error *err);
int mxg_rt_graph_end(void *stream, void **exec, mx_error *err);
int mxg_rt_graph_launch(void *exec, void *stream, mx_error *err);
void mxg_rt_graph_destroy(void *exec);

// Device timing: an event pair around enqueued work; elapsed milliseconds after both complete.
int mxg_rt_event_create(void **ev, mx_error *err);
void mxg_rt_event_destroy(void *ev);
int mxg_rt_event_record(void *ev, void *stream, mx_error *err);
int mxg_rt_event_elapsed_ms(void *start, void *stop, float *ms, mx_error *err);

#ifdef __cplusplus
}
#endif

#endif
