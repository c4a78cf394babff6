// SPDX-License-Identifier: MIT
// Continuous-batching scheduler (see srv_sched.h). Locking: the scheduler mutex guards the queue,
// the slot table and the stats; a job's own mutex guards its shared fields. When both are held the
// scheduler mutex is taken first. The engine is touched by the scheduler thread only.
// Wake-ups and ends: the token callback only marks a job (srv_job.news); after each step the
// scheduler queues the marked jobs for the notifier thread, which wakes their connections. A wake-up
// of a waiting thread is a system call (tens of microseconds when the woken thread takes the core),
// and a step of 64 sequences has 64 of them: done here they would delay the next step, done by the
// notifier they overlap it (the scheduler thread is then waiting for the backend). The notifier is
// signalled once per batch: after a step's news are queued, and after an upkeep pass. A job that ends
// (finished, cancelled, expired, failed) is handed to the notifier the same way, which ends its
// output (srv_job_finish, under the job's lock) and then wakes its connection: so the scheduler
// thread takes a job's lock only in the token callback, and never waits between steps for a
// connection thread that holds one. Only when the notifier's queue is full (or the notifier is not
// running) does the scheduler do both itself.
#include "server/srv_sched.h"

#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "core/clock.h"
#include "generate/engine.h"

// One job for the notifier: end it first when finish is set (srv_job_finish), then wake its connection.
typedef struct wake_item {
    srv_job *j;
    const char *finish;  // NULL: only wake
    int status;
    char *error;         // owned; NULL when status is 0
} wake_item;

struct srv_sched {
    mx_model *m;
    const mx_tokenizer *tok;
    mx_engine *eng;
    int n_slots, max_ctx, max_queue;
    int32_t *stop_ids;
    int n_stop_ids;
    pthread_mutex_t *model_lock;  // held around each step (other users of the model take it too)
    pthread_t thread;
    bool thread_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stopping;
    srv_job **queue;  // FIFO [max_queue]
    int n_queue;
    srv_job **active; // [n_slots] admitted jobs; each owns one reference
    int n_active;
    srv_stats st;
    // notifier: jobs to end and whose connections must be woken, each holding a reference (nmu guards them)
    pthread_t notifier;
    bool notifier_started, notifier_stop;
    pthread_mutex_t nmu;
    pthread_cond_t ncv;
    wake_item *wake, *waking;  // [cap_wake] queued; the notifier's batch being handled
    int n_wake, cap_wake;
};

// Ends (finish set: srv_job_finish's arguments) and wakes the job on this thread.
static void end_and_wake(srv_job *j, const char *finish, int status, const char *error) {
    if (finish) srv_job_finish(j, finish, status, error);
    srv_job_wake(j);
}

// Hands j to the notifier: ends it when finish is set, then wakes its connection (done here when
// the notifier's queue is full or it is not running).
static void hand_over(srv_sched *s, srv_job *j, const char *finish, int status, const char *error) {
    char *err = NULL;
    if (finish && status && !(err = strdup(error ? error : ""))) {
        end_and_wake(j, finish, status, error);
        return;
    }
    pthread_mutex_lock(&s->nmu);
    if (s->n_wake == s->cap_wake || !s->notifier_started) {
        pthread_mutex_unlock(&s->nmu);
        free(err);
        end_and_wake(j, finish, status, error);
        return;
    }
    srv_job_retain(j);
    s->wake[s->n_wake++] = (wake_item){j, finish, status, err};
    pthread_mutex_unlock(&s->nmu);
}

// Lets the notifier handle what was handed over since the last call (one signal for a whole step).
static void release_wakes(srv_sched *s) {
    pthread_mutex_lock(&s->nmu);
    if (s->n_wake > 0) pthread_cond_signal(&s->ncv);
    pthread_mutex_unlock(&s->nmu);
}

// Queues a wake-up of j's connection for the notifier.
static void queue_wake(srv_sched *s, srv_job *j) { hand_over(s, j, NULL, 0, NULL); }

static void *notify_main(void *arg) {
    srv_sched *s = arg;
    pthread_mutex_lock(&s->nmu);
    for (;;) {
        while (s->n_wake == 0 && !s->notifier_stop) pthread_cond_wait(&s->ncv, &s->nmu);
        if (s->n_wake == 0) break;  // stopping, and every queued wake-up done
        int n = s->n_wake;
        memcpy(s->waking, s->wake, sizeof *s->wake * (size_t)n);
        s->n_wake = 0;
        pthread_mutex_unlock(&s->nmu);
        for (int i = 0; i < n; i++) {
            wake_item *w = &s->waking[i];
            end_and_wake(w->j, w->finish, w->status, w->error ? w->error : "");
            free(w->error);
            srv_job_release(w->j);
        }
        pthread_mutex_lock(&s->nmu);
    }
    pthread_mutex_unlock(&s->nmu);
    return NULL;
}

