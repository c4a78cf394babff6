// SPDX-License-Identifier: MIT
// Private to src/server: the server object shared by the HTTP front (srv_http.c), the generation
// routes (srv_generate.c, srv_stream.c), the small routes (srv_routes.c, srv_embed_route.c) and the
// reply helpers (srv_reply.h). Calls go one way: front -> routes -> stream -> reply helpers and
// response JSON (srv_response.h), which call none of the others.
#ifndef MX_SERVER_SRV_INTERNAL_H
#define MX_SERVER_SRV_INTERNAL_H

#include <jansson.h>
#include <microhttpd.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "server/server.h"
#include "server/srv_embed.h"
#include "server/srv_grammar.h"
#include "server/srv_job.h"
#include "server/srv_request.h"
#include "server/srv_response.h"
#include "server/srv_sched.h"

struct mx_server {
    struct MHD_Daemon *daemon;
    mx_model *model;
    const mx_tokenizer *tok;
    const mx_chat_template *tmpl;
    srv_sched *sched;
    srv_grammars *grammars;
    srv_embedder *embedder;
    srv_call_format calls;   // the model's tool-call format
    pthread_mutex_t model_lock;  // one forward pass at a time: the scheduler's steps and embeddings
    mx_server_opts o;
    char model_id[256];
    int port;
    atomic_bool stopping;    // running requests end now with an error reply
    atomic_bool draining;    // no new requests (503); running ones may finish
    atomic_int n_conns;      // open connections (srv_conn.c)
    atomic_int n_active;     // requests between their first byte and their last reply byte
    atomic_ullong http_requests, http_errors, ids;
    long started;            // unix time, for "created"
};

// The request entry points (srv_http.c) that srv_conn.c registers with libmicrohttpd.
enum MHD_Result srv_http_on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                    const char *version, const char *upload, size_t *upload_size, void **con_cls);
void *srv_http_on_uri(void *cls, const char *uri, struct MHD_Connection *c);
void srv_http_on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe);
size_t srv_http_unescape(void *cls, struct MHD_Connection *c, char *s);

// Route handlers; body is the parsed JSON (NULL for GET).
enum MHD_Result srv_route_generate(mx_server *s, struct MHD_Connection *c, srv_kind kind, json_t *body);
enum MHD_Result srv_route_models(mx_server *s, struct MHD_Connection *c);
enum MHD_Result srv_route_health(mx_server *s, struct MHD_Connection *c);
enum MHD_Result srv_route_metrics(mx_server *s, struct MHD_Connection *c);
enum MHD_Result srv_route_tokenize(mx_server *s, struct MHD_Connection *c, json_t *body);
enum MHD_Result srv_route_detokenize(mx_server *s, struct MHD_Connection *c, json_t *body);
enum MHD_Result srv_route_embeddings(mx_server *s, struct MHD_Connection *c, json_t *body);
enum MHD_Result srv_route_apply_template(mx_server *s, struct MHD_Connection *c, json_t *body);

// The streaming (SSE) response of a request's n submitted jobs (choice i is jobs[i]); takes over the
// caller's job references.
enum MHD_Result srv_stream_start(mx_server *s, struct MHD_Connection *c, srv_job **jobs, int n, const srv_gen_info *info);

#endif
