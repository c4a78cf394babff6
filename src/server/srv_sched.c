// SPDX-License-Identifier: MIT
// Continuous-batching scheduler (see srv_sched.h). Locking: the scheduler mutex guards the queue,
// the slot table and the stats; a job's own mutex guards its shared fields. When both are held the
// scheduler mutex is taken first. Step buffers are allocated once at creation.
#include "server/srv_sched.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct srv_sched {
    mx_model *m;
    const mx_tokenizer *tok;
    mx_ctx *ctx;
    int n_slots, max_ctx, max_queue, chunk, vocab;
    int32_t *stop_ids;
    int n_stop_ids;
    pthread_mutex_t *model_lock;
    pthread_t thread;
    bool thread_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stopping;
    srv_job **queue;  // FIFO [max_queue]
    int n_queue;
    srv_job **slots;  // [n_slots]; a slot's job is owned (one reference)
    // step buffers
    int32_t *b_tok, *b_pos, *b_slot, *b_rows;  // [n_slots + chunk]
    int *b_end;                                // [n_slots] prompt tokens fed after this step
    srv_job **row_job;                         // [n_slots]
    float *logits;                             // [n_slots, vocab]
    float *raw;                                // [vocab] logits before penalties (logprobs)
    uint32_t *mask;                            // [ceil(vocab / 32)] allowed tokens of a constrained job
    char *text;
    size_t text_cap;
    srv_stats st;
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static bool is_stop_token(const srv_sched *s, int32_t id) {
    if (mx_model_is_eos(s->m, id)) return true;
    for (int i = 0; i < s->n_stop_ids; i++)
        if (s->stop_ids[i] == id) return true;
    return false;
}

