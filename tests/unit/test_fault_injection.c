// SPDX-License-Identifier: MIT
// Failure injection (this test's build only): every allocation the library makes goes through the
// linker's --wrap of malloc/calloc/realloc/strdup/strndup/aligned_alloc/posix_memalign and of
// open_memstream, which allocates inside the C library (see tests/cmake/fault_injection.cmake), and
// the wrapper fails the Nth one. For each N, in a child
// process, model load, a generation (the engine: context, forward, token choice), one server request, an
// embeddings request in base64 and in floats (a 200 answer must hold the whole embedding), a streamed
// completion, a forced tool call and a streamed one, a completion with logprobs and a streamed chat
// with them (each answer whole, event by event, and equal to
// the answer without failures, or an error: a stream may end with an error event and [DONE]) and a
// DeepSeek-V3 load and forward (latent attention) must end
// in success or a clean error: a message (load, generate) or an HTTP answer, never a crash, and
// the server must answer the next request. A second part swaps the backend's ops table for one
// whose run_plan fails (a device fault as the engine sees it): the forward returns the backend's
// message, the server answers 500 with it, and the next request succeeds. A third part fails the
// CPU backend's one allocation inside a step (its activation scratch growing on a fresh backend):
// the step ends with the backend's out-of-memory message (what the CLI prints before its non-zero
// exit), the server answers 500 naming it, and the next step or request succeeds.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "backends/backend.h"
#include "chat/chat_template.h"
#include "check.h"
#include "generate/engine.h"
#include "grammar/grammar.h"
#include "models/model.h"
#include "sample/sampler.h"
#include "server/server.h"
#include "tokenizer/tokenizer.h"

// ---- the allocation hook ------------------------------------------------------------------------
static long alloc_count, alloc_fail_at;  // fail_at 0: never
static size_t aligned_fail_from;         // nonzero: every aligned_alloc of at least this many bytes fails

static bool fail_now(void) { return ++alloc_count == alloc_fail_at; }

void *__real_malloc(size_t n);
void *__real_calloc(size_t a, size_t b);
void *__real_realloc(void *p, size_t n);
char *__real_strdup(const char *s);
char *__real_strndup(const char *s, size_t n);
void *__real_aligned_alloc(size_t al, size_t n);
int __real_posix_memalign(void **p, size_t al, size_t n);
void *__wrap_malloc(size_t n) { return fail_now() ? NULL : __real_malloc(n); }
void *__wrap_calloc(size_t a, size_t b) { return fail_now() ? NULL : __real_calloc(a, b); }
void *__wrap_realloc(void *p, size_t n) { return fail_now() ? NULL : __real_realloc(p, n); }
char *__wrap_strdup(const char *s) { return fail_now() ? NULL : __real_strdup(s); }
char *__wrap_strndup(const char *s, size_t n) { return fail_now() ? NULL : __real_strndup(s, n); }
void *__wrap_aligned_alloc(size_t al, size_t n) {
    return fail_now() || (aligned_fail_from && n >= aligned_fail_from) ? NULL : __real_aligned_alloc(al, n);
}
int __wrap_posix_memalign(void **p, size_t al, size_t n) { return fail_now() ? 12 : __real_posix_memalign(p, al, n); }
FILE *__real_open_memstream(char **text, size_t *len);
FILE *__wrap_open_memstream(char **text, size_t *len) { return fail_now() ? NULL : __real_open_memstream(text, len); }

static void arm(long n) {
    alloc_count = 0;
    alloc_fail_at = n;
}

static const char *MODEL = "models/qwen3-demo-44m-4bit";

// ---- the operations under test (each returns 0 on success, 1 on a clean error) -------------------
static int op_load(void) {
    mx_error err = {{0}};
    mx_backend_options bo = {.name = "cpu", .threads = 1};
    mx_backend *be = mx_backend_create(&bo, &err);
    mx_model *m = be ? mx_model_load(MODEL, be, &err) : NULL;
    int rc = m ? 0 : 1;
    if (!m && !err.msg[0]) {
        fprintf(stderr, "load failed without a message\n");
        abort();
    }
    mx_model_free(m);
    mx_backend_free(be);
    return rc;
}

