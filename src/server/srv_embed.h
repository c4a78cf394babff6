// SPDX-License-Identifier: MIT
// Embeddings for POST /v1/embeddings: each input's final hidden states (after the final norm),
// pooled over its tokens (mean, or the last token as Qwen3-Embedding-style checkpoints are trained),
// optionally cut to the first `dimensions` values (Matryoshka-style), and L2-normalized. Inputs are
// run together, one KV slot each, in batches of up to EMBED_SLOTS. The embedder owns its own context
// (made at the first request) and runs its forward passes under the server's model lock, between
// the scheduler's steps.
#ifndef MX_SERVER_SRV_EMBED_H
#define MX_SERVER_SRV_EMBED_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "models/model.h"

typedef enum srv_pooling { SRV_POOL_MEAN, SRV_POOL_LAST } srv_pooling;

typedef struct srv_embedder srv_embedder;

// pooling NULL: last when the model folder's 1_Pooling/config.json says pooling_mode_lasttoken,
// else mean; "mean" or "last" otherwise. Returns NULL (err set) on a bad pooling name.
srv_embedder *srv_embedder_create(mx_model *m, int max_ctx, const char *pooling, pthread_mutex_t *model_lock,
                                  mx_error *err);
void srv_embedder_free(srv_embedder *e);
srv_pooling srv_embedder_pooling(const srv_embedder *e);
int srv_embedder_dim(const srv_embedder *e);
int srv_embedder_max_tokens(const srv_embedder *e);

// Embeds n inputs (tokens[i][0..lens[i]), each 1..max_tokens) into out[n, dims] (dims <= dim).
int srv_embedder_run(srv_embedder *e, int32_t *const *tokens, const int *lens, int n, int dims, float *out,
                     mx_error *err);

#endif
