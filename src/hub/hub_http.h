// SPDX-License-Identifier: MIT
// One HTTP request to the Hub or to the host it redirects to, through libcurl. The response
// headers the Hub protocol relies on (X-Repo-Commit, ETag, X-Linked-Etag, X-Linked-Size, Location,
// Content-Range, X-Error-Code, X-Error-Message) are parsed into hub_response; a 2xx body goes to
// the caller's sink, any other body is kept (up to 4 KiB) for the error message.
//
// The access token is sent only to the endpoint's own origin (scheme, host and port): a redirect
// to a storage host (the Hub's CDN) never receives it.
#ifndef MX_HUB_HTTP_H
#define MX_HUB_HTTP_H

#include <curl/curl.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/error.h"
#include "hub/hub_env.h"

typedef struct hub_response {
    long status;              // HTTP status of the last response (0: none)
    char repo_commit[128];    // X-Repo-Commit
    char etag[256];           // ETag, without W/ and quotes
    char linked_etag[256];    // X-Linked-Etag, without W/ and quotes
    char location[4096];      // Location
    char error_code[64];      // X-Error-Code (RepoNotFound, GatedRepo, RevisionNotFound, EntryNotFound)
    char error_message[512];  // X-Error-Message
    int64_t linked_size;      // X-Linked-Size; -1 when absent
    int64_t content_length;   // Content-Length; -1 when absent
    int64_t range_start;      // first byte of Content-Range; -1 when absent
    int64_t body_bytes;       // bytes of a 2xx body handed to the sink
} hub_response;

// Receives a 2xx body; returns n, or anything else to abort the transfer (CURLE_WRITE_ERROR).
typedef size_t (*hub_sink_fn)(const char *data, size_t n, void *user);

typedef struct hub_request {
    CURL *curl;
    struct curl_slist *headers;
    hub_response resp;
    hub_sink_fn sink;
    void *sink_user;
    char error_body[4096];
    size_t error_len;
    char errbuf[CURL_ERROR_SIZE];
    char url[4096];
} hub_request;

typedef enum hub_net_class {
    HUB_NET_OK,
    HUB_NET_UNREACHABLE,  // name resolution or connection failed: no network, wrong endpoint
    HUB_NET_DROPPED,      // the connection broke or stalled during the response: worth a retry
    HUB_NET_SINK_FAILED,  // the sink refused data (a write to disk failed)
    HUB_NET_OTHER,
} hub_net_class;

// Initializes libcurl once per process (thread-safe).
void hub_http_global_init(void);

// Prepares r for one request (reusing r->curl and its connections when already set).
// method: "GET" or "HEAD". range_from >= 0 adds "Range: bytes=from-[to]" (range_to -1: open end).
// HEAD requests follow no redirect (the caller reads Location); GET follows up to 5.
int hub_request_setup(hub_request *r, const mx_hub_env *env, const char *method, const char *url, int64_t range_from,
                      int64_t range_to, hub_sink_fn sink, void *sink_user, mx_error *err);
CURLcode hub_request_perform(hub_request *r);
void hub_request_free(hub_request *r);  // keeps r reusable (zeroed)

hub_net_class hub_net_classify(CURLcode rc);
// Writes a message for a failed transfer (rc != CURLE_OK) of url, naming the cause; returns -1.
int hub_transport_fail(const hub_request *r, CURLcode rc, const mx_hub_env *env, mx_error *err);

// True when both URLs have the same scheme, host and port (the token may travel).
bool hub_same_origin(const char *a, const char *b);
// Strips a leading W/ and surrounding quotes from an ETag value, in place.
void hub_etag_normalize(char *etag);

#endif
