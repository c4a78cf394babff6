// SPDX-License-Identifier: MIT
// Clock (see clock.h).
#include "core/clock.h"

#include <stdatomic.h>
#include <time.h>

double mx_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

uint64_t mx_clock_seed(void) {
    static atomic_ullong calls;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t z = ((uint64_t)ts.tv_sec << 32 ^ (uint64_t)ts.tv_nsec) + 0x9e3779b97f4a7c15ull * (atomic_fetch_add(&calls, 1) + 1);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
