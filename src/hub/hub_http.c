// SPDX-License-Identifier: MIT
// libcurl plumbing for the hub client (see hub_http.h). Headers are parsed as they arrive; a new
// status line (a followed redirect) starts the response over, so the fields describe the last
// response. Stalls are errors: a transfer moving less than 1 byte/s for 30 s is abandoned.
#include "hub/hub_http.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static pthread_once_t global_once = PTHREAD_ONCE_INIT;
static void global_init(void) { curl_global_init(CURL_GLOBAL_DEFAULT); }
void hub_http_global_init(void) { pthread_once(&global_once, global_init); }

void hub_etag_normalize(char *etag) {
    char *s = etag;
    if (s[0] == 'W' && s[1] == '/') s += 2;
    size_t n = strlen(s);
    if (n >= 1 && s[0] == '"') s++, n--;
    if (n >= 1 && s[n - 1] == '"') n--;
    memmove(etag, s, n);
    etag[n] = 0;
}

// Splits "scheme://[user@]host[:port]/..." into a canonical "scheme://host:port" (lowercase).
static void url_origin(const char *url, char *out, size_t cap) {
    const char *sep = strstr(url, "://");
    if (!sep) {
        snprintf(out, cap, "?");
        return;
    }
    char scheme[16];
    size_t slen = (size_t)(sep - url) < sizeof scheme - 1 ? (size_t)(sep - url) : sizeof scheme - 1;
    for (size_t i = 0; i < slen; i++) scheme[i] = (char)tolower((unsigned char)url[i]);
    scheme[slen] = 0;
    const char *auth = sep + 3, *end = auth + strcspn(auth, "/?#");
    const char *at = memchr(auth, '@', (size_t)(end - auth));
    if (at) auth = at + 1;
    const char *colon = NULL;
    if (*auth == '[') {  // IPv6 literal
        const char *close = memchr(auth, ']', (size_t)(end - auth));
        if (close && close + 1 < end && close[1] == ':') colon = close + 1;
    } else {
        colon = memchr(auth, ':', (size_t)(end - auth));
    }
    const char *host_end = colon ? colon : end;
    char host[512];
    size_t hlen = (size_t)(host_end - auth) < sizeof host - 1 ? (size_t)(host_end - auth) : sizeof host - 1;
    for (size_t i = 0; i < hlen; i++) host[i] = (char)tolower((unsigned char)auth[i]);
    host[hlen] = 0;
    char port[16];
    if (colon && colon + 1 < end)
        snprintf(port, sizeof port, "%.*s", (int)(end - colon - 1), colon + 1);
    else
        snprintf(port, sizeof port, "%s", strcmp(scheme, "https") == 0 ? "443" : "80");
    snprintf(out, cap, "%s://%s:%s", scheme, host, port);
}

bool hub_same_origin(const char *a, const char *b) {
    char oa[600], ob[600];
    url_origin(a, oa, sizeof oa);
    url_origin(b, ob, sizeof ob);
    return strcmp(oa, "?") != 0 && strcmp(oa, ob) == 0;
}

static void copy_value(char *dst, size_t cap, const char *v, size_t n) {
    if (n >= cap) n = cap - 1;
    memcpy(dst, v, n);
    dst[n] = 0;
}

static int64_t parse_i64(const char *v, size_t n) {
    char tmp[32];
    copy_value(tmp, sizeof tmp, v, n);
    char *end;
    errno = 0;
    long long x = strtoll(tmp, &end, 10);
    return errno || end == tmp || x < 0 ? -1 : (int64_t)x;
}

static void reset_response(hub_response *resp) {
    int64_t body = resp->body_bytes;
    memset(resp, 0, sizeof *resp);
    resp->linked_size = resp->content_length = resp->range_start = -1;
    resp->body_bytes = body;
}

static size_t on_header(char *line, size_t size, size_t nitems, void *user) {
    hub_request *r = user;
    size_t n = size * nitems, len = n;
    while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) len--;
    if (len >= 5 && strncmp(line, "HTTP/", 5) == 0) {
        reset_response(&r->resp);
        const char *sp = memchr(line, ' ', len);
        if (sp) r->resp.status = strtol(sp + 1, NULL, 10);
        r->error_len = 0;
        return n;
    }
    const char *colon = memchr(line, ':', len);
    if (!colon) return n;
    size_t name_len = (size_t)(colon - line);
    const char *v = colon + 1;
    while (v < line + len && (*v == ' ' || *v == '\t')) v++;
    size_t vlen = (size_t)(line + len - v);
    hub_response *resp = &r->resp;
#define IS(name) (name_len == sizeof(name) - 1 && strncasecmp(line, name, name_len) == 0)
    if (IS("X-Repo-Commit")) {
        copy_value(resp->repo_commit, sizeof resp->repo_commit, v, vlen);
    } else if (IS("ETag")) {
        copy_value(resp->etag, sizeof resp->etag, v, vlen);
        hub_etag_normalize(resp->etag);
    } else if (IS("X-Linked-Etag")) {
        copy_value(resp->linked_etag, sizeof resp->linked_etag, v, vlen);
        hub_etag_normalize(resp->linked_etag);
    } else if (IS("Location")) {
        copy_value(resp->location, sizeof resp->location, v, vlen);
    } else if (IS("X-Error-Code")) {
        copy_value(resp->error_code, sizeof resp->error_code, v, vlen);
    } else if (IS("X-Error-Message")) {
        copy_value(resp->error_message, sizeof resp->error_message, v, vlen);
    } else if (IS("X-Linked-Size")) {
        resp->linked_size = parse_i64(v, vlen);
    } else if (IS("Content-Length")) {
        resp->content_length = parse_i64(v, vlen);
    } else if (IS("Content-Range")) {  // "bytes START-END/TOTAL"
        const char *p = v;
        while (p < v + vlen && !isdigit((unsigned char)*p)) p++;
        resp->range_start = parse_i64(p, strspn(p, "0123456789"));
    }