// DeepSeek-V3 (the Hub-layout bf16 fixture: kv_b_proj split and transposed, per-expert tensors
// stacked, rows reordered at load) loaded, with a context (latent cache and scratch) and a forward.
static int op_deepseek(void) {
    mx_error err = {{0}};
    mx_backend_options bo = {.name = "cpu", .threads = 1};
    mx_backend *be = mx_backend_create(&bo, &err);
    mx_model *m = be ? mx_model_load("tests/fixtures/models/deepseek_v3-bf16", be, &err) : NULL;
    mx_ctx *ctx = m ? mx_ctx_create(m, 1, 32, 4, &err) : NULL;
    int32_t tokens[3] = {5, 17, 300}, pos[3] = {0, 1, 2}, slot[3] = {0, 0, 0}, row = 2, id = -1;
    mx_batch b = {3, tokens, pos, slot, 1, &row};
    int rc = ctx && mx_ctx_forward(ctx, &b, NULL, &id, &err) == 0 ? 0 : 1;
    if (rc && !err.msg[0]) {
        fprintf(stderr, "deepseek_v3 load or forward failed without a message\n");
        abort();
    }
    mx_ctx_free(ctx);
    mx_model_free(m);
    mx_backend_free(be);
    return rc;
}

static mx_backend *g_be;
static mx_model *g_model;
static mx_tokenizer *g_tok;

static int op_generate(void) {
    mx_error err = {{0}};
    int32_t *ids = NULL;
    size_t n = 0;
    if (mx_tokenizer_encode(g_tok, "Once upon a time", 16, &ids, &n, &err)) return err.msg[0] ? 1 : (abort(), 1);
    mx_engine_opts eo = {.n_slots = 1, .max_ctx = 64, .prefill_chunk = 16, .threads = 1};
    mx_engine *eng = mx_engine_create(g_model, &eo, &err);
    mx_sampling sp = mx_sampling_defaults();
    sp.temp = 0.8f;
    sp.top_k = 20;
    sp.has_seed = true;
    mx_seq_opts so = {.sampling = sp, .max_new = 4, .n_logprobs = 2};
    mx_seq *seq = eng ? mx_seq_create(g_tok, ids, (int)n, &so, 64, &err) : NULL;
    int rc = 1;
    if (eng && seq) {
        rc = mx_engine_admit(eng, seq, &err) != 0 || mx_engine_run(eng, &err) != 0;
        if (rc && !err.msg[0]) {
            fprintf(stderr, "generation failed without a message\n");
            abort();
        }
        mx_engine_release(eng, seq);
    } else if (!err.msg[0]) {
        fprintf(stderr, "engine or sequence creation failed without a message\n");
        abort();
    }
    mx_seq_free(seq);
    mx_engine_free(eng);
    free(ids);
    return rc;
}

// A generation constrained by a grammar: an allocation that fails in the matcher (its stacks, its
// masks) ends the sequence with an error, never as if the grammar had ended it: the tokens of a run
// that finishes without an error are those of the run without failures. A schema's compilation, the
// parse and the matcher's start that fail say they failed for memory (MX_GRAM_NO_MEMORY: the
// server's 500, not the 400 of a wrong grammar).
static mx_gram_vocab *g_vocab;
static int32_t g_grammar_ref[16];
static int g_grammar_ref_n = -1;  // -1 until the first run (no failure) records its tokens
static json_t *g_schema;          // read before the sweep (a pattern: the compiler parses a probe grammar)

static void expect_no_memory(const char *what, int failure, const mx_error *err) {
    if (failure == MX_GRAM_NO_MEMORY) return;
    fprintf(stderr, "%s failed under an injected allocation failure as kind %d, not out of memory: %s\n", what, failure,
            err->msg);
    abort();
}

