// SPDX-License-Identifier: MIT
// Server-sent events for streaming requests. libmicrohttpd pulls the body through stream_read on
// the connection's own thread; the reader blocks on the job until it has something new (a role
// chunk, reasoning, content, tool calls, the final chunk with finish_reason, usage, [DONE]),
// checking every 100 ms whether the client is gone (reset) or the server stops. A client is known
// to be gone only when a write fails, so after 2 s without news a keep-alive comment is written;
// the job is then cancelled and the scheduler frees its slot at the next step. On shutdown the
// stream ends with an error event and [DONE]. Nothing is sent for held-back text (stop strings).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/srv_buf.h"
#include "server/srv_internal.h"

enum { KEEPALIVE_WAITS = 20 };  // 100 ms waits without news before a keep-alive comment (2 s)

typedef struct sse {
    mx_server *s;
    struct MHD_Connection *c;
    srv_job *j;
    srv_gen_info info;
    srv_buf out;     // bytes ready to send
    size_t off;      // bytes of `out` already sent
    size_t sent_content, sent_reasoning, sent_lp;
    int sent_tools;
    bool role_sent, finished;
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

static json_t *chunk(sse *st, json_t *choice) {
    json_t *choices = json_array();
    if (choice) json_array_append_new(choices, choice);
    return json_pack("{s:s, s:s, s:I, s:s, s:o}", "id", st->info.id, "object",
                     st->info.kind == SRV_KIND_CHAT ? "chat.completion.chunk" : "text_completion", "created",
                     (json_int_t)st->info.created, "model", st->info.model, "choices", choices);
}

static json_t *choice(sse *st, json_t *delta_or_text, json_t *logprobs, const char *finish) {
    json_t *c = json_pack("{s:i}", "index", 0);
    if (st->info.kind == SRV_KIND_CHAT)
        json_object_set_new(c, "delta", delta_or_text);
    else
        json_object_set_new(c, "text", delta_or_text);
    json_object_set_new(c, "logprobs", logprobs ? logprobs : json_null());
    json_object_set_new(c, "finish_reason", finish ? json_string(finish) : json_null());
    return c;
}

// Formats what is new in the job (lock held). Returns true when something was produced.
static bool take_new(sse *st) {
    srv_job *j = st->j;
    size_t clen, rlen, n_lp = j->n_lp;
    const char *content = srv_output_content(j->out, &clen);
    const char *reasoning = srv_output_reasoning(j->out, &rlen);
    int n_tools = srv_output_n_tools(j->out);
    bool any = false;
    bool chat = st->info.kind == SRV_KIND_CHAT;
    if (j->error_status && j->done) {
        sse_event(st, srv_error_json((unsigned)j->error_status, NULL, j->error));
        st->finished = true;
        srv_buf_puts(&st->out, "data: [DONE]\n\n");
        return true;
    }
    if (chat && rlen > st->sent_reasoning) {
        sse_event(st, chunk(st, choice(st, json_pack("{s:s%}", "reasoning_content", reasoning + st->sent_reasoning,
                                                     rlen - st->sent_reasoning),
                                       NULL, NULL)));
        st->sent_reasoning = rlen;
        any = true;
    }
    if (clen > st->sent_content) {
        json_t *lp = j->n_logprobs >= 0 ? srv_logprobs_json(st->s->tok, j, st->info.kind, st->sent_lp, n_lp) : NULL;
        json_t *piece = json_stringn(content + st->sent_content, clen - st->sent_content);
        sse_event(st, chunk(st, choice(st, chat ? json_pack("{s:o}", "content", piece) : piece, lp, NULL)));
        st->sent_content = clen;
        st->sent_lp = n_lp;
        any = true;
    }
    if (chat && n_tools > st->sent_tools) {
        json_t *delta = json_pack("{s:o}", "tool_calls", srv_tool_calls_json(j, &st->info, st->sent_tools, true));
        sse_event(st, chunk(st, choice(st, delta, NULL, NULL)));
        st->sent_tools = n_tools;
        any = true;
    }
    if (j->done) {
        json_t *lp = j->n_logprobs >= 0 && n_lp > st->sent_lp ? srv_logprobs_json(st->s->tok, j, st->info.kind, st->sent_lp, n_lp)
                                                               : NULL;
        sse_event(st, chunk(st, choice(st, chat ? json_object() : json_string(""), lp, j->finish)));
        if (st->info.include_usage) {
            json_t *u = chunk(st, NULL);
            json_object_set_new(u, "usage", srv_usage_json(st->info.n_prompt, j->n_generated));
            sse_event(st, u);
        }
        srv_buf_puts(&st->out, "data: [DONE]\n\n");
        st->finished = true;
        any = true;
    }
    return any;
}

// Fills st->out with the next events; false when the client is gone (the job is then cancelled).
static bool produce(sse *st) {
    if (!st->role_sent) {
        st->role_sent = true;
        if (st->info.kind == SRV_KIND_CHAT) {
            sse_event(st, chunk(st, choice(st, json_pack("{s:s, s:s}", "role", "assistant", "content", ""), NULL, NULL)));
            return true;
        }
    }
    srv_job *j = st->j;
    pthread_mutex_lock(&j->mu);
    for (int waits = 0; !take_new(st); waits++) {
        if (waits == KEEPALIVE_WAITS) {
            // An SSE comment: clients ignore it, and writing it is what finds a vanished client
            // (a half-closed one is still reading, so reading alone cannot tell).
            srv_buf_puts(&st->out, ": keep-alive\n\n");
            break;
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 100 * 1000 * 1000;
        if (ts.tv_nsec >= 1000000000) ts.tv_sec++, ts.tv_nsec -= 1000000000;
        pthread_cond_timedwait(&j->cv, &j->mu, &ts);
        if (j->done) continue;
        if (atomic_load(&st->s->stopping)) {
            // Shutdown: the client gets a final error event and [DONE] instead of a cut stream.
            j->cancelled = true;
            pthread_mutex_unlock(&j->mu);
            srv_sched_wake(st->s->sched);
            sse_event(st, srv_error_json(503, "shutting_down", "the server shut down before the request finished"));
            srv_buf_puts(&st->out, "data: [DONE]\n\n");
            st->finished = true;
            return true;
        }
        if (srv_client_gone(st->c)) {
            j->cancelled = true;
            pthread_mutex_unlock(&j->mu);
            srv_sched_wake(st->s->sched);
            return false;
        }
    }
    pthread_mutex_unlock(&j->mu);
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
    // The response can end early (client gone mid-write): make sure the job stops too.
    pthread_mutex_lock(&st->j->mu);
    bool done = st->j->done;
    pthread_mutex_unlock(&st->j->mu);
    if (!done) {
        srv_job_cancel(st->j);
        srv_sched_wake(st->s->sched);
    }
    srv_job_release(st->j);
    srv_buf_free(&st->out);
    free(st);
}

enum MHD_Result srv_stream_start(mx_server *s, struct MHD_Connection *c, srv_job *j, const srv_gen_info *info) {
    sse *st = calloc(1, sizeof *st);
    if (!st) {
        srv_job_cancel(j);
        srv_job_release(j);
        return MHD_NO;
    }
    st->s = s;
    st->c = c;
    st->j = j;
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