// Takes active job k out (scheduler lock held): releases its sequence and hands the job to the
// notifier, which ends it.
static void drop_active(srv_sched *s, int k, const char *finish, int status, const char *error) {
    srv_job *j = s->active[k];
    s->active[k] = s->active[--s->n_active];
    mx_engine_release(s->eng, j->seq);
    hand_over(s, j, finish, status, error);
    srv_job_release(j);
}

// (Scheduler lock held.) Reads the flag without the job's lock: after every step all connections
// take theirs at once to format the new events, and waiting for each would stall the next step.
static bool job_cancelled(srv_sched *s, srv_job *j) { return atomic_load(&j->cancelled) || s->stopping; }

// Creates the job's sequence and admits it. Returns 0 (admitted), 1 (no free slot), -1 (failed:
// the job is finished with an error).
static int admit(srv_sched *s, srv_job *j) {
    mx_error err = {{0}};
    if (!j->seq) {
        mx_sampling sp = j->sampling;
        if (j->n_bias > 0) {
            if (!(j->bias = malloc(sizeof *j->bias * (size_t)j->n_bias))) {
                hand_over(s, j, "stop", 500, "out of memory");
                return -1;
            }
            for (int i = 0; i < j->n_bias; i++) j->bias[i] = (mx_logit_bias){j->bias_ids[i], j->bias_values[i]};
            sp.logit_bias = j->bias;
            sp.n_logit_bias = j->n_bias;
        }
        mx_seq_opts so = {.sampling = sp, .max_new = j->max_tokens, .ignore_eos = j->ignore_eos,
                          .stop_ids = s->stop_ids, .n_stop_ids = s->n_stop_ids, .n_logprobs = j->n_logprobs,
                          .skip_special = !j->keep_special, .matcher = j->matcher, .on_token = srv_job_on_token, .user = j};
        if (!(j->seq = mx_seq_create(s->tok, j->prompt, j->n_prompt, &so, s->max_ctx, &err))) {
            hand_over(s, j, "stop", 500, err.msg);
            return -1;
        }
    }
    int rc = mx_engine_admit(s->eng, j->seq, &err);
    if (rc < 0) hand_over(s, j, "stop", 400, err.msg);
    return rc;
}

// The engine's counters into the shared stats (scheduler lock held, or before the thread starts).
static void copy_engine_stats(srv_sched *s) { mx_engine_stats_get(s->eng, &s->st.engine); }

// What one or more upkeep passes cost, counted into the stats with the gap between steps they were part of.
typedef struct upkeep_cost {
    double wall, admit, release, cpu, lock_wait;
    uint64_t preemptions, blocks;
} upkeep_cost;

// The calling thread's CPU seconds (mx_thread_cpu_now: getrusage's times are in scheduler ticks)
// and context switches so far.
static void thread_usage(double *cpu, uint64_t *involuntary, uint64_t *voluntary) {
    *cpu = mx_thread_cpu_now();
    struct rusage ru;
    if (getrusage(RUSAGE_THREAD, &ru) != 0) memset(&ru, 0, sizeof ru);
    *involuntary = (uint64_t)ru.ru_nivcsw;
    *voluntary = (uint64_t)ru.ru_nvcsw;
}