static int op_grammar_generate(void) {
    mx_error err = {{0}};
    int failure = 0;
    char *schema_gbnf = mx_json_schema_to_gbnf(g_schema, &failure, &err);
    if (!schema_gbnf) {
        expect_no_memory("a schema's compilation", failure, &err);
        return 1;
    }
    free(schema_gbnf);
    int32_t prompt[4] = {785, 4226, 374, 25};
    mx_grammar *g = mx_grammar_parse("root ::= \"{\\\"a\\\": \" [0-9]{1,5} \", \\\"b\\\": \\\"\" [a-z ]{0,40} \"\\\"}\"\n", &failure,
                                     &err);
    if (!g) expect_no_memory("a grammar's parse", failure, &err);
    mx_gram_index *ix = g ? mx_gram_index_create(g, g_vocab, &err) : NULL;
    mx_matcher *mt = ix ? mx_matcher_create(ix, &failure, &err) : NULL;
    if (ix && !mt) expect_no_memory("a matcher's start", failure, &err);
    mx_gram_index_release(ix);
    mx_engine_opts eo = {.n_slots = 1, .max_ctx = 64, .prefill_chunk = 16, .threads = 1};
    mx_engine *eng = mt ? mx_engine_create(g_model, &eo, &err) : NULL;
    mx_seq_opts so = {.sampling = mx_sampling_defaults(), .max_new = 16, .n_logprobs = -1, .matcher = mt};
    so.sampling.temp = 0;
    mx_seq *seq = eng ? mx_seq_create(g_tok, prompt, 4, &so, 64, &err) : NULL;
    int rc = 1;
    if (seq) {
        bool ran = mx_engine_admit(eng, seq, &err) == 0 && mx_engine_run(eng, &err) == 0;
        mx_finish why = mx_seq_finish_reason(seq);
        if (!ran || why == MX_FINISH_ERROR) {
            if (!err.msg[0] && !mx_seq_error(seq)[0]) {
                fprintf(stderr, "constrained generation failed without a message\n");
                abort();
            }
        } else {
            int n = 0;
            const int32_t *ids = mx_seq_generated(seq, &n);
            if (g_grammar_ref_n < 0) {
                g_grammar_ref_n = n < 16 ? n : 16;
                memcpy(g_grammar_ref, ids, sizeof *ids * (size_t)g_grammar_ref_n);
            }
            if (n != g_grammar_ref_n || memcmp(ids, g_grammar_ref, sizeof *ids * (size_t)n) != 0) {
                fprintf(stderr, "constrained generation finished (%d) with %d tokens instead of %d\n", why, n,
                        g_grammar_ref_n);
                abort();
            }
            rc = 0;
        }
        mx_engine_release(eng, seq);
    } else if (!err.msg[0]) {
        fprintf(stderr, "constrained generation set-up failed without a message\n");
        abort();
    }
    mx_seq_free(seq);
    mx_engine_free(eng);
    mx_matcher_free(mt);
    return rc;
}

// One HTTP exchange on loopback with fixed buffers (no allocation on the client side). Returns the
// status code, 0 when the server closed the connection without an answer, -1 if it cannot connect.
static int http_post(int port, const char *path, const char *body, char *reply, size_t cap) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        if (fd >= 0) close(fd);
        return -1;
    }
    char req[1024];
    int n = snprintf(req, sizeof req,
                     "POST %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\n"
                     "Content-Length: %zu\r\n\r\n%s",
                     path, strlen(body), body);
    if (write(fd, req, (size_t)n) != n) {
        close(fd);
        return 0;
    }
    size_t got = 0;
    ssize_t k;
    while (got + 1 < cap && (k = read(fd, reply + got, cap - 1 - got)) > 0) got += (size_t)k;
    reply[got] = 0;
    close(fd);
    int status = 0;
    if (sscanf(reply, "HTTP/1.1 %d", &status) != 1) return 0;
    return status;
}

static int g_port;
static const char *REQ = "{\"prompt\":\"Hello\",\"max_tokens\":3,\"temperature\":0}";

// After a request with an injected failure: disarm the injection; the server must still serve the
// next request (path, body). It not doing so ends the whole test.
static void expect_still_serving(const char *failed_path, const char *path, const char *body) {
    static char again[65536];
    alloc_fail_at = 0;
    int st = http_post(g_port, path, body, again, sizeof again);
    if (st != 200) {
        fprintf(stderr, "after an allocation failure in %s the next request to %s got %d: %.300s\n", failed_path,
                path, st, again);
        abort();
    }
}

// In this process (the server's threads do not survive a fork): a crash ends the whole test.
static int op_request(void) {
    static char reply[65536];
    int st = http_post(g_port, "/v1/completions", REQ, reply, sizeof reply);
    expect_still_serving("/v1/completions", "/v1/completions", REQ);
    if (st == 200) return 0;
    // An error answer. (jansson's parser reports some allocation failures as syntax errors: 400.)
    if (st >= 400 && strstr(reply, "\"error\"")) return 1;
    if (st == 0) return 1;  // connection closed without an answer (the reply itself could not be built)
    fprintf(stderr, "unexpected answer %d: %.300s\n", st, reply);
    abort();
}

// One /v1/embeddings request in this process (as op_request), body g_embed_req (8 dimensions): a
// 200 answer must hold the whole embedding, 8 numbers or their 44 base64 characters; an answer
// with less is counted in g_embed_short.
static const char *g_embed_req;
static int g_embed_short;
static int op_embed(void) {
    static char reply[65536];
    int st = http_post(g_port, "/v1/embeddings", g_embed_req, reply, sizeof reply);
    expect_still_serving("/v1/embeddings", "/v1/embeddings", g_embed_req);
    if (st == 200) {
        const char *body = strstr(reply, "\r\n\r\n");
        json_t *j = body ? json_loads(body + 4, 0, NULL) : NULL;
        json_t *e = json_object_get(json_array_get(json_object_get(j, "data"), 0), "embedding");
        if (json_is_string(e) ? json_string_length(e) != 44 : json_array_size(e) != 8) {
            g_embed_short++;
            fprintf(stderr, "a 200 answer without the whole embedding: %.300s\n", body ? body + 4 : reply);
        }
        json_decref(j);
        return 0;
    }
    if (st >= 400 && strstr(reply, "\"error\"")) return 1;
    if (st == 0) return 1;
    fprintf(stderr, "unexpected answer %d: %.300s\n", st, reply);
    abort();
}

