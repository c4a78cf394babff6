// SPDX-License-Identifier: MIT
// The one clock of the project: monotonic seconds for timing and deadlines, and a seed drawn from
// the wall clock for samplers given no seed.
#ifndef MX_CORE_CLOCK_H
#define MX_CORE_CLOCK_H

#include <stdint.h>

// Seconds on the monotonic clock (an arbitrary origin; only differences mean anything).
double mx_now(void);
// A 64-bit value that differs between calls and runs (wall-clock nanoseconds, mixed).
uint64_t mx_clock_seed(void);

#endif
