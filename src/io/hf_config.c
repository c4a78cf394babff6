// SPDX-License-Identifier: MIT
// config.json parsing (see hf_config.h). Missing fields take the defaults mlx-lm uses; wrong types
// and impossible values are errors naming the field.
#include "io/hf_config.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/json_text.h"
#include "io/mapped_file.h"

// Integer field: absent -> def; present but not an integer (or out of range) -> error.
static int get_int(json_t *o, const char *key, int def, int lo, int *out, const char *label, mx_error *err) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) {
        *out = def;
        return 0;
    }
    if (!json_is_integer(v)) return mx_fail(err, "%s: field '%s' must be an integer", label, key);
    json_int_t x = json_integer_value(v);
    if (x < lo || x > 1 << 30) return mx_fail(err, "%s: field '%s' = %lld is out of range", label, key, (long long)x);
    *out = (int)x;
    return 0;
}

static int get_num(json_t *o, const char *key, double def, double *out, const char *label, mx_error *err) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) {
        *out = def;
        return 0;
    }
    if (!json_is_number(v)) return mx_fail(err, "%s: field '%s' must be a number", label, key);
    *out = json_number_value(v);
    return 0;
}

static int get_bool(json_t *o, const char *key, bool def, bool *out, bool *present, const char *label, mx_error *err) {
    json_t *v = json_object_get(o, key);
    if (present) *present = v && !json_is_null(v);
    if (!v || json_is_null(v)) {
        *out = def;
        return 0;
    }
    if (!json_is_boolean(v)) return mx_fail(err, "%s: field '%s' must be true or false", label, key);
    *out = json_is_true(v);
    return 0;
}

// eos_token_id: an int or a list of ints; replaces cfg's list when present.
static int read_eos(json_t *o, mx_config *cfg, const char *label, mx_error *err) {
    json_t *v = json_object_get(o, "eos_token_id");
    if (!v || json_is_null(v)) return 0;
    cfg->n_eos = 0;
    if (json_is_integer(v)) {
        cfg->eos_ids[cfg->n_eos++] = (int32_t)json_integer_value(v);
        return 0;
    }
    if (!json_is_array(v)) return mx_fail(err, "%s: eos_token_id must be an integer or a list", label);
    size_t i;
    json_t *e;
    json_array_foreach(v, i, e) {
        if (!json_is_integer(e)) return mx_fail(err, "%s: eos_token_id[%zu] is not an integer", label, i);
        if (cfg->n_eos < MX_MAX_EOS) cfg->eos_ids[cfg->n_eos++] = (int32_t)json_integer_value(e);
    }
    return 0;
}

// One quantization spec object {group_size, bits[, mode]}.
static int parse_quant_spec(json_t *o, mx_quant *q, const char *label, const char *where, mx_error *err) {
    int bits = 0, group = 0;
    if (get_int(o, "bits", 0, 0, &bits, label, err) || get_int(o, "group_size", 0, 0, &group, label, err)) return -1;
    q->mode = MX_QUANT_AFFINE;
    json_t *m = json_object_get(o, "mode");
    if (m && !json_is_null(m)) {
        if (!json_is_string(m) || mx_quant_mode_parse(json_string_value(m), &q->mode) != 0)
            return mx_fail(err, "%s: %s: unknown quantization mode %s", label, where,
                           json_is_string(m) ? json_string_value(m) : "(not a string)");
    }
    q->bits = bits;
    q->group_size = group;
    if (q->mode != MX_QUANT_AFFINE) {  // fp formats fix their own widths
        if (bits == 0) q->bits = q->mode == MX_QUANT_MXFP8 ? 8 : 4;
        if (group == 0) q->group_size = q->mode == MX_QUANT_NVFP4 ? 16 : 32;
    }
    char why[160];
    if (!mx_quant_valid(*q, why, sizeof why)) return mx_fail(err, "%s: %s: %s", label, where, why);
    return 0;
}