// ---- answers that must be whole: a streamed completion, a forced tool call (plain and streamed) ------
// A 200 answer is summed up as its content, its tool calls (name and arguments) and its
// finish_reason; it must equal the summary of the run without failures (the sweep's first run,
// recorded in ref). A stream must be events `data: JSON` ending with `data: [DONE]` (and the
// chunked body's last chunk); an error event may end it (a clean error) but only as its last event.
// Anything else (a broken event, a missing [DONE], a cut stream, a shorter answer) is counted in
// g_whole_bad.
typedef struct whole_op {
    const char *path, *body;
    bool stream;
    char ref[1024];  // "" until the first run
} whole_op;
static whole_op *g_whole;
static int g_whole_bad;

static void add_calls(char *sum, size_t cap, json_t *calls) {
    size_t i;
    json_t *c;
    json_array_foreach(calls, i, c) {
        json_t *f = json_object_get(c, "function");
        size_t k = strlen(sum);
        const char *name = json_string_value(json_object_get(f, "name"));
        const char *args = json_string_value(json_object_get(f, "arguments"));
        snprintf(sum + k, cap - k, "[%s](%s)", name ? name : "?", args ? args : "?");
    }
}

// The texts of a choice's logprobs (chat or completion form) appended to sum, each token's after a
// \x01 and each alternative's after a \x02: a text left out or emptied makes the answer unlike the
// one without failures.
static void add_logprobs(char *sum, size_t cap, json_t *lp) {
    size_t i, k;
    json_t *e, *top, *v;
    const char *key;
    json_array_foreach(json_object_get(lp, "content"), i, e) {  // chat
        k = strlen(sum);
        snprintf(sum + k, cap - k, "\x01%s", json_string_value(json_object_get(e, "token")));
        json_array_foreach(json_object_get(e, "top_logprobs"), k, top) {
            size_t at = strlen(sum);
            snprintf(sum + at, cap - at, "\x02%s", json_string_value(json_object_get(top, "token")));
        }
    }
    json_t *tops = json_object_get(lp, "top_logprobs");
    json_array_foreach(json_object_get(lp, "tokens"), i, e) {  // completion
        k = strlen(sum);
        snprintf(sum + k, cap - k, "\x01%s", json_string_value(e));
        json_object_foreach(json_array_get(tops, i), key, v) {
            size_t at = strlen(sum);
            snprintf(sum + at, cap - at, "\x02%s", key);
        }
    }
}

// The summary of a whole (non-streamed) answer; false when it lacks a part.
static bool sum_answer(json_t *j, char *sum, size_t cap) {
    json_t *ch = json_array_get(json_object_get(j, "choices"), 0);
    json_t *msg = json_object_get(ch, "message"), *fin = json_object_get(ch, "finish_reason");
    json_t *text = msg ? json_object_get(msg, "content") : json_object_get(ch, "text");
    if (!json_is_string(fin) || !(json_is_string(text) || (msg && json_is_null(text)))) return false;
    if (!json_is_object(json_object_get(j, "usage"))) return false;
    snprintf(sum, cap, "%s|", json_is_string(text) ? json_string_value(text) : "");
    add_calls(sum, cap, json_object_get(msg, "tool_calls"));
    size_t k = strlen(sum);
    snprintf(sum + k, cap - k, "|%s", json_string_value(fin));
    add_logprobs(sum, cap, json_object_get(ch, "logprobs"));
    return true;
}

// In place: the body of a chunked reply; *ended when its last (empty) chunk came.
static char *dechunk(char *p, bool *ended) {
    char *out = p, *w = p;
    *ended = false;
    for (;;) {
        char *e;
        unsigned long n = strtoul(p, &e, 16);
        if (e == p || strncmp(e, "\r\n", 2) != 0) break;
        p = e + 2;
        if (n == 0) {
            *ended = true;
            break;
        }
        if (strlen(p) < n + 2) break;
        memmove(w, p, n);
        w += n;
        p += n + 2;
    }
    *w = 0;
    return out;
}

