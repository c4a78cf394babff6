// SPDX-License-Identifier: MIT
// The weights of multi-head latent attention (deepseek_v3; forward_mla.c runs it), reshaped at load
// so the generic records apply: the RoPE rows of q and of the shared key reordered from DeepSeek's
// interleaved pairs to rotate-half order, q's no-RoPE and RoPE parts and the latent's two parts as
// separate matrices, and the Hub layout's kv_b_proj split into embed_q and unembed_out.
#include <stdlib.h>
#include <string.h>

#include "models/load_internal.h"

// A host copy of rows rows[0..n) of a (non-expert) host matrix, in that order: quantization is per
// row, so a row's codes, scales and biases move together. The copy lives until the model is freed.
static int gather_rows(mx_model *m, const mx_matrix *w, const int64_t *rows, int64_t n, mx_matrix *out,
                       mx_error *err) {
    size_t rb = (size_t)mx_matrix_row_bytes(w);
    size_t sb = w->q.mode == MX_QUANT_NONE ? 0 : (size_t)(w->cols / w->q.group_size) * mx_dtype_size(w->scale_dtype);
    *out = *w;
    out->rows = n;
    uint8_t *parts[3] = {NULL, NULL, NULL};
    const uint8_t *src[3] = {w->data, w->scales, w->biases};
    size_t width[3] = {rb, sb, sb};
    for (int k = 0; k < 3; k++) {
        if (!src[k]) continue;
        parts[k] = malloc(width[k] * (size_t)n);
        if (!parts[k] || mx_load_keep_host(m, parts[k], err)) {
            free(parts[k]);
            return mx_fail(err, "out of memory reordering rows");
        }
        for (int64_t r = 0; r < n; r++)
            memcpy(parts[k] + (size_t)r * width[k], src[k] + (size_t)rows[r] * width[k], width[k]);
    }
    out->data = parts[0];
    out->scales = parts[1];
    out->biases = parts[2];
    return 0;
}

// Dimension j of a RoPE block of width r in rotate-half order comes from dimension deinterleave(j)
// of DeepSeek's interleaved order (pairs (2i, 2i + 1)): the even dimensions first, then the odd ones.
// transformers applies the same reordering to q and k before its rotate-half RoPE.
static int64_t deinterleave(int64_t j, int64_t r) { return j < r / 2 ? 2 * j : 2 * (j - r / 2) + 1; }