#undef IS
    return n;
}

static size_t on_body(char *data, size_t size, size_t nmemb, void *user) {
    hub_request *r = user;
    size_t n = size * nmemb;
    if (r->resp.status >= 200 && r->resp.status < 300) {
        if (!r->sink) return n;
        size_t took = r->sink(data, n, r->sink_user);
        if (took == n) r->resp.body_bytes += (int64_t)n;
        return took;
    }
    size_t room = sizeof r->error_body - 1 - r->error_len, take = n < room ? n : room;
    memcpy(r->error_body + r->error_len, data, take);
    r->error_len += take;
    r->error_body[r->error_len] = 0;
    return n;
}

int hub_request_setup(hub_request *r, const mx_hub_env *env, const char *method, const char *url, int64_t range_from,
                      int64_t range_to, hub_sink_fn sink, void *sink_user, mx_error *err) {
    hub_http_global_init();
    if (r->curl) {
        curl_easy_reset(r->curl);
    } else if (!(r->curl = curl_easy_init())) {
        return mx_fail(err, "libcurl could not create a transfer (out of memory?)");
    }
    curl_slist_free_all(r->headers);
    r->headers = NULL;
    memset(&r->resp, 0, sizeof r->resp);
    reset_response(&r->resp);
    r->resp.body_bytes = 0;
    r->sink = sink;
    r->sink_user = sink_user;
    r->error_len = 0;
    r->error_body[0] = 0;
    r->errbuf[0] = 0;
    snprintf(r->url, sizeof r->url, "%s", url);

    struct curl_slist *h = NULL;
    char line[1200];
    if (env->token[0] && hub_same_origin(url, env->endpoint)) {
        snprintf(line, sizeof line, "Authorization: Bearer %s", env->token);
        h = curl_slist_append(h, line);
    }
    if (range_from >= 0) {
        if (range_to >= 0)
            snprintf(line, sizeof line, "Range: bytes=%" PRId64 "-%" PRId64, range_from, range_to);
        else
            snprintf(line, sizeof line, "Range: bytes=%" PRId64 "-", range_from);
        h = curl_slist_append(h, line);
    }
    h = curl_slist_append(h, "Accept-Encoding: identity");
    if (!h) return mx_fail(err, "out of memory building the request headers for %s", url);
    r->headers = h;

    CURL *c = r->curl;
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_USERAGENT, "mlxcel/" MLXCEL_VERSION);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 15L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, 30L);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, r);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, r->errbuf);
    curl_easy_setopt(c, CURLOPT_PRIVATE, r);
    if (strcmp(method, "HEAD") == 0) {
        curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
    } else {
        // A redirect to another host gets no Authorization header: curl drops custom
        // Authorization headers when the host changes (CURLOPT_UNRESTRICTED_AUTH stays off).
        curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
        curl_easy_setopt(c, CURLOPT_MAXREDIRS, 5L);
        curl_easy_setopt(c, CURLOPT_UNRESTRICTED_AUTH, 0L);
    }
    return 0;
}

CURLcode hub_request_perform(hub_request *r) { return curl_easy_perform(r->curl); }

void hub_request_free(hub_request *r) {
    if (r->curl) curl_easy_cleanup(r->curl);
    curl_slist_free_all(r->headers);
    memset(r, 0, sizeof *r);
}

hub_net_class hub_net_classify(CURLcode rc) {
    switch (rc) {
    case CURLE_OK: return HUB_NET_OK;
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_COULDNT_CONNECT: return HUB_NET_UNREACHABLE;
    case CURLE_PARTIAL_FILE:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_SSL_CONNECT_ERROR: return HUB_NET_DROPPED;
    case CURLE_WRITE_ERROR: return HUB_NET_SINK_FAILED;
    default: return HUB_NET_OTHER;
    }
}

int hub_transport_fail(const hub_request *r, CURLcode rc, const mx_hub_env *env, mx_error *err) {
    const char *detail = r->errbuf[0] ? r->errbuf : curl_easy_strerror(rc);
    switch (hub_net_classify(rc)) {
    case HUB_NET_UNREACHABLE:
        return mx_fail(err,
                       "cannot reach %s (%s): no network connection, or a wrong HF_ENDPOINT (now %s); "
                       "set HF_HUB_OFFLINE=1 to use only the local cache",
                       r->url, detail, env->endpoint);
    case HUB_NET_DROPPED:
        return mx_fail(err, "the connection to %s broke during the transfer (%s); run again to resume", r->url,
                       detail);
    default: return mx_fail(err, "request to %s failed: %s", r->url, detail);
    }
}
