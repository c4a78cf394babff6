// SPDX-License-Identifier: MIT
// One generation request as it travels between an HTTP connection thread and the scheduler thread.
// Ownership: reference counted (the connection holds one reference, the scheduler one while the
// job is queued or active); srv_job_release frees on the last. Fields are in three groups:
//   - request: written by the connection before submit, read-only afterwards;
//   - shared: guarded by `mu`; the scheduler appends output and (through its notifier thread) sets
//     `done`, the connection reads and may set `cancelled` (atomic too: the scheduler checks every
//     active job between steps without taking `mu`); `cv` is broadcast on every change. The
//     scheduler thread takes `mu` for every token, so a connection holds it only to copy what is
//     new (srv_stream.c) or to wait on `cv`, and formats JSON after releasing it;
//   - scheduler: private to the scheduler thread.
#ifndef MX_SERVER_SRV_JOB_H
#define MX_SERVER_SRV_JOB_H

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/sample_rows.h"
#include "generate/seq.h"
#include "grammar/grammar.h"
#include "sample/sampler.h"
#include "server/srv_output.h"
#include "tokenizer/tokenizer.h"

typedef struct srv_job {
    // request
    int32_t *prompt;       // [n_prompt] token ids (owned)
    int n_prompt;
    int max_tokens;        // generated tokens at most (stop token excluded)
    mx_sampling sampling;
    int n_logprobs;        // -1: no logprobs; else top alternatives per token (0..20)
    bool ignore_eos;       // stop tokens are ordinary tokens
    bool keep_special;     // special tokens stay in the decoded text (tool-call markers that are special tokens)
    double deadline;       // monotonic seconds; 0: none
    mx_matcher *matcher;   // grammar constraint (owned; read and advanced by the scheduler), NULL: none
    int32_t *bias_ids;     // logit_bias (owned): bias_values[i] is added to the logit of bias_ids[i]
    float *bias_values;
    int n_bias;
    mx_logit_bias *bias;   // the same as the sampler reads it (made by the scheduler at admission)
    // shared (mu)
    pthread_mutex_t mu;
    pthread_cond_t cv;
    srv_output *out;       // decoded text, split into content / reasoning / tool calls
    mx_sample_out *lp;     // [n_lp] logprobs of the generated tokens (when n_logprobs >= 0)
    size_t n_lp, cap_lp;
    int n_generated;
    atomic_bool started;   // admitted into a slot (atomic, not under `mu`: the scheduler sets it)
    bool done;
    const char *finish;    // "stop", "length", "cancelled" (set with done; see srv_finish_reason)
    int error_status;      // non-zero: the job failed (HTTP status): before producing output, or an allocation
                           // failed while its output was taken in (srv_job_on_token ends it then)
    char error[256];
    atomic_bool cancelled; // the client went away or the server stops
    atomic_int refs;       // atomic, not under `mu`: the scheduler retains every job it wakes after each step
    // scheduler
    mx_seq *seq;           // the engine's sequence while admitted
    bool news;             // output arrived since the connection was last woken (srv_sched wakes it after the step)
} srv_job;

// A job holding a copy of the prompt and an output object made from opts; refs = 1.
srv_job *srv_job_create(const int32_t *prompt, int n_prompt, const srv_output_opts *opts);
void srv_job_retain(srv_job *j);
void srv_job_release(srv_job *j);
// Sets cancelled (under mu) and wakes waiters.
void srv_job_cancel(srv_job *j);

// The scheduler's side (it takes neither lock first): the engine's token callback (mx_seq_opts.on_token,
// with the job as user) moves the text into the output and the logprobs into the job and sets
// `news` (it does not wake the connection: a wake-up costs a system call, and the scheduler hands
// the step's wake-ups to another thread, srv_sched.c); false once a stop string matched
// or the job failed (an allocation failing while its output was taken in: error_status 500).
// srv_job_finish ends the output and marks the job done with finish ("stop", "length" or
// "cancelled"; the response layer names the OpenAI finish_reason) and an optional error (HTTP
// status and message). It does not wake the connection: the caller then calls srv_job_wake. The
// scheduler hands both to its notifier thread (srv_sched.c: the lock may be held by the connection,
// and a wake-up can hand the core to the woken thread for a millisecond), or does both itself when
// the notifier cannot take them (its queue full, or at shutdown after it ended). Nothing changes a
// job once it is done.
bool srv_job_on_token(void *job, const mx_token_event *ev);
void srv_job_finish(srv_job *j, const char *finish, int error_status, const char *error);
// Wakes the connection waiting on the job (cv).
void srv_job_wake(srv_job *j);
// Seconds the calling thread waited for job locks held by other threads in srv_job_on_token and
// srv_job_finish since its last call (per thread; the scheduler's counters).
double srv_job_lock_wait_take(void);

#endif
