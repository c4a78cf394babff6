// SPDX-License-Identifier: MIT
// The connection side of the HTTP front: starts libmicrohttpd, counts connections, and stops.
//   - One thread per connection (handlers block while a job runs), each waiting with poll(), not
//     select(), so descriptors above FD_SETSIZE (1024) work.
//   - --max-connections: connections beyond it get a 503 JSON answer (and close) to their first
//     request and only a short time to send it; a small reserve above the limit is what the
//     library accepts at all, so a flood of idle sockets cannot use up the process's descriptors.
//     The process's descriptor limit is raised to fit, or start-up fails saying so.
//   - --conn-timeout: a connection that sends nothing for that long (idle keep-alive, or a request
//     sent too slowly) is closed. Running requests are not affected (their handler is busy).
//   - Per-connection memory: the library's pool (request line + headers) is bounded.
//   - Shutdown in two steps: drain (stop accepting, 503 to new requests on open connections, wait
//     for running ones) and stop (running requests end with an error reply, threads are joined).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "server/srv_internal.h"
#include "server/srv_json_alloc.h"
#include "server/srv_text.h"

enum {
    DEFAULT_MAX_CONNECTIONS = 2048,
    REFUSAL_RESERVE = 64,        // connections above the limit that still get a 503 answer
    OWN_DESCRIPTORS = 64,        // model files, logs, the listening socket, ...
    OVER_LIMIT_TIMEOUT_S = 2,    // time a connection above the limit has to send its request
    POOL_BYTES = 64 * 1024,      // per-connection memory for the request line and headers
};

static void on_log(void *cls, const char *fmt, va_list ap) {
    (void)cls;
    fputs("mlxcel-server: ", stderr);
    vfprintf(stderr, fmt, ap);
}

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode code) {
    (void)socket_context;
    mx_server *s = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        if (atomic_fetch_add(&s->n_conns, 1) + 1 > s->o.max_connections)
            MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned)OVER_LIMIT_TIMEOUT_S);
    } else {
        atomic_fetch_sub(&s->n_conns, 1);
    }
}

// Makes room for the connection limit in RLIMIT_NOFILE. An explicit limit that does not fit is an
// error; the default shrinks to fit (and says so).
static int fit_descriptor_limit(int *max_conns, bool explicit_limit, mx_error *err) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return 0;
    rlim_t need = (rlim_t)*max_conns + REFUSAL_RESERVE + OWN_DESCRIPTORS;
    if (rl.rlim_cur < need) {
        struct rlimit want = rl;
        want.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= need ? need : rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &want) == 0) rl = want;
    }
    if (rl.rlim_cur >= need) return 0;
    int fits = (int)rl.rlim_cur - REFUSAL_RESERVE - OWN_DESCRIPTORS;
    if (explicit_limit || fits < 1)
        return mx_fail(err, "--max-connections %d needs %llu file descriptors, but this process may open only %llu "
                            "(ulimit -n); lower --max-connections or raise the limit",
                       *max_conns, (unsigned long long)need, (unsigned long long)rl.rlim_cur);
    fprintf(stderr, "mlxcel-server: at most %d connections (the file descriptor limit is %llu)\n", fits,
            (unsigned long long)rl.rlim_cur);
    *max_conns = fits;
    return 0;
}

// Frees what start created besides the daemon (each part may be missing), then the server. The
// scheduler goes first: it uses the model lock.
static void free_parts(mx_server *s) {
    srv_sched_free(s->sched);
    srv_grammars_free(s->grammars);
    srv_embedder_free(s->embedder);
    pthread_mutex_destroy(&s->model_lock);
    free(s);
}

