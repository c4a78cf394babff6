// SPDX-License-Identifier: MIT
// Server-sent events for streaming requests. libmicrohttpd pulls the body through stream_read on
// the connection's own thread; the reader blocks on the request's jobs (one per choice, `n`) until
// one has something new (role chunks, reasoning, content, tool calls, a choice's final chunk with
// finish_reason, then usage and [DONE] once every choice is done), checking every 100 ms whether the
// client is gone (reset) or the server stops. Each chunk carries one choice, named by its `index`.
// It waits on the condition variable of one running choice (the choices of a request decode in the
// same steps, so that one wakes it every step) and takes what is new from all of them at each wake:
// under a job's lock it only copies the new text, tool calls and logprobs (sse_snap), and formats
// the events after releasing it, so the scheduler thread (which takes the lock for every token)
// never waits for JSON formatting.
// A client is known to be gone only when a write fails, so after 2 s without news a keep-alive
// comment is written; the jobs are then cancelled and the scheduler frees their slots at the next
// step. On shutdown the stream ends with an error event and [DONE]. Nothing is sent for held-back
// text (stop strings). An allocation that fails while events are built (the copy, the JSON, the
// bytes to send; jansson's own failures are counted by srv_json_alloc.h) never drops or cuts an
// event: the whole events already written go out, then an error event and [DONE] from static text,
// and the jobs are cancelled.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/clock.h"
#include "server/srv_buf.h"
#include "server/srv_internal.h"
#include "server/srv_json_alloc.h"
#include "server/srv_reply.h"
#include "server/srv_response.h"

enum { KEEPALIVE_WAITS = 20 };  // 100 ms waits without news before a keep-alive comment (2 s)

// What one choice has sent so far.
typedef struct sse_choice {
    srv_job *j;
    size_t sent_content, sent_reasoning, sent_lp;
    size_t lp_offset;  // completion logprobs: text offset of the next token
    int sent_tools;
    int generated;     // tokens generated so far (the last copy's count)
    bool finished;
} sse_choice;

// A copy of what is new in one choice, taken under its job's lock. The copy is all that happens
// under the lock: the scheduler thread takes it for every token and when the job ends, and must not
// wait while a connection thread formats JSON (or is preempted doing so). The buffers are reused
// from choice to choice and event to event, so once grown the copy allocates nothing.
typedef struct sse_snap {
    srv_buf content, reasoning;  // new released text
    srv_buf tools;               // new tool calls: name NUL arguments NUL for each
    int n_tools;                 // the job's tool calls so far
    mx_sample_out *lp;           // new logprobs [n_lp] (sent with new content or the final chunk)
    size_t n_lp, cap_lp;
    int generated;
    bool done;
    const char *finish;          // the OpenAI finish_reason (with done)
    int error_status;            // with done: the job failed (HTTP status, error)
    char error[256];
} sse_snap;

typedef struct sse {
    mx_server *s;
    struct MHD_Connection *c;
    sse_choice ch[SRV_MAX_CHOICES];
    int n;
    srv_gen_info info;
    sse_snap snap;
    srv_buf out;     // bytes ready to send
    size_t off;      // bytes of `out` already sent
    size_t whole;    // bytes of `out` that are whole events (an allocation can fail inside one)
    unsigned long json_failures;  // srv_json_alloc_failures() when this round of events began
    bool roles_sent, finished;
    bool failed;     // an allocation failed: `out` (whole events) and then OOM_END are all that is left
    size_t end_off;  // bytes of OOM_END already sent
} sse;

// How a stream ends when an event cannot be built (an allocation failed): the OpenAI error event
// and [DONE], from static text, since there may be no memory for anything else.
static const char OOM_END[] = "data: {\"error\":{\"message\":\"out of memory while streaming the answer\","
                              "\"type\":\"server_error\",\"code\":null}}\n\ndata: [DONE]\n\n";

// Appends bytes that end an event (or are a whole one).
static void put_whole(sse *st, const char *text) {
    srv_buf_puts(&st->out, text);
    if (!st->out.oom) st->whole = st->out.n;
}

// The stream failed: the whole events written so far, then OOM_END; the jobs stop.
static void fail_oom(sse *st) {
    if (st->failed) return;
    st->failed = st->finished = true;
    if (st->out.p) st->out.p[st->out.n = st->whole] = 0;
    for (int i = 0; i < st->n; i++) srv_job_cancel(st->ch[i].j);
    srv_sched_wake(st->s->sched);
}