// The summary of a streamed answer (its events in body); 1 for an error event ending it, -1 when
// the stream is not whole (why in `bad`).
static int sum_stream(char *body, char *sum, size_t cap, const char **bad) {
    static char content[4096], calls[1024], fin[32], lps[1024];
    content[0] = calls[0] = fin[0] = lps[0] = 0;
    bool done = false, error = false;
    for (char *ev = body; *ev;) {
        char *end = strstr(ev, "\n\n");
        if (!end) return *bad = "an event cut short", -1;
        *end = 0;
        if (done || (error && strcmp(ev, "data: [DONE]") != 0)) return *bad = "an event after [DONE] or an error", -1;
        if (ev[0] == ':') {  // a comment (keep-alive)
            ev = end + 2;
            continue;
        }
        if (strncmp(ev, "data: ", 6) != 0) return *bad = "a line that is not an event", -1;
        if (strcmp(ev + 6, "[DONE]") == 0) {
            done = true;
        } else {
            json_t *j = json_loads(ev + 6, 0, NULL);
            if (!j) return *bad = "an event that is not JSON", -1;
            if (json_object_get(j, "error")) {
                error = json_is_string(json_object_get(json_object_get(j, "error"), "message"));
                json_decref(j);
                if (!error) return *bad = "an error event without a message", -1;
                ev = end + 2;
                continue;
            }
            json_t *chs = json_object_get(j, "choices"), *ch = json_array_get(chs, 0);
            if (!json_is_array(chs) || (!ch && !json_object_get(j, "usage"))) {
                json_decref(j);
                return *bad = "a chunk without choices", -1;
            }
            json_t *delta = json_object_get(ch, "delta");
            json_t *text = delta ? json_object_get(delta, "content") : json_object_get(ch, "text");
            if (ch && !delta && !json_is_string(text)) {
                json_decref(j);
                return *bad = "a completion chunk without text", -1;
            }
            if (json_is_string(text)) strncat(content, json_string_value(text), sizeof content - strlen(content) - 1);
            add_calls(calls, sizeof calls, json_object_get(delta, "tool_calls"));
            add_logprobs(lps, sizeof lps, json_object_get(ch, "logprobs"));
            if (json_is_string(json_object_get(ch, "finish_reason")))
                snprintf(fin, sizeof fin, "%s", json_string_value(json_object_get(ch, "finish_reason")));
            json_decref(j);
        }
        ev = end + 2;
    }
    if (!done) return *bad = "no [DONE]", -1;
    if (error) return 1;
    if (!fin[0]) return *bad = "no finish_reason", -1;
    snprintf(sum, cap, "%s|%s|%s%s", content, calls, fin, lps);
    return 0;
}

static int op_whole(void) {
    static char reply[262144];
    whole_op *w = g_whole;
    int st = http_post(g_port, w->path, w->body, reply, sizeof reply);
    expect_still_serving(w->path, "/v1/completions", REQ);  // (not w's own: a stream takes 0.2 s)
    if (st == 0) return 1;  // closed before an answer (the reply itself could not be started)
    char *body = strstr(reply, "\r\n\r\n");
    if (st >= 400 && body && strstr(body, "\"error\"")) return 1;
    if (st != 200 || !body) {
        fprintf(stderr, "unexpected answer %d: %.300s\n", st, reply);
        abort();
    }
    *body = 0;
    body += 4;
    if (getenv("MLXCEL_FAULT_AT")) fprintf(stderr, "%s\n%s\n", reply, body);  // debugging: one N
    const char *bad = NULL;
    char sum[1024] = "";
    int rc = 0;
    if (w->stream) {
        bool ended = true;
        if (strcasestr(reply, "Transfer-Encoding: chunked")) body = dechunk(body, &ended);
        rc = sum_stream(body, sum, sizeof sum, &bad);
        if (!ended && rc >= 0) bad = "no last chunk (the stream was cut)", rc = -1;
    } else {
        json_t *j = json_loads(body, 0, NULL);
        if (!j || !sum_answer(j, sum, sizeof sum)) bad = "an answer without a part", rc = -1;
        json_decref(j);
    }
    if (rc == 0 && !w->ref[0]) snprintf(w->ref, sizeof w->ref, "%s", sum);  // the run without failures
    else if (rc == 0 && strcmp(sum, w->ref) != 0) bad = "an answer unlike the one without failures", rc = -1;
    if (rc < 0) {
        g_whole_bad++;
        fprintf(stderr, "%s %s: %s (%s; want %s): %.300s\n", w->path, w->stream ? "stream" : "answer", bad, sum, w->ref,
                body);
        return 0;
    }
    return rc;
}