mx_server *mx_server_start(mx_model *m, const mx_tokenizer *tok, const mx_chat_template *tmpl,
                           const mx_server_opts *o, mx_error *err) {
    srv_json_alloc_install();  // JSON built or read with an allocation failing is an error, never a reply with less
    mx_server *s = calloc(1, sizeof *s);
    if (!s) {
        mx_fail(err, "out of memory");
        return NULL;
    }
    s->model = m;
    s->tok = tok;
    s->tmpl = tmpl;
    s->calls = srv_calls_detect(tok, tmpl, mx_model_config(m)->model_type);
    s->o = *o;
    s->started = (long)mx_wall_now();
    if (s->o.max_connections <= 0) s->o.max_connections = DEFAULT_MAX_CONNECTIONS;
    if (s->o.conn_timeout <= 0) s->o.conn_timeout = 30;
    if (fit_descriptor_limit(&s->o.max_connections, o->max_connections > 0, err)) {
        free(s);
        return NULL;
    }
    const char *model_id = o->model_id ? o->model_id : "mlxcel";
    srv_text_copy(s->model_id, sizeof s->model_id, model_id, strlen(model_id));
    atomic_init(&s->stopping, false);
    atomic_init(&s->draining, false);
    atomic_init(&s->n_conns, 0);
    atomic_init(&s->n_active, 0);
    atomic_init(&s->http_requests, 0);
    atomic_init(&s->http_errors, 0);
    atomic_init(&s->ids, 0);

    // Stop tokens: the model's eos, plus the template's eos token and <|im_end|> when present, and for
    // harmony <|return|> and <|call|> (a turn ends with either, whatever generation_config lists).
    int32_t stops[4];
    int n_stops = 0;
    const char *eos = tmpl ? mx_chat_template_eos(tmpl) : NULL;
    const char *more[3] = {"<|im_end|>", s->calls == SRV_CALLS_HARMONY ? "<|return|>" : NULL,
                           s->calls == SRV_CALLS_HARMONY ? "<|call|>" : NULL};
    int32_t id;
    if (eos && (id = mx_tokenizer_token_id(tok, eos)) >= 0) stops[n_stops++] = id;
    for (int i = 0; i < 3; i++)
        if (more[i] && (id = mx_tokenizer_token_id(tok, more[i])) >= 0 && (n_stops == 0 || stops[0] != id))
            stops[n_stops++] = id;
    pthread_mutex_init(&s->model_lock, NULL);
    srv_sched_opts so = {o->parallel, o->ctx, o->max_queue, o->prefill_chunk, o->batch_tokens, stops, n_stops,
                         &s->model_lock, !o->no_prefix_cache, o->kv_size};
    // Constrained decoding ends sequences with the same tokens: those above and the model's eos ids.
    int vocab = mx_model_config(m)->vocab_size, n_all = 0;
    int32_t all_stops[68];
    for (int i = 0; i < n_stops; i++) all_stops[n_all++] = stops[i];
    for (int32_t t = 0; t < vocab && n_all < 68; t++) {
        bool listed = false;
        for (int i = 0; i < n_stops; i++) listed |= t == stops[i];
        if (mx_model_is_eos(m, t) && !listed) all_stops[n_all++] = t;
    }
    if (!(s->embedder = srv_embedder_create(m, o->ctx, o->pooling, &s->model_lock, err))) {
        free_parts(s);
        return NULL;
    }
    if (!(s->grammars = srv_grammars_create(tok, vocab, all_stops, n_all))) {
        mx_fail(err, "out of memory");
        free_parts(s);
        return NULL;
    }
    if (!(s->sched = srv_sched_create(m, tok, &so, err))) {
        free_parts(s);
        return NULL;
    }

    struct sockaddr_storage addr = {0};
    const char *host = o->host && strcmp(o->host, "localhost") != 0 ? o->host : "127.0.0.1";
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL | MHD_USE_ITC |
                     MHD_USE_ERROR_LOG;
    struct sockaddr_in *a4 = (struct sockaddr_in *)&addr;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&addr;
    if (inet_pton(AF_INET, host, &a4->sin_addr) == 1) {
        a4->sin_family = AF_INET;
        a4->sin_port = htons((uint16_t)o->port);
    } else if (inet_pton(AF_INET6, host, &a6->sin6_addr) == 1) {
        a6->sin6_family = AF_INET6;
        a6->sin6_port = htons((uint16_t)o->port);
        flags |= MHD_USE_IPv6;
    } else {
        mx_fail(err, "--host '%s' is not an IPv4 or IPv6 address", host);
        free_parts(s);
        return NULL;
    }
    unsigned timeout = s->o.conn_timeout < 1 ? 1 : (unsigned)(s->o.conn_timeout + 0.5);
    s->daemon = MHD_start_daemon(
        flags, (uint16_t)o->port, NULL, NULL, srv_http_on_request, s, MHD_OPTION_EXTERNAL_LOGGER, on_log, s,
        MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr, MHD_OPTION_NOTIFY_COMPLETED, srv_http_on_completed, s,
        MHD_OPTION_NOTIFY_CONNECTION, on_connection, s, MHD_OPTION_URI_LOG_CALLBACK, srv_http_on_uri, s,
        MHD_OPTION_UNESCAPE_CALLBACK, srv_http_unescape, s, MHD_OPTION_CONNECTION_LIMIT,
        (unsigned)(s->o.max_connections + REFUSAL_RESERVE), MHD_OPTION_CONNECTION_TIMEOUT, timeout,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)POOL_BYTES, MHD_OPTION_LISTEN_BACKLOG_SIZE, 1024u, MHD_OPTION_END);
    if (!s->daemon) {
        mx_fail(err, "cannot listen on %s port %d (in use, or not allowed)", host, o->port);
        free_parts(s);
        return NULL;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : o->port;
    return s;
}

int mx_server_port(const mx_server *s) { return s->port; }

int mx_server_kv_size(const mx_server *s) {
    srv_stats st;
    srv_sched_stats(s->sched, &st);
    return st.engine.kv_blocks * st.engine.kv_block_size;
}

// Waits until no request is running or the deadline passes; returns the number still running.
static int wait_idle(mx_server *s, double deadline) {
    int n;
    while ((n = atomic_load(&s->n_active)) > 0 && mx_now() < deadline) {
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return n;
}

int mx_server_drain(mx_server *s, double timeout_s) {
    if (!s) return 0;
    atomic_store(&s->draining, true);
    MHD_socket ls = MHD_quiesce_daemon(s->daemon);
    if (ls != MHD_INVALID_SOCKET) close(ls);
    return wait_idle(s, mx_now() + timeout_s);
}

void mx_server_stop(mx_server *s) {
    if (!s) return;
    // Handlers waiting on a job see `stopping` within a wait period, cancel it and queue an error
    // reply (a final error event for streams); they get a moment to send it before the daemon
    // closes the connections and joins their threads. The scheduler goes last since connections
    // still call into it.
    atomic_store(&s->draining, true);
    atomic_store(&s->stopping, true);
    srv_sched_wake(s->sched);
    wait_idle(s, mx_now() + 3.0);
    MHD_stop_daemon(s->daemon);
    free_parts(s);
}
