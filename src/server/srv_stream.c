// SPDX-License-Identifier: MIT
// Server-sent events for streaming requests. libmicrohttpd pulls the body through stream_read on
// the connection's own thread; the reader blocks on the request's jobs (one per choice, `n`) until
// one has something new (role chunks, reasoning, content, tool calls, a choice's final chunk with
// finish_reason, then usage and [DONE] once every choice is done), checking every 100 ms whether the
// client is gone (reset) or the server stops. Each chunk carries one choice, named by its `index`.
// It waits on the condition variable of one running choice (the choices of a request decode in the
// same steps, so that one wakes it every step) and takes what is new from all of them at each wake.
// A client is known to be gone only when a write fails, so after 2 s without news a keep-alive
// comment is written; the jobs are then cancelled and the scheduler frees their slots at the next
// step. On shutdown the stream ends with an error event and [DONE]. Nothing is sent for held-back
// text (stop strings).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/clock.h"
#include "server/srv_buf.h"
#include "server/srv_internal.h"
#include "server/srv_reply.h"
#include "server/srv_response.h"

enum { KEEPALIVE_WAITS = 20 };  // 100 ms waits without news before a keep-alive comment (2 s)

// What one choice has sent so far.
typedef struct sse_choice {
    srv_job *j;
    size_t sent_content, sent_reasoning, sent_lp;
    int sent_tools;
    bool finished;
} sse_choice;

typedef struct sse {
    mx_server *s;
    struct MHD_Connection *c;
    sse_choice ch[SRV_MAX_CHOICES];
    int n;
    srv_gen_info info;
    srv_buf out;     // bytes ready to send
    size_t off;      // bytes of `out` already sent
    bool roles_sent, finished;
} sse;

static void sse_event(sse *st, json_t *obj) {
    char *text = json_dumps(obj, JSON_COMPACT);
    json_decref(obj);
    if (!text) return;
    srv_buf_puts(&st->out, "data: ");
    srv_buf_puts(&st->out, text);
    srv_buf_puts(&st->out, "\n\n");
    free(text);
}

static json_t *chunk(sse *st, json_t *choice) { return srv_chunk_json(&st->info, choice); }

static json_t *choice(sse *st, int index, json_t *delta_or_text, json_t *logprobs, const char *finish) {
    return srv_chunk_choice_json(&st->info, index, delta_or_text, logprobs, finish);
}

// Ends the stream with an error event and [DONE].
static void fail(sse *st, json_t *error) {
    sse_event(st, error);
    srv_buf_puts(&st->out, "data: [DONE]\n\n");
    st->finished = true;
}

// Formats what is new in choice i (its job's lock held). Returns true when something was produced.
static bool take_new(sse *st, int i) {
    sse_choice *ch = &st->ch[i];
    srv_job *j = ch->j;
    size_t clen, rlen, n_lp = j->n_lp;
    const char *content = srv_output_content(j->out, &clen);
    const char *reasoning = srv_output_reasoning(j->out, &rlen);
    int n_tools = srv_output_n_tools(j->out);
    bool any = false;
    bool chat = st->info.kind == SRV_KIND_CHAT;
    if (j->error_status && j->done) {
        fail(st, srv_error_json((unsigned)j->error_status, NULL, j->error));
        return true;
    }
    if (chat && rlen > ch->sent_reasoning) {
        json_t *delta = json_pack("{s:s%}", "reasoning_content", reasoning + ch->sent_reasoning, rlen - ch->sent_reasoning);
        sse_event(st, chunk(st, choice(st, i, delta, NULL, NULL)));
        ch->sent_reasoning = rlen;
        any = true;
    }
    if (clen > ch->sent_content) {
        json_t *lp = j->n_logprobs >= 0 ? srv_logprobs_json(st->s->tok, j, st->info.kind, ch->sent_lp, n_lp) : NULL;
        json_t *piece = json_stringn(content + ch->sent_content, clen - ch->sent_content);
        sse_event(st, chunk(st, choice(st, i, chat ? json_pack("{s:o}", "content", piece) : piece, lp, NULL)));
        ch->sent_content = clen;
        ch->sent_lp = n_lp;
        any = true;
    }
    if (chat && n_tools > ch->sent_tools) {
        json_t *delta = json_pack("{s:o}", "tool_calls", srv_tool_calls_json(j, &st->info, i, ch->sent_tools, true));
        sse_event(st, chunk(st, choice(st, i, delta, NULL, NULL)));
        ch->sent_tools = n_tools;
        any = true;
    }
    if (j->done) {
        json_t *lp = j->n_logprobs >= 0 && n_lp > ch->sent_lp ? srv_logprobs_json(st->s->tok, j, st->info.kind, ch->sent_lp, n_lp)
                                                               : NULL;
        sse_event(st, chunk(st, choice(st, i, chat ? json_object() : json_string(""), lp, srv_finish_reason(j))));
        ch->finished = true;
        any = true;
    }
    return any;
}

