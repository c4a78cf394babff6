// SPDX-License-Identifier: MIT
// Thread pool: every task of every job runs exactly once and mx_pool_run returns only after all of
// them finished, for many back-to-back jobs of varied sizes (the decode loop's pattern), with tasks
// of uneven length, with workers that sleep in between (jobs spaced out), and with more threads
// than cores (workers descheduled while the caller goes on: the caller takes their tasks).
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "check.h"
#include "core/thread_pool.h"

typedef struct job {
    atomic_int *hits;
    int n;
    int slow;  // every slow-th task spins a while
    atomic_int bad_thread;
    int n_threads;
} job;

static void task(void *arg, int t, int thread) {
    job *j = arg;
    if (thread < 0 || thread >= j->n_threads) atomic_fetch_add(&j->bad_thread, 1);
    if (j->slow && t % j->slow == 0) {
        volatile int x = 0;
        for (int i = 0; i < 20000; i++) x += i;
    }
    atomic_fetch_add(&j->hits[t], 1);
}

static void run_jobs(int threads, int jobs, int max_tasks, int slow, int pause_us) {
    mx_pool *p = mx_pool_create(threads);
    CHECK(p != NULL);
    int nt = mx_pool_threads(p);
    atomic_int *hits = calloc((size_t)max_tasks, sizeof *hits);
    int wrong = 0, bad_thread = 0;
    unsigned seed = 12345;
    for (int k = 0; k < jobs; k++) {
        seed = seed * 1103515245u + 12345u;
        int n = 1 + (int)((seed >> 8) % (unsigned)max_tasks);
        for (int t = 0; t < n; t++) atomic_store(&hits[t], 0);
        job j = {hits, n, slow, 0, nt};
        mx_pool_run(p, n, task, &j);
        for (int t = 0; t < n; t++)
            if (atomic_load(&hits[t]) != 1) wrong++;
        bad_thread += atomic_load(&j.bad_thread);
        if (pause_us) nanosleep(&(struct timespec){0, pause_us * 1000L}, NULL);
    }
    CHECK_MSG(wrong == 0, "threads %d: %d tasks did not run exactly once", threads, wrong);
    CHECK_MSG(bad_thread == 0, "threads %d: %d tasks got a thread index out of range", threads, bad_thread);
    free(hits);
    mx_pool_free(p);
}

int main(void) {
    run_jobs(1, 200, 50, 0, 0);
    run_jobs(2, 20000, 64, 0, 0);
    run_jobs(2, 2000, 200, 7, 0);
    run_jobs(2, 50, 30, 3, 2000);  // workers fall asleep between jobs
    run_jobs(8, 5000, 100, 5, 0);  // more threads than cores
    return check_finish();
}