// Writes one event. An event that cannot be built whole (obj NULL, or jansson failed an allocation
// while it or an earlier one of this round was built: a key could be missing) fails the stream.
static void sse_event(sse *st, json_t *obj) {
    if (st->failed) {
        json_decref(obj);
        return;
    }
    char *text = srv_json_dumps(obj, JSON_COMPACT);
    json_decref(obj);
    if (!text || srv_json_alloc_failures() != st->json_failures) {
        free(text);
        fail_oom(st);
        return;
    }
    srv_buf_puts(&st->out, "data: ");
    srv_buf_puts(&st->out, text);
    free(text);
    put_whole(st, "\n\n");
    if (st->out.oom) fail_oom(st);
}

static json_t *chunk(sse *st, json_t *choice) { return srv_chunk_json(&st->info, choice); }

static json_t *choice(sse *st, int index, json_t *delta_or_text, json_t *logprobs, const char *finish) {
    return srv_chunk_choice_json(&st->info, index, delta_or_text, logprobs, finish);
}

// Ends the stream with an error event and [DONE].
static void fail(sse *st, json_t *error) {
    sse_event(st, error);
    if (st->failed) return;
    put_whole(st, "data: [DONE]\n\n");
    st->finished = true;
    if (st->out.oom) fail_oom(st);
}

// Copies what is new in choice i into st->snap (its job's lock held; see sse_snap).
static void snapshot(sse *st, int i) {
    sse_choice *ch = &st->ch[i];
    srv_job *j = ch->j;
    sse_snap *sn = &st->snap;
    size_t clen, rlen;
    const char *content = srv_output_content(j->out, &clen);
    const char *reasoning = srv_output_reasoning(j->out, &rlen);
    sn->content.n = sn->reasoning.n = sn->tools.n = 0;
    sn->n_lp = 0;
    sn->done = j->done;
    sn->generated = j->n_generated;
    sn->error_status = sn->done ? j->error_status : 0;
    if (sn->error_status) {
        memcpy(sn->error, j->error, sizeof sn->error);
        return;
    }
    if (clen > ch->sent_content) srv_buf_append(&sn->content, content + ch->sent_content, clen - ch->sent_content);
    if (rlen > ch->sent_reasoning) srv_buf_append(&sn->reasoning, reasoning + ch->sent_reasoning, rlen - ch->sent_reasoning);
    sn->n_tools = srv_output_n_tools(j->out);
    for (int t = ch->sent_tools; t < sn->n_tools; t++) {
        const char *name = srv_output_tool_name(j->out, t), *args = srv_output_tool_args(j->out, t);
        srv_buf_append(&sn->tools, name, strlen(name) + 1);
        srv_buf_append(&sn->tools, args, strlen(args) + 1);
    }
    if (j->n_logprobs >= 0 && j->n_lp > ch->sent_lp && (clen > ch->sent_content || sn->done)) {
        size_t n = j->n_lp - ch->sent_lp;
        if (n > sn->cap_lp) {
            mx_sample_out *g = realloc(sn->lp, sizeof *g * n);
            if (g) sn->lp = g, sn->cap_lp = n;
        }
        if (n <= sn->cap_lp) {
            memcpy(sn->lp, j->lp + ch->sent_lp, sizeof *sn->lp * n);
            sn->n_lp = n;
        } else {
            st->out.oom = true;  // fails the stream (take_all), as any allocation failure does
        }
    }
    sn->finish = sn->done ? srv_finish_reason(j) : NULL;
    if (sn->content.oom || sn->reasoning.oom || sn->tools.oom) st->out.oom = true;  // ends the stream
}

