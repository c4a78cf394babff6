// SPDX-License-Identifier: MIT
// The failure count of the GPU emulation tests (mma_emulation, sample_emulation): FAIL(fmt, ...)
// prints one "FAIL: " line and counts it in `fails`, which the test's main turns into its exit status.
#pragma once
#include <cstdio>

static int fails = 0;
#define FAIL(...) do { printf("FAIL: " __VA_ARGS__); printf("\n"); fails++; } while (0)
