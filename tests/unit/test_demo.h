// SPDX-License-Identifier: MIT
// The demo model on the CPU backend, loaded the way the engine and model tests need it (they run
// from the repository root, where models/qwen3-demo-44m-4bit is).
#ifndef MLXCEL_TEST_DEMO_H
#define MLXCEL_TEST_DEMO_H

#include "backends/backend.h"
#include "check.h"
#include "test_cpu.h"
#include "models/model.h"

// Creates the CPU backend in *be and loads the demo model on it. Returns NULL, with a failed
// check, when either fails (*be is then the backend or NULL).
static inline mx_model *test_demo_model(mx_backend **be) {
    mx_error err = {{0}};
    *be = test_cpu_backend(0);
    mx_model *m = *be ? mx_model_load("models/qwen3-demo-44m-4bit", *be, &err) : NULL;
    CHECK_MSG(m != NULL, "%s", err.msg);
    return m;
}

#endif
