// SPDX-License-Identifier: MIT
// Loading a model folder: config.json checked against its family, then the weights layer by layer
// (load_layer here; the parts in load_attention.c, load_latent.c, load_gpt_oss.c, load_tensors.c),
// the RoPE tables, and the model's public accessors and free. One loader serves every family: the
// family table (family.h) says which optional tensors a layer must have (q/k norms, attention
// biases) and whether its MLP is a mixture of experts.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "io/json_text.h"
#include "io/mapped_file.h"
#include "models/load_internal.h"

const char *mx_model_supported_types(void) { return mx_family_names(true); }

static int load_layer(mx_model *m, const mx_family *fam, int i, mx_error *err) {
    const mx_config *c = &m->cfg;
    mx_layer *L = &m->layers[i];
    char p[256], name[512];
    snprintf(p, sizeof p, "model.layers.%d", i);
    int64_t H = c->hidden_size;
#define PATH(suffix) (snprintf(name, sizeof name, "%s.%s", p, suffix), name)
    if (mx_load_norm(m, PATH("input_layernorm.weight"), H, true, &L->attn_norm, err)) return -1;
    if (fam->gemma) {
        if (mx_load_norm(m, PATH("post_attention_layernorm.weight"), H, true, &L->post_attn_norm, err) ||
            mx_load_norm(m, PATH("pre_feedforward_layernorm.weight"), H, true, &L->ffn_norm, err) ||
            mx_load_norm(m, PATH("post_feedforward_layernorm.weight"), H, true, &L->post_ffn_norm, err))
            return -1;
    } else if (mx_load_norm(m, PATH("post_attention_layernorm.weight"), H, true, &L->ffn_norm, err)) {
        return -1;
    }
    L->sliding = c->layer_sliding && c->layer_sliding[i];
    if (fam->latent_attention ? mx_load_latent_attention(m, p, L, err) : mx_load_attention(m, fam, p, L, err)) return -1;
    L->moe = mx_family_layer_is_moe(fam, c, i);
    if (L->moe) {
        char mlp[300];
        snprintf(mlp, sizeof mlp, "%s.mlp", p);
        if (fam->expert_biases) return mx_load_gpt_oss_moe(m, fam, mlp, L, err);
        int64_t E = c->num_experts, I = c->moe_intermediate_size, IS = I * c->n_shared_experts;
        if (c->n_group > 0 && mx_load_vector(m, PATH("mlp.gate.e_score_correction_bias"), E, true, &L->router_bias, err))
            return -1;
        if (IS > 0 && (mx_load_matrix(m, PATH("mlp.shared_experts.gate_proj"), IS, H, &L->s_gate, err) ||
                       mx_load_matrix(m, PATH("mlp.shared_experts.up_proj"), IS, H, &L->s_up, err) ||
                       mx_load_matrix(m, PATH("mlp.shared_experts.down_proj"), H, IS, &L->s_down, err)))
            return -1;
        return mx_load_matrix(m, PATH(mx_family_router(fam)), E, H, &L->router, err) ||
               mx_load_experts(m, mlp, "gate_proj", E, I, H, &L->e_gate, err) ||
               mx_load_experts(m, mlp, "up_proj", E, I, H, &L->e_up, err) ||
               mx_load_experts(m, mlp, "down_proj", E, H, I, &L->e_down, err);
    }
    int64_t I = c->intermediate_size;
    if (fam->fused_qkv_gate_up) {
        int64_t rows[2] = {I, I};
        mx_matrix *parts[2] = {&L->w_gate, &L->w_up};
        if (mx_load_split_rows(m, PATH("mlp.gate_up_proj"), H, 2, rows, parts, err) ||
            mx_load_matrix(m, PATH("mlp.down_proj"), H, I, &L->w_down, err))
            return -1;
    } else if (mx_load_matrix(m, PATH("mlp.gate_proj"), I, H, &L->w_gate, err) ||
        mx_load_matrix(m, PATH("mlp.up_proj"), I, H, &L->w_up, err) ||
        mx_load_matrix(m, PATH("mlp.down_proj"), H, I, &L->w_down, err))
        return -1;
    return mx_load_vector(m, PATH("mlp.gate_proj.bias"), I, c->mlp_bias, &L->b_gate, err) ||
           mx_load_vector(m, PATH("mlp.up_proj.bias"), I, c->mlp_bias, &L->b_up, err) ||
           mx_load_vector(m, PATH("mlp.down_proj.bias"), H, c->mlp_bias, &L->b_down, err);
#undef PATH
}

