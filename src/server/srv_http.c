// SPDX-License-Identifier: MIT
// The HTTP front of the server: starts libmicrohttpd (one thread per connection, so handlers may
// block while a job runs), collects request bodies within the size limit, checks the API key and
// dispatches to the routes. Every error answer is an OpenAI-style JSON error object.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "server/srv_buf.h"
#include "server/srv_internal.h"

typedef enum route_id {
    ROUTE_CHAT,
    ROUTE_COMPLETIONS,
    ROUTE_MODELS,
    ROUTE_HEALTH,
    ROUTE_METRICS,
    ROUTE_TOKENIZE,
    ROUTE_DETOKENIZE,
    ROUTE_APPLY_TEMPLATE,
    ROUTE_EMBEDDINGS,
} route_id;

static const struct {
    const char *path;
    const char *method;
    route_id id;
} routes[] = {
    {"/v1/chat/completions", "POST", ROUTE_CHAT},
    {"/chat/completions", "POST", ROUTE_CHAT},
    {"/v1/completions", "POST", ROUTE_COMPLETIONS},
    {"/completions", "POST", ROUTE_COMPLETIONS},
    {"/v1/models", "GET", ROUTE_MODELS},
    {"/models", "GET", ROUTE_MODELS},
    {"/health", "GET", ROUTE_HEALTH},
    {"/metrics", "GET", ROUTE_METRICS},
    {"/apply-template", "POST", ROUTE_APPLY_TEMPLATE},
    {"/v1/embeddings", "POST", ROUTE_EMBEDDINGS},
    {"/embeddings", "POST", ROUTE_EMBEDDINGS},
    {"/tokenize", "POST", ROUTE_TOKENIZE},
    {"/detokenize", "POST", ROUTE_DETOKENIZE},
};

// Per-connection request state (MHD's con_cls).
typedef struct http_req {
    srv_buf body;
    bool too_big;
} http_req;

static const char *error_type(unsigned status) {
    switch (status) {
    case 400: return "invalid_request_error";
    case 401: return "authentication_error";
    case 404: return "not_found_error";
    case 405: return "invalid_request_error";
    case 413: return "invalid_request_error";
    case 503: return "server_busy";
    default: return status >= 500 ? "server_error" : "invalid_request_error";
    }
}

json_t *srv_error_json(unsigned status, const char *code, const char *message) {
    return json_pack("{s:{s:s, s:s, s:o}}", "error", "message", message, "type", error_type(status), "code",
                     code ? json_string(code) : json_null());
}

enum MHD_Result srv_respond_json(mx_server *s, struct MHD_Connection *c, unsigned status, json_t *body) {
    char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    if (!text) return MHD_NO;
    size_t len = strlen(text);
    struct MHD_Response *r = MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(text);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", "application/json");
    if (status == 503) MHD_add_response_header(r, "Retry-After", "1");
    if (status >= 400) atomic_fetch_add(&s->http_errors, 1);
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ret;
}

enum MHD_Result srv_respond_error(mx_server *s, struct MHD_Connection *c, unsigned status, const char *code,
                                  const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return srv_respond_json(s, c, status, srv_error_json(status, code, msg));
}