// Queue and slot upkeep between steps (scheduler lock held); adds its parts' times to c.
static void housekeep(srv_sched *s, upkeep_cost *c) {
    double now = mx_now();
    for (int k = 0; k < s->n_active; k++) {
        srv_job *j = s->active[k];
        mx_finish why = mx_seq_finish_reason(j->seq);
        if (why == MX_FINISH_NONE && job_cancelled(s, j)) {
            s->st.cancelled++;
            drop_active(s, k--, "cancelled", 0, "");
        } else if (why == MX_FINISH_NONE && j->deadline > 0 && now > j->deadline) {
            mx_engine_end(s->eng, j->seq, MX_FINISH_LENGTH);
            drop_active(s, k--, "length", 0, "");
        } else if (why != MX_FINISH_NONE) {
            int status = why != MX_FINISH_ERROR ? 0 : mx_seq_error_is_request(j->seq) ? 400 : 500;
            drop_active(s, k--, why == MX_FINISH_LENGTH ? "length" : "stop", status,
                        mx_seq_error(j->seq)[0] ? mx_seq_error(j->seq) : "model error");
        }
    }
    int kept = 0;
    for (int q = 0; q < s->n_queue; q++) {
        srv_job *j = s->queue[q];
        bool cancel = job_cancelled(s, j);
        if (cancel || (j->deadline > 0 && now > j->deadline)) {
            hand_over(s, j, "cancelled", 503, cancel ? "the request was cancelled" : "timed out waiting for a free slot");
            srv_job_release(j);
        } else {
            s->queue[kept++] = j;
        }
    }
    s->n_queue = kept;
    double t_admit = mx_now();
    c->release += t_admit - now;
    while (s->n_queue > 0 && s->n_active < s->n_slots) {
        srv_job *j = s->queue[0];
        int rc = admit(s, j);
        if (rc == 1) break;
        memmove(s->queue, s->queue + 1, sizeof *s->queue * (size_t)(s->n_queue - 1));
        s->n_queue--;
        if (rc < 0) {
            srv_job_release(j);
            continue;
        }
        s->active[s->n_active++] = j;
        s->st.requests++;
        s->st.prompt_tokens += (uint64_t)j->n_prompt;
        atomic_store(&j->started, true);
    }
    c->admit += mx_now() - t_admit;
    copy_engine_stats(s);
}

static void *sched_main(void *arg) {
    srv_sched *s = arg;
    double last_step_end = 0.0;  // 0: no step since the engine was last idle
    upkeep_cost upkeep = {0};    // housekeeping since the last step (counted with the gap it is part of)
    pthread_mutex_lock(&s->mu);
    for (;;) {
        double t_upkeep = mx_now(), cpu0, cpu1;
        uint64_t inv0, inv1, vol0, vol1;
        thread_usage(&cpu0, &inv0, &vol0);
        srv_job_lock_wait_take();  // waits before this pass (none: every lock is in the callback or here)
        housekeep(s, &upkeep);
        upkeep.lock_wait += srv_job_lock_wait_take();
        thread_usage(&cpu1, &inv1, &vol1);
        upkeep.wall += mx_now() - t_upkeep;
        upkeep.cpu += cpu1 - cpu0;
        upkeep.preemptions += inv1 - inv0;
        upkeep.blocks += vol1 - vol0;
        release_wakes(s);  // the jobs that ended
        if (s->stopping) break;
        if (mx_engine_running(s->eng) == 0) {
            last_step_end = 0.0, upkeep = (upkeep_cost){0};
            struct timespec ts = mx_wall_deadline(1.0);
            pthread_cond_timedwait(&s->cv, &s->mu, &ts);
            continue;
        }
        pthread_mutex_unlock(&s->mu);
        mx_error err = {{0}};
        if (s->model_lock) pthread_mutex_lock(s->model_lock);
        double t0 = mx_now(), step_cpu0, step_cpu1;
        uint64_t step_inv0, step_inv1, step_vol0, step_vol1;
        thread_usage(&step_cpu0, &step_inv0, &step_vol0);
        int rc = mx_engine_step(s->eng, &err);
        thread_usage(&step_cpu1, &step_inv1, &step_vol1);
        if (s->model_lock) pthread_mutex_unlock(s->model_lock);
        double step_lock_wait = srv_job_lock_wait_take();
        double between = last_step_end > 0.0 ? t0 - last_step_end : 0.0;
        last_step_end = mx_now();
        pthread_mutex_lock(&s->mu);
        s->st.between_steps_seconds += between;
        s->st.step_lock_wait_seconds += step_lock_wait;
        s->st.step_preemptions += step_inv1 - step_inv0;
        s->st.step_blocks += step_vol1 - step_vol0;
        if (between > 0.0) {
            s->st.upkeep_seconds += upkeep.wall;
            s->st.admit_seconds += upkeep.admit;
            s->st.release_seconds += upkeep.release;
            s->st.upkeep_cpu_seconds += upkeep.cpu;
            s->st.upkeep_preemptions += upkeep.preemptions;
            s->st.upkeep_blocks += upkeep.blocks;
            s->st.upkeep_lock_wait_seconds += upkeep.lock_wait;
        }
        upkeep = (upkeep_cost){0};
        for (int k = 0; k < s->n_active; k++)
            if (s->active[k]->news) {
                s->active[k]->news = false;
                queue_wake(s, s->active[k]);
            }
        release_wakes(s);
        copy_engine_stats(s);
        if (rc) {
            char msg[256];
            snprintf(msg, sizeof msg, "model error: %s", err.msg);
            for (int k = 0; k < s->n_active; k++)
                if (mx_seq_finish_reason(s->active[k]->seq) == MX_FINISH_ERROR) drop_active(s, k--, "stop", 500, msg);
        }
    }
    while (s->n_active > 0) drop_active(s, 0, "cancelled", 0, "");
    pthread_mutex_unlock(&s->mu);
    release_wakes(s);
    return NULL;
}

