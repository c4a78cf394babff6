// SPDX-License-Identifier: MIT
// The model's weights as the forward pass sees them. Private to src/models/: the loader fills it,
// the forward pass reads it.
#ifndef MX_MODELS_MODEL_INTERNAL_H
#define MX_MODELS_MODEL_INTERNAL_H

#include "io/safetensors.h"
#include "models/family.h"
#include "models/model.h"

typedef struct mx_layer {
    const float *attn_norm;  // [hidden]
    const float *ffn_norm;   // [hidden] (gemma: pre_feedforward_layernorm)
    const float *post_attn_norm;  // [hidden] gemma: on the attention output before the residual add; else NULL
    const float *post_ffn_norm;   // [hidden] gemma: on the MLP output before the residual add; else NULL
    bool sliding;            // attends to the last cfg.sliding_window positions, with rope_local
    const float *q_norm;     // [head_dim] or NULL (qwen3)
    const float *k_norm;     // [head_dim] or NULL
    mx_matrix wq;            // [n_heads*head_dim, hidden]
    mx_matrix wk;            // [n_kv_heads*head_dim, hidden]
    mx_matrix wv;            // [n_kv_heads*head_dim, hidden]
    mx_matrix wo;            // [hidden, n_heads*head_dim]
    const float *bq, *bk, *bv, *bo;  // optional biases
    bool moe;
    mx_matrix w_gate;        // dense MLP: [intermediate, hidden]
    mx_matrix w_up;          // [intermediate, hidden]
    mx_matrix w_down;        // [hidden, intermediate]
    const float *b_gate, *b_up, *b_down;
    mx_matrix router;        // MoE: [n_experts, hidden]
    mx_matrix e_gate;        // [n_experts, moe_intermediate, hidden]
    mx_matrix e_up;          // [n_experts, moe_intermediate, hidden]
    mx_matrix e_down;        // [n_experts, hidden, moe_intermediate]
} mx_layer;

struct mx_model {
    char *dir;
    mx_config cfg;
    mx_backend *be;
    mx_safetensors *st;
    mx_matrix embed;         // [vocab, hidden]
    mx_matrix lm_head;       // [vocab, hidden]; equals embed when tied
    bool tied;
    const float *final_norm; // [hidden]
    mx_layer *layers;        // [n_layers]
    float *rope_inv_freq;    // backend [head_dim/2]
    mx_rope rope;
    mx_rope rope_local;      // gemma sliding-window layers: base rope_local_base_freq, no scaling (else = rope)
    float embed_scale;       // multiplies the embeddings (gemma: sqrt(hidden)); 1 otherwise
    const mx_family *family;
    int64_t n_params;
    int64_t weight_bytes;
    // Everything to give back at free time.
    void **backend_bufs;
    int n_backend_bufs, cap_backend_bufs;
    mx_matrix **matrices;
    int n_matrices, cap_matrices;
    void **host_bufs;
    int n_host_bufs, cap_host_bufs;
};

// The RoPE tables a model uses: the main one (rope_theta with the config's scaling: linear, llama3,
// or longrope's short factors), Gemma's sliding-window one (rope_local_base_freq, unscaled) and
// longrope's long-context one.
typedef enum mx_rope_table { MX_ROPE_TABLE_MAIN, MX_ROPE_TABLE_LOCAL, MX_ROPE_TABLE_LONG } mx_rope_table;
// Computes inverse frequencies [rope_dim/2] of one table.
void mx_rope_inv_freq(const mx_config *cfg, mx_rope_table table, float *out);
// Refuses (with the numbers) a context whose KV cache and scratch do not fit the backend's memory
// next to the weights (mem_check.c). Backends that cannot tell their memory pass.
int mx_ctx_memory_check(const mx_model *m, const mx_kv_layout *lay, int max_batch, mx_error *err);

#endif