static int check_config(const mx_config *c, const mx_family *fam, mx_error *err) {
    if (fam->moe && (c->num_experts <= 0 || c->num_experts_per_tok <= 0 || c->moe_intermediate_size <= 0 ||
                     c->num_experts_per_tok > c->num_experts || c->num_experts > 1024))
        return mx_fail(err, "config.json: %s needs %s (1..1024), num_experts_per_tok (1..%s) and moe_intermediate_size",
                       fam->model_type, fam->n_experts_key ? fam->n_experts_key : "num_experts",
                       fam->n_experts_key ? fam->n_experts_key : "num_experts");
    if ((!fam->moe || c->first_k_dense_replace > 0) && c->intermediate_size <= 0)
        return mx_fail(err, "config.json: missing 'intermediate_size'");
    if (fam->latent_attention && c->kv_lora_rank <= 0)
        return mx_fail(err, "config.json: %s needs kv_lora_rank", fam->model_type);
    if (c->head_dim > 512) return mx_fail(err, "config.json: head_dim %d is larger than 512", c->head_dim);
    if (c->rms_norm_eps <= 0) return mx_fail(err, "config.json: rms_norm_eps must be positive");
    if (c->rope_theta <= 0) return mx_fail(err, "config.json: rope_theta must be positive");
    return 0;
}

static int fail_not_running(const char *dir, const char *model_type, mx_error *err) {
    return mx_fail(err, "%s/config.json: model_type '%s' is not supported yet: its forward pass is not implemented "
                        "(mlxcel convert handles it; supported: %s)",
                   dir, model_type, mx_model_supported_types());
}

// When config.json does not parse into mx_config, a family whose forward pass is not written yet is
// the more useful thing to report: its config may use what only that forward pass would need (for
// example YaRN RoPE). Otherwise err keeps the parser's message.
static void explain_config_failure(const char *dir, mx_error *err) {
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    mx_error ignored = {{0}};
    char *text = mx_read_text_file(path, NULL, &ignored);
    json_error_t je;
    json_t *root = text ? mx_json_loads(text, 0, &je) : NULL;
    const mx_family *fam = mx_family_find(json_string_value(json_object_get(root, "model_type")));
    if (fam && !fam->runs) fail_not_running(dir, fam->model_type, err);
    json_decref(root);
    free(text);
}

