// SPDX-License-Identifier: MIT
// The project's one clock (see clock.h): CLOCK_MONOTONIC seconds, thread and process CPU seconds,
// CLOCK_REALTIME seconds and deadlines for timed waits, and a seed mixed from the wall clock for
// samplers given none.
#include "core/clock.h"

#include <stdatomic.h>

#include "core/sample_noise.h"

// Seconds on clock `id` (one reading, the same conversion for every clock below).
static double seconds_on(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double mx_now(void) { return seconds_on(CLOCK_MONOTONIC); }

double mx_thread_cpu_now(void) { return seconds_on(CLOCK_THREAD_CPUTIME_ID); }

double mx_process_cpu_now(void) { return seconds_on(CLOCK_PROCESS_CPUTIME_ID); }

double mx_wall_now(void) { return seconds_on(CLOCK_REALTIME); }

struct timespec mx_wall_deadline(double seconds) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    long whole = (long)seconds;
    ts.tv_sec += whole;
    ts.tv_nsec += (long)((seconds - (double)whole) * 1e9);
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    return ts;
}

uint64_t mx_clock_seed(void) {
    static atomic_ullong calls;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t z = ((uint64_t)ts.tv_sec << 32 ^ (uint64_t)ts.tv_nsec) + 0x9e3779b97f4a7c15ull * (atomic_fetch_add(&calls, 1) + 1);
    return mx_noise_mix(z);
}
