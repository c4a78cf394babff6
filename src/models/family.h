// SPDX-License-Identifier: MIT
// The one table of model families, shared by the loader (which tensors a layer must have), the
// converter (mlx-lm's layout and quantization rules for the family) and `bench --config` (which
// tensors a random model of that shape needs). A family is a `model_type` of config.json; adding
// one is adding a row here plus whatever new tensors and ops its forward pass needs. A row whose
// forward pass is not written yet (`runs` false) is still known to the converter, and the loader
// refuses it by name instead of calling it unknown.
#ifndef MX_MODELS_FAMILY_H
#define MX_MODELS_FAMILY_H

#include <stdbool.h>

#include "io/hf_config.h"

typedef struct mx_family {
    const char *model_type;
    bool runs;           // the forward pass implements it (loader, bench); else convert only
    bool qk_norm;        // per-head q/k RMSNorm tensors required
    bool qkv_bias;       // q/k/v bias tensors required (also when config.json says attention_bias)
    bool moe;            // MLP is a mixture of experts (router `mlp.gate`, experts stacked or per expert)
    bool tied_default;   // tie_word_embeddings when config.json omits it (mlx-lm's default)
    // Gemma 3: RMSNorm weights w applied as (1 + w), norms after attention and after the MLP as well as
    // before them, GeLU-tanh gated MLP, embeddings scaled by sqrt(hidden).
    bool gemma;
    // Phi-3: q/k/v in one qkv_proj [q + 2 kv, hidden] and gate/up in one gate_up_proj [2 I, hidden].
    bool fused_qkv_gate_up;
    // DeepSeek-V3: multi-head latent attention (q_a/q_b or q_proj, kv_a_proj_with_mqa, embed_q and
    // unembed_out, or kv_b_proj in the Hub layout) with a compressed KV cache (forward_mla.c), and
    // an MoE with shared experts and grouped sigmoid routing after first_k_dense_replace dense layers.
    bool latent_attention;
    // gpt_oss: attention sinks (self_attn.sinks [n_heads], backend.h), o_proj with a bias, a router
    // with a bias and experts with biases (mlx-lm's `mlp.experts.<proj>` stacked, or the Hub's
    // interleaved gate_up_proj [E, H, 2I] and down_proj [E, I, H] with their _bias tensors), and the
    // clamped SwiGLU (limit swiglu_limit, alpha 1.702).
    bool attn_sinks;
    bool o_bias;
    bool expert_biases;
    bool clamped_swiglu;
    // Converter rules (mlx-lm's sanitize and quantization predicate for the family):
    const char *n_experts_key;    // config key of the routed expert count, for stacking per-expert tensors
    const char *router;           // module quantized at 8 bits group 64 whatever the default, or NULL
    const char *float_module;     // module suffix never quantized (a router that is not a Linear), or NULL
    const char *keep_dtype;       // tensor name suffix never cast by --dtype, or NULL
    bool split_gate_up;           // experts.gate_up_proj [E, H, 2I] (interleaved) -> gate_proj/up_proj [E, I, H]
    bool split_kv_b;              // self_attn.kv_b_proj -> embed_q [heads, kv_lora, nope], unembed_out [heads, v, kv_lora]
    bool drop_extra_layers;       // layers numbered >= num_hidden_layers (multi-token prediction) are dropped
} mx_family;

// The row for `model_type`, or NULL when it is not in the table.
const mx_family *mx_family_find(const char *model_type);
// Supported model_types, comma separated (for messages and `info`): the ones the forward pass runs
// (runnable_only) or every row (what convert accepts).
const char *mx_family_names(bool runnable_only);
// The router's module inside a layer: `router` where the family names one (it is also the module
// quantized at 8 bits), else "mlp.gate".
const char *mx_family_router(const mx_family *f);
// Whether layer `i` of a model of this family and config has a mixture-of-experts MLP.
bool mx_family_layer_is_moe(const mx_family *f, const mx_config *c, int i);

#endif
