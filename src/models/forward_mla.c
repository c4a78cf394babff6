// SPDX-License-Identifier: MIT
// Multi-head latent attention records (see forward_mla.h). Shapes: n tokens, NH heads, nope/R the
// no-RoPE and RoPE parts of a query head, KL the latent width, V the value head width.
// The per-head projections embed_q [NH, KL, nope] and unembed_out [NH, V, KL] are stacked like MoE
// experts, so they run as moe_matmul records whose expert of row (t, h) is head h (head_ids).
#include "models/forward_mla.h"

#include <math.h>
#include <stdlib.h>

struct mx_mla {
    void *buf;           // one backend allocation holding everything below
    float *q_a;          // [B, q_lora]
    float *q_nope;       // [B, NH, nope]
    float *q_pe;         // [B, NH, R]
    float *q_lat;        // [B, NH, KL]
    float *o_lat;        // [B, NH, KL]
    float *c_kv;         // [B, KL]
    float *k_pe;         // [B, R]
    float *att;          // [B, NH, V]
    int32_t *head_ids;   // [B * NH]: row r is head r % NH
    float scale;         // softmax scale: qk_head_dim^-0.5, times mscale(factor, mscale_all_dim)^2 under YaRN
};

typedef struct mla_sizes {
    size_t q_a, q_nope, q_pe, lat, c_kv, k_pe, att, ids;  // elements per buffer for B tokens
} mla_sizes;

// Each buffer starts 256 bytes after the previous one's start at least, so kernels may use vector loads.
static size_t padded(size_t elems) { return (elems + 63) / 64 * 64; }

static mla_sizes sizes(const mx_config *c, int max_batch) {
    size_t B = (size_t)max_batch, NH = (size_t)c->n_heads;
    return (mla_sizes){.q_a = padded(B * (size_t)c->q_lora_rank), .q_nope = padded(B * NH * c->qk_nope_head_dim),
                       .q_pe = padded(B * NH * c->qk_rope_head_dim), .lat = padded(B * NH * c->kv_lora_rank),
                       .c_kv = padded(B * c->kv_lora_rank), .k_pe = padded(B * c->qk_rope_head_dim),
                       .att = padded(B * NH * c->v_head_dim), .ids = padded(B * NH)};
}

static size_t total_elems(const mla_sizes *s) {
    return s->q_a + s->q_nope + s->q_pe + 2 * s->lat + s->c_kv + s->k_pe + s->att + s->ids;
}

size_t mx_mla_scratch_bytes(const mx_config *cfg, int max_batch) {
    mla_sizes s = sizes(cfg, max_batch);
    return 4 * total_elems(&s);
}

mx_mla *mx_mla_create(const mx_model *m, int max_batch, mx_error *err) {
    const mx_config *c = &m->cfg;
    mx_mla *a = calloc(1, sizeof *a);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)max_batch * c->n_heads);
    if (!a || !ids) {
        free(a);
        free(ids);
        mx_fail(err, "out of memory");
        return NULL;
    }
    mla_sizes s = sizes(c, max_batch);
    a->buf = m->be->ops->alloc(m->be, 4 * total_elems(&s), err);
    if (!a->buf) {
        free(a);
        free(ids);
        return NULL;
    }
    float *f = a->buf;
    a->q_a = f, f += s.q_a;
    a->q_nope = f, f += s.q_nope;
    a->q_pe = f, f += s.q_pe;
    a->q_lat = f, f += s.lat;
    a->o_lat = f, f += s.lat;
    a->c_kv = f, f += s.c_kv;
    a->k_pe = f, f += s.k_pe;
    a->att = f, f += s.att;
    a->head_ids = (int32_t *)f;
    for (size_t r = 0; r < (size_t)max_batch * c->n_heads; r++) ids[r] = (int32_t)(r % (size_t)c->n_heads);
    int rc = m->be->ops->upload(m->be, a->head_ids, ids, sizeof(int32_t) * (size_t)max_batch * c->n_heads, err);
    free(ids);
    if (rc) {
        mx_mla_free(m->be, a);
        return NULL;
    }
    // transformers' DeepseekV3Attention: the YaRN mscale enters the softmax scale squared.
    a->scale = 1.0f / sqrtf((float)(c->qk_nope_head_dim + c->qk_rope_head_dim));
    if (c->rope_type == MX_ROPE_YARN && c->rope_mscale_all_dim != 0 && c->rope_factor > 1) {
        double ms = 0.1 * c->rope_mscale_all_dim * log(c->rope_factor) + 1.0;
        a->scale = (float)(a->scale * ms * ms);
    }
    return a;
}