static int read_quantization(json_t *root, mx_config *cfg, const char *label, mx_error *err) {
    json_t *q = json_object_get(root, "quantization");
    if (!q || json_is_null(q)) q = json_object_get(root, "quantization_config");
    if (!q || json_is_null(q)) return 0;
    if (!json_is_object(q)) return mx_fail(err, "%s: 'quantization' must be an object", label);
    // OpenAI's gpt-oss checkpoints: quant_method mxfp4 stands for their `_blocks`/`_scales` experts,
    // which the loader recognizes by name; everything else in them is float.
    const char *method = json_string_value(json_object_get(q, "quant_method"));
    if (method && strcmp(method, "mxfp4") == 0 && strcmp(cfg->model_type, "gpt_oss") == 0) return 0;
    // Hugging Face quantization_config of other tools (bitsandbytes, gptq...) carry quant_method.
    if (json_object_get(q, "quant_method"))
        return mx_fail(err, "%s: quantization method '%s' is not an MLX format", label,
                       json_string_value(json_object_get(q, "quant_method")) ?: "?");
    if (parse_quant_spec(q, &cfg->quant, label, "quantization", err)) return -1;
    cfg->quantized = true;
    size_t n = json_object_size(q);
    cfg->overrides = calloc(n ? n : 1, sizeof *cfg->overrides);
    if (!cfg->overrides) return mx_fail(err, "out of memory");
    const char *key;
    json_t *v;
    json_object_foreach(q, key, v) {
        if (!json_is_object(v) && !json_is_false(v)) continue;  // bits, group_size, mode
        struct mx_quant_override *o = &cfg->overrides[cfg->n_overrides];
        if (json_is_false(v)) {
            o->disabled = true;
        } else {
            char where[300];
            snprintf(where, sizeof where, "quantization override '%s'", key);
            if (parse_quant_spec(v, &o->quant, label, where, err)) return -1;
        }
        o->path = strdup(key);
        cfg->n_overrides++;
    }
    return 0;
}

// One list of longrope factors, [rope_dim / 2] numbers.
static int read_factors(json_t *scaling, const char *key, int n, float *out, const char *label, mx_error *err) {
    json_t *v = json_object_get(scaling, key);
    if (!json_is_array(v) || (int)json_array_size(v) != n)
        return mx_fail(err, "%s: rope_scaling.%s must be a list of %d numbers (rotary dimensions / 2)", label, key, n);
    for (int i = 0; i < n; i++) {
        json_t *e = json_array_get(v, (size_t)i);
        if (!json_is_number(e)) return mx_fail(err, "%s: rope_scaling.%s[%d] is not a number", label, key, i);
        out[i] = (float)json_number_value(e);
    }
    return 0;
}

// Phi-3's longrope ("su"): per-frequency factors for short and long contexts, and an attention
// factor derived from how far max_position_embeddings extends the original context.
static int read_longrope(json_t *root, json_t *scaling, mx_config *cfg, const char *label, mx_error *err) {
    cfg->rope_type = MX_ROPE_LONGROPE;
    int n = cfg->rope_dim / 2;
    double orig = 0, factor = 0, attn = 0;
    if (get_num(root, "original_max_position_embeddings", 0, &orig, label, err) ||
        get_num(scaling, "original_max_position_embeddings", orig, &orig, label, err) ||
        get_num(scaling, "factor", 0, &factor, label, err) || get_num(scaling, "attention_factor", 0, &attn, label, err))
        return -1;
    if (orig <= 1) return mx_fail(err, "%s: longrope needs original_max_position_embeddings", label);
    if (n > MX_MAX_ROPE_FACTORS) return mx_fail(err, "%s: longrope with %d rotary dimensions is too large", label, 2 * n);
    if (read_factors(scaling, "short_factor", n, cfg->rope_short_factor, label, err) ||
        read_factors(scaling, "long_factor", n, cfg->rope_long_factor, label, err))
        return -1;
    if (!json_object_get(scaling, "factor") || json_is_null(json_object_get(scaling, "factor")))
        factor = cfg->max_position_embeddings / orig;
    if (!json_object_get(scaling, "attention_factor") || json_is_null(json_object_get(scaling, "attention_factor")))
        attn = factor <= 1.0 ? 1.0 : sqrt(1.0 + log(factor) / log(orig));
    cfg->rope_original_max_pos = orig;
    cfg->rope_factor = factor;
    cfg->rope_attn_factor = attn;
    return 0;
}

// YaRN's magnitude correction: 0.1 * m * ln(scale) + 1 (1 when the context is not extended).
static double yarn_mscale(double scale, double m) { return scale <= 1.0 ? 1.0 : 0.1 * m * log(scale) + 1.0; }

