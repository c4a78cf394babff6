// SPDX-License-Identifier: MIT
// The quantization part of config.json: MLX's `quantization` (or `quantization_config`) object with
// its default format and per-path overrides, the refusal of other tools' methods, and the lookup
// that tells the loader which format one weight path has.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/hf_config_internal.h"

// One quantization spec object {group_size, bits[, mode]}.
static int parse_quant_spec(json_t *o, mx_quant *q, const char *label, const char *where, mx_error *err) {
    int bits = 0, group = 0;
    if (mx_config_get_int(o, "bits", 0, 0, &bits, label, err) ||
        mx_config_get_int(o, "group_size", 0, 0, &group, label, err))
        return -1;
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

int mx_config_read_quantization(json_t *root, mx_config *cfg, const char *label, mx_error *err) {
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

mx_quant mx_config_quant_for(const mx_config *cfg, const char *path, bool has_scales) {
    mx_quant none = {MX_QUANT_NONE, 0, 0};
    for (int i = 0; i < cfg->n_overrides; i++) {
        if (strcmp(cfg->overrides[i].path, path) == 0)
            return cfg->overrides[i].disabled ? none : cfg->overrides[i].quant;
    }
    return (cfg->quantized && has_scales) ? cfg->quant : none;
}