// Marks a job done and wakes its connection. Caller holds neither lock.
static void job_finish(srv_job *j, const char *finish, int error_status, const char *error) {
    pthread_mutex_lock(&j->mu);
    srv_output_finish(j->out);
    if (error_status) {
        j->error_status = error_status;
        snprintf(j->error, sizeof j->error, "%s", error);
    }
    j->finish = strcmp(finish, "stop") == 0 && srv_output_n_tools(j->out) > 0 ? "tool_calls" : finish;
    j->done = true;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

// Takes an active job out of its slot (scheduler lock held).
static void slot_finish(srv_sched *s, int i, const char *finish, int status, const char *error) {
    srv_job *j = s->slots[i];
    s->slots[i] = NULL;
    job_finish(j, finish, status, error);
    srv_job_release(j);
}

static void flush_detok(srv_sched *s, srv_job *j) {
    size_t len = mx_detok_flush(&j->detok, s->text, s->text_cap);
    if (!len) return;
    pthread_mutex_lock(&j->mu);
    srv_output_push(j->out, s->text, len);
    pthread_mutex_unlock(&j->mu);
}

// Queue and slot upkeep between steps (scheduler lock held).
static void housekeep(srv_sched *s) {
    double now = now_s();
    for (int i = 0; i < s->n_slots; i++) {
        srv_job *j = s->slots[i];
        if (!j) continue;
        pthread_mutex_lock(&j->mu);
        bool cancel = j->cancelled || s->stopping;
        pthread_mutex_unlock(&j->mu);
        if (cancel) {
            s->st.cancelled++;
            slot_finish(s, i, "cancelled", 0, "");
        } else if (j->deadline > 0 && now > j->deadline) {
            flush_detok(s, j);
            slot_finish(s, i, "length", 0, "");
        }
    }
    int k = 0;
    for (int q = 0; q < s->n_queue; q++) {
        srv_job *j = s->queue[q];
        pthread_mutex_lock(&j->mu);
        bool cancel = j->cancelled || s->stopping;
        pthread_mutex_unlock(&j->mu);
        if (cancel || (j->deadline > 0 && now > j->deadline)) {
            job_finish(j, "cancelled", 503, cancel ? "the request was cancelled" : "timed out waiting for a free slot");
            srv_job_release(j);
        } else {
            s->queue[k++] = j;
        }
    }
    s->n_queue = k;
    for (int i = 0; i < s->n_slots && s->n_queue > 0; i++) {
        if (s->slots[i]) continue;
        srv_job *j = s->queue[0];
        memmove(s->queue, s->queue + 1, sizeof *s->queue * (size_t)(s->n_queue - 1));
        s->n_queue--;
        j->sampler = mx_sampler_create(&j->sampling, s->vocab);
        if (!j->sampler) {
            job_finish(j, "stop", 500, "out of memory");
            srv_job_release(j);
            i--;
            continue;
        }
        for (int t = 0; t < j->n_prompt; t++) mx_sampler_accept(j->sampler, j->prompt[t], false);
        mx_detok_init(&j->detok, s->tok, true);
        j->slot = i;
        j->n_fed = 0;
        s->slots[i] = j;
        s->st.requests++;
        s->st.prompt_tokens += (uint64_t)j->n_prompt;
        pthread_mutex_lock(&j->mu);
        j->started = true;
        pthread_mutex_unlock(&j->mu);
    }
}

// The top n (<= 20) tokens of row, best first.
static int top_tokens(const float *row, int V, int n, int32_t *ids) {
    int k = 0;
    for (int v = 0; v < V; v++) {
        if (k < n) {
            ids[k++] = v;
        } else if (row[v] > row[ids[k - 1]]) {
            ids[k - 1] = v;
        } else {
            continue;
        }
        for (int a = k - 1; a > 0 && row[ids[a]] > row[ids[a - 1]]; a--) {
            int32_t t = ids[a];
            ids[a] = ids[a - 1];
            ids[a - 1] = t;
        }
    }
    return k;
}

static json_t *token_entry(const mx_tokenizer *tok, int32_t id, double lp) {
    char *txt = mx_tokenizer_decode(tok, &id, 1, false);
    json_t *bytes = json_array();
    for (const unsigned char *p = (const unsigned char *)(txt ? txt : ""); *p; p++)
        json_array_append_new(bytes, json_integer(*p));
    json_t *e = json_pack("{s:s, s:f, s:o}", "token", txt ? txt : "", "logprob", lp, "bytes", bytes);
    free(txt);
    return e;
}

static json_t *logprob_item(srv_sched *s, const float *raw, int32_t id, int n_top) {
    int V = s->vocab;
    float mx = raw[0];
    for (int v = 1; v < V; v++)
        if (raw[v] > mx) mx = raw[v];
    double sum = 0;
    for (int v = 0; v < V; v++) sum += exp((double)raw[v] - mx);
    double lse = mx + log(sum);
    json_t *e = token_entry(s->tok, id, raw[id] - lse);
    json_t *tops = json_array();
    int32_t ids[20];
    int k = top_tokens(raw, V, n_top > 20 ? 20 : n_top, ids);
    for (int i = 0; i < k; i++) json_array_append_new(tops, token_entry(s->tok, ids[i], raw[ids[i]] - lse));
    json_object_set_new(e, "top_logprobs", tops);
    return e;
}

// Handles the sampled output of one sequence; returns the finish reason or NULL to go on.
static const char *take_token(srv_sched *s, srv_job *j, float *row) {
    bool want_lp = j->n_logprobs >= 0;
    if (want_lp) memcpy(s->raw, row, sizeof(float) * (size_t)s->vocab);
    for (int k = 0; k < j->n_bias; k++) row[j->bias_ids[k]] += j->bias_values[k];
    if (j->matcher) {
        if (mx_matcher_mask(j->matcher, s->mask) == 0) {  // complete, and the grammar has no end token
            flush_detok(s, j);
            return "stop";
        }
        mx_mask_logits(s->mask, row, s->vocab);
    }
    int32_t id = mx_sampler_sample(j->sampler, row);
    mx_error gerr;
    if (j->matcher && mx_matcher_accept(j->matcher, id, &gerr) != 0) {
        // Only a rounding corner of the sampler can pick a masked token: take the best allowed one.
        id = 0;
        for (int v = 1; v < s->vocab; v++)
            if (row[v] > row[id]) id = v;
        MX_ASSERT(mx_matcher_accept(j->matcher, id, &gerr) == 0);
    }
    mx_sampler_accept(j->sampler, id, true);
    if (!j->ignore_eos && is_stop_token(s, id)) {
        flush_detok(s, j);
        return "stop";
    }
    size_t len = mx_detok_push(&j->detok, id, s->text, s->text_cap);
    json_t *lp = want_lp ? logprob_item(s, s->raw, id, j->n_logprobs) : NULL;
    pthread_mutex_lock(&s->mu);
    s->st.generated_tokens++;
    pthread_mutex_unlock(&s->mu);
    pthread_mutex_lock(&j->mu);
    j->n_generated++;
    bool stopped = srv_output_push(j->out, s->text, len);
    if (lp) {
        if (!j->logprobs) j->logprobs = json_array();
        json_array_append_new(j->logprobs, lp);
    }
    pthread_cond_broadcast(&j->cv);
    int n_gen = j->n_generated;
    pthread_mutex_unlock(&j->mu);
    j->last = id;
    if (stopped) return "stop";
    if (n_gen >= j->max_tokens || j->n_fed + 1 >= s->max_ctx) {
        flush_detok(s, j);
        return "length";
    }
    return NULL;
}

// One forward step over every active sequence. Returns -1 (err set) when the engine failed.
static int step(srv_sched *s, mx_error *err) {
    int n = 0, n_out = 0, prefill = 0;
    for (int i = 0; i < s->n_slots; i++) {
        srv_job *j = s->slots[i];
        s->b_end[i] = -1;
        if (!j) continue;
        if (j->n_fed < j->n_prompt) {
            int start = j->n_fed, end = (start / s->chunk + 1) * s->chunk;
            if (end > j->n_prompt) end = j->n_prompt;
            if (prefill > 0 && prefill + (end - start) > s->chunk) continue;
            for (int t = start; t < end; t++, n++) {
                s->b_tok[n] = j->prompt[t];
                s->b_pos[n] = t;
                s->b_slot[n] = i;
            }
            prefill += end - start;
            s->b_end[i] = end;
            if (end == j->n_prompt) {
                s->b_rows[n_out] = n - 1;
                s->row_job[n_out++] = j;
            }
        } else {
            s->b_tok[n] = j->last;
            s->b_pos[n] = j->n_fed;
            s->b_slot[n] = i;
            s->b_end[i] = j->n_fed + 1;
            s->b_rows[n_out] = n++;
            s->row_job[n_out++] = j;
        }
    }
    if (n == 0) return 0;
    mx_batch b = {n, s->b_tok, s->b_pos, s->b_slot, n_out, s->b_rows};
    double t0 = now_s();
    if (s->model_lock) pthread_mutex_lock(s->model_lock);
    int frc = mx_ctx_forward(s->ctx, &b, s->logits, NULL, err);
    if (s->model_lock) pthread_mutex_unlock(s->model_lock);
    if (frc) return -1;
    double dt = now_s() - t0;
    for (int i = 0; i < s->n_slots; i++)
        if (s->slots[i] && s->b_end[i] >= 0) s->slots[i]->n_fed = s->b_end[i];
    int decoded = 0;
    for (int k = 0; k < n_out; k++) {
        srv_job *j = s->row_job[k];
        const char *fin = take_token(s, j, s->logits + (size_t)k * s->vocab);
        decoded++;
        if (fin) {
            pthread_mutex_lock(&s->mu);
            slot_finish(s, j->slot, fin, 0, "");
            pthread_mutex_unlock(&s->mu);
        }
    }
    pthread_mutex_lock(&s->mu);
    s->st.busy_seconds += dt;
    if (dt > 0) s->st.last_tok_per_s = decoded / dt;
    pthread_mutex_unlock(&s->mu);
    return 0;
}

static void *sched_main(void *arg) {
    srv_sched *s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        housekeep(s);
        if (s->stopping) break;
        int active = 0;
        for (int i = 0; i < s->n_slots; i++) active += s->slots[i] != NULL;
        if (!active) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_sec += 1;
            pthread_cond_timedwait(&s->cv, &s->mu, &ts);
            continue;
        }
        pthread_mutex_unlock(&s->mu);
        mx_error err = {{0}};
        int rc = step(s, &err);
        pthread_mutex_lock(&s->mu);
        if (rc) {
            char msg[256];
            snprintf(msg, sizeof msg, "model error: %s", err.msg);
            for (int i = 0; i < s->n_slots; i++)
                if (s->slots[i]) slot_finish(s, i, "stop", 500, msg);
        }
    }
    pthread_mutex_unlock(&s->mu);
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
    s->chunk = o->prefill_chunk > 0 ? o->prefill_chunk : 256;
    s->vocab = mx_model_config(m)->vocab_size;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    size_t nb = (size_t)(s->n_slots + s->chunk);
    s->text_cap = mx_detok_cap(tok);
    s->stop_ids = malloc(sizeof(int32_t) * (size_t)(o->n_stop_ids + 1));
    s->queue = calloc((size_t)s->max_queue, sizeof *s->queue);
    s->slots = calloc((size_t)s->n_slots, sizeof *s->slots);
    s->b_tok = malloc(4 * nb), s->b_pos = malloc(4 * nb), s->b_slot = malloc(4 * nb), s->b_rows = malloc(4 * nb);
    s->b_end = malloc(sizeof(int) * (size_t)s->n_slots);
    s->row_job = calloc((size_t)s->n_slots, sizeof *s->row_job);
    s->logits = malloc(sizeof(float) * (size_t)s->n_slots * (size_t)s->vocab);
    s->raw = malloc(sizeof(float) * (size_t)s->vocab);
    s->mask = malloc(sizeof(uint32_t) * (size_t)((s->vocab + 31) / 32));
    s->text = malloc(s->text_cap);
    if (!s->stop_ids || !s->queue || !s->slots || !s->b_tok || !s->b_pos || !s->b_slot || !s->b_rows || !s->b_end ||
        !s->row_job || !s->logits || !s->raw || !s->mask || !s->text) {
        mx_fail(err, "out of memory");
        srv_sched_free(s);
        return NULL;
    }
    if (o->n_stop_ids > 0) memcpy(s->stop_ids, o->stop_ids, sizeof(int32_t) * (size_t)o->n_stop_ids);
    s->n_stop_ids = o->n_stop_ids;
    s->model_lock = o->model_lock;
    s->st.n_slots = s->n_slots;
    s->ctx = mx_ctx_create(m, s->n_slots, s->max_ctx, (int)nb, err);
    if (!s->ctx) {
        srv_sched_free(s);
        return NULL;
    }
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
    mx_ctx_free(s->ctx);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s->stop_ids), free(s->queue), free(s->slots);
    free(s->b_tok), free(s->b_pos), free(s->b_slot), free(s->b_rows), free(s->b_end), free(s->row_job);
    free(s->logits), free(s->raw), free(s->mask), free(s->text);
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
    out->active = 0;
    for (int i = 0; i < s->n_slots; i++) out->active += s->slots[i] != NULL;
    pthread_mutex_unlock(&s->mu);
}