// YaRN (transformers' _compute_yarn_parameters): the ramp between beta_fast and beta_slow rotations
// over the original context, and the attention factor that multiplies cos/sin (explicit, or
// mscale(factor, mscale) / mscale(factor, mscale_all_dim) when both are set, else mscale(factor)).
static int read_yarn(json_t *root, json_t *scaling, mx_config *cfg, const char *label, mx_error *err) {
    cfg->rope_type = MX_ROPE_YARN;
    double orig = 0, mscale = 0, attn = 0;
    if (get_num(root, "original_max_position_embeddings", cfg->max_position_embeddings, &orig, label, err) ||
        get_num(scaling, "original_max_position_embeddings", orig, &orig, label, err) ||
        get_num(scaling, "beta_fast", 32.0, &cfg->rope_beta_fast, label, err) ||
        get_num(scaling, "beta_slow", 1.0, &cfg->rope_beta_slow, label, err) ||
        get_num(scaling, "mscale", 0.0, &mscale, label, err) ||
        get_num(scaling, "mscale_all_dim", 0.0, &cfg->rope_mscale_all_dim, label, err) ||
        get_num(scaling, "attention_factor", 0.0, &attn, label, err) ||
        get_bool(scaling, "truncate", true, &cfg->rope_truncate, NULL, label, err))
        return -1;
    if (cfg->rope_beta_fast == 0) cfg->rope_beta_fast = 32.0;  // transformers: `or 32`, `or 1`
    if (cfg->rope_beta_slow == 0) cfg->rope_beta_slow = 1.0;
    if (orig < 1) return mx_fail(err, "%s: yarn needs original_max_position_embeddings", label);
    json_t *f = json_object_get(scaling, "factor");
    if (!f || json_is_null(f)) cfg->rope_factor = cfg->max_position_embeddings / orig;
    if (cfg->rope_factor <= 0) return mx_fail(err, "%s: rope_scaling.factor must be positive", label);
    if (cfg->rope_beta_fast <= 0 || cfg->rope_beta_slow <= 0)
        return mx_fail(err, "%s: rope_scaling beta_fast and beta_slow must be positive", label);
    json_t *a = json_object_get(scaling, "attention_factor");
    if (!a || json_is_null(a))
        attn = mscale != 0 && cfg->rope_mscale_all_dim != 0
                   ? yarn_mscale(cfg->rope_factor, mscale) / yarn_mscale(cfg->rope_factor, cfg->rope_mscale_all_dim)
                   : yarn_mscale(cfg->rope_factor, 1.0);
    cfg->rope_original_max_pos = orig;
    cfg->rope_attn_factor = attn;
    return 0;
}

