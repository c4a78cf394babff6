// SPDX-License-Identifier: MIT
// The OpenAI-compatible HTTP server behind `mlxcel serve` / `mlxcel-server`: routes
// /v1/chat/completions, /v1/completions (JSON or SSE), /v1/embeddings, /v1/models, /health,
// /tokenize, /detokenize, /apply-template and /metrics on top of the continuous-batching scheduler (srv_sched.h).
// The server borrows the model, tokenizer and chat template; they must outlive it. It runs its own
// threads (libmicrohttpd, one per connection, plus the scheduler): start returns at once.
#ifndef MX_SERVER_SERVER_H
#define MX_SERVER_SERVER_H

#include <stdbool.h>
#include <stddef.h>

#include "chat/chat_template.h"
#include "core/error.h"
#include "models/model.h"
#include "sample/sampler.h"
#include "tokenizer/tokenizer.h"

typedef struct mx_server_opts {
    const char *host;        // IPv4 or IPv6 literal, or "localhost"; NULL: 127.0.0.1
    int port;                // 0: an ephemeral port (see mx_server_port)
    const char *api_key;     // NULL: no authentication
    int parallel;            // sequences decoded together (KV slots)
    int ctx;                 // positions per sequence
    int max_queue;           // requests waiting for a slot at most (more: 503)
    double timeout;          // seconds per request (0: none)
    size_t max_body;         // request body bytes at most (more: 413)
    int prefill_chunk;       // prompt tokens per sequence per step
    int batch_tokens;        // prompt tokens per step over all sequences; 0: the engine's default
    mx_sampling sampling;    // defaults for fields the request leaves out
    const char *model_id;    // name reported by /v1/models and in responses
    const char *pooling;     // embeddings: "mean", "last", NULL: from the model folder (else mean)
    int max_connections;     // open connections at most (more: 503 and close); 0: 1024
    double conn_timeout;     // seconds an idle connection (or one sending its request) may stay; 0: 30
    const char *cors_origins;  // comma-separated origins allowed cross-site ("*": any); NULL: none
    bool no_special_in_content;  // added tokens written in chat message content are plain text
    bool no_prefix_cache;    // compute every prompt in full (no reuse of cached KV blocks)
    int kv_size;             // positions in the KV pool; 0: the engine's default (generate/engine.h)
} mx_server_opts;

typedef struct mx_server mx_server;

mx_server *mx_server_start(mx_model *m, const mx_tokenizer *tok, const mx_chat_template *tmpl,
                           const mx_server_opts *o, mx_error *err);
int mx_server_port(const mx_server *s);
// Positions in the KV pool the server's engine allocated (--kv-size or its default).
int mx_server_kv_size(const mx_server *s);
// Graceful shutdown, first half: stops accepting connections, answers new requests on open
// connections with 503, and waits up to timeout_s seconds for running requests to finish. Returns
// the number still running (mx_server_stop then ends them with an error reply).
int mx_server_drain(mx_server *s, double timeout_s);
// Stops accepting, ends running requests (a 503 error reply, or a final SSE error event), joins
// every thread and frees. NULL is a no-op.
void mx_server_stop(mx_server *s);

#endif