void mx_mla_free(mx_backend *be, mx_mla *a) {
    if (!a) return;
    if (a->buf) be->ops->release(be, a->buf);
    free(a);
}

static void add_matmul(mx_plan *p, float *out, const float *x, const mx_matrix *w, int n) {
    mx_plan_add(p, (mx_op){.kind = MX_OP_MATMUL, .matmul = {out, x, w, NULL, n}});
}

void mx_mla_records(mx_plan *p, const mx_mla *a, const mx_model *m, const mx_layer *L, mx_kv_ref kv, const float *h,
                    float *out, int n) {
    const mx_config *c = &m->cfg;
    int NH = c->n_heads, KL = c->kv_lora_rank, R = c->qk_rope_head_dim;
    float eps = c->rms_norm_eps;
    // Queries: through the q LoRA (q_a_proj, its norm) or straight from h.
    const float *q_in = h;
    if (c->q_lora_rank > 0) {
        add_matmul(p, a->q_a, h, &L->wq_a, n);
        mx_plan_add(p, (mx_op){.kind = MX_OP_RMSNORM, .rmsnorm = {a->q_a, a->q_a, L->q_a_norm, n, c->q_lora_rank, eps}});
        q_in = a->q_a;
    }
    add_matmul(p, a->q_nope, q_in, &L->wq_nope, n);
    add_matmul(p, a->q_pe, q_in, &L->wq_pe, n);
    // The latent (normed) and the shared RoPE key.
    add_matmul(p, a->c_kv, h, &L->wkv_a, n);
    add_matmul(p, a->k_pe, h, &L->wk_pe, n);
    mx_plan_add(p, (mx_op){.kind = MX_OP_RMSNORM, .rmsnorm = {a->c_kv, a->c_kv, L->kv_a_norm, n, KL, eps}});
    // RoPE on the RoPE parts only (their rows were de-interleaved at load, so rotate-half applies).
    mx_rope rope = m->rope;
    rope.head_dim = R;
    rope.rot_dim = R;
    mx_plan_add(p, (mx_op){.kind = MX_OP_ROPE, .rope = {a->q_pe, kv.pos, n, NH, rope}});
    mx_plan_add(p, (mx_op){.kind = MX_OP_ROPE, .rope = {a->k_pe, kv.pos, n, 1, rope}});
    mx_plan_add(p, (mx_op){.kind = MX_OP_LATENT_STORE, .latent_store = {kv, a->c_kv, a->k_pe, n, KL, R}});
    // Absorbed attention: q_lat[t, h] = embed_q[h] q_nope[t, h]; attend over the latent rows; values
    // per head = unembed_out[h] o_lat[t, h].
    mx_plan_add(p, (mx_op){.kind = MX_OP_MOE_MATMUL, .moe_matmul = {a->q_lat, a->q_nope, &L->embed_q, a->head_ids, n * NH, 1}});
    mx_plan_add(p, (mx_op){.kind = MX_OP_LATENT_ATTENTION,
                           .latent_attention = {a->o_lat, a->q_lat, a->q_pe, kv, n, NH, KL, R, a->scale}});
    mx_plan_add(p, (mx_op){.kind = MX_OP_MOE_MATMUL,
                           .moe_matmul = {a->att, a->o_lat, &L->unembed_out, a->head_ids, n * NH, 1}});
    add_matmul(p, out, a->att, &L->wo, n);
}