// Runs op in a child with the Nth allocation failing. Returns 0 (success), 1 (clean error) or 2
// (crash or abort).
static int run_child(int (*op)(void), long n) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        arm(n);
        int rc = op();
        arm(0);
        _exit(rc);
    }
    int status;
    waitpid(pid, &status, 0);
    if (WIFEXITED(status) && WEXITSTATUS(status) <= 1) return WEXITSTATUS(status);
    return 2;
}

// The whole-answer sweeps (a streamed completion, the tool-call requests) generate tokens after each
// injected failure; the sanitizer build (Debug, ASan) runs them ~15x slower, so it samples them
// sparser: the release build's ctest takes the dense sweep.
#if defined(__SANITIZE_ADDRESS__)
#define SANITIZED_BUILD 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SANITIZED_BUILD 1
#endif
#endif
#ifdef SANITIZED_BUILD
enum { WHOLE_DENSE = 30, WHOLE_STEP = 29 };
#else
enum { WHOLE_DENSE = 100, WHOLE_STEP = 9 };
#endif

// Counts the allocations of one run of op (in this process), then fails each of the first `dense`
// one by one and every step-th one after that, up to the count.
static void sweep(const char *name, int (*op)(void), long dense, long step, bool in_process) {
    arm(0);
    op();
    long total = alloc_count;
    const char *only = getenv("MLXCEL_FAULT_AT");  // debugging: one N, in this process
    if (only) {
        arm(atol(only));
        printf("%s: failing allocation %s of %ld: %d\n", name, only, total, op());
        arm(0);
        return;
    }
    int crashes = 0, errors = 0, tried = 0;
    for (long n = 1; n <= total; n += n < dense ? 1 : step) {
        int r;
        if (in_process) {
            arm(n);
            r = op();
            arm(0);
        } else {
            r = run_child(op, n);
        }
        tried++;
        if (r == 2) {
            crashes++;
            fprintf(stderr, "%s: failing allocation %ld of %ld crashed\n", name, n, total);
        }
        errors += r == 1;
    }
    printf("%s: %ld allocations; %d failures injected: %d clean errors, %d crashes\n", name, total, tried, errors,
           crashes);
    CHECK(crashes == 0);
    CHECK(errors > 0);
}

// ---- device faults at the backend seam ------------------------------------------------------------
static const mx_backend_ops *real_ops;
static mx_backend_ops faulty_ops;
static int plans_until_fault = -1;

static int faulty_run_plan(mx_backend *be, const mx_plan *plan, mx_error *err) {
    if (plans_until_fault == 0) {
        plans_until_fault = -1;
        return mx_fail(err, "injected device fault (an illegal memory access was encountered)");
    }
    if (plans_until_fault > 0) plans_until_fault--;
    return real_ops->run_plan(be, plan, err);
}

static void device_fault(void) {
    real_ops = g_be->ops;
    faulty_ops = *real_ops;
    faulty_ops.run_plan = faulty_run_plan;
    g_be->ops = &faulty_ops;

    plans_until_fault = 0;
    CHECK(op_generate() == 1);
    plans_until_fault = -1;
    CHECK(op_generate() == 0);

    static char reply[65536];
    plans_until_fault = 0;
    int st = http_post(g_port, "/v1/completions", REQ, reply, sizeof reply);
    CHECK(st == 500 && strstr(reply, "injected device fault"));
    if (st != 500) fprintf(stderr, "device fault answer %d: %.300s\n", st, reply);
    st = http_post(g_port, "/v1/completions", REQ, reply, sizeof reply);
    CHECK(st == 200);
    g_be->ops = real_ops;
}

// ---- the CPU backend's activation scratch ---------------------------------------------------------
// The scratch is allocated on the first step that needs it and grows for bigger batches; the first
// sampled row takes vocab x 24 bytes per thread (megabytes), while a step's other large memory (KV
// cache, activations) is allocated with the context. So on a fresh backend, failing every aligned
// allocation of 1 MB or more during a sampled step fails exactly the scratch (greedy steps choose
// by argmax, without it).
#define SCRATCH_FAIL_FROM ((size_t)1 << 20)

static mx_model *fresh_model(mx_backend **be) {
    mx_error err = {{0}};
    mx_backend_options bo = {.name = "cpu", .threads = 1};
    *be = mx_backend_create(&bo, &err);
    mx_model *m = *be ? mx_model_load(MODEL, *be, &err) : NULL;
    if (!m) fprintf(stderr, "fresh model: %s\n", err.msg);
    return m;
}