// Takes what is new from every unfinished choice; after the last one, usage and [DONE].
static bool take_all(sse *st) {
    bool any = false;
    int generated = 0, open = 0;
    for (int i = 0; i < st->n && !st->finished; i++) {
        sse_choice *ch = &st->ch[i];
        pthread_mutex_lock(&ch->j->mu);
        if (!ch->finished) any |= take_new(st, i);
        generated += ch->j->n_generated;
        open += !ch->finished;
        pthread_mutex_unlock(&ch->j->mu);
    }
    if (st->finished) return true;  // an error event ended the stream
    if (open == 0) {
        if (st->info.include_usage) {
            json_t *u = chunk(st, NULL);
            json_object_set_new(u, "usage", srv_usage_json(st->info.n_prompt, generated));
            sse_event(st, u);
        }
        srv_buf_puts(&st->out, "data: [DONE]\n\n");
        st->finished = true;
        return true;
    }
    return any;
}

static void cancel_all(sse *st) {
    for (int i = 0; i < st->n; i++) srv_job_cancel(st->ch[i].j);
    srv_sched_wake(st->s->sched);
}

// The choice to wait on: an admitted, unfinished one when there is one (it changes every step).
static srv_job *wait_job(sse *st) {
    srv_job *pick = NULL;
    for (int i = 0; i < st->n; i++) {
        if (st->ch[i].finished) continue;
        srv_job *j = st->ch[i].j;
        pthread_mutex_lock(&j->mu);
        bool started = j->started;
        pthread_mutex_unlock(&j->mu);
        if (!pick || started) pick = j;
        if (started) break;
    }
    return pick;
}

// Fills st->out with the next events; false when the client is gone (the jobs are then cancelled).
static bool produce(sse *st) {
    if (!st->roles_sent) {
        st->roles_sent = true;
        if (st->info.kind == SRV_KIND_CHAT) {
            for (int i = 0; i < st->n; i++)
                sse_event(st, chunk(st, choice(st, i, json_pack("{s:s, s:s}", "role", "assistant", "content", ""), NULL, NULL)));
            return true;
        }
    }
    for (int waits = 0; !take_all(st); waits++) {
        if (waits == KEEPALIVE_WAITS) {
            // An SSE comment: clients ignore it, and writing it is what finds a vanished client
            // (a half-closed one is still reading, so reading alone cannot tell).
            srv_buf_puts(&st->out, ": keep-alive\n\n");
            return true;
        }
        srv_job *j = wait_job(st);
        pthread_mutex_lock(&j->mu);
        if (!j->done) {
            struct timespec ts = mx_wall_deadline(0.1);
            pthread_cond_timedwait(&j->cv, &j->mu, &ts);
        }
        pthread_mutex_unlock(&j->mu);
        if (atomic_load(&st->s->stopping)) {
            // Shutdown: the client gets a final error event and [DONE] instead of a cut stream.
            if (take_all(st)) return true;  // finished in the meantime: send that instead
            cancel_all(st);
            fail(st, srv_error_json(503, "shutting_down", "the server shut down before the request finished"));
            return true;
        }
        if (srv_client_gone(st->c)) {
            cancel_all(st);
            return false;
        }
    }
    return true;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    sse *st = cls;
    while (st->off >= st->out.n) {
        st->off = 0;
        st->out.n = 0;
        if (st->finished) return MHD_CONTENT_READER_END_OF_STREAM;
        if (!produce(st)) return MHD_CONTENT_READER_END_WITH_ERROR;
        if (st->out.oom) return MHD_CONTENT_READER_END_WITH_ERROR;
    }
    size_t k = st->out.n - st->off;
    if (k > max) k = max;
    memcpy(buf, st->out.p + st->off, k);
    st->off += k;
    return (ssize_t)k;
}

static void stream_free(void *cls) {
    sse *st = cls;
    // The response can end early (client gone mid-write): make sure the jobs stop too.
    bool woke = false;
    for (int i = 0; i < st->n; i++) {
        srv_job *j = st->ch[i].j;
        pthread_mutex_lock(&j->mu);
        bool done = j->done;
        pthread_mutex_unlock(&j->mu);
        if (!done) srv_job_cancel(j), woke = true;
        srv_job_release(j);
    }
    if (woke) srv_sched_wake(st->s->sched);
    srv_buf_free(&st->out);
    free(st);
}

enum MHD_Result srv_stream_start(mx_server *s, struct MHD_Connection *c, srv_job **jobs, int n, const srv_gen_info *info) {
    sse *st = calloc(1, sizeof *st);
    if (!st) {
        for (int i = 0; i < n; i++) srv_job_cancel(jobs[i]), srv_job_release(jobs[i]);
        srv_sched_wake(s->sched);
        return MHD_NO;
    }
    st->s = s;
    st->c = c;
    st->n = n;
    for (int i = 0; i < n; i++) st->ch[i].j = jobs[i];
    st->info = *info;
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, stream_read, st, stream_free);
    if (!r) {
        stream_free(st);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", "text/event-stream");
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    srv_add_common_headers(s, c, r);
    enum MHD_Result ret = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    return ret;
}
