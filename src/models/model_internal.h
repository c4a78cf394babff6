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
    const float *sinks;      // [n_heads] gpt_oss attention sinks, else NULL
    bool moe;
    mx_matrix w_gate;        // dense MLP: [intermediate, hidden]
    mx_matrix w_up;          // [intermediate, hidden]
    mx_matrix w_down;        // [hidden, intermediate]
    const float *b_gate, *b_up, *b_down;
    // Multi-head latent attention (deepseek_v3; forward_mla.c). The RoPE parts of the query and key
    // projections come out de-interleaved (DeepSeek rotates pairs (2i, 2i + 1); their rows are
    // reordered at load so the rotate-half RoPE record applies), q's no-RoPE and RoPE parts as
    // separate matrices, and the latent's two parts too.
    mx_matrix wq_a;          // [q_lora, hidden] q_a_proj; rows 0 when queries come from q_proj
    const float *q_a_norm;   // [q_lora]
    mx_matrix wq_nope;       // [n_heads*nope, q_lora or hidden]
    mx_matrix wq_pe;         // [n_heads*rope, q_lora or hidden]
    mx_matrix wkv_a;         // [kv_lora, hidden] the latent c_kv
    mx_matrix wk_pe;         // [rope, hidden] the shared RoPE key
    const float *kv_a_norm;  // [kv_lora]
    mx_matrix embed_q;       // [n_heads (as experts), kv_lora, nope]: q_nope into the latent space
    mx_matrix unembed_out;   // [n_heads (as experts), v_head, kv_lora]: attended latent to values
    mx_matrix router;        // MoE: [n_experts, hidden]
    const float *router_bias;  // [n_experts] deepseek_v3: e_score_correction_bias (selection only)
    mx_matrix s_gate, s_up;  // deepseek_v3 shared experts: [shared_I, hidden]
    mx_matrix s_down;        // [hidden, shared_I]
    mx_matrix e_gate;        // [n_experts, moe_intermediate, hidden]
    mx_matrix e_up;          // [n_experts, moe_intermediate, hidden]
    mx_matrix e_down;        // [n_experts, hidden, moe_intermediate]
    // gpt_oss: the router's Linear bias [n_experts] and the experts' biases [n_experts, out].
    const float *router_linear_bias, *e_gate_bias, *e_up_bias, *e_down_bias;
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
// The KV cache geometry of a model: per-head keys and values, or for latent attention one latent row
// of kv_lora + rope values per position, held as one KV head of half that width (backend.h).
// n_blocks: the pool's blocks (0: each slot its own, backend.h).
static inline mx_kv_layout mx_model_kv_layout(const mx_config *c, int n_slots, int max_ctx, int n_blocks) {
    if (c->kv_lora_rank > 0)
        return (mx_kv_layout){c->n_layers, n_slots, max_ctx, 1, (c->kv_lora_rank + c->qk_rope_head_dim) / 2, n_blocks};
    return (mx_kv_layout){c->n_layers, n_slots, max_ctx, c->n_kv_heads, c->head_dim, n_blocks};
}
// intermediate_size when some layer has a dense MLP, else 0: a model whose layers are all mixtures
// of experts does not use it (and its weights do not check it), so scratch is not sized by it.
int64_t mx_model_dense_intermediate(const mx_model *m);
// Refuses (with the numbers) a context whose KV cache and scratch do not fit the backend's memory
// next to the weights (mem_check.c). Backends that cannot tell their memory pass.
int mx_ctx_memory_check(const mx_model *m, const mx_kv_layout *lay, int max_batch, mx_error *err);

#endif