// One sampled generation of 2 tokens on eng, with the scratch failing when `fail`. Returns the
// engine's or the sequence's error message ("" on success) in msg.
static void generate_on(mx_engine *eng, bool fail, char *msg, size_t cap) {
    mx_error err = {{0}};
    int32_t prompt[4] = {785, 4226, 374, 25};
    mx_seq_opts so = {.sampling = mx_sampling_defaults(), .max_new = 2, .n_logprobs = -1};
    so.sampling.temp = 0.8f;
    so.sampling.has_seed = true;
    mx_seq *seq = mx_seq_create(g_tok, prompt, 4, &so, 64, &err);
    if (!seq || mx_engine_admit(eng, seq, &err) != 0) {
        snprintf(msg, cap, "set-up failed: %s", err.msg);
        mx_seq_free(seq);
        return;
    }
    aligned_fail_from = fail ? SCRATCH_FAIL_FROM : 0;
    int rc = mx_engine_run(eng, &err);
    aligned_fail_from = 0;
    const char *why = rc != 0 ? err.msg : mx_seq_finish_reason(seq) == MX_FINISH_ERROR ? mx_seq_error(seq) : "";
    snprintf(msg, cap, "%s", rc != 0 && !why[0] ? "failed without a message" : why);
    mx_engine_release(eng, seq);
    mx_seq_free(seq);
}

static void activation_scratch_failure(void) {
    mx_backend *be = NULL;
    mx_model *m = fresh_model(&be);
    mx_error err = {{0}};
    mx_engine_opts eo = {.n_slots = 1, .max_ctx = 64, .prefill_chunk = 16, .threads = 1};
    mx_engine *eng = m ? mx_engine_create(m, &eo, &err) : NULL;
    CHECK(eng != NULL);
    if (eng) {
        char msg[512];
        generate_on(eng, true, msg, sizeof msg);
        printf("activation scratch, generation: %s\n", msg);
        CHECK(strstr(msg, "out of memory") && strstr(msg, "activation scratch"));
        generate_on(eng, false, msg, sizeof msg);
        CHECK(msg[0] == 0);
        if (msg[0]) fprintf(stderr, "the generation after the failure: %s\n", msg);
    }
    mx_engine_free(eng);
    mx_model_free(m);
    mx_backend_free(be);

    m = fresh_model(&be);
    mx_server_opts so = {.port = 0, .parallel = 1, .ctx = 256, .max_queue = 4, .max_body = 65536,
                         .prefill_chunk = 64, .sampling = mx_sampling_defaults(), .model_id = "m"};
    mx_server *srv = m ? mx_server_start(m, g_tok, NULL, &so, &err) : NULL;
    CHECK(srv != NULL);
    if (srv) {
        static char reply[65536];
        aligned_fail_from = SCRATCH_FAIL_FROM;
        const char *sampled = "{\"prompt\":\"Hello\",\"max_tokens\":3,\"temperature\":0.8,\"seed\":1}";
        int st = http_post(mx_server_port(srv), "/v1/completions", sampled, reply, sizeof reply);
        aligned_fail_from = 0;
        const char *body = strstr(reply, "\r\n\r\n");
        printf("activation scratch, server: %d %.300s\n", st, body ? body + 4 : reply);
        CHECK(st == 500 && strstr(reply, "out of memory") && strstr(reply, "activation scratch"));
        st = http_post(mx_server_port(srv), "/v1/completions", sampled, reply, sizeof reply);
        CHECK(st == 200);
        mx_server_stop(srv);
    }
    mx_model_free(m);
    mx_backend_free(be);
}

