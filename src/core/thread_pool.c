// SPDX-License-Identifier: MIT
// Thread pool (see thread_pool.h). One job at a time: the caller publishes (fn, arg, n_tasks) under
// a generation counter; workers and the caller claim task indices with an atomic counter; the last
// thread to finish signals completion.
#include "core/thread_pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>

#define SPIN_ROUNDS 20000

struct mx_pool {
    int n_threads;  // including the caller
    pthread_t *workers;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    pthread_cond_t done_cv;
    atomic_uint generation;
    atomic_int next_task;
    atomic_int active;  // threads still working on the current job
    int n_tasks;
    mx_pool_fn fn;
    void *arg;
    atomic_bool stop;
};

struct worker_start {
    mx_pool *pool;
    int index;
};

static void run_tasks(mx_pool *p, int thread) {
    for (;;) {
        int t = atomic_fetch_add(&p->next_task, 1);
        if (t >= p->n_tasks) break;
        p->fn(p->arg, t, thread);
    }
}

static void finish_share(mx_pool *p) {
    if (atomic_fetch_sub(&p->active, 1) == 1) {
        pthread_mutex_lock(&p->lock);
        pthread_cond_signal(&p->done_cv);
        pthread_mutex_unlock(&p->lock);
    }
}

static void *worker_main(void *raw) {
    struct worker_start *ws = raw;
    mx_pool *p = ws->pool;
    int index = ws->index;
    free(ws);
    unsigned seen = 0;
    for (;;) {
        int spins = 0;
        while (atomic_load(&p->generation) == seen && !atomic_load(&p->stop) && spins < SPIN_ROUNDS) spins++;
        if (atomic_load(&p->generation) == seen && !atomic_load(&p->stop)) {
            pthread_mutex_lock(&p->lock);
            while (atomic_load(&p->generation) == seen && !atomic_load(&p->stop)) pthread_cond_wait(&p->wake, &p->lock);
            pthread_mutex_unlock(&p->lock);
        }
        if (atomic_load(&p->stop)) return NULL;
        seen = atomic_load(&p->generation);
        run_tasks(p, index);
        finish_share(p);
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
    for (int i = 1; i < n_threads; i++) {
        struct worker_start *ws = malloc(sizeof *ws);
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
    p->fn = fn;
    p->arg = arg;
    p->n_tasks = n_tasks;
    atomic_store(&p->next_task, 0);
    atomic_store(&p->active, p->n_threads);
    pthread_mutex_lock(&p->lock);
    atomic_fetch_add(&p->generation, 1);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
    run_tasks(p, 0);
    if (atomic_fetch_sub(&p->active, 1) != 1) {
        int spins = 0;
        while (atomic_load(&p->active) > 0 && spins < SPIN_ROUNDS) spins++;
        pthread_mutex_lock(&p->lock);
        while (atomic_load(&p->active) > 0) pthread_cond_wait(&p->done_cv, &p->lock);
        pthread_mutex_unlock(&p->lock);
    }
}
