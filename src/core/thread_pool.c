// SPDX-License-Identifier: MIT
// Thread pool (see thread_pool.h). One job at a time. The caller publishes (fn, arg, n_tasks) and
// then a 64-bit ticket = (generation << 32 | next task index); workers and the caller claim task
// indices by compare-and-swap on the ticket, so a claim can only succeed for the generation the
// claimer read fn/arg for (each job first closes the previous one under a generation of its own,
// then publishes itself under the next). Completion is counted in finished tasks, not in threads: the caller
// never waits for a worker that was descheduled before claiming anything (it takes the unstarted
// tasks itself); it only waits for tasks a worker actually started. The thread that finishes the
// last task wakes the caller if it went to sleep.
#include "core/thread_pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

// Rounds a thread polls for a new job (a worker) or for the job's last task (the caller) before it
// sleeps: about 0.18 ms on the 2-vCPU Xeon. A decode step runs a few short jobs per layer (a 2k-context
// attention task is ~50 us); at 20,000 rounds (~18 us) the worker often slept between them and was
// woken late, and 10x the rounds decoded 6-7% faster on two threads (bench/RESULTS.md CPU round 14).
// An idle pool polls that long once, then sleeps.
#define SPIN_ROUNDS 200000

struct mx_pool {
    int n_threads;  // including the caller
    pthread_t *workers;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    pthread_cond_t done_cv;
    _Atomic uint64_t ticket;  // generation << 32 | next task index
    atomic_int done;          // tasks finished in the current job
    atomic_int n_tasks;
    _Atomic(mx_pool_fn) fn;
    _Atomic(void *) arg;
    atomic_bool caller_sleeps;
    atomic_bool stop;
};

struct worker_start {
    mx_pool *pool;
    int index;
};

// Claims and runs tasks of generation `gen` until none are left (or a newer job replaced it).
static void run_tasks(mx_pool *p, uint32_t gen, int thread) {
    uint64_t cur = atomic_load(&p->ticket);
    for (;;) {
        if ((uint32_t)(cur >> 32) != gen) return;
        mx_pool_fn fn = atomic_load_explicit(&p->fn, memory_order_relaxed);
        void *arg = atomic_load_explicit(&p->arg, memory_order_relaxed);
        int n = atomic_load_explicit(&p->n_tasks, memory_order_relaxed);
        int t = (int)(uint32_t)cur;
        if (t >= n) return;
        // Succeeds only while the ticket still belongs to `gen`: fn/arg/n above are that job's,
        // since the caller rewrites them only after every task of the job has finished.
        if (!atomic_compare_exchange_weak(&p->ticket, &cur, cur + 1)) continue;
        fn(arg, t, thread);
        if (atomic_fetch_add(&p->done, 1) + 1 == n && atomic_load(&p->caller_sleeps)) {
            pthread_mutex_lock(&p->lock);
            pthread_cond_signal(&p->done_cv);
            pthread_mutex_unlock(&p->lock);
        }
        cur = atomic_load(&p->ticket);
    }
}

static uint32_t generation(mx_pool *p) { return (uint32_t)(atomic_load(&p->ticket) >> 32); }

static void *worker_main(void *raw) {
    struct worker_start *ws = raw;
    mx_pool *p = ws->pool;
    int index = ws->index;
    free(ws);
    uint32_t seen = 0;
    for (;;) {
        int spins = 0;
        while (generation(p) == seen && !atomic_load(&p->stop) && spins < SPIN_ROUNDS) spins++;
        if (generation(p) == seen && !atomic_load(&p->stop)) {
            pthread_mutex_lock(&p->lock);
            while (generation(p) == seen && !atomic_load(&p->stop)) pthread_cond_wait(&p->wake, &p->lock);
            pthread_mutex_unlock(&p->lock);
        }
        if (atomic_load(&p->stop)) return NULL;
        seen = generation(p);
        run_tasks(p, seen, index);
    }
}

int mx_cpu_count(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        int n = CPU_COUNT(&set);
        if (n > 0) return n;
    }
    return 1;
}

mx_pool *mx_pool_create(int n_threads) {
    if (n_threads <= 0) n_threads = mx_cpu_count();
    mx_pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->n_threads = n_threads;
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done_cv, NULL);
    p->workers = calloc(n_threads, sizeof *p->workers);
    if (!p->workers) {
        pthread_mutex_destroy(&p->lock);
        pthread_cond_destroy(&p->wake);
        pthread_cond_destroy(&p->done_cv);
        free(p);
        return NULL;
    }
    for (int i = 1; i < n_threads; i++) {
        struct worker_start *ws = malloc(sizeof *ws);
        if (!ws) {
            p->n_threads = i;  // run with the threads we got
            break;
        }
        ws->pool = p;
        ws->index = i;
        if (pthread_create(&p->workers[i], NULL, worker_main, ws) != 0) {
            free(ws);
            p->n_threads = i;  // run with the threads we got
            break;
        }
    }
    return p;
}

void mx_pool_free(mx_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->lock);
    atomic_store(&p->stop, true);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
    for (int i = 1; i < p->n_threads; i++) pthread_join(p->workers[i], NULL);
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->done_cv);
    free(p->workers);
    free(p);
}

int mx_pool_threads(const mx_pool *p) { return p->n_threads; }

void mx_pool_run(mx_pool *p, int n_tasks, mx_pool_fn fn, void *arg) {
    if (n_tasks <= 0) return;
    if (p->n_threads == 1 || n_tasks == 1) {
        for (int t = 0; t < n_tasks; t++) fn(arg, t, 0);
        return;
    }
    // Close the previous job first (new generation, no claimable index): a worker that read the old
    // ticket and is about to read n_tasks must not see the new count and still win its CAS.
    uint32_t gen = generation(p) + 2;
    atomic_store(&p->ticket, (uint64_t)(gen - 1) << 32 | 0x7fffffffu);
    atomic_store_explicit(&p->fn, fn, memory_order_relaxed);
    atomic_store_explicit(&p->arg, arg, memory_order_relaxed);
    atomic_store_explicit(&p->n_tasks, n_tasks, memory_order_relaxed);
    atomic_store(&p->done, 0);
    pthread_mutex_lock(&p->lock);
    atomic_store(&p->ticket, (uint64_t)gen << 32);  // publishes the job (seq_cst: after the stores above)
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
    run_tasks(p, gen, 0);
    if (atomic_load(&p->done) < n_tasks) {
        int spins = 0;
        while (atomic_load(&p->done) < n_tasks && spins < SPIN_ROUNDS) spins++;
        if (atomic_load(&p->done) < n_tasks) {
            pthread_mutex_lock(&p->lock);
            atomic_store(&p->caller_sleeps, true);
            while (atomic_load(&p->done) < n_tasks) pthread_cond_wait(&p->done_cv, &p->lock);
            atomic_store(&p->caller_sleeps, false);
            pthread_mutex_unlock(&p->lock);
        }
    }
}
