// SPDX-License-Identifier: MIT
// config.json's sizes checked against the weights before anything is sized from them: the number
// of layers (the layer table is allocated from num_hidden_layers), which layers are mixtures of
// experts, and the shapes of the embedding and of the first layers' projections against vocab_size,
// hidden_size, the head counts and widths, intermediate_size, the expert counts and the latent
// widths. A wrong or hostile config is reported
// by the field it got wrong, with the tensor that disagrees, instead of an allocation sized by it.
// The per-tensor shape checks of the loader (load_format.c) still cover every other tensor.
#include <stdio.h>

#include "models/load_internal.h"

// The logical [rows, cols] of matrix `path` (the last two dimensions of `.weight`; a quantized
// weight's packed columns unpacked by its bits), and its leading dimension when it has three
// (stacked experts; else 0). Returns false when the tensor is absent or has fewer than 2 dims.
static bool matrix_dims(const mx_model *m, const char *path, int64_t *rows, int64_t *cols, int64_t *lead,
                        const char **name) {
    const mx_st_tensor *t = mx_load_find(m, path, ".weight");
    if (!t) t = mx_load_find(m, path, "");  // gpt_oss's Hub layout names its experts without .weight
    if (!t || t->ndim < 2 || t->ndim > 3) return false;
    *name = t->name;
    mx_quant q = mx_config_quant_for(&m->cfg, path, mx_load_find(m, path, ".scales") != NULL);
    // A quantized weight that is not U32 codes is left to the loader's dtype check.
    if (q.mode != MX_QUANT_NONE && (t->dtype != MX_DTYPE_U32 || q.bits <= 0)) return false;
    *rows = t->shape[t->ndim - 2];
    *cols = t->shape[t->ndim - 1];
    if (q.mode != MX_QUANT_NONE) *cols = *cols * 32 / q.bits;
    *lead = t->ndim == 3 ? t->shape[0] : 0;
    return true;
}

// Fails naming the config field(s) `what` (whose value is want) when got differs.
static int agree(int64_t want, int64_t got, const char *what, const char *tensor, const char *dim, mx_error *err) {
    if (want == got) return 0;
    return mx_fail(err, "config.json: %s is %lld but tensor '%s' has %lld %s", what, (long long)want, tensor,
                   (long long)got, dim);
}