static int read_rope(json_t *root, mx_config *cfg, const char *label, mx_error *err) {
    json_t *params = json_object_get(root, "rope_parameters");
    json_t *scaling = json_object_get(root, "rope_scaling");
    if (params && !json_is_object(params) && !json_is_null(params))
        return mx_fail(err, "%s: rope_parameters must be an object", label);
    if (scaling && !json_is_object(scaling) && !json_is_null(scaling))
        return mx_fail(err, "%s: rope_scaling must be an object or null", label);
    if (get_num(root, "rope_theta", 10000.0, &cfg->rope_theta, label, err)) return -1;
    if (json_is_object(params)) {
        if (get_num(params, "rope_theta", cfg->rope_theta, &cfg->rope_theta, label, err)) return -1;
        if (!json_is_object(scaling)) scaling = params;  // transformers 5 puts the type here too
    }
    cfg->rope_type = MX_ROPE_DEFAULT;
    if (!json_is_object(scaling)) return 0;
    json_t *t = json_object_get(scaling, "rope_type");
    if (!t) t = json_object_get(scaling, "type");
    const char *type = json_is_string(t) ? json_string_value(t) : "default";
    if (get_num(scaling, "factor", 1.0, &cfg->rope_factor, label, err)) return -1;
    if (strcmp(type, "default") == 0) return 0;
    if (strcmp(type, "linear") == 0) {
        cfg->rope_type = MX_ROPE_LINEAR;
        return 0;
    }
    if (strcmp(type, "llama3") == 0) {
        cfg->rope_type = MX_ROPE_LLAMA3;
        if (get_num(scaling, "low_freq_factor", 1.0, &cfg->rope_low_freq_factor, label, err) ||
            get_num(scaling, "high_freq_factor", 4.0, &cfg->rope_high_freq_factor, label, err) ||
            get_num(scaling, "original_max_position_embeddings", 8192, &cfg->rope_original_max_pos, label, err))
            return -1;
        if (cfg->rope_high_freq_factor <= cfg->rope_low_freq_factor)
            return mx_fail(err, "%s: rope_scaling: high_freq_factor must exceed low_freq_factor", label);
        return 0;
    }
    if (strcmp(type, "longrope") == 0 || strcmp(type, "su") == 0) return read_longrope(root, scaling, cfg, label, err);
    if (strcmp(type, "yarn") == 0) return read_yarn(root, scaling, cfg, label, err);
    return mx_fail(err, "%s: rope scaling type '%s' is not supported (supported: default, linear, llama3, longrope, yarn)",
                   label, type);
}

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
static int read_gemma(json_t *root, mx_config *cfg, const char *label, mx_error *err) {
    int pattern = 6;
    if (get_num(root, "query_pre_attn_scalar", 256, &cfg->query_pre_attn_scalar, label, err) ||
        get_int(root, "sliding_window", 4096, 1, &cfg->sliding_window, label, err) ||
        get_int(root, "sliding_window_pattern", 6, 1, &pattern, label, err) ||
        get_num(root, "rope_local_base_freq", 10000.0, &cfg->rope_local_theta, label, err))
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
static int read_gpt_oss(json_t *root, mx_config *cfg, const char *label, mx_error *err) {
    if (get_int(root, "num_local_experts", 0, 1, &cfg->num_experts, label, err) ||
        get_num(root, "swiglu_limit", 7.0, &cfg->swiglu_limit, label, err) ||
        get_int(root, "sliding_window", 128, 1, &cfg->sliding_window, label, err))
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
static int read_deepseek(json_t *root, mx_config *cfg, const char *label, mx_error *err) {
    json_t *ql = json_object_get(root, "q_lora_rank");
    if (get_int(root, "kv_lora_rank", 512, 1, &cfg->kv_lora_rank, label, err) ||
        (!json_is_null(ql) && get_int(root, "q_lora_rank", 1536, 1, &cfg->q_lora_rank, label, err)) ||
        get_int(root, "qk_nope_head_dim", 128, 1, &cfg->qk_nope_head_dim, label, err) ||
        get_int(root, "qk_rope_head_dim", 64, 2, &cfg->qk_rope_head_dim, label, err) ||
        get_int(root, "v_head_dim", 128, 1, &cfg->v_head_dim, label, err) ||
        get_int(root, "n_routed_experts", 256, 1, &cfg->num_experts, label, err) ||
        get_int(root, "n_group", 8, 1, &cfg->n_group, label, err) ||
        get_int(root, "topk_group", 4, 1, &cfg->topk_group, label, err) ||
        get_num(root, "routed_scaling_factor", 2.5, &cfg->routed_scaling_factor, label, err) ||
        get_int(root, "n_shared_experts", 1, 0, &cfg->n_shared_experts, label, err) ||
        get_int(root, "first_k_dense_replace", 3, 0, &cfg->first_k_dense_replace, label, err) ||
        get_int(root, "moe_layer_freq", 1, 1, &cfg->moe_layer_freq, label, err) ||
        get_bool(root, "norm_topk_prob", true, &cfg->norm_topk_prob, NULL, label, err))
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
    cfg->head_dim = cfg->qk_nope_head_dim + cfg->qk_rope_head_dim;
    cfg->rope_dim = cfg->qk_rope_head_dim;
    return 0;
}

// Phi-3: transformers applies `sliding_window` (when not null) to every layer (Phi-3-mini-4k: 2047).
static int read_phi3_window(json_t *root, mx_config *cfg, const char *label, mx_error *err) {
    if (get_int(root, "sliding_window", 0, 1, &cfg->sliding_window, label, err)) return -1;
    if (cfg->sliding_window == 0) return 0;
    cfg->layer_sliding = calloc((size_t)cfg->n_layers, sizeof(bool));
    if (!cfg->layer_sliding) return mx_fail(err, "out of memory");
    for (int i = 0; i < cfg->n_layers; i++) cfg->layer_sliding[i] = true;
    return 0;
}

int mx_config_parse(const char *text, const char *gen_text, const char *label, mx_config *cfg, mx_error *err) {
    memset(cfg, 0, sizeof *cfg);
    cfg->bos_id = -1;
    json_error_t jerr;
    json_t *root = mx_json_loads(text, 0, &jerr);
    if (!root) return mx_fail(err, "%s: not valid JSON: %s (line %d)", label, jerr.text, jerr.line);
    json_t *top = root;  // owned; root may move to text_config below
    int rc = -1;
    if (!json_is_object(root)) {
        mx_fail(err, "%s: not a JSON object", label);
        goto done;
    }
    json_t *mt = json_object_get(root, "model_type");
    if (!json_is_string(mt)) {
        mx_fail(err, "%s: missing 'model_type'", label);
        goto done;
    }
    snprintf(cfg->model_type, sizeof cfg->model_type, "%s", json_string_value(mt));
    // The top level keeps quantization and special tokens; a multimodal Gemma 3 checkpoint has the
    // language model's fields in text_config and its tensors under "language_model." (the vision
    // tower is not loaded).
    json_t *text_config = json_object_get(root, "text_config");
    if (strcmp(cfg->model_type, "gemma3") == 0) {
        if (!json_is_object(text_config)) {
            mx_fail(err, "%s: model_type gemma3 without a text_config object", label);
            goto done;
        }
        root = text_config;
        snprintf(cfg->model_type, sizeof cfg->model_type, "gemma3_text");
        snprintf(cfg->tensor_prefix, sizeof cfg->tensor_prefix, "language_model.");
    }
    // Gemma3TextConfig's defaults (text_config of published checkpoints omits many of them).
    bool gemma = strcmp(cfg->model_type, "gemma3_text") == 0;
    double eps = 1e-6;
    if (get_int(root, "vocab_size", gemma ? 262208 : 0, 1, &cfg->vocab_size, label, err) ||
        get_int(root, "hidden_size", 0, 1, &cfg->hidden_size, label, err) ||
        get_int(root, "intermediate_size", 0, 0, &cfg->intermediate_size, label, err) ||
        get_int(root, "num_hidden_layers", 0, 1, &cfg->n_layers, label, err) ||
        get_int(root, "num_attention_heads", gemma ? 8 : 0, 1, &cfg->n_heads, label, err) ||
        get_int(root, "num_key_value_heads", gemma ? 4 : cfg->n_heads, 1, &cfg->n_kv_heads, label, err) ||
        get_int(root, "head_dim", gemma ? 256 : 0, 0, &cfg->head_dim, label, err) ||
        get_int(root, "max_position_embeddings", 32768, 1, &cfg->max_position_embeddings, label, err) ||
        get_num(root, "rms_norm_eps", 1e-6, &eps, label, err) ||
        get_bool(root, "tie_word_embeddings", true, &cfg->tie_word_embeddings, &cfg->tie_set, label, err) ||
        get_bool(root, "attention_bias", false, &cfg->attention_bias, NULL, label, err) ||
        get_bool(root, "mlp_bias", false, &cfg->mlp_bias, NULL, label, err) ||
        get_int(root, "num_experts", 0, 0, &cfg->num_experts, label, err) ||
        get_int(root, "num_experts_per_tok", 0, 0, &cfg->num_experts_per_tok, label, err) ||
        get_int(root, "moe_intermediate_size", 0, 0, &cfg->moe_intermediate_size, label, err) ||
        get_int(root, "decoder_sparse_step", 1, 1, &cfg->decoder_sparse_step, label, err) ||
        get_bool(root, "norm_topk_prob", false, &cfg->norm_topk_prob, NULL, label, err) ||
        get_int(root, "bos_token_id", -1, -1, &cfg->bos_id, label, err))
        goto done;
    // Presence of the required sizes (zero means absent).
    const char *missing = !cfg->vocab_size ? "vocab_size" : !cfg->hidden_size ? "hidden_size"
                          : !cfg->n_layers ? "num_hidden_layers" : !cfg->n_heads ? "num_attention_heads" : NULL;
    if (missing) {
        mx_fail(err, "%s: missing '%s'", label, missing);
        goto done;
    }
    cfg->rms_norm_eps = (float)eps;
    if (cfg->head_dim == 0) cfg->head_dim = cfg->hidden_size / cfg->n_heads;
    if (cfg->n_heads % cfg->n_kv_heads != 0) {
        mx_fail(err, "%s: num_attention_heads (%d) is not a multiple of num_key_value_heads (%d)", label,
                cfg->n_heads, cfg->n_kv_heads);
        goto done;
    }
    if (cfg->head_dim % 2 != 0) {
        mx_fail(err, "%s: head_dim %d is odd (RoPE needs pairs)", label, cfg->head_dim);
        goto done;
    }
    json_t *mlp_only = json_object_get(root, "mlp_only_layers");
    if (json_is_array(mlp_only)) {
        cfg->mlp_only_layers = calloc(json_array_size(mlp_only) + 1, sizeof(int));
        size_t i;
        json_t *e;
        json_array_foreach(mlp_only, i, e) {
            if (json_is_integer(e)) cfg->mlp_only_layers[cfg->n_mlp_only_layers++] = (int)json_integer_value(e);
        }
    }
    double partial = 1.0;
    if (get_num(root, "partial_rotary_factor", 1.0, &partial, label, err)) goto done;
    cfg->rope_dim = (int)(cfg->head_dim * partial);
    if (partial <= 0 || partial > 1 || cfg->rope_dim % 2 != 0 || cfg->rope_dim == 0) {
        mx_fail(err, "%s: partial_rotary_factor %g gives %d rotary dimensions (must be even, 2..head_dim)", label, partial,
                cfg->rope_dim);
        goto done;
    }
    cfg->rope_attn_factor = 1.0;
    if ((strcmp(cfg->model_type, "deepseek_v3") == 0 && read_deepseek(root, cfg, label, err)) ||
        read_rope(root, cfg, label, err) || read_eos(top, cfg, label, err) || read_quantization(top, cfg, label, err) ||
        (gemma && read_gemma(root, cfg, label, err)) ||
        (strcmp(cfg->model_type, "phi3") == 0 && read_phi3_window(root, cfg, label, err)) ||
        (strcmp(cfg->model_type, "gpt_oss") == 0 && read_gpt_oss(root, cfg, label, err)))
        goto done;
    if (gen_text) {
        json_t *gen = mx_json_loads(gen_text, 0, &jerr);
        if (!gen || !json_is_object(gen)) {
            json_decref(gen);
            mx_fail(err, "generation_config.json: not a valid JSON object");
            goto done;
        }
        int r = read_eos(gen, cfg, "generation_config.json", err);
        json_decref(gen);
        if (r) goto done;
    }
    rc = 0;
done:
    json_decref(top);
    if (rc) mx_config_free(cfg);
    return rc;
}

int mx_config_load(const char *dir, mx_config *cfg, mx_error *err) {
    char path[4096], gpath[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    snprintf(gpath, sizeof gpath, "%s/generation_config.json", dir);
    char *text = mx_read_text_file(path, NULL, err);
    if (!text) return -1;
    char *gen = NULL;
    if (access(gpath, F_OK) == 0) {
        gen = mx_read_text_file(gpath, NULL, err);
        if (!gen) {
            free(text);
            return -1;
        }
    }
    int rc = mx_config_parse(text, gen, path, cfg, err);
    free(text);
    free(gen);
    return rc;
}

void mx_config_free(mx_config *cfg) {
    if (!cfg) return;
    for (int i = 0; i < cfg->n_overrides; i++) free(cfg->overrides[i].path);
    free(cfg->overrides);
    free(cfg->mlp_only_layers);
    free(cfg->layer_sliding);
    cfg->overrides = NULL;
    cfg->mlp_only_layers = NULL;
    cfg->layer_sliding = NULL;
    cfg->n_overrides = cfg->n_mlp_only_layers = 0;
}

mx_quant mx_config_quant_for(const mx_config *cfg, const char *path, bool has_scales) {
    mx_quant none = {MX_QUANT_NONE, 0, 0};
    for (int i = 0; i < cfg->n_overrides; i++) {
        if (strcmp(cfg->overrides[i].path, path) == 0)
            return cfg->overrides[i].disabled ? none : cfg->overrides[i].quant;
    }
    return (cfg->quantized && has_scales) ? cfg->quant : none;
}
