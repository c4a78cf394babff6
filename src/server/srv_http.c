// SPDX-License-Identifier: MIT
// The request side of the HTTP front: collects request bodies within the size limit, checks what
// every request must satisfy (path and header sizes, no encoded NUL in the path, one Content-Length,
// an allowed Origin, the API key, a JSON Content-Type on POST) and dispatches to the routes. Every
// error answer is an OpenAI-style JSON error object (srv_reply.h).
// The daemon itself (threads, connection limits, timeouts, shutdown) is srv_conn.c.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "server/srv_buf.h"
#include "server/srv_internal.h"
#include "server/srv_reply.h"

// Below libmicrohttpd's own limits (its per-connection memory pool, srv_conn.c), so that too long
// a path or too many header bytes get a JSON answer here rather than the library's HTML page.
enum { MAX_URI_BYTES = 8 * 1024, MAX_HEADER_BYTES = 16 * 1024 };

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

// Per-request state (MHD's con_cls), created when the request line arrives (srv_http_on_uri).
typedef struct http_req {
    srv_buf body;
    bool too_big;
    bool uri_too_long;
    bool uri_has_nul;   // "%00" in the raw path
    bool counted;       // counted in n_active
    bool replied;       // an error was queued from the headers alone; the body is ignored
} http_req;

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

// True when the Content-Type's media type is application/json (parameters such as charset allowed).
static bool is_json_type(const char *ct) {
    if (!ct) return false;
    while (*ct == ' ') ct++;
    if (strncasecmp(ct, "application/json", 16) != 0) return false;
    ct += 16;
    while (*ct == ' ') ct++;
    return *ct == 0 || *ct == ';';
}

typedef struct header_scan {
    size_t bytes;
    int n_length;
    bool length_differs;
    const char *first_length;
} header_scan;

static enum MHD_Result scan_header(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
    (void)kind;
    header_scan *h = cls;
    h->bytes += strlen(key) + (value ? strlen(value) : 0) + 4;
    if (strcasecmp(key, "Content-Length") == 0) {
        if (h->n_length++ == 0)
            h->first_length = value;
        else if (!value || !h->first_length || strcmp(value, h->first_length) != 0)
            h->length_differs = true;
    }
    return MHD_YES;
}

// CORS preflight: allowed origins get the methods and headers they may use; others 403.
static enum MHD_Result preflight(mx_server *s, struct MHD_Connection *c) {
    const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
    if (!srv_origin_allowed(s, origin))
        return srv_respond_error(s, c, 403, "origin_not_allowed", "cross-origin requests from '%s' are not allowed (see --cors-origin)",
                                 origin ? origin : "(no Origin header)");
    struct MHD_Response *r = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    srv_add_common_headers(s, c, r);
    MHD_add_response_header(r, "Access-Control-Allow-Methods", "GET, HEAD, POST, OPTIONS");
    MHD_add_response_header(r, "Access-Control-Allow-Headers", "Authorization, Content-Type");
    MHD_add_response_header(r, "Access-Control-Max-Age", "600");
    enum MHD_Result ret = MHD_queue_response(c, 204, r);
    MHD_destroy_response(r);
    return ret;
}

// Checks that need only the request line and headers. Returns MHD_YES to go on reading the body,
// or the result of queueing an error.
static enum MHD_Result check_head(mx_server *s, struct MHD_Connection *c, const char *method, http_req *rq,
                                  bool *answered) {
    *answered = true;
    if (atomic_load(&s->draining))
        return srv_respond_error_close(s, c, 503, "shutting_down", "the server is shutting down");
    if (atomic_load(&s->n_conns) > s->o.max_connections)
        return srv_respond_error_close(s, c, 503, "too_many_connections",
                                   "too many open connections (limit %d, see --max-connections); retry later",
                                   s->o.max_connections);
    if (rq->uri_too_long)
        return srv_respond_error_close(s, c, 414, "uri_too_long", "the request path exceeds %d bytes", MAX_URI_BYTES);
    if (rq->uri_has_nul)
        return srv_respond_error_close(s, c, 400, "invalid_path", "the request path contains an encoded NUL byte (%%00)");
    header_scan h = {0};
    MHD_get_connection_values(c, MHD_HEADER_KIND, scan_header, &h);
    if (h.bytes > MAX_HEADER_BYTES)
        return srv_respond_error_close(s, c, 431, "headers_too_large", "the request headers exceed %d bytes", MAX_HEADER_BYTES);
    if (h.length_differs)
        return srv_respond_error_close(s, c, 400, "invalid_content_length", "the request has conflicting Content-Length headers");
    const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
    if (strcmp(method, "OPTIONS") == 0) return preflight(s, c);
    if (origin && !srv_origin_allowed(s, origin))
        return srv_respond_error_close(s, c, 403, "origin_not_allowed",
                                   "cross-origin requests from '%s' are not allowed (see --cors-origin)", origin);
    if (h.first_length && strtoull(h.first_length, NULL, 10) > s->o.max_body) {
        rq->too_big = true;
        return srv_respond_error_close(s, c, 413, "request_too_large", "the request body exceeds %zu bytes", s->o.max_body);
    }
    *answered = false;
    return MHD_YES;
}

