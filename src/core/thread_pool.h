// SPDX-License-Identifier: MIT
// A fixed pool of worker threads for data-parallel ops. mx_pool_run splits `n_tasks` task indices
// over the workers and the calling thread and returns when all are done; no allocation happens per
// call, so the decode loop can use it freely. Workers spin briefly before sleeping, which keeps the
// hand-off cheap between the many small ops of one decoded token.
#ifndef MX_CORE_THREAD_POOL_H
#define MX_CORE_THREAD_POOL_H

typedef struct mx_pool mx_pool;

// fn(arg, task, thread): thread is in [0, n_threads) and indexes per-thread scratch.
typedef void (*mx_pool_fn)(void *arg, int task, int thread);

// n_threads <= 0: the number of cores available to this process.
mx_pool *mx_pool_create(int n_threads);
void mx_pool_free(mx_pool *pool);
int mx_pool_threads(const mx_pool *pool);
// Runs fn for task = 0 .. n_tasks-1; tasks are taken in order by whichever thread is free.
void mx_pool_run(mx_pool *pool, int n_tasks, mx_pool_fn fn, void *arg);
// Number of cores this process may use (sched_getaffinity).
int mx_cpu_count(void);

#endif
