// SPDX-License-Identifier: MIT
// Human-readable summary of a loaded model for `mlxcel inspect`: architecture, sizes, parameter
// count, the quantization of each group of layers, and the memory a context needs.
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "models/model_internal.h"

static void put(char *buf, size_t cap, const char *fmt, ...) {
    size_t len = strlen(buf);
    if (len >= cap) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + len, cap - len, fmt, ap);
    va_end(ap);
}

static void quant_name(const mx_matrix *w, char *out, size_t cap) {
    if (w->q.mode == MX_QUANT_NONE)
        snprintf(out, cap, "%s (not quantized)", mx_dtype_name(w->dtype));
    else if (w->q.mode == MX_QUANT_AFFINE)
        snprintf(out, cap, "affine %d-bit, group %d, %s scales", w->q.bits, w->q.group_size, mx_dtype_name(w->scale_dtype));
    else
        snprintf(out, cap, "%s", mx_quant_mode_name(w->q.mode));
}

// Adds "name: format" lines, collapsing layers that share a format into a range.
static void describe_group(char *buf, size_t cap, const mx_model *m, const char *name, size_t offset) {
    int n = m->cfg.n_layers, start = 0;
    char prev[128] = "", cur[128];
    for (int i = 0; i <= n; i++) {
        cur[0] = 0;
        if (i < n) {
            const mx_matrix *w = (const mx_matrix *)((const char *)&m->layers[i] + offset);
            if (w->data) quant_name(w, cur, sizeof cur);
        }
        if (i == n || strcmp(cur, prev) != 0) {
            if (i > 0 && prev[0]) put(buf, cap, "  %-14s layers %d-%d: %s\n", name, start, i - 1, prev);
            start = i;
            memcpy(prev, cur, sizeof prev);
        }
    }
}

static int64_t matrix_bytes(const mx_matrix *w) {
    if (!w->data) return 0;
    return mx_matrix_data_bytes(w) + mx_matrix_scale_bytes(w) * (1 + (w->biases != NULL));
}

int64_t mx_model_decode_weight_bytes(const mx_model *m) {
    const mx_config *c = &m->cfg;
    int64_t total = matrix_bytes(&m->lm_head);
    for (int i = 0; i < c->n_layers; i++) {
        const mx_layer *l = &m->layers[i];
        total += matrix_bytes(&l->wq) + matrix_bytes(&l->wk) + matrix_bytes(&l->wv) + matrix_bytes(&l->wo);
        total += matrix_bytes(&l->wq_a) + matrix_bytes(&l->wq_nope) + matrix_bytes(&l->wq_pe) + matrix_bytes(&l->wkv_a) +
                 matrix_bytes(&l->wk_pe) + matrix_bytes(&l->embed_q) + matrix_bytes(&l->unembed_out);
        total += matrix_bytes(&l->s_gate) + matrix_bytes(&l->s_up) + matrix_bytes(&l->s_down);
        total += matrix_bytes(&l->w_gate) + matrix_bytes(&l->w_up) + matrix_bytes(&l->w_down) + matrix_bytes(&l->router);
        int64_t experts = matrix_bytes(&l->e_gate) + matrix_bytes(&l->e_up) + matrix_bytes(&l->e_down);
        if (experts && c->num_experts > 0) total += experts * c->num_experts_per_tok / c->num_experts;
    }
    return total;
}

