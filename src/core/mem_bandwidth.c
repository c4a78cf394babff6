// SPDX-License-Identifier: MIT
// Streaming read probe (see mem_bandwidth.h). Each thread sums its share of the buffer as 64-bit
// words into eight independent accumulators: enough loads in flight to saturate memory on any
// x86-64 or AArch64 core without SIMD code, and the sum is stored so the loads are not removed.
// The buffer is filled before timing (untouched anonymous pages would read the shared zero page).
#include "core/mem_bandwidth.h"

#include "core/clock.h"

#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#define PROBE_ALIGN ((size_t)2 << 20)

typedef struct probe_job {
    const uint64_t *words;
    size_t n_words;
    int n_tasks;
    uint64_t sums[64];  // one per task (at most 64 tasks), so the reads have a visible result
} probe_job;

static void probe_task(void *arg, int task, int thread) {
    (void)thread;
    probe_job *j = arg;
    size_t per = j->n_words / (size_t)j->n_tasks / 8 * 8;
    const uint64_t *w = j->words + (size_t)task * per;
    uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0, a4 = 0, a5 = 0, a6 = 0, a7 = 0;
    for (size_t i = 0; i < per; i += 8) {
        a0 += w[i], a1 += w[i + 1], a2 += w[i + 2], a3 += w[i + 3];
        a4 += w[i + 4], a5 += w[i + 5], a6 += w[i + 6], a7 += w[i + 7];
    }
    j->sums[task] = a0 ^ a1 ^ a2 ^ a3 ^ a4 ^ a5 ^ a6 ^ a7;
}

double mx_mem_read_bandwidth(mx_pool *pool, size_t bytes, int passes) {
    bytes = (bytes + PROBE_ALIGN - 1) / PROBE_ALIGN * PROBE_ALIGN;
    void *buf = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (buf == MAP_FAILED) return -1.0;
#ifdef MADV_HUGEPAGE
    madvise(buf, bytes, MADV_HUGEPAGE);  // advisory: ignored where transparent huge pages are off
#endif
    memset(buf, 0x5a, bytes);
    int threads = mx_pool_threads(pool);
    probe_job j = {.words = buf, .n_words = bytes / 8, .n_tasks = threads * 8 > 64 ? 64 : threads * 8};
    mx_pool_run(pool, j.n_tasks, probe_task, &j);  // warm-up: TLB and page tables
    double best = 0.0;
    for (int p = 0; p < passes; p++) {
        double t0 = mx_now();
        mx_pool_run(pool, j.n_tasks, probe_task, &j);
        double t = mx_now() - t0;
        double rate = (double)(j.n_words / (size_t)j.n_tasks / 8 * 8 * (size_t)j.n_tasks * 8) / t / 1e9;
        best = rate > best ? rate : best;
    }
    munmap(buf, bytes);
    return best;
}