// Multi-head latent attention (forward_mla.c): q through q_a_proj, q_a_layernorm, q_b_proj (or
// q_proj), split into its no-RoPE and RoPE parts; kv_a_proj_with_mqa split into the latent c_kv and
// the shared RoPE key; the per-head up-projections from mlx-lm's embed_q / unembed_out or, in the
// Hub layout, from kv_b_proj ([heads * (nope + v), kv_lora]: per head nope key rows, then v rows).
int mx_load_latent_attention(mx_model *m, const char *p, mx_layer *L, mx_error *err) {
    const mx_config *c = &m->cfg;
    int64_t H = c->hidden_size, NH = c->n_heads, nope = c->qk_nope_head_dim, R = c->qk_rope_head_dim,
            V = c->v_head_dim, KL = c->kv_lora_rank, QL = c->q_lora_rank, QD = nope + R;
    char name[512];
#define PATH(suffix) (snprintf(name, sizeof name, "%s.self_attn.%s", p, suffix), name)
    if (c->attention_bias) return mx_fail(err, "config.json: attention_bias with latent attention is not supported");
    if (NH < 2) return mx_fail(err, "config.json: latent attention needs at least 2 heads");
    int64_t q_in = H;
    const char *q_path = "q_proj";
    if (QL > 0) {
        if (mx_load_matrix(m, PATH("q_a_proj"), QL, H, &L->wq_a, err) ||
            mx_load_norm(m, PATH("q_a_layernorm.weight"), QL, true, &L->q_a_norm, err))
            return -1;
        q_in = QL;
        q_path = "q_b_proj";
    }
    // The index table below is sized from the config's widths: the tensors that hold them (q's
    // rows, the latent's, o_proj's columns) are checked first.
    mx_matrix host, part, probe;
    if (mx_load_describe_matrix(m, PATH("kv_a_proj_with_mqa"), 1, KL + R, H, &probe, err) ||
        mx_load_describe_matrix(m, PATH("o_proj"), 1, H, NH * V, &probe, err) ||
        mx_load_describe_matrix(m, PATH(q_path), 1, NH * QD, q_in, &host, err))
        return -1;
    int64_t n_rows = NH * QD > KL + R ? NH * QD : KL + R;
    if (NH * (nope + V) > n_rows) n_rows = NH * (nope + V);
    int64_t *rows = malloc(sizeof(int64_t) * (size_t)n_rows);
    if (!rows) return mx_fail(err, "out of memory");
    int rc = -1;
    // Queries: per head [nope | rope] rows.
    for (int64_t h = 0; h < NH; h++)
        for (int64_t j = 0; j < nope; j++) rows[h * nope + j] = h * QD + j;
    if (gather_rows(m, &host, rows, NH * nope, &part, err) || mx_load_upload(m, &part, &L->wq_nope, err)) goto done;
    for (int64_t h = 0; h < NH; h++)
        for (int64_t j = 0; j < R; j++) rows[h * R + j] = h * QD + nope + deinterleave(j, R);
    if (gather_rows(m, &host, rows, NH * R, &part, err) || mx_load_upload(m, &part, &L->wq_pe, err)) goto done;
    // The latent [kv_lora] and the shared RoPE key [rope].
    if (mx_load_describe_matrix(m, PATH("kv_a_proj_with_mqa"), 1, KL + R, H, &host, err)) goto done;
    part = mx_matrix_row_range(&host, 0, KL);
    if (mx_load_upload(m, &part, &L->wkv_a, err)) goto done;
    for (int64_t j = 0; j < R; j++) rows[j] = KL + deinterleave(j, R);
    if (gather_rows(m, &host, rows, R, &part, err) || mx_load_upload(m, &part, &L->wk_pe, err)) goto done;
    if (mx_load_norm(m, PATH("kv_a_layernorm.weight"), KL, true, &L->kv_a_norm, err) ||
        mx_load_matrix(m, PATH("o_proj"), H, NH * V, &L->wo, err))
        goto done;
    if (mx_load_find(m, PATH("embed_q"), ".weight")) {
        if (mx_load_describe_matrix(m, PATH("embed_q"), NH, KL, nope, &host, err) || mx_load_upload(m, &host, &L->embed_q, err) ||
            mx_load_describe_matrix(m, PATH("unembed_out"), NH, V, KL, &host, err) || mx_load_upload(m, &host, &L->unembed_out, err))
            goto done;
    } else if (!mx_load_find(m, PATH("kv_b_proj"), ".weight")) {
        mx_fail(err, "missing tensor '%s%s.self_attn.embed_q.weight' (mlx-lm's layout, with unembed_out) or '%s.weight' "
                     "(the Hub layout)", m->cfg.tensor_prefix, p, name);
        goto done;
    } else {
        if (mx_load_describe_matrix(m, PATH("kv_b_proj"), 1, NH * (nope + V), KL, &host, err)) goto done;
        if (host.q.mode != MX_QUANT_NONE) {
            mx_fail(err, "'%s': a quantized kv_b_proj must be split into embed_q and unembed_out (mlx-lm's layout)", name);
            goto done;
        }
        // embed_q[h] = (key rows of head h)^T: [kv_lora, nope], transposed element by element.
        size_t es = mx_dtype_size(host.dtype);
        uint8_t *t = malloc(es * (size_t)(NH * KL * nope));
        if (!t || mx_load_keep_host(m, t, err)) {
            free(t);
            mx_fail(err, "out of memory");
            goto done;
        }
        for (int64_t h = 0; h < NH; h++)
            for (int64_t i = 0; i < KL; i++)
                for (int64_t j = 0; j < nope; j++)
                    memcpy(t + (size_t)((h * KL + i) * nope + j) * es,
                           (const uint8_t *)host.data + (size_t)((h * (nope + V) + j) * KL + i) * es, es);
        part = host;
        part.data = t;
        part.n_experts = NH, part.rows = KL, part.cols = nope;
        if (mx_load_upload(m, &part, &L->embed_q, err)) goto done;
        for (int64_t h = 0; h < NH; h++)
            for (int64_t v = 0; v < V; v++) rows[h * V + v] = h * (nope + V) + nope + v;
        if (gather_rows(m, &host, rows, NH * V, &part, err)) goto done;
        part.n_experts = NH, part.rows = V;
        if (mx_load_upload(m, &part, &L->unembed_out, err)) goto done;
    }
    rc = 0;
done:
    free(rows);
    return rc;
#undef PATH
}