void mx_model_describe(const mx_model *m, char *buf, size_t cap) {
    const mx_config *c = &m->cfg;
    char q[128];
    buf[0] = 0;
    put(buf, cap, "model: %s\narchitecture: %s\n", m->dir, c->model_type);
    if (c->tensor_prefix[0])
        put(buf, cap, "note: the language model of a multimodal checkpoint (tensors under '%s'); the vision tower is "
                      "not loaded, so image inputs are not supported\n",
            c->tensor_prefix);
    put(buf, cap, "layers: %d, hidden: %d, heads: %d (kv %d), head_dim: %d, vocab: %d\n", c->n_layers, c->hidden_size,
        c->n_heads, c->n_kv_heads, c->head_dim, c->vocab_size);
    if (c->kv_lora_rank > 0)
        put(buf, cap, "latent attention: kv_lora %d, q_lora %d, head nope %d + rope %d, v %d\n", c->kv_lora_rank,
            c->q_lora_rank, c->qk_nope_head_dim, c->qk_rope_head_dim, c->v_head_dim);
    if (c->num_experts)
        put(buf, cap, "experts: %d, active per token: %d, expert intermediate: %d\n", c->num_experts,
            c->num_experts_per_tok, c->moe_intermediate_size);
    else
        put(buf, cap, "intermediate: %d\n", c->intermediate_size);
    if (c->n_group > 0)
        put(buf, cap, "routing: sigmoid, best %d of %d expert groups, weights x %g; shared experts: %d; dense layers: %d\n",
            c->topk_group, c->n_group, c->routed_scaling_factor, c->n_shared_experts, c->first_k_dense_replace);
    put(buf, cap, "rope: theta %g%s, max positions %d\n", c->rope_theta,
        c->rope_type == MX_ROPE_LLAMA3 ? " (llama3 scaling)" : c->rope_type == MX_ROPE_LINEAR ? " (linear scaling)"
        : c->rope_type == MX_ROPE_YARN ? " (yarn scaling)" : c->rope_type == MX_ROPE_LONGROPE ? " (longrope scaling)" : "",
        c->max_position_embeddings);
    put(buf, cap, "parameters: %.2f M\n", m->n_params / 1e6);
    put(buf, cap, "weights in memory: %.1f MB\n", m->weight_bytes / 1e6);
    put(buf, cap, "tied embeddings: %s\n", m->tied ? "yes" : "no");
    put(buf, cap, "quantization:\n");
    quant_name(&m->embed, q, sizeof q);
    put(buf, cap, "  %-14s %s\n", "embedding", q);
    describe_group(buf, cap, m, "q_proj", offsetof(mx_layer, wq));
    describe_group(buf, cap, m, "k_proj", offsetof(mx_layer, wk));
    describe_group(buf, cap, m, "v_proj", offsetof(mx_layer, wv));
    describe_group(buf, cap, m, "q_a_proj", offsetof(mx_layer, wq_a));
    describe_group(buf, cap, m, "q_b_proj.nope", offsetof(mx_layer, wq_nope));
    describe_group(buf, cap, m, "q_b_proj.rope", offsetof(mx_layer, wq_pe));
    describe_group(buf, cap, m, "kv_a_proj", offsetof(mx_layer, wkv_a));
    describe_group(buf, cap, m, "embed_q", offsetof(mx_layer, embed_q));
    describe_group(buf, cap, m, "unembed_out", offsetof(mx_layer, unembed_out));
    describe_group(buf, cap, m, "o_proj", offsetof(mx_layer, wo));
    describe_group(buf, cap, m, "gate_proj", offsetof(mx_layer, w_gate));
    describe_group(buf, cap, m, "up_proj", offsetof(mx_layer, w_up));
    describe_group(buf, cap, m, "down_proj", offsetof(mx_layer, w_down));
    describe_group(buf, cap, m, "router", offsetof(mx_layer, router));
    describe_group(buf, cap, m, "experts.gate", offsetof(mx_layer, e_gate));
    describe_group(buf, cap, m, "experts.up", offsetof(mx_layer, e_up));
    describe_group(buf, cap, m, "experts.down", offsetof(mx_layer, e_down));
    describe_group(buf, cap, m, "shared.gate", offsetof(mx_layer, s_gate));
    describe_group(buf, cap, m, "shared.up", offsetof(mx_layer, s_up));
    describe_group(buf, cap, m, "shared.down", offsetof(mx_layer, s_down));
    if (!m->tied) {
        quant_name(&m->lm_head, q, sizeof q);
        put(buf, cap, "  %-14s %s\n", "lm_head", q);
    }
    mx_kv_layout lay = mx_model_kv_layout(c, 1, 1, 0);
    double kv_per_token = 2.0 * c->n_layers * lay.n_kv_heads * lay.head_dim * 4;
    put(buf, cap, "KV cache: %.1f KB per token (float32), %.1f MB at 4096 tokens\n", kv_per_token / 1e3,
        kv_per_token * 4096 / 1e6);
}
