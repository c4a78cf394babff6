// SPDX-License-Identifier: MIT
// config.json (+ generation_config.json) of a model folder, read into one flat struct. Handles the
// variants real checkpoints use: rope_theta at top level or inside rope_parameters, rope_scaling
// (llama3, linear, ...), eos_token_id as int or list, tied embeddings, and the `quantization`
// object with per-layer overrides (a dict or false; a missing mode means affine).
#ifndef MX_IO_HF_CONFIG_H
#define MX_IO_HF_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include "core/error.h"
#include "core/quant.h"

#define MX_MAX_EOS 8
// num_hidden_layers at most this: per-layer tables are allocated from it as the config is read
// (the largest published models have under 200 layers).
#define MX_CONFIG_MAX_LAYERS 16384

typedef enum mx_rope_type {
    MX_ROPE_DEFAULT,
    MX_ROPE_LLAMA3,
    MX_ROPE_LINEAR,
    MX_ROPE_LONGROPE,   // Phi-3 "longrope" / "su": per-frequency short and long factors
    MX_ROPE_YARN,       // YaRN: frequencies blended between interpolated and original by a linear ramp
} mx_rope_type;

#define MX_MAX_ROPE_FACTORS 256  // longrope factors: one per rotary frequency (rope_dim / 2)

typedef struct mx_config {
    char model_type[64];
    int vocab_size;
    int hidden_size;
    int intermediate_size;
    int n_layers;
    int n_heads;
    int n_kv_heads;
    int head_dim;
    int max_position_embeddings;
    float rms_norm_eps;
    bool tie_word_embeddings;
    bool tie_set;           // tie_word_embeddings present in the file
    bool attention_bias;    // q/k/v (and o for llama) biases
    bool mlp_bias;

    // RoPE
    double rope_theta;
    mx_rope_type rope_type;
    double rope_factor;
    double rope_low_freq_factor;
    double rope_high_freq_factor;
    double rope_original_max_pos;
    int rope_dim;              // rotated dimensions per head: head_dim * partial_rotary_factor
    double rope_attn_factor;   // multiplies cos/sin (longrope's sqrt(1 + ln(factor) / ln(original)))
    float rope_short_factor[MX_MAX_ROPE_FACTORS];  // longrope, [rope_dim / 2]
    float rope_long_factor[MX_MAX_ROPE_FACTORS];   // longrope, used from rope_original_max_pos on
    double rope_beta_fast, rope_beta_slow;         // yarn: the ramp's ends in rotations (32, 1)
    double rope_mscale_all_dim;                    // yarn (DeepSeek): attention scale times mscale(factor, this)^2
    bool rope_truncate;                            // yarn: ramp ends rounded to whole dimensions (default true)

    // Gemma 3 (gemma3_text; also the text model of multimodal gemma3 checkpoints)
    double query_pre_attn_scalar;  // attention scale 1/sqrt(this); 0: 1/sqrt(head_dim)
    int sliding_window;            // 0: every layer attends to the whole context
    bool *layer_sliding;           // [n_layers] sliding-window layer (Gemma, gpt_oss: layer_types or the
                                   // pattern; Phi-3: all when sliding_window is set); NULL: none
    double rope_local_theta;       // RoPE base of the sliding-window layers (rope_local_base_freq)
    char tensor_prefix[32];        // "language_model." for multimodal checkpoints, else ""

    // gpt_oss: experts of intermediate_size (num_local_experts of them, routed by a softmax over the
    // top num_experts_per_tok logits), their clamped SwiGLU's limit, and sliding_window layers from
    // layer_types (alternating from a sliding one when absent).
    double swiglu_limit;

    // DeepSeek-V3 (deepseek_v3, also Kimi-K2): multi-head latent attention. head_dim is
    // qk_nope_head_dim + qk_rope_head_dim and rope_dim qk_rope_head_dim; n_kv_heads is unused.
    int kv_lora_rank;          // > 0: the model uses multi-head latent attention
    int q_lora_rank;           // 0: queries through q_proj (config null), else q_a_proj / q_b_proj
    int qk_nope_head_dim, qk_rope_head_dim, v_head_dim;
    // DeepSeek-V3 routing: sigmoid scores, experts in n_group groups of which topk_group are kept
    // (group score: the sum of its two best biased scores), routed weights times routed_scaling_factor;
    // n_shared_experts always-on experts of moe_intermediate_size * n_shared_experts.
    int n_group, topk_group;   // n_group 0: softmax routing (qwen3_moe)
    double routed_scaling_factor;
    int n_shared_experts;
    int first_k_dense_replace; // layers before this one have a dense MLP
    int moe_layer_freq;        // MoE on layers i % moe_layer_freq == 0 (from first_k_dense_replace on)

    // Mixture of experts (qwen3_moe)
    int num_experts;
    int num_experts_per_tok;
    int moe_intermediate_size;
    int decoder_sparse_step;
    bool norm_topk_prob;
    int *mlp_only_layers;
    int n_mlp_only_layers;

    // Special tokens
    int32_t eos_ids[MX_MAX_EOS];
    int n_eos;
    int32_t bos_id;         // -1 when absent

    // Quantization: default for every module that has .scales; overrides per module path
    bool quantized;
    mx_quant quant;
    struct mx_quant_override {
        char *path;         // module path without ".weight"
        bool disabled;      // `false` in the config
        mx_quant quant;
    } *overrides;
    int n_overrides;
} mx_config;

// Reads DIR/config.json and, when present, DIR/generation_config.json (its eos_token_id wins).
int mx_config_load(const char *dir, mx_config *cfg, mx_error *err);
// Parses config text already in memory (gen_text may be NULL); label names the source in errors.
int mx_config_parse(const char *text, const char *gen_text, const char *label, mx_config *cfg, mx_error *err);
void mx_config_free(mx_config *cfg);

// Quantization of the module at `path` (e.g. "model.layers.0.mlp.down_proj"). has_scales tells
// whether `<path>.scales` exists in the weights: with no override, a module is quantized iff it has.
mx_quant mx_config_quant_for(const mx_config *cfg, const char *path, bool has_scales);

#endif
