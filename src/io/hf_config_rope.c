// SPDX-License-Identifier: MIT
// The RoPE part of config.json: rope_theta and the scaling in rope_scaling (or transformers 5's
// rope_parameters): linear, llama3, Phi-3's longrope with its per-frequency factors, and YaRN with
// its ramp and attention factor, each with transformers' defaults.
#include <math.h>
#include <string.h>

#include "io/hf_config_internal.h"

// One list of longrope factors, [rope_dim / 2] numbers.
static int read_factors(json_t *scaling, const char *key, int n, float *out, const char *label, mx_error *err) {
    json_t *v = json_object_get(scaling, key);
    if (!json_is_array(v) || (int)json_array_size(v) != n)
        return mx_fail(err, "%s: rope_scaling.%s must be a list of %d numbers (rotary dimensions / 2, from head_dim and "
                       "partial_rotary_factor)", label, key, n);
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
    if (mx_config_get_num(root, "original_max_position_embeddings", 0, &orig, label, err) ||
        mx_config_get_num(scaling, "original_max_position_embeddings", orig, &orig, label, err) ||
        mx_config_get_num(scaling, "factor", 0, &factor, label, err) ||
        mx_config_get_num(scaling, "attention_factor", 0, &attn, label, err))
        return -1;
    // A position: the long factors apply from it on (an int in the RoPE record).
    if (orig <= 1 || orig > 1 << 30)
        return mx_fail(err, "%s: longrope needs original_max_position_embeddings (2..2^30), not %g", label, orig);
    if (n > MX_MAX_ROPE_FACTORS)
        return mx_fail(err, "%s: longrope with %d rotary dimensions (of head_dim %d) is more than %d", label, 2 * n,
                       cfg->head_dim, 2 * MX_MAX_ROPE_FACTORS);
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
    if (mx_config_get_num(root, "original_max_position_embeddings", cfg->max_position_embeddings, &orig, label, err) ||
        mx_config_get_num(scaling, "original_max_position_embeddings", orig, &orig, label, err) ||
        mx_config_get_num(scaling, "beta_fast", 32.0, &cfg->rope_beta_fast, label, err) ||
        mx_config_get_num(scaling, "beta_slow", 1.0, &cfg->rope_beta_slow, label, err) ||
        mx_config_get_num(scaling, "mscale", 0.0, &mscale, label, err) ||
        mx_config_get_num(scaling, "mscale_all_dim", 0.0, &cfg->rope_mscale_all_dim, label, err) ||
        mx_config_get_num(scaling, "attention_factor", 0.0, &attn, label, err) ||
        mx_config_get_bool(scaling, "truncate", true, &cfg->rope_truncate, NULL, label, err))
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

int mx_config_read_rope(json_t *root, mx_config *cfg, const char *label, mx_error *err) {
    json_t *params = json_object_get(root, "rope_parameters");
    json_t *scaling = json_object_get(root, "rope_scaling");
    if (params && !json_is_object(params) && !json_is_null(params))
        return mx_fail(err, "%s: rope_parameters must be an object", label);
    if (scaling && !json_is_object(scaling) && !json_is_null(scaling))
        return mx_fail(err, "%s: rope_scaling must be an object or null", label);
    if (mx_config_get_num(root, "rope_theta", 10000.0, &cfg->rope_theta, label, err)) return -1;
    if (json_is_object(params)) {
        if (mx_config_get_num(params, "rope_theta", cfg->rope_theta, &cfg->rope_theta, label, err)) return -1;
        if (!json_is_object(scaling)) scaling = params;  // transformers 5 puts the type here too
    }
    cfg->rope_type = MX_ROPE_DEFAULT;
    if (!json_is_object(scaling)) return 0;
    json_t *t = json_object_get(scaling, "rope_type");
    if (!t) t = json_object_get(scaling, "type");
    const char *type = json_is_string(t) ? json_string_value(t) : "default";
    if (mx_config_get_num(scaling, "factor", 1.0, &cfg->rope_factor, label, err)) return -1;
    if (strcmp(type, "default") == 0) return 0;
    if (strcmp(type, "linear") == 0) {
        cfg->rope_type = MX_ROPE_LINEAR;
        return 0;
    }
    if (strcmp(type, "llama3") == 0) {
        cfg->rope_type = MX_ROPE_LLAMA3;
        if (mx_config_get_num(scaling, "low_freq_factor", 1.0, &cfg->rope_low_freq_factor, label, err) ||
            mx_config_get_num(scaling, "high_freq_factor", 4.0, &cfg->rope_high_freq_factor, label, err) ||
            mx_config_get_num(scaling, "original_max_position_embeddings", 8192, &cfg->rope_original_max_pos, label, err))
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
