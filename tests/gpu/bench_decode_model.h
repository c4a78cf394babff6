// SPDX-License-Identifier: MIT
// The random model that bench_gpu_decode times (tests/gpu/bench_decode_model.c): the named Qwen3
// shapes (dense, and the 30B-A3B MoE), random affine 4-bit (group 64, bf16 scales) weights of a
// shape on the device, the activation buffers of up to `cap` tokens, and the op records of a
// forward pass, issued in the order and with the buffer aliasing of the engine's model code
// (src/models/forward.c: block_records, mlp_records, head_records), so the GPU plan runner fuses
// them exactly as it fuses a real model's. Every layer has its own device copy of the weights;
// bench_model_free releases them with everything else the model holds.
#ifndef MLXCEL_BENCH_DECODE_MODEL_H
#define MLXCEL_BENCH_DECODE_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "backends/backend.h"

typedef struct bench_shape {
    const char *name;
    int hidden, layers, heads, kv_heads, head_dim;
    int inter;  // the dense MLP's width, or one expert's (moe_intermediate_size) where experts > 0
    int vocab;
    bool tied;
    int experts, top_k;  // MoE: experts per layer and per token (norm_topk_prob true); 0: dense
} bench_shape;

typedef struct bench_layer {
    mx_matrix q, k, v, o;    // [heads*D, H], [kv*D, H] (k, v), [H, heads*D]
    mx_matrix gate, up, down;  // dense [I, H], [I, H], [H, I]; MoE stacked [E, I, H], [E, I, H], [E, H, I]
    mx_matrix router;        // MoE: [E, H]
    float *in_norm, *post_norm, *q_norm, *k_norm;  // [H], [H], [D], [D]
} bench_layer;

typedef struct bench_model {
    bench_shape s;
    mx_matrix embed, lm_head;  // [vocab, H]
    bench_layer *L;            // [layers]
    float *final_norm, *inv_freq;  // [H], [D/2]
    void *kv;
    mx_kv_layout lay;
    int32_t *table;  // [kv_slots][table_len] block tables: entry i names block i (each slot its own blocks)
    // Activations of up to cap tokens (the engine's mx_ctx buffers of the same names): x, h, tmp
    // [cap, H]; q, att [cap, heads*D]; k, v [cap, kv*D]; g, u [cap, I] dense or [cap*top_k, I] MoE;
    // last [H]; logits [vocab].
    float *x, *h, *q, *k, *v, *att, *tmp, *g, *u, *last, *logits;
    // MoE: router logits [cap, E], routing weights [cap*top_k], expert outputs [cap*top_k, H].
    float *router, *moe_w, *moe_y;
    int32_t *moe_ids;  // [cap*top_k]
    int32_t *ids, *pos, *slot, *next_id, *last_row;  // [cap] x3, [1], [2]
    int cap;
    double weight_bytes;  // all weights (the embedding once)
    double layers_bytes;  // the layers' weights (all of them)
    double read_bytes;    // weights a decode token reads: one layer's without the unused experts, all layers, lm_head
    void *host[21];       // the host matrices' buffers (n_host) every layer's weights were uploaded from
    int n_host;
    void **owned;         // the device buffers above (n_owned of at most max_owned)
    int n_owned, max_owned;
} bench_model;

// The shape called `name`, or NULL; bench_shape_names: the names, comma separated.
const bench_shape *bench_shape_find(const char *name);
const char *bench_shape_names(void);

// Exits with status 1 after printing what failed and bench_err's message.
void bench_die(const char *what);
extern mx_error bench_err;

// Fills m with shape s on be: weights, the KV cache of kv_slots sequences of max_ctx positions,
// activations for cap tokens, token ids (random), positions 0..cap-1, slots 0. last_row holds
// {last_row0, 0}. Exits on failure.
void bench_model_init(mx_backend *be, bench_model *m, const bench_shape *s, int cap, int max_ctx, int kv_slots,
                      int last_row0);

// Releases m's device buffers and weights (before be is freed) and its host matrices.
void bench_model_free(mx_backend *be, bench_model *m);

// Where the step's tokens live in layer `layer` of the cache (with the block table, as forward.c's
// kv_ref).
mx_kv_ref bench_kv_ref(const bench_model *m, int layer);

// The records of a forward pass, in src/models/forward.c's order (n tokens; decode: the attention
// records' hint).
// Layer L's q/k norms, RoPE and KV store (what the plan runner fuses into one launch).
void bench_add_qk_rope_kv(mx_plan *p, const bench_model *m, const bench_layer *L, mx_kv_ref kv, int n);
// RMSNorm, q/k/v, the q/k norms + RoPE + KV store and the attention.
void bench_add_attn_half(mx_plan *p, const bench_model *m, const bench_layer *L, mx_kv_ref kv, int n, bool decode);
// With o_proj the o-projection and its residual add, then the MLP half: RMSNorm, gate/up, SwiGLU,
// down and residual add (dense), or the three MoE pieces below.
void bench_add_mlp_half(mx_plan *p, const bench_model *m, const bench_layer *L, int n, bool o_proj);
// The MoE MLP half in three pieces, together the MLP half: RMSNorm + router product + routing;
// expert gate and up products + SwiGLU; expert down product + combine (the weighted sum of the k
// expert rows added into x: the residual add).
void bench_add_moe_router(mx_plan *p, const bench_model *m, const bench_layer *L, int n);
void bench_add_moe_gate_up(mx_plan *p, const bench_model *m, const bench_layer *L, int n);
void bench_add_moe_down(mx_plan *p, const bench_model *m, const bench_layer *L, int n);
// The whole step of n tokens, then the logits and argmax of row *last_row (device), or with
// last_row NULL of the step's one token (no gather: forward.c's head_records for output row 0).
mx_plan *bench_forward_plan(const bench_model *m, int n, const int32_t *last_row, bool decode);

#endif
