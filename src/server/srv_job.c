// SPDX-License-Identifier: MIT
// Generation jobs shared by the HTTP thread and the scheduler (see srv_job.h): reference counted,
// fed token by token through the text stage, cancellable, and finished once with a reason.
#include "server/srv_job.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"

// Seconds this thread waited for contended job locks in srv_job_on_token and srv_job_finish (the
// scheduler's side), until srv_job_lock_wait_take reads them.
static _Thread_local double lock_wait;

// Takes j->mu, counting the wait when another thread holds it (an uncontended lock costs no clock read).
static void lock_counted(srv_job *j) {
    if (pthread_mutex_trylock(&j->mu) == 0) return;
    double t = mx_now();
    pthread_mutex_lock(&j->mu);
    lock_wait += mx_now() - t;
}

double srv_job_lock_wait_take(void) {
    double w = lock_wait;
    lock_wait = 0.0;
    return w;
}

srv_job *srv_job_create(const int32_t *prompt, int n_prompt, const srv_output_opts *opts) {
    srv_job *j = calloc(1, sizeof *j);
    if (!j) return NULL;
    j->prompt = malloc(sizeof(int32_t) * (size_t)(n_prompt > 0 ? n_prompt : 1));
    j->out = srv_output_create(opts);
    if (!j->prompt || !j->out) {
        free(j->prompt);
        srv_output_free(j->out);
        free(j);
        return NULL;
    }
    if (n_prompt > 0) memcpy(j->prompt, prompt, sizeof(int32_t) * (size_t)n_prompt);
    j->n_prompt = n_prompt;
    j->n_logprobs = -1;
    atomic_init(&j->refs, 1);
    atomic_init(&j->started, false);
    j->sampling = mx_sampling_defaults();
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    return j;
}

void srv_job_retain(srv_job *j) { atomic_fetch_add(&j->refs, 1); }

void srv_job_release(srv_job *j) {
    if (!j) return;
    if (atomic_fetch_sub(&j->refs, 1) > 1) return;
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    srv_output_free(j->out);
    free(j->lp);
    mx_seq_free(j->seq);
    mx_matcher_free(j->matcher);
    free(j->bias_ids);
    free(j->bias_values);
    free(j->bias);
    free(j->prompt);
    free(j);
}

void srv_job_cancel(srv_job *j) {
    pthread_mutex_lock(&j->mu);
    atomic_store(&j->cancelled, true);
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

// An allocation failed while the job's output was taken in (its text, calls or logprobs): what it
// holds may lack part of the answer, so the job ends with an error (the caller holds mu).
static void fail_oom(srv_job *j) {
    if (j->error_status) return;
    j->error_status = 500;
    snprintf(j->error, sizeof j->error, "out of memory while reading the model's output");
}

bool srv_job_on_token(void *job, const mx_token_event *ev) {
    srv_job *j = job;
    lock_counted(j);
    bool stopped = srv_output_push(j->out, ev->text, ev->len);
    if (ev->id >= 0) j->n_generated++;
    if (ev->lp) {
        if (j->n_lp == j->cap_lp) {
            size_t cap = j->cap_lp ? 2 * j->cap_lp : 64;
            mx_sample_out *g = realloc(j->lp, sizeof *g * cap);
            if (g) j->lp = g, j->cap_lp = cap;
        }
        if (j->n_lp < j->cap_lp) j->lp[j->n_lp++] = *ev->lp;
        else fail_oom(j);
    }
    if (srv_output_failed(j->out)) fail_oom(j);
    pthread_mutex_unlock(&j->mu);
    j->news = true;
    return !stopped && !j->error_status;
}

void srv_job_wake(srv_job *j) {
    pthread_mutex_lock(&j->mu);
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

void srv_job_finish(srv_job *j, const char *finish, int error_status, const char *error) {
    lock_counted(j);
    srv_output_finish(j->out);
    if (error_status) {
        j->error_status = error_status;
        snprintf(j->error, sizeof j->error, "%s", error);
    } else if (srv_output_failed(j->out)) {
        fail_oom(j);
    }
    j->finish = finish;
    j->done = true;
    pthread_mutex_unlock(&j->mu);
}
