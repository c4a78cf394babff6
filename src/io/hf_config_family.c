// SPDX-License-Identifier: MIT
// The fields only some families have: Gemma 3's attention scale and sliding-window layers, gpt_oss's
// experts, clamped SwiGLU and alternating windows, DeepSeek-V3's latent attention and grouped
// routing, Phi-3's all-layer window. Each takes transformers' defaults for its family.
#include <stdlib.h>
#include <string.h>

#include "io/hf_config_internal.h"

// Which layers attend to a sliding window: layer_types (transformers' per-layer list), or when it is
// absent every layer but one in `pattern` (the last of each group of pattern layers attends to all).
static int read_layer_types(json_t *root, mx_config *cfg, int pattern, const char *label, mx_error *err) {
    cfg->layer_sliding = calloc((size_t)cfg->n_layers, sizeof(bool));
    if (!cfg->layer_sliding) return mx_fail(err, "out of memory");
    json_t *types = json_object_get(root, "layer_types");
    if (types && !json_is_null(types)) {
        if (!json_is_array(types) || (int)json_array_size(types) != cfg->n_layers)
            return mx_fail(err, "%s: layer_types must list num_hidden_layers (%d) entries", label, cfg->n_layers);
        for (int i = 0; i < cfg->n_layers; i++) {
            const char *t = json_string_value(json_array_get(types, (size_t)i));
            if (!t || (strcmp(t, "sliding_attention") != 0 && strcmp(t, "full_attention") != 0))
                return mx_fail(err, "%s: layer_types[%d] must be \"sliding_attention\" or \"full_attention\"", label, i);
            cfg->layer_sliding[i] = strcmp(t, "sliding_attention") == 0;
        }
    } else {
        for (int i = 0; i < cfg->n_layers; i++) cfg->layer_sliding[i] = (i + 1) % pattern != 0;
    }
    return 0;
}

// Gemma 3: attention scale, the sliding-window layers (layer_types, else one global layer every
// sliding_window_pattern layers) and their RoPE base.
int mx_config_read_gemma(json_t *root, mx_config *cfg, const char *label, mx_error *err) {
    int pattern = 6;
    if (mx_config_get_num(root, "query_pre_attn_scalar", 256, &cfg->query_pre_attn_scalar, label, err) ||
        mx_config_get_int(root, "sliding_window", 4096, 1, &cfg->sliding_window, label, err) ||
        mx_config_get_int(root, "sliding_window_pattern", 6, 1, &pattern, label, err) ||
        mx_config_get_num(root, "rope_local_base_freq", 10000.0, &cfg->rope_local_theta, label, err))
        return -1;
    if (cfg->query_pre_attn_scalar <= 0) return mx_fail(err, "%s: query_pre_attn_scalar must be positive", label);
    const char *caps[] = {"attn_logit_softcapping", "final_logit_softcapping"};
    for (int k = 0; k < 2; k++) {
        json_t *v = json_object_get(root, caps[k]);
        if (v && !json_is_null(v)) return mx_fail(err, "%s: %s is not supported (Gemma 3 has none)", label, caps[k]);
    }
    return read_layer_types(root, cfg, pattern, label, err);
}

// gpt_oss (transformers' GptOssConfig): experts of intermediate_size, softmax over the top k router
// logits (the moe_route record's softmax over all, renormalized over the top k: the same weights),
// the clamped SwiGLU's limit, and sliding-window layers (every other one, from layer 0, by default).
int mx_config_read_gpt_oss(json_t *root, mx_config *cfg, const char *label, mx_error *err) {
    if (mx_config_get_int(root, "num_local_experts", 0, 1, &cfg->num_experts, label, err) ||
        mx_config_get_num(root, "swiglu_limit", 7.0, &cfg->swiglu_limit, label, err) ||
        mx_config_get_int(root, "sliding_window", 128, 1, &cfg->sliding_window, label, err))
        return -1;
    if (cfg->num_experts == 0) return mx_fail(err, "%s: gpt_oss needs num_local_experts", label);
    if (cfg->intermediate_size <= 0) return mx_fail(err, "%s: missing 'intermediate_size'", label);
    if (!(cfg->swiglu_limit > 0)) return mx_fail(err, "%s: swiglu_limit must be positive", label);
    cfg->moe_intermediate_size = cfg->intermediate_size;
    cfg->norm_topk_prob = true;
    return read_layer_types(root, cfg, 2, label, err);
}