bool srv_client_gone(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return true;
    struct pollfd p = {.fd = ci->connect_fd, .events = POLLRDHUP};
    if (poll(&p, 1, 0) <= 0) return false;
    return (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

static bool auth_ok(mx_server *s, struct MHD_Connection *c) {
    if (!s->o.api_key || !s->o.api_key[0]) return true;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (!h || strncasecmp(h, "Bearer ", 7) != 0) return false;
    h += 7;
    while (*h == ' ') h++;
    // Length-independent comparison of the key.
    size_t a = strlen(h), b = strlen(s->o.api_key);
    unsigned diff = (unsigned)(a != b);
    for (size_t i = 0; i < b; i++) diff |= (unsigned char)(i < a ? h[i] : 0) ^ (unsigned char)s->o.api_key[i];
    return diff == 0;
}

static enum MHD_Result dispatch(mx_server *s, struct MHD_Connection *c, const char *url, const char *method,
                                http_req *rq) {
    int found = -1;
    bool path_known = false;
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
        if (strcmp(url, routes[i].path) != 0) continue;
        path_known = true;
        if (strcmp(method, routes[i].method) == 0) found = (int)i;
    }
    if (!path_known) return srv_respond_error(s, c, 404, "not_found", "no route for %s %s", method, url);
    if (found < 0) return srv_respond_error(s, c, 405, "method_not_allowed", "method %s is not allowed on %s", method, url);
    route_id id = routes[found].id;
    if (id != ROUTE_HEALTH && !auth_ok(s, c))
        return srv_respond_error(s, c, 401, "invalid_api_key", "missing or invalid API key (Authorization: Bearer ...)");
    if (rq->too_big)
        return srv_respond_error(s, c, 413, "request_too_large", "the request body exceeds %zu bytes", s->o.max_body);
    json_t *body = NULL;
    if (strcmp(method, "POST") == 0) {
        json_error_t je;
        body = json_loadb(srv_buf_str(&rq->body), rq->body.n, 0, &je);
        if (!body)
            return srv_respond_error(s, c, 400, "invalid_json", "the body is not valid JSON: %s (line %d, column %d)",
                                     je.text, je.line, je.column);
        if (!json_is_object(body)) {
            json_decref(body);
            return srv_respond_error(s, c, 400, "invalid_request", "the body must be a JSON object");
        }
    }
    enum MHD_Result ret;
    switch (id) {
    case ROUTE_CHAT: ret = srv_route_generate(s, c, SRV_KIND_CHAT, body); break;
    case ROUTE_COMPLETIONS: ret = srv_route_generate(s, c, SRV_KIND_COMPLETION, body); break;
    case ROUTE_MODELS: ret = srv_route_models(s, c); break;
    case ROUTE_HEALTH: ret = srv_route_health(s, c); break;
    case ROUTE_METRICS: ret = srv_route_metrics(s, c); break;
    case ROUTE_TOKENIZE: ret = srv_route_tokenize(s, c, body); break;
    case ROUTE_APPLY_TEMPLATE: ret = srv_route_apply_template(s, c, body); break;
    case ROUTE_EMBEDDINGS: ret = srv_route_embeddings(s, c, body); break;
    default: ret = srv_route_detokenize(s, c, body); break;
    }
    json_decref(body);
    return ret;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    (void)version;
    mx_server *s = cls;
    http_req *rq = *con_cls;
    if (!rq) {
        if (!(rq = calloc(1, sizeof *rq))) return MHD_NO;
        *con_cls = rq;
        atomic_fetch_add(&s->http_requests, 1);
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
        if (cl && strtoull(cl, NULL, 10) > s->o.max_body) {
            rq->too_big = true;
            return srv_respond_error(s, c, 413, "request_too_large", "the request body exceeds %zu bytes",
                                     s->o.max_body);
        }
        return MHD_YES;
    }
    if (*upload_size) {
        if (!rq->too_big) {
            if (rq->body.n + *upload_size > s->o.max_body) {
                rq->too_big = true;
                srv_buf_free(&rq->body);
            } else {
                srv_buf_append(&rq->body, upload, *upload_size);
            }
        }
        *upload_size = 0;
        return MHD_YES;
    }
    if (rq->body.oom) return srv_respond_error(s, c, 500, NULL, "out of memory");
    return dispatch(s, c, url, method, rq);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    (void)cls, (void)c, (void)toe;
    http_req *rq = *con_cls;
    if (!rq) return;
    srv_buf_free(&rq->body);
    free(rq);
    *con_cls = NULL;
}

static void on_log(void *cls, const char *fmt, va_list ap) {
    (void)cls;
    fputs("mlxcel-server: ", stderr);
    vfprintf(stderr, fmt, ap);
}

mx_server *mx_server_start(mx_model *m, const mx_tokenizer *tok, const mx_chat_template *tmpl,
                           const mx_server_opts *o, mx_error *err) {
    mx_server *s = calloc(1, sizeof *s);
    if (!s) {
        mx_fail(err, "out of memory");
        return NULL;
    }
    s->model = m;
    s->tok = tok;
    s->tmpl = tmpl;
    s->o = *o;
    s->started = (long)time(NULL);
    snprintf(s->model_id, sizeof s->model_id, "%s", o->model_id ? o->model_id : "mlxcel");
    atomic_init(&s->stopping, false);
    atomic_init(&s->http_requests, 0);
    atomic_init(&s->http_errors, 0);
    atomic_init(&s->ids, 0);

    // Stop tokens: the model's eos, plus the template's eos token and <|im_end|> when present.
    int32_t stops[2];
    int n_stops = 0;
    const char *eos = tmpl ? mx_chat_template_eos(tmpl) : NULL;
    int32_t id;
    if (eos && (id = mx_tokenizer_token_id(tok, eos)) >= 0) stops[n_stops++] = id;
    if ((id = mx_tokenizer_token_id(tok, "<|im_end|>")) >= 0) stops[n_stops++] = id;
    pthread_mutex_init(&s->model_lock, NULL);
    srv_sched_opts so = {o->parallel, o->ctx, o->max_queue, o->prefill_chunk, stops, n_stops, &s->model_lock};
    // Constrained decoding ends sequences with the same tokens: those above and the model's eos ids.
    int vocab = mx_model_config(m)->vocab_size, n_all = 0;
    int32_t all_stops[66];
    for (int i = 0; i < n_stops; i++) all_stops[n_all++] = stops[i];
    for (int32_t t = 0; t < vocab && n_all < 66; t++)
        if (mx_model_is_eos(m, t) && t != stops[0] && (n_stops < 2 || t != stops[1])) all_stops[n_all++] = t;
    if (!(s->embedder = srv_embedder_create(m, o->ctx, o->pooling, &s->model_lock, err))) {
        free(s);
        return NULL;
    }
    if (!(s->grammars = srv_grammars_create(tok, vocab, all_stops, n_all))) {
        mx_fail(err, "out of memory");
        srv_embedder_free(s->embedder);
        free(s);
        return NULL;
    }
    if (!(s->sched = srv_sched_create(m, tok, &so, err))) {
        srv_grammars_free(s->grammars);
        srv_embedder_free(s->embedder);
        free(s);
        return NULL;
    }

    struct sockaddr_storage addr = {0};
    socklen_t alen;
    const char *host = o->host && strcmp(o->host, "localhost") != 0 ? o->host : "127.0.0.1";
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_ERROR_LOG;
    struct sockaddr_in *a4 = (struct sockaddr_in *)&addr;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&addr;
    if (inet_pton(AF_INET, host, &a4->sin_addr) == 1) {
        a4->sin_family = AF_INET;
        a4->sin_port = htons((uint16_t)o->port);
        alen = sizeof *a4;
    } else if (inet_pton(AF_INET6, host, &a6->sin6_addr) == 1) {
        a6->sin6_family = AF_INET6;
        a6->sin6_port = htons((uint16_t)o->port);
        alen = sizeof *a6;
        flags |= MHD_USE_IPv6;
    } else {
        mx_fail(err, "--host '%s' is not an IPv4 or IPv6 address", host);
        srv_sched_free(s->sched);
        srv_grammars_free(s->grammars);
        srv_embedder_free(s->embedder);
        free(s);
        return NULL;
    }
    (void)alen;
    s->daemon = MHD_start_daemon(flags, (uint16_t)o->port, NULL, NULL, on_request, s, MHD_OPTION_EXTERNAL_LOGGER, on_log,
                                 s, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr, MHD_OPTION_NOTIFY_COMPLETED,
                                 on_completed, s, MHD_OPTION_END);
    if (!s->daemon) {
        mx_fail(err, "cannot listen on %s port %d (in use, or not allowed)", host, o->port);
        srv_sched_free(s->sched);
        srv_grammars_free(s->grammars);
        srv_embedder_free(s->embedder);
        free(s);
        return NULL;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : o->port;
    return s;
}

int mx_server_port(const mx_server *s) { return s->port; }

void mx_server_stop(mx_server *s) {
    if (!s) return;
    // Connection threads waiting on a job see `stopping` within a wait period, cancel and return, so
    // the daemon joins them; the scheduler goes last since connections still call into it.
    atomic_store(&s->stopping, true);
    MHD_stop_daemon(s->daemon);
    srv_sched_free(s->sched);
    srv_grammars_free(s->grammars);
    srv_embedder_free(s->embedder);
    pthread_mutex_destroy(&s->model_lock);
    free(s);
}