static int check_attention(const mx_model *m, const char *p, mx_error *err) {
    const mx_config *c = &m->cfg;
    char path[512], what[160];
    int64_t rows, cols, lead;
    const char *name = NULL;
    if (m->family->latent_attention) {
        if (c->q_lora_rank > 0) {
            snprintf(path, sizeof path, "%s.self_attn.q_a_proj", p);
            if (matrix_dims(m, path, &rows, &cols, &lead, &name) && agree(c->q_lora_rank, rows, "q_lora_rank", name, "rows", err))
                return -1;
        }
        snprintf(path, sizeof path, "%s.self_attn.%s", p, c->q_lora_rank > 0 ? "q_b_proj" : "q_proj");
        snprintf(what, sizeof what, "num_attention_heads (%d) x (qk_nope_head_dim (%d) + qk_rope_head_dim (%d))", c->n_heads,
                 c->qk_nope_head_dim, c->qk_rope_head_dim);
        if (matrix_dims(m, path, &rows, &cols, &lead, &name) &&
            agree((int64_t)c->n_heads * (c->qk_nope_head_dim + c->qk_rope_head_dim), rows, what, name, "rows", err))
            return -1;
        snprintf(path, sizeof path, "%s.self_attn.kv_a_proj_with_mqa", p);
        if (matrix_dims(m, path, &rows, &cols, &lead, &name) &&
            agree((int64_t)c->kv_lora_rank + c->qk_rope_head_dim, rows, "kv_lora_rank + qk_rope_head_dim", name, "rows", err))
            return -1;
        snprintf(path, sizeof path, "%s.self_attn.o_proj", p);
        snprintf(what, sizeof what, "num_attention_heads (%d) x v_head_dim (%d)", c->n_heads, c->v_head_dim);
        if (matrix_dims(m, path, &rows, &cols, &lead, &name) && agree((int64_t)c->n_heads * c->v_head_dim, cols, what, name, "columns", err))
            return -1;
        return 0;
    }
    if (m->family->fused_qkv_gate_up) {
        snprintf(path, sizeof path, "%s.self_attn.qkv_proj", p);
        snprintf(what, sizeof what, "(num_attention_heads (%d) + 2 x num_key_value_heads (%d)) x head_dim (%d)", c->n_heads,
                 c->n_kv_heads, c->head_dim);
        return matrix_dims(m, path, &rows, &cols, &lead, &name) &&
                       agree(((int64_t)c->n_heads + 2 * (int64_t)c->n_kv_heads) * c->head_dim, rows, what, name, "rows", err)
                   ? -1
                   : 0;
    }
    snprintf(path, sizeof path, "%s.self_attn.q_proj", p);
    snprintf(what, sizeof what, "num_attention_heads (%d) x head_dim (%d)", c->n_heads, c->head_dim);
    if (matrix_dims(m, path, &rows, &cols, &lead, &name) && agree((int64_t)c->n_heads * c->head_dim, rows, what, name, "rows", err))
        return -1;
    snprintf(path, sizeof path, "%s.self_attn.k_proj", p);
    snprintf(what, sizeof what, "num_key_value_heads (%d) x head_dim (%d)", c->n_kv_heads, c->head_dim);
    if (matrix_dims(m, path, &rows, &cols, &lead, &name) && agree((int64_t)c->n_kv_heads * c->head_dim, rows, what, name, "rows", err))
        return -1;
    snprintf(path, sizeof path, "%s.self_attn.q_norm.weight", p);
    const mx_st_tensor *qn = mx_load_find(m, path, "");
    if (qn && qn->ndim == 1 && agree(c->head_dim, qn->shape[0], "head_dim", qn->name, "elements", err)) return -1;
    return 0;
}

static int check_mlp(const mx_model *m, const char *p, bool moe, mx_error *err) {
    const mx_config *c = &m->cfg;
    char path[512], what[160];
    int64_t rows, cols, lead;
    const char *name = NULL;
    if (!moe) {
        if (m->family->fused_qkv_gate_up) {
            snprintf(path, sizeof path, "%s.mlp.gate_up_proj", p);
            return matrix_dims(m, path, &rows, &cols, &lead, &name) &&
                           agree(2 * (int64_t)c->intermediate_size, rows, "2 x intermediate_size", name, "rows", err)
                       ? -1
                       : 0;
        }
        snprintf(path, sizeof path, "%s.mlp.gate_proj", p);
        return matrix_dims(m, path, &rows, &cols, &lead, &name) &&
                       agree(c->intermediate_size, rows, "intermediate_size", name, "rows", err)
                   ? -1
                   : 0;
    }
    snprintf(path, sizeof path, "%s.%s", p, mx_family_router(m->family));
    const char *experts = m->family->n_experts_key ? m->family->n_experts_key : "num_experts";
    if (matrix_dims(m, path, &rows, &cols, &lead, &name) && agree(c->num_experts, rows, experts, name, "rows", err)) return -1;
    // gpt_oss reads its experts' width from intermediate_size.
    const char *width = m->family->expert_biases ? "intermediate_size" : "moe_intermediate_size";
    static const char *const stacks[] = {"switch_mlp.gate_proj", "experts.gate_proj", "experts.gate_up_proj"};
    for (int k = 0; k < 3; k++) {
        snprintf(path, sizeof path, "%s.mlp.%s", p, stacks[k]);
        if (!matrix_dims(m, path, &rows, &cols, &lead, &name) || lead == 0) continue;
        if (agree(c->num_experts, lead, experts, name, "experts (its first dimension)", err)) return -1;
        if (k < 2 && agree(c->moe_intermediate_size, rows, width, name, "rows", err)) return -1;
        if (k == 2 && agree(2 * (int64_t)c->moe_intermediate_size, cols, "2 x intermediate_size", name, "columns", err))
            return -1;
        break;
    }
    snprintf(path, sizeof path, "%s.mlp.shared_experts.gate_proj", p);
    if (c->n_shared_experts == 0 && matrix_dims(m, path, &rows, &cols, &lead, &name))
        return mx_fail(err, "config.json: n_shared_experts is 0 but the weights have '%s'", name);
    if (c->n_shared_experts > 0) {
        snprintf(path, sizeof path, "%s.mlp.shared_experts.gate_proj", p);
        snprintf(what, sizeof what, "moe_intermediate_size (%d) x n_shared_experts (%d)", c->moe_intermediate_size,
                 c->n_shared_experts);
        if (matrix_dims(m, path, &rows, &cols, &lead, &name) &&
            agree((int64_t)c->moe_intermediate_size * c->n_shared_experts, rows, what, name, "rows", err))
            return -1;
    }
    return 0;
}