static enum MHD_Result dispatch(mx_server *s, struct MHD_Connection *c, const char *url, const char *method,
                                http_req *rq) {
    int found = -1;
    bool path_known = false;
    // HEAD is GET without the body (libmicrohttpd leaves the body out).
    const char *as = strcmp(method, "HEAD") == 0 ? "GET" : method;
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
        if (strcmp(url, routes[i].path) != 0) continue;
        path_known = true;
        if (strcmp(as, routes[i].method) == 0) found = (int)i;
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
        const char *ct = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Type");
        if (!is_json_type(ct))
            return srv_respond_error(s, c, 415, "unsupported_media_type",
                                     "the body must be sent with 'Content-Type: application/json' (got '%s')",
                                     ct ? ct : "none");
        json_error_t je;
        body = json_loadb(srv_buf_str(&rq->body), rq->body.n, 0, &je);
        if (!body && (json_error_code(&je) == json_error_out_of_memory || !je.text[0]))
            return srv_respond_error(s, c, 500, NULL, "out of memory reading the request body");
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

void *srv_http_on_uri(void *cls, const char *uri, struct MHD_Connection *c) {
    (void)cls, (void)c;
    http_req *rq = calloc(1, sizeof *rq);
    if (!rq) return NULL;
    size_t n = strlen(uri);
    rq->uri_too_long = n > MAX_URI_BYTES;
    for (size_t i = 0; i + 2 < n && !rq->uri_has_nul; i++)
        rq->uri_has_nul = uri[i] == '%' && uri[i + 1] == '0' && uri[i + 2] == '0';
    return rq;
}

// Percent-decoding of the path, except that "%00" stays as written: a NUL would end the C string
// early and make "/health%00x" look like "/health" (such paths are refused in check_head anyway).
size_t srv_http_unescape(void *cls, struct MHD_Connection *c, char *s) {
    (void)cls, (void)c;
    char *w = s;
    for (const char *r = s; *r;) {
        unsigned v;
        if (r[0] == '%' && r[1] && r[2] && sscanf(r + 1, "%2x", &v) == 1 && strchr("0123456789abcdefABCDEF", r[1]) &&
            strchr("0123456789abcdefABCDEF", r[2]) && v != 0) {
            *w++ = (char)v;
            r += 3;
        } else {
            *w++ = *r++;
        }
    }
    *w = 0;
    return (size_t)(w - s);
}

enum MHD_Result srv_http_on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                    const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    (void)version;
    mx_server *s = cls;
    http_req *rq = *con_cls;
    if (!rq) {
        if (!(rq = calloc(1, sizeof *rq))) return MHD_NO;
        *con_cls = rq;
    }
    if (!rq->counted) {
        rq->counted = true;
        atomic_fetch_add(&s->n_active, 1);
        atomic_fetch_add(&s->http_requests, 1);
        bool answered;
        enum MHD_Result r = check_head(s, c, method, rq, &answered);
        rq->replied = answered;
        return r;
    }
    if (rq->replied) {
        *upload_size = 0;
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

void srv_http_on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    (void)c, (void)toe;
    mx_server *s = cls;
    http_req *rq = *con_cls;
    if (!rq) return;
    if (rq->counted) atomic_fetch_sub(&s->n_active, 1);
    srv_buf_free(&rq->body);
    free(rq);
    *con_cls = NULL;
}