static int model_load_into(mx_model *m, const char *dir, mx_error *err) {
    if (mx_config_load(dir, &m->cfg, err)) {
        explain_config_failure(dir, err);
        return -1;
    }
    const mx_family *fam = mx_family_find(m->cfg.model_type);
    if (fam && !fam->runs) return fail_not_running(dir, m->cfg.model_type, err);
    if (!fam)
        return mx_fail(err, "%s/config.json: unsupported model_type '%s' (supported: %s)", dir, m->cfg.model_type,
                       mx_model_supported_types());
    if (check_config(&m->cfg, fam, err)) return -1;
    m->family = fam;
    m->st = mx_st_open_dir(dir, err);
    if (!m->st || mx_load_check_config(m, err)) return -1;
    const mx_config *c = &m->cfg;
    if (mx_load_matrix(m, "model.embed_tokens", c->vocab_size, c->hidden_size, &m->embed, err) ||
        mx_load_norm(m, "model.norm.weight", c->hidden_size, true, &m->final_norm, err))
        return -1;
    bool has_head = mx_load_find(m, "lm_head.weight", "") != NULL;
    m->tied = !has_head || (c->tie_set && c->tie_word_embeddings);
    if (m->tied) {
        m->lm_head = m->embed;
    } else if (mx_load_matrix(m, "lm_head", c->vocab_size, c->hidden_size, &m->lm_head, err)) {
        return -1;
    }
    m->layers = calloc(c->n_layers, sizeof *m->layers);
    if (!m->layers) return mx_fail(err, "out of memory");
    for (int i = 0; i < c->n_layers; i++)
        if (load_layer(m, fam, i, err)) return -1;
    // Gemma scales embeddings by sqrt(hidden) (in float32, as the float32 reference does).
    m->embed_scale = fam->gemma ? sqrtf((float)c->hidden_size) : 1.0f;
    // RoPE: the main table, plus Gemma's local one or longrope's long one.
    int half = c->rope_dim / 2;
    float inv[2 * 256];
    mx_rope_inv_freq(c, MX_ROPE_TABLE_MAIN, inv);
    bool second = fam->gemma || c->rope_type == MX_ROPE_LONGROPE;
    if (second) mx_rope_inv_freq(c, fam->gemma ? MX_ROPE_TABLE_LOCAL : MX_ROPE_TABLE_LONG, inv + half);
    // rope_theta, rope_local_base_freq and the scaling factors must give finite positive frequencies
    // (a base of 1e-300 or a factor of 0 made them infinite, and every activation NaN).
    for (int i = 0; i < half * (second ? 2 : 1); i++)
        if (!isfinite(inv[i]) || !(inv[i] > 0))
            return mx_fail(err, "config.json: RoPE frequency %d is %g (from rope_theta %g%s and rope_scaling; it must be "
                                "finite and positive)", i, inv[i], c->rope_theta, fam->gemma ? ", rope_local_base_freq" : "");
    size_t bytes = sizeof(float) * (size_t)half * (second ? 2 : 1);
    m->rope_inv_freq = m->be->ops->alloc(m->be, bytes, err);
    if (!m->rope_inv_freq || mx_load_keep_backend(m, m->rope_inv_freq, err)) return -1;
    if (m->be->ops->upload(m->be, m->rope_inv_freq, inv, bytes, err)) return -1;
    m->rope = (mx_rope){.inv_freq = m->rope_inv_freq, .head_dim = c->head_dim, .attn_factor = (float)c->rope_attn_factor,
                        .rot_dim = c->rope_dim};
    if (c->rope_type == MX_ROPE_LONGROPE) {
        m->rope.long_inv_freq = m->rope_inv_freq + half;
        m->rope.long_from = (int)c->rope_original_max_pos;
    }
    m->rope_local = m->rope;
    if (fam->gemma)
        m->rope_local = (mx_rope){.inv_freq = m->rope_inv_freq + half, .head_dim = c->head_dim, .attn_factor = 1.0f,
                                  .rot_dim = c->rope_dim};
    return m->be->ops->sync(m->be, err);
}

mx_model *mx_model_load(const char *dir, mx_backend *be, mx_error *err) {
    mx_model *m = calloc(1, sizeof *m);
    if (!m) {
        mx_fail(err, "out of memory");
        return NULL;
    }
    m->be = be;
    m->dir = strdup(dir);
    if (model_load_into(m, dir, err) != 0) {
        mx_model_free(m);
        return NULL;
    }
    return m;
}

void mx_model_free(mx_model *m) {
    if (!m) return;
    for (int i = 0; i < m->n_matrices; i++) m->be->ops->release_matrix(m->be, m->matrices[i]);
    for (int i = 0; i < m->n_backend_bufs; i++) m->be->ops->release(m->be, m->backend_bufs[i]);
    for (int i = 0; i < m->n_host_bufs; i++) free(m->host_bufs[i]);
    free(m->matrices);
    free(m->backend_bufs);
    free(m->host_bufs);
    free(m->layers);
    mx_st_close(m->st);
    mx_config_free(&m->cfg);
    free(m->dir);
    free(m);
}

const mx_config *mx_model_config(const mx_model *m) { return &m->cfg; }
mx_backend *mx_model_backend(const mx_model *m) { return m->be; }
const char *mx_model_dir(const mx_model *m) { return m->dir; }
int64_t mx_model_weight_bytes(const mx_model *m) { return m->weight_bytes; }

int64_t mx_model_dense_intermediate(const mx_model *m) {
    for (int i = 0; i < m->cfg.n_layers; i++)
        if (!m->layers[i].moe) return m->cfg.intermediate_size;
    return 0;
}

bool mx_model_is_eos(const mx_model *m, int32_t id) {
    for (int i = 0; i < m->cfg.n_eos; i++)
        if (m->cfg.eos_ids[i] == id) return true;
    return false;
}