// Formats the events of choice i from st->snap (no lock held). Returns true when something was produced.
static bool take_new(sse *st, int i) {
    sse_choice *ch = &st->ch[i];
    const sse_snap *sn = &st->snap;
    bool any = false;
    bool chat = st->info.kind == SRV_KIND_CHAT;
    bool logprobs = ch->j->n_logprobs >= 0;  // request field: read-only after submit
    if (sn->error_status) {
        fail(st, srv_error_json((unsigned)sn->error_status, NULL, sn->error));
        return true;
    }
    if (chat && sn->reasoning.n) {
        json_t *delta = json_pack("{s:s%}", "reasoning_content", srv_buf_str(&sn->reasoning), sn->reasoning.n);
        sse_event(st, chunk(st, choice(st, i, delta, NULL, NULL)));
        any = true;
    }
    ch->sent_reasoning += sn->reasoning.n;
    size_t lp_left = sn->n_lp;  // copied logprobs not sent yet
    if (sn->content.n) {
        json_t *lp = NULL;
        if (logprobs && !(lp = srv_logprobs_json(st->s->tok, sn->lp, lp_left, st->info.kind, &ch->lp_offset)))
            return fail_oom(st), true;  // a token's text could not be decoded
        json_t *piece = json_stringn(srv_buf_str(&sn->content), sn->content.n);
        sse_event(st, chunk(st, choice(st, i, chat ? json_pack("{s:o}", "content", piece) : piece, lp, NULL)));
        ch->sent_content += sn->content.n;
        ch->sent_lp += lp_left;
        lp_left = 0;
        any = true;
    }
    if (chat && sn->n_tools > ch->sent_tools) {
        json_t *calls = json_array();
        const char *p = srv_buf_str(&sn->tools);
        for (int t = ch->sent_tools; t < sn->n_tools; t++) {
            const char *name = p, *args = name + strlen(name) + 1;
            p = args + strlen(args) + 1;
            json_array_append_new(calls, srv_tool_call_json(&st->info, i, t, name, args, true));
        }
        sse_event(st, chunk(st, choice(st, i, json_pack("{s:o}", "tool_calls", calls), NULL, NULL)));
        any = true;
    }
    ch->sent_tools = sn->n_tools;
    if (sn->done) {
        json_t *lp = NULL;
        if (logprobs && lp_left && !(lp = srv_logprobs_json(st->s->tok, sn->lp, lp_left, st->info.kind, &ch->lp_offset)))
            return fail_oom(st), true;
        sse_event(st, chunk(st, choice(st, i, chat ? json_object() : json_string(""), lp, sn->finish)));
        ch->sent_lp += lp_left;
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
        if (!ch->finished) {
            pthread_mutex_lock(&ch->j->mu);
            snapshot(st, i);
            pthread_mutex_unlock(&ch->j->mu);
            if (st->out.oom) {  // the copy lost text or logprobs
                fail_oom(st);
                return true;
            }
            ch->generated = st->snap.generated;
            any |= take_new(st, i);
        }
        generated += ch->generated;
        open += !ch->finished;
    }
    if (st->finished) return true;  // an error event ended the stream
    if (open == 0) {
        if (st->info.include_usage) {
            json_t *u = chunk(st, NULL);
            if (u && json_object_set_new(u, "usage", srv_usage_json(st->info.n_prompt, generated))) {
                json_decref(u);
                u = NULL;
            }
            sse_event(st, u);
        }
        if (st->failed) return true;
        put_whole(st, "data: [DONE]\n\n");
        st->finished = true;
        if (st->out.oom) fail_oom(st);
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
        bool started = atomic_load(&j->started);
        if (!pick || started) pick = j;
        if (started) break;
    }
    return pick;
}

// Fills st->out with the next events; false when the client is gone (the jobs are then cancelled).
static bool produce(sse *st) {
    st->json_failures = srv_json_alloc_failures();  // this thread works for this stream until it returns
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
            put_whole(st, ": keep-alive\n\n");
            if (st->out.oom) fail_oom(st);
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
        if (st->failed) {  // the whole events are out: the error event and [DONE]
            size_t k = sizeof OOM_END - 1 - st->end_off;
            if (!k) return MHD_CONTENT_READER_END_OF_STREAM;
            if (k > max) k = max;
            memcpy(buf, OOM_END + st->end_off, k);
            st->end_off += k;
            return (ssize_t)k;
        }
        st->off = st->whole = 0;
        st->out.n = 0;
        if (st->finished) return MHD_CONTENT_READER_END_OF_STREAM;
        if (!produce(st)) return MHD_CONTENT_READER_END_WITH_ERROR;
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
    srv_buf_free(&st->snap.content), srv_buf_free(&st->snap.reasoning), srv_buf_free(&st->snap.tools);
    free(st->snap.lp);
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
