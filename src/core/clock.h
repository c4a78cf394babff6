// SPDX-License-Identifier: MIT
// The one clock of the project: monotonic seconds for timing and deadlines, a thread's and the
// process's CPU seconds, wall-clock seconds for timestamps, the wall-clock instant that
// condition-variable waits take, and a seed drawn from the wall clock for samplers given no seed.
#ifndef MX_CORE_CLOCK_H
#define MX_CORE_CLOCK_H

#include <stdint.h>
#include <time.h>

// Seconds on the monotonic clock (an arbitrary origin; only differences mean anything).
double mx_now(void);
// CPU seconds the calling thread has run (its own clock; for telling time on the CPU from time waiting).
double mx_thread_cpu_now(void);
// CPU seconds all threads of the process have run (for telling work from waiting under a shared machine).
double mx_process_cpu_now(void);
// Wall-clock seconds since the Unix epoch, for timestamps that leave the process (a response's
// "created", the Hub cache's metadata, a chat template's strftime_now); never for measuring time.
double mx_wall_now(void);
// The wall-clock instant `seconds` from now, as pthread_cond_timedwait takes it.
struct timespec mx_wall_deadline(double seconds);
// A 64-bit value that differs between calls and runs (wall-clock nanoseconds, mixed).
uint64_t mx_clock_seed(void);

#endif