static void json_free(void *p) { free(p); }

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    json_set_alloc_funcs(__wrap_malloc, json_free);  // JSON building counts too
    sweep("load", op_load, 300, 29, false);
    sweep("deepseek_v3 load + forward", op_deepseek, 200, 13, false);

    mx_error err = {{0}};
    mx_backend_options bo = {.name = "cpu", .threads = 1};
    g_be = mx_backend_create(&bo, &err);
    g_model = g_be ? mx_model_load(MODEL, g_be, &err) : NULL;
    g_tok = mx_tokenizer_load("models/qwen3-demo-44m-4bit/tokenizer.json", &err);
    CHECK(g_model && g_tok);
    if (!g_model || !g_tok) return check_finish();
    activation_scratch_failure();
    sweep("generate", op_generate, 200, 7, false);
    int32_t eos = mx_tokenizer_token_id(g_tok, "<|im_end|>");
    g_vocab = mx_gram_vocab_create(g_tok, mx_tokenizer_vocab_size(g_tok), &eos, 1, &err);
    CHECK(g_vocab != NULL);
    g_schema = json_loads("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"pattern\":\"^[a-z]{2,5}$\"}}}",
                          0, NULL);
    CHECK(g_schema != NULL);
    if (g_vocab && g_schema) sweep("constrained generate", op_grammar_generate, 400, 1, false);
    json_decref(g_schema);

    mx_server_opts so = {.port = 0, .parallel = 1, .ctx = 256, .max_queue = 4, .max_body = 65536,
                         .prefill_chunk = 64, .sampling = mx_sampling_defaults(), .model_id = "m"};
    // ChatML without tools in the prompt: the forced call's grammar is what makes the model write one.
    mx_chat_template *tmpl = mx_chat_template_from_string(
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
        NULL, "<|im_end|>", &err);
    CHECK(tmpl != NULL);
    mx_server *srv = mx_server_start(g_model, g_tok, tmpl, &so, &err);
    CHECK(srv != NULL);
    if (srv) {
        g_port = mx_server_port(srv);
        sweep("server request", op_request, 150, 3, true);
        g_embed_req = "{\"input\":\"Hello\",\"dimensions\":8,\"encoding_format\":\"base64\"}";
        sweep("embeddings request (base64)", op_embed, 400, 1, true);
        g_embed_req = "{\"input\":\"Hello\",\"dimensions\":8}";
        sweep("embeddings request (float)", op_embed, 400, 1, true);
        CHECK_MSG(g_embed_short == 0, "%d answers of 200 without the whole embedding", g_embed_short);
        // No string in these bodies is longer than 13 bytes: jansson 2.14's lexer writes past its
        // buffer when growing the text of a longer one fails (lex_save ignores the failed append, and
        // the string is then decoded up to a closing quote that was never saved), a heap overflow in
        // the request's parsing that the server cannot catch.
        static whole_op streamed = {"/v1/completions",
                                    "{\"prompt\":\"Hello\",\"max_tokens\":4,\"temperature\":0,\"stream\":true}", true,
                                    ""};
#define TOOLS "\"messages\":[{\"role\":\"user\",\"content\":\"Weather?\"}],\"tools\":[{\"type\":\"function\"," \
              "\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\",\"properties\":" \
              "{\"city\":{\"enum\":[\"Paris\",\"Rome\"]}},\"required\":[\"city\"]}}}],\"tool_choice\":\"required\"," \
              "\"max_tokens\":60,\"temperature\":0"
        static whole_op tools = {"/v1/chat/completions", "{" TOOLS "}", false, ""};
        static whole_op tools_streamed = {"/v1/chat/completions", "{" TOOLS ",\"stream\":true}", true, ""};
#undef TOOLS
        // Logprobs: each token's text and its alternatives' are decoded while the answer is built.
        static whole_op logprobs = {"/v1/completions",
                                    "{\"prompt\":\"Hello\",\"max_tokens\":3,\"temperature\":0,\"logprobs\":2}",
                                    false, ""};
        static whole_op chat_logprobs_streamed = {
            "/v1/chat/completions",
            "{\"messages\":[{\"role\":\"user\",\"content\":\"Hello\"}],\"max_tokens\":3,\"temperature\":0,"
            "\"logprobs\":true,\"top_logprobs\":2,\"stream\":true}",
            true, ""};
        whole_op *ops[] = {&streamed, &tools, &tools_streamed, &logprobs, &chat_logprobs_streamed};
        const char *names[] = {"streamed completion", "tool-call request", "streamed tool-call request",
                               "completion with logprobs", "streamed chat with logprobs"};
        for (int i = 0; i < 5; i++) {
            g_whole = ops[i];
            sweep(names[i], op_whole, WHOLE_DENSE, WHOLE_STEP, true);
            printf("%s: the answer without failures: %s\n", names[i], ops[i]->ref);
        }
        CHECK_MSG(strstr(tools.ref, "[get_weather]({\"city\":\"") && strcmp(tools.ref, tools_streamed.ref) == 0,
                  "tool calls: %s and %s", tools.ref, tools_streamed.ref);
        // Three tokens, each with its two alternatives, in both answers without failures.
        for (int i = 3; i < 5; i++) {
            int texts = 0, alternatives = 0;
            for (const char *p = ops[i]->ref; *p; p++) texts += *p == '\x01', alternatives += *p == '\x02';
            CHECK_MSG(texts == 3 && alternatives == 6, "%s: %s", names[i], ops[i]->ref);
        }
        CHECK_MSG(g_whole_bad == 0, "%d answers neither whole nor an error", g_whole_bad);
        device_fault();
        mx_server_stop(srv);
    }
    mx_chat_template_free(tmpl);
    mx_gram_vocab_free(g_vocab);
    mx_tokenizer_free(g_tok);
    mx_model_free(g_model);
    mx_backend_free(g_be);
    return check_finish();
}
