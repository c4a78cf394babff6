// SPDX-License-Identifier: MIT
// The CPU backend: the reference implementation of every op in backend.h, multithreaded with the
// core thread pool. Other backends are tested op by op against it.
#ifndef MX_BACKENDS_CPU_BACKEND_H
#define MX_BACKENDS_CPU_BACKEND_H

#include "backends/backend.h"

// threads <= 0: all cores available.
mx_backend *mx_cpu_backend_create(int threads, mx_error *err);

#endif