srv_sched *srv_sched_create(mx_model *m, const mx_tokenizer *tok, const srv_sched_opts *o, mx_error *err) {
    srv_sched *s = calloc(1, sizeof *s);
    if (!s) {
        mx_fail(err, "out of memory");
        return NULL;
    }
    s->m = m;
    s->tok = tok;
    s->n_slots = o->n_slots;
    s->max_ctx = o->max_ctx;
    s->max_queue = o->max_queue > 0 ? o->max_queue : 1;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    pthread_mutex_init(&s->nmu, NULL);
    pthread_cond_init(&s->ncv, NULL);
    s->stop_ids = malloc(sizeof(int32_t) * (size_t)(o->n_stop_ids + 1));
    s->queue = calloc((size_t)s->max_queue, sizeof *s->queue);
    s->active = calloc((size_t)s->n_slots, sizeof *s->active);
    s->cap_wake = 4 * s->n_slots;  // a few steps' worth, should the notifier fall behind
    s->wake = calloc((size_t)s->cap_wake, sizeof *s->wake);
    s->waking = calloc((size_t)s->cap_wake, sizeof *s->waking);
    if (!s->stop_ids || !s->queue || !s->active || !s->wake || !s->waking) {
        mx_fail(err, "out of memory");
        srv_sched_free(s);
        return NULL;
    }
    if (o->n_stop_ids > 0) memcpy(s->stop_ids, o->stop_ids, sizeof(int32_t) * (size_t)o->n_stop_ids);
    s->n_stop_ids = o->n_stop_ids;
    s->model_lock = o->model_lock;
    s->st.n_slots = s->n_slots;
    mx_engine_opts eo = {.n_slots = o->n_slots, .max_ctx = o->max_ctx, .prefill_chunk = o->prefill_chunk,
                         .step_tokens = o->batch_tokens,                         .prefix_reuse = o->prefix_reuse, .threads = 0, .kv_size = o->kv_size};
    if (!(s->eng = mx_engine_create(m, &eo, err))) {
        srv_sched_free(s);
        return NULL;
    }
    copy_engine_stats(s);
    if (pthread_create(&s->notifier, NULL, notify_main, s) != 0) {
        mx_fail(err, "cannot start the scheduler's notifier thread");
        srv_sched_free(s);
        return NULL;
    }
    s->notifier_started = true;
    if (pthread_create(&s->thread, NULL, sched_main, s) != 0) {
        mx_fail(err, "cannot start the scheduler thread");
        srv_sched_free(s);
        return NULL;
    }
    s->thread_started = true;
    return s;
}

void srv_sched_free(srv_sched *s) {
    if (!s) return;
    if (s->thread_started) {
        pthread_mutex_lock(&s->mu);
        s->stopping = true;
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->thread, NULL);
    }
    if (s->notifier_started) {  // after the scheduler: it wakes what is still queued, then ends
        pthread_mutex_lock(&s->nmu);
        s->notifier_stop = true;
        pthread_cond_signal(&s->ncv);
        pthread_mutex_unlock(&s->nmu);
        pthread_join(s->notifier, NULL);
    }
    for (int q = 0; q < s->n_queue; q++) {  // the notifier has ended: end and wake them here
        end_and_wake(s->queue[q], "cancelled", 503, "the server is shutting down");
        srv_job_release(s->queue[q]);
    }
    mx_engine_free(s->eng);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->nmu);
    pthread_cond_destroy(&s->ncv);
    free(s->stop_ids), free(s->queue), free(s->active), free(s->wake), free(s->waking);
    free(s);
}

int srv_sched_submit(srv_sched *s, srv_job *j) {
    pthread_mutex_lock(&s->mu);
    if (s->n_queue >= s->max_queue || s->stopping) {
        pthread_mutex_unlock(&s->mu);
        return -1;
    }
    srv_job_retain(j);
    s->queue[s->n_queue++] = j;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return 0;
}

void srv_sched_wake(srv_sched *s) {
    pthread_mutex_lock(&s->mu);
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

void srv_sched_stats(srv_sched *s, srv_stats *out) {
    pthread_mutex_lock(&s->mu);
    *out = s->st;
    out->queued = s->n_queue;
    out->active = s->n_active;
    pthread_mutex_unlock(&s->mu);
}
