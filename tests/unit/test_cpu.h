// SPDX-License-Identifier: MIT
// The CPU backend as the unit tests create it: with `threads` workers (0: the backend's default),
// or NULL with a failed check naming why.
#ifndef MLXCEL_TEST_CPU_H
#define MLXCEL_TEST_CPU_H

#include "backends/backend.h"
#include "check.h"

static inline mx_backend *test_cpu_backend(int threads) {
    mx_error err = {{0}};
    mx_backend_options opt = {.name = "cpu", .threads = threads};
    mx_backend *be = mx_backend_create(&opt, &err);
    CHECK_MSG(be != NULL, "%s", err.msg);
    return be;
}

#endif