// DeepSeek-V3's latent attention sizes and routing (defaults: transformers' DeepseekV3Config).
// q_lora_rank null means queries through q_proj. Heads are qk_nope + qk_rope wide with RoPE on the
// last qk_rope dimensions, so head_dim and rope_dim are set from them.
int mx_config_read_deepseek(json_t *root, mx_config *cfg, const char *label, mx_error *err) {
    json_t *ql = json_object_get(root, "q_lora_rank");
    if (mx_config_get_int(root, "kv_lora_rank", 512, 1, &cfg->kv_lora_rank, label, err) ||
        (!json_is_null(ql) && mx_config_get_int(root, "q_lora_rank", 1536, 1, &cfg->q_lora_rank, label, err)) ||
        mx_config_get_int(root, "qk_nope_head_dim", 128, 1, &cfg->qk_nope_head_dim, label, err) ||
        mx_config_get_int(root, "qk_rope_head_dim", 64, 2, &cfg->qk_rope_head_dim, label, err) ||
        mx_config_get_int(root, "v_head_dim", 128, 1, &cfg->v_head_dim, label, err) ||
        mx_config_get_int(root, "n_routed_experts", 256, 1, &cfg->num_experts, label, err) ||
        mx_config_get_int(root, "n_group", 8, 1, &cfg->n_group, label, err) ||
        mx_config_get_int(root, "topk_group", 4, 1, &cfg->topk_group, label, err) ||
        mx_config_get_num(root, "routed_scaling_factor", 2.5, &cfg->routed_scaling_factor, label, err) ||
        mx_config_get_int(root, "n_shared_experts", 1, 0, &cfg->n_shared_experts, label, err) ||
        mx_config_get_int(root, "first_k_dense_replace", 3, 0, &cfg->first_k_dense_replace, label, err) ||
        mx_config_get_int(root, "moe_layer_freq", 1, 1, &cfg->moe_layer_freq, label, err) ||
        mx_config_get_bool(root, "norm_topk_prob", true, &cfg->norm_topk_prob, NULL, label, err))
        return -1;
    const char *keys[2] = {"scoring_func", "topk_method"}, *want[2] = {"sigmoid", "noaux_tc"};
    for (int k = 0; k < 2; k++) {
        json_t *v = json_object_get(root, keys[k]);
        if (v && !json_is_null(v) && (!json_is_string(v) || strcmp(json_string_value(v), want[k]) != 0))
            return mx_fail(err, "%s: %s %s is not supported (only \"%s\")", label, keys[k],
                           json_is_string(v) ? json_string_value(v) : "(not a string)", want[k]);
    }
    if (cfg->qk_rope_head_dim % 2 != 0 || cfg->qk_rope_head_dim > 512 || cfg->kv_lora_rank % 2 != 0 ||
        cfg->kv_lora_rank > 4096)
        return mx_fail(err, "%s: qk_rope_head_dim (%d) and kv_lora_rank (%d) must be even (at most 512 and 4096)", label,
                       cfg->qk_rope_head_dim, cfg->kv_lora_rank);
    int per_group = cfg->num_experts / cfg->n_group;
    if (cfg->num_experts % cfg->n_group != 0 || per_group < 2 || cfg->topk_group > cfg->n_group ||
        cfg->num_experts_per_tok > cfg->topk_group * per_group)
        return mx_fail(err, "%s: n_routed_experts %d in n_group %d groups (at least 2 each), topk_group %d and "
                            "num_experts_per_tok %d do not fit together", label, cfg->num_experts, cfg->n_group,
                       cfg->topk_group, cfg->num_experts_per_tok);
    // A head is qk_nope + qk_rope wide (head_dim, at most 512 like every family's).
    if (cfg->qk_nope_head_dim + cfg->qk_rope_head_dim > 512)
        return mx_fail(err, "%s: qk_nope_head_dim (%d) + qk_rope_head_dim (%d) is more than 512", label,
                       cfg->qk_nope_head_dim, cfg->qk_rope_head_dim);
    cfg->head_dim = cfg->qk_nope_head_dim + cfg->qk_rope_head_dim;
    cfg->rope_dim = cfg->qk_rope_head_dim;
    return 0;
}

// Phi-3: transformers applies `sliding_window` (when not null) to every layer (Phi-3-mini-4k: 2047).
int mx_config_read_phi3_window(json_t *root, mx_config *cfg, const char *label, mx_error *err) {
    if (mx_config_get_int(root, "sliding_window", 0, 1, &cfg->sliding_window, label, err)) return -1;
    if (cfg->sliding_window == 0) return 0;
    cfg->layer_sliding = calloc((size_t)cfg->n_layers, sizeof(bool));
    if (!cfg->layer_sliding) return mx_fail(err, "out of memory");
    for (int i = 0; i < cfg->n_layers; i++) cfg->layer_sliding[i] = true;
    return 0;
}
