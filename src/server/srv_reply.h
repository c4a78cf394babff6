// SPDX-License-Identifier: MIT
// How the server answers: a JSON body, an OpenAI-style error {"error": {"message", "type", "code"}},
// the headers every reply carries (CORS for allowed origins, Connection: close while draining), and
// whether a connection's client is gone. Every route and the stream use these; they call nothing
// of the routes, so calls go one way (front -> routes -> stream -> replies and response JSON).
#ifndef MX_SERVER_SRV_REPLY_H
#define MX_SERVER_SRV_REPLY_H

#include <jansson.h>
#include <microhttpd.h>
#include <stdbool.h>

#include "server/server.h"

// Queues a JSON response (takes the reference to body; NULL or an unencodable body becomes a 500).
enum MHD_Result srv_respond_json(mx_server *s, struct MHD_Connection *c, unsigned status, json_t *body);
// Queues an OpenAI-style error; code may be NULL (null).
enum MHD_Result srv_respond_error(mx_server *s, struct MHD_Connection *c, unsigned status, const char *code,
                                  const char *fmt, ...) __attribute__((format(printf, 5, 6)));
// The same, and the connection closes after it (the request's framing cannot be trusted, or the
// server is refusing or draining connections).
enum MHD_Result srv_respond_error_close(mx_server *s, struct MHD_Connection *c, unsigned status, const char *code,
                                        const char *fmt, ...) __attribute__((format(printf, 5, 6)));
// The error object itself (for SSE error events).
json_t *srv_error_json(unsigned status, const char *code, const char *message);
// json_dumps (malloc'ed text, caller frees), except that an allocation failing anywhere in the
// encoding gives NULL: jansson 2.14 goes on after a failed write of an object key, which gave
// replies with a key cut out. NULL for a NULL j.
char *srv_json_dumps(const json_t *j, size_t flags);

// Headers every reply carries; call before MHD_queue_response.
void srv_add_common_headers(mx_server *s, struct MHD_Connection *c, struct MHD_Response *r);
// True when origin is one of the comma-separated --cors-origin entries (or they allow "*").
bool srv_origin_allowed(const mx_server *s, const char *origin);

// True when the client of this connection is gone for sure (the connection was reset or errored).
// A client that only shut down its sending side (half-close, legal in HTTP/1.1) still reads.
bool srv_client_gone(struct MHD_Connection *c);

#endif
