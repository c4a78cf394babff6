// SPDX-License-Identifier: MIT
// Reply helpers shared by every route (see srv_reply.h): JSON bodies, OpenAI-style error objects
// whose strings are valid UTF-8 (srv_text.h), the headers every reply carries, and whether a
// client is gone.
#include "server/srv_reply.h"

#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "server/srv_buf.h"
#include "server/srv_internal.h"
#include "server/srv_json_alloc.h"
#include "server/srv_text.h"

static const char *error_type(unsigned status) {
    switch (status) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 503: return "server_busy";
    default: return status >= 500 ? "server_error" : "invalid_request_error";
    }
}

json_t *srv_error_json(unsigned status, const char *code, const char *message) {
    char safe[2048];
    srv_text_copy(safe, sizeof safe, message, strlen(message));
    return json_pack("{s:{s:s, s:s, s:o}}", "error", "message", safe, "type", error_type(status), "code",
                     code ? json_string(code) : json_null());
}

bool srv_origin_allowed(const mx_server *s, const char *origin) {
    const char *list = s->o.cors_origins;
    if (!list || !origin) return false;
    size_t n = strlen(origin);
    for (const char *p = list; *p;) {
        while (*p == ' ' || *p == ',') p++;
        const char *e = p;
        while (*e && *e != ',') e++;
        const char *t = e;
        while (t > p && t[-1] == ' ') t--;
        if ((t - p == 1 && *p == '*') || ((size_t)(t - p) == n && strncasecmp(p, origin, n) == 0)) return true;
        p = e;
    }
    return false;
}

void srv_add_common_headers(mx_server *s, struct MHD_Connection *c, struct MHD_Response *r) {
    const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
    if (origin && srv_origin_allowed(s, origin)) {
        MHD_add_response_header(r, "Access-Control-Allow-Origin", origin);
        MHD_add_response_header(r, "Vary", "Origin");
    }
    if (atomic_load(&s->draining)) MHD_add_response_header(r, "Connection", "close");
}

static enum MHD_Result queue_text(mx_server *s, struct MHD_Connection *c, unsigned status, char *text, bool close) {
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(text);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", "application/json");
    if (status == 503) MHD_add_response_header(r, "Retry-After", "1");
    if (close) MHD_add_response_header(r, "Connection", "close");
    srv_add_common_headers(s, c, r);
    if (status >= 400) atomic_fetch_add(&s->http_errors, 1);
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ret;
}

static int dump_to_buf(const char *p, size_t n, void *user) {
    srv_buf_append(user, p, n);
    return ((srv_buf *)user)->oom ? -1 : 0;
}

char *srv_json_dumps(const json_t *j, size_t flags) {
    srv_buf b = {0};
    unsigned long failed = srv_json_alloc_failures();
    if (!j || json_dump_callback(j, dump_to_buf, &b, flags) != 0 || b.oom || !b.p || srv_json_alloc_failures() != failed) {
        srv_buf_free(&b);
        return NULL;
    }
    return b.p;
}

enum MHD_Result srv_respond_json(mx_server *s, struct MHD_Connection *c, unsigned status, json_t *body) {
    char *text = srv_json_dumps(body, JSON_COMPACT);
    json_decref(body);
    if (!text) {
        // Never drop the reply: the body could not be built (out of memory, or a string the encoder
        // refused). This fixed text needs no allocation by jansson.
        static const char fallback[] =
            "{\"error\":{\"message\":\"the server could not encode its reply\",\"type\":\"server_error\",\"code\":null}}";
        if (!(text = strdup(fallback))) return MHD_NO;
        status = 500;
    }
    return queue_text(s, c, status, text, false);
}

static enum MHD_Result respond_error_v(mx_server *s, struct MHD_Connection *c, unsigned status, bool close,
                                       const char *code, const char *fmt, va_list ap) {
    char msg[1024];
    vsnprintf(msg, sizeof msg, fmt, ap);
    json_t *body = srv_error_json(status, code, msg);
    char *text = srv_json_dumps(body, JSON_COMPACT);
    json_decref(body);
    if (!text) return srv_respond_json(s, c, status, NULL);
    return queue_text(s, c, status, text, close);
}

enum MHD_Result srv_respond_error(mx_server *s, struct MHD_Connection *c, unsigned status, const char *code,
                                  const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    enum MHD_Result r = respond_error_v(s, c, status, false, code, fmt, ap);
    va_end(ap);
    return r;
}

enum MHD_Result srv_respond_error_close(mx_server *s, struct MHD_Connection *c, unsigned status, const char *code,
                                           const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    enum MHD_Result r = respond_error_v(s, c, status, true, code, fmt, ap);
    va_end(ap);
    return r;
}

bool srv_client_gone(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return true;
    // Not POLLRDHUP: end of the client's data is a legal half-close, and it still reads the reply.
    struct pollfd p = {.fd = ci->connect_fd, .events = 0};
    if (poll(&p, 1, 0) <= 0) return false;
    return (p.revents & (POLLHUP | POLLERR | POLLNVAL)) != 0;
}
