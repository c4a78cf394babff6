// SPDX-License-Identifier: MIT
// config.json parsing (see hf_config.h): the fields every family has, the multimodal Gemma 3
// wrapper, eos tokens (also from generation_config.json), then the parts in their own files: RoPE
// (hf_config_rope.c), quantization (hf_config_quant.c) and the family-specific fields
// (hf_config_family.c). Missing fields take the defaults mlx-lm uses; wrong types and impossible
// values are errors naming the field.
#include "io/hf_config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/hf_config_internal.h"
#include "io/json_text.h"
#include "io/mapped_file.h"

// eos_token_id: an int or a list of ints; replaces cfg's list when present.
static int read_eos(json_t *o, mx_config *cfg, const char *label, mx_error *err) {
    json_t *v = json_object_get(o, "eos_token_id");
    if (!v || json_is_null(v)) return 0;
    cfg->n_eos = 0;
    // A token id is an int32 (an id past it would wrap into another token).
    if (json_is_integer(v)) {
        if (json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX)
            return mx_fail(err, "%s: eos_token_id %lld is not a token id", label, (long long)json_integer_value(v));
        cfg->eos_ids[cfg->n_eos++] = (int32_t)json_integer_value(v);
        return 0;
    }
    if (!json_is_array(v)) return mx_fail(err, "%s: eos_token_id must be an integer or a list", label);
    size_t i;
    json_t *e;
    json_array_foreach(v, i, e) {
        if (!json_is_integer(e) || json_integer_value(e) < 0 || json_integer_value(e) > INT32_MAX)
            return mx_fail(err, "%s: eos_token_id[%zu] is not a token id", label, i);
        if (cfg->n_eos < MX_MAX_EOS) cfg->eos_ids[cfg->n_eos++] = (int32_t)json_integer_value(e);
    }
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
    if (mx_config_get_int(root, "vocab_size", gemma ? 262208 : 0, 1, &cfg->vocab_size, label, err) ||
        mx_config_get_int(root, "hidden_size", 0, 1, &cfg->hidden_size, label, err) ||
        mx_config_get_int(root, "intermediate_size", 0, 0, &cfg->intermediate_size, label, err) ||
        mx_config_get_int(root, "num_hidden_layers", 0, 1, &cfg->n_layers, label, err) ||
        mx_config_get_int(root, "num_attention_heads", gemma ? 8 : 0, 1, &cfg->n_heads, label, err) ||
        mx_config_get_int(root, "num_key_value_heads", gemma ? 4 : cfg->n_heads, 1, &cfg->n_kv_heads, label, err) ||
        mx_config_get_int(root, "head_dim", gemma ? 256 : 0, 0, &cfg->head_dim, label, err) ||
        mx_config_get_int(root, "max_position_embeddings", 32768, 1, &cfg->max_position_embeddings, label, err) ||
        mx_config_get_num(root, "rms_norm_eps", 1e-6, &eps, label, err) ||
        mx_config_get_bool(root, "tie_word_embeddings", true, &cfg->tie_word_embeddings, &cfg->tie_set, label, err) ||
        mx_config_get_bool(root, "attention_bias", false, &cfg->attention_bias, NULL, label, err) ||
        mx_config_get_bool(root, "mlp_bias", false, &cfg->mlp_bias, NULL, label, err) ||
        mx_config_get_int(root, "num_experts", 0, 0, &cfg->num_experts, label, err) ||
        mx_config_get_int(root, "num_experts_per_tok", 0, 0, &cfg->num_experts_per_tok, label, err) ||
        mx_config_get_int(root, "moe_intermediate_size", 0, 0, &cfg->moe_intermediate_size, label, err) ||
        mx_config_get_int(root, "decoder_sparse_step", 1, 1, &cfg->decoder_sparse_step, label, err) ||
        mx_config_get_bool(root, "norm_topk_prob", false, &cfg->norm_topk_prob, NULL, label, err) ||
        mx_config_get_int(root, "bos_token_id", -1, -1, &cfg->bos_id, label, err))
        goto done;
    // Presence of the required sizes (zero means absent).
    const char *missing = !cfg->vocab_size ? "vocab_size" : !cfg->hidden_size ? "hidden_size"
                          : !cfg->n_layers ? "num_hidden_layers" : !cfg->n_heads ? "num_attention_heads" : NULL;
    if (missing) {
        mx_fail(err, "%s: missing '%s'", label, missing);
        goto done;
    }
    if (cfg->n_layers > MX_CONFIG_MAX_LAYERS) {
        mx_fail(err, "%s: field 'num_hidden_layers' = %d is more than %d", label, cfg->n_layers, MX_CONFIG_MAX_LAYERS);
        goto done;
    }
    cfg->rms_norm_eps = (float)eps;
    // DeepSeek's heads are sized by its own fields (mx_config_read_deepseek): the checks of head_dim
    // here are for the other families.
    bool latent = strcmp(cfg->model_type, "deepseek_v3") == 0;
    char head_from[96] = "";
    if (cfg->head_dim == 0) {
        cfg->head_dim = cfg->hidden_size / cfg->n_heads;
        snprintf(head_from, sizeof head_from, " (hidden_size %d / num_attention_heads %d)", cfg->hidden_size, cfg->n_heads);
    }
    if (cfg->n_heads % cfg->n_kv_heads != 0) {
        mx_fail(err, "%s: num_attention_heads (%d) is not a multiple of num_key_value_heads (%d)", label,
                cfg->n_heads, cfg->n_kv_heads);
        goto done;
    }
    if (!latent && cfg->head_dim % 2 != 0) {
        mx_fail(err, "%s: head_dim %d%s is odd (RoPE needs pairs)", label, cfg->head_dim, head_from);
        goto done;
    }
    json_t *mlp_only = json_object_get(root, "mlp_only_layers");
    if (json_is_array(mlp_only)) {
        cfg->mlp_only_layers = calloc(json_array_size(mlp_only) + 1, sizeof(int));
        if (!cfg->mlp_only_layers) {
            mx_fail(err, "out of memory");
            goto done;
        }
        size_t i;
        json_t *e;
        json_array_foreach(mlp_only, i, e) {  // (a number past the layers names no layer)
            if (json_is_integer(e) && json_integer_value(e) >= 0 && json_integer_value(e) < cfg->n_layers)
                cfg->mlp_only_layers[cfg->n_mlp_only_layers++] = (int)json_integer_value(e);
        }
    }
    double partial = 1.0;
    if (mx_config_get_num(root, "partial_rotary_factor", 1.0, &partial, label, err)) goto done;
    // In (0, 1] before the product is made an int (a factor of 1e21 made it undefined).
    cfg->rope_dim = partial > 0 && partial <= 1 ? (int)(cfg->head_dim * partial) : 0;
    if (!latent && (partial <= 0 || partial > 1 || cfg->rope_dim % 2 != 0 || cfg->rope_dim == 0)) {
        mx_fail(err, "%s: partial_rotary_factor %g of head_dim %d%s gives %d rotary dimensions (must be even, 2..head_dim)",
                label, partial, cfg->head_dim, head_from, cfg->rope_dim);
        goto done;
    }
    cfg->rope_attn_factor = 1.0;
    if ((strcmp(cfg->model_type, "deepseek_v3") == 0 && mx_config_read_deepseek(root, cfg, label, err)) ||
        mx_config_read_rope(root, cfg, label, err) || read_eos(top, cfg, label, err) ||
        mx_config_read_quantization(top, cfg, label, err) ||
        (gemma && mx_config_read_gemma(root, cfg, label, err)) ||
        (strcmp(cfg->model_type, "phi3") == 0 && mx_config_read_phi3_window(root, cfg, label, err)) ||
        (strcmp(cfg->model_type, "gpt_oss") == 0 && mx_config_read_gpt_oss(root, cfg, label, err)))
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
