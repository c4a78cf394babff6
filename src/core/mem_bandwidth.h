// SPDX-License-Identifier: MIT
// Streaming read bandwidth of this machine's memory, measured with a thread pool, so a decode
// speed (bytes read per token x tokens per second) can be put next to the rate the same number of
// threads can read at all. Used by `mlxcel bench --bandwidth`.
#ifndef MX_CORE_MEM_BANDWIDTH_H
#define MX_CORE_MEM_BANDWIDTH_H

#include <stddef.h>

#include "core/thread_pool.h"

// Reads a `bytes` buffer (rounded up to 2 MiB; huge pages where the kernel offers them) `passes`
// times, each pass split into 8 tasks per thread of the pool, after one untimed pass that faults it in.
// Returns the best pass in GB/s (1e9 bytes per second), or -1 when the buffer cannot be allocated.
double mx_mem_read_bandwidth(mx_pool *pool, size_t bytes, int passes);

#endif
