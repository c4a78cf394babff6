// SPDX-License-Identifier: MIT
// The continuous-batching scheduler: one thread owns the generation engine (src/generate, n_slots
// sequences) and runs its steps while any job is active. Between steps it admits queued jobs into
// free slots and drops finished or cancelled ones, so a slot is reused at the next step. What a
// step does (prompt chunks, batched token choice, stop rules, detokenization, logprobs) is the
// engine's; the scheduler only moves text and logprobs into the job (the response layer turns them
// into JSON). The queue and the slots are the only shared state, so draining is: stop submitting,
// wait until stats report nothing queued or active.
#ifndef MX_SERVER_SRV_SCHED_H
#define MX_SERVER_SRV_SCHED_H

#include <pthread.h>
#include <stdint.h>

#include "core/error.h"
#include "generate/engine.h"
#include "models/model.h"
#include "server/srv_job.h"
#include "tokenizer/tokenizer.h"

typedef struct srv_sched srv_sched;

typedef struct srv_sched_opts {
    int n_slots;             // sequences decoded together
    int max_ctx;             // positions per sequence
    int max_queue;           // jobs waiting for a slot at most
    int prefill_chunk;       // prompt tokens per sequence per step
    int batch_tokens;        // prompt tokens per step over all sequences; 0: the engine's default
    const int32_t *stop_ids; // extra stop tokens besides the model's eos (copied)
    int n_stop_ids;
    pthread_mutex_t *model_lock; // held around each forward step (other users of the model take it too)
    bool prefix_reuse;       // a new prompt shares the cached KV blocks of its prefix
    int kv_size;             // positions in the KV pool; 0: the engine's default
} srv_sched_opts;

typedef struct srv_stats {
    int queued, active, n_slots;
    uint64_t requests, prompt_tokens, cancelled;
    mx_engine_stats engine;  // the engine's counters: tokens, step rate, the KV pool and prefix cache
    // Seconds the scheduler thread spent between consecutive steps while sequences were running:
    // queue and slot upkeep, admission, and waiting for the scheduler lock or the model lock.
    double between_steps_seconds;
    double upkeep_seconds;  // the part of it spent in queue and slot upkeep (the rest: lock waits)
    // Parts of upkeep_seconds: admitting queued jobs (sequence creation, engine admission); dropping
    // finished, cancelled and expired jobs (engine release, handing the job's end to the notifier).
    double admit_seconds, release_seconds;
    // The scheduler thread in upkeep_seconds: its CPU time (the rest it was off the CPU: preempted or
    // blocked), its involuntary context switches (preempted) and voluntary ones (blocked on a lock).
    double upkeep_cpu_seconds;
    uint64_t upkeep_preemptions, upkeep_blocks;
    // The scheduler thread waiting for job locks held by connection threads (contended acquisitions
    // only): in upkeep, and in the token callback during steps (which delays the step).
    double upkeep_lock_wait_seconds, step_lock_wait_seconds;
    // The scheduler thread's context switches during steps: involuntary (preempted by other threads
    // while it prepares, launches or waits for the backend) and voluntary (blocked: a lock, or a
    // backend wait that sleeps).
    uint64_t step_preemptions, step_blocks;
} srv_stats;

// Creates the context and starts the thread. The model and tokenizer are borrowed. A job whose
// prompt does not fit the KV pool now waits in the queue; one that never can is answered 400 with the
// numbers. A running job may be preempted by the engine when the pool runs out (engine.h); it stays
// active (its stream pauses) and resumes ahead of the queue.
srv_sched *srv_sched_create(mx_model *m, const mx_tokenizer *tok, const srv_sched_opts *o, mx_error *err);
// Stops the thread (active and queued jobs finish as cancelled) and frees everything.
void srv_sched_free(srv_sched *s);
// Queues the job (takes a reference). Returns 0, or -1 when the queue is full.
int srv_sched_submit(srv_sched *s, srv_job *j);
// Wakes the scheduler (after a cancel) so it frees the slot at once.
void srv_sched_wake(srv_sched *s);
void srv_sched_stats(srv_sched *s, srv_stats *out);

#endif