int mx_load_check_config(const mx_model *m, mx_error *err) {
    const mx_config *c = &m->cfg;
    char path[512];
    int64_t rows, cols, lead;
    const char *name = NULL;
    // The last layer must exist (its first norm is in every family), and unless the family's
    // checkpoints carry extra layers (DeepSeek's multi-token prediction), none after it.
    snprintf(path, sizeof path, "model.layers.%d.input_layernorm.weight", c->n_layers - 1);
    if (!mx_load_find(m, path, ""))
        return mx_fail(err, "config.json: num_hidden_layers is %d but the weights have no layer %d (missing tensor '%s%s')",
                       c->n_layers, c->n_layers - 1, c->tensor_prefix, path);
    snprintf(path, sizeof path, "model.layers.%d.input_layernorm.weight", c->n_layers);
    if (!m->family->drop_extra_layers && mx_load_find(m, path, ""))
        return mx_fail(err, "config.json: num_hidden_layers is %d but the weights have more layers (tensor '%s%s')",
                       c->n_layers, c->tensor_prefix, path);
    if (matrix_dims(m, "model.embed_tokens", &rows, &cols, &lead, &name) &&
        (agree(c->vocab_size, rows, "vocab_size", name, "rows", err) ||
         agree(c->hidden_size, cols, "hidden_size", name, "columns", err)))
        return -1;
    if (check_attention(m, "model.layers.0", err)) return -1;
    // Which layers are mixtures of experts (the config decides) against the weights: a dense layer
    // has its gate projection, an MoE layer its router. Then the sizes of the first of each kind.
    bool seen[2] = {false, false};
    for (int i = 0; i < c->n_layers; i++) {
        bool moe = mx_family_layer_is_moe(m->family, c, i);
        const char *part = moe ? mx_family_router(m->family) : m->family->fused_qkv_gate_up ? "mlp.gate_up_proj" : "mlp.gate_proj";
        snprintf(path, sizeof path, "model.layers.%d.%s", i, part);
        if (!mx_load_find(m, path, ".weight") && m->family->moe)
            return mx_fail(err, "config.json: num_hidden_layers %d, first_k_dense_replace %d, moe_layer_freq %d, "
                                "decoder_sparse_step %d and mlp_only_layers make layer %d %s, but the weights have no '%s%s.weight'",
                           c->n_layers, c->first_k_dense_replace, c->moe_layer_freq, c->decoder_sparse_step, i,
                           moe ? "a mixture of experts" : "dense", c->tensor_prefix, path);
        if (seen[moe]) continue;
        seen[moe] = true;
        snprintf(path, sizeof path, "model.layers.%d", i);
        if (check_mlp(m, path, moe, err)) return -1;
    }
    return 0;
}
