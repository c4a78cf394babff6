// SPDX-License-Identifier: MIT
// The CPU backend: the reference implementation of every op in backend.h, multithreaded with the
// core thread pool. Other backends are tested op by op against it.
#ifndef MX_BACKENDS_CPU_BACKEND_H
#define MX_BACKENDS_CPU_BACKEND_H

#include "backends/backend.h"

// threads <= 0: all cores available.
mx_backend *mx_cpu_backend_create(int threads, mx_error *err);
// Sets the KV cache's codes before any context is created (--kv-bits): 16 int16 (the default), 8
// int8, both with a float scale per MX_KV_SCALE_BLOCK values, 4 4-bit codes with a float scale per
// MX_KV_I4_GROUP values; overrides MLXCEL_CPU_KV. Returns -1 with a message for any other number.
int mx_cpu_backend_set_kv_bits(mx_backend *be, int bits, mx_error *err);

#endif
