// SPDX-License-Identifier: MIT
// The attention weights of a layer with per-head keys and values (every family but latent
// attention): q/k/v/o projections (Phi-3's fused qkv_proj split by rows), their optional biases,
// gpt_oss's attention sinks and the q/k norms, each required or not as the family table says.
#include <stdio.h>

#include "models/load_internal.h"

// The attention projections of the families with per-head K/V (everything but latent attention).
int mx_load_attention(mx_model *m, const mx_family *fam, const char *p, mx_layer *L, mx_error *err) {
    const mx_config *c = &m->cfg;
    char name[512];
    int64_t H = c->hidden_size, q_out = (int64_t)c->n_heads * c->head_dim, kv_out = (int64_t)c->n_kv_heads * c->head_dim;
#define PATH(suffix) (snprintf(name, sizeof name, "%s.%s", p, suffix), name)
    if (fam->fused_qkv_gate_up) {
        int64_t rows[3] = {q_out, kv_out, kv_out};
        mx_matrix *parts[3] = {&L->wq, &L->wk, &L->wv};
        if (mx_load_split_rows(m, PATH("self_attn.qkv_proj"), H, 3, rows, parts, err)) return -1;
    } else if (mx_load_matrix(m, PATH("self_attn.q_proj"), q_out, H, &L->wq, err) ||
               mx_load_matrix(m, PATH("self_attn.k_proj"), kv_out, H, &L->wk, err) ||
               mx_load_matrix(m, PATH("self_attn.v_proj"), kv_out, H, &L->wv, err)) {
        return -1;
    }
    if (mx_load_matrix(m, PATH("self_attn.o_proj"), H, q_out, &L->wo, err)) return -1;
    bool need_qkv_bias = fam->qkv_bias || c->attention_bias;
    if (mx_load_vector(m, PATH("self_attn.q_proj.bias"), q_out, need_qkv_bias, &L->bq, err) ||
        mx_load_vector(m, PATH("self_attn.k_proj.bias"), kv_out, need_qkv_bias, &L->bk, err) ||
        mx_load_vector(m, PATH("self_attn.v_proj.bias"), kv_out, need_qkv_bias, &L->bv, err) ||
        mx_load_vector(m, PATH("self_attn.o_proj.bias"), H, fam->o_bias, &L->bo, err))
        return -1;
    if (fam->attn_sinks && mx_load_vector(m, PATH("self_attn.sinks"), c->n_heads, true, &L->sinks, err)) return -1;
    if (mx_load_norm(m, PATH("self_attn.q_norm.weight"), c->head_dim, fam->qk_norm, &L->q_norm, err) ||
        mx_load_norm(m, PATH("self_attn.k_norm.weight"), c->head_dim, fam->qk_norm, &L->k_norm, err))
        return -1;
    return 0;
#undef PATH
}
