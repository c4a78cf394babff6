// SPDX-License-Identifier: MIT
// Multi-head latent attention (DeepSeek-V3, Kimi-K2) as op records, and the scratch it needs. The
// KV cache keeps, per layer and position, the latent c_kv [kv_lora] after kv_a_layernorm and the
// shared RoPE key k_pe [rope]: one row of W = kv_lora + rope values instead of per-head keys and
// values (mx_model_kv_layout). Attention runs in the absorbed form: q_nope is projected into the
// latent space per head (embed_q), scores are q_lat . c_kv + q_pe . k_pe, and the attended latent
// is projected to values per head (unembed_out) before o_proj. Private to src/models/.
#ifndef MX_MODELS_FORWARD_MLA_H
#define MX_MODELS_FORWARD_MLA_H

#include "backends/plan.h"
#include "models/model_internal.h"

typedef struct mx_mla mx_mla;

// Scratch for steps of up to max_batch tokens on the model's backend, or NULL (error in err).
mx_mla *mx_mla_create(const mx_model *m, int max_batch, mx_error *err);
void mx_mla_free(mx_backend *be, mx_mla *a);
// Bytes of backend scratch mx_mla_create allocates (for the memory check).
size_t mx_mla_scratch_bytes(const mx_config *cfg, int max_batch);
// Appends the attention of layer L for n tokens: h [n, hidden] (the normed hidden states) in,
// out [n, hidden] (after o_proj) out; kv says where the tokens' latent rows go and are read.
void mx_mla_records(mx_plan *p, const mx_mla *a, const mx_model *m, const mx_layer *L, mx_kv_ref kv, const float *h,
                    float *out, int n);

#endif
