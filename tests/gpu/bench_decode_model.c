// SPDX-License-Identifier: MIT
// bench_gpu_decode's random model (see bench_decode_model.h): shapes, device weights and buffers,
// and the records of a forward pass. The records mirror src/models/forward.c record for record
// (block_records for the attention half, mlp_records for the dense and the MoE MLP half, without
// the branches Qwen3 does not take: no biases, no post-norms, no shared experts), with the same
// buffers in the same roles, so the GPU plan runner's patterns (gpu_plan.c) match here as they do
// in the engine. Expert weights are stacked [n_experts, rows, cols] matrices, as the loader makes
// them (src/models/load_tensors.c: mx_load_experts), uploaded with the backend's upload_matrix.
// One random host matrix per distinct shape is uploaded once per layer, so each layer reads its
// own device memory.
#include "bench_decode_model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/plan.h"
#include "core/dtype.h"
#include "../unit/test_rng.h"

static const bench_shape shapes[] = {
    {"qwen3-0.6b", 1024, 28, 16, 8, 128, 3072, 151936, true, 0, 0},
    {"qwen3-8b", 4096, 36, 32, 8, 128, 12288, 151936, false, 0, 0},
    // `mlxcel bench --shape qwen3-30b-a3b` (app/bench_model.c): 128 experts of 768, 8 a token.
    {"qwen3-30b-a3b", 2048, 48, 32, 4, 128, 768, 151936, false, 128, 8},
};

mx_error bench_err;
static test_rng rng = {0x243f6a8885a308d3ull};
static uint64_t next(void) { return test_rng_next(&rng); }

const bench_shape *bench_shape_find(const char *name) {
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        if (strcmp(shapes[i].name, name) == 0) return &shapes[i];
    return NULL;
}

const char *bench_shape_names(void) {
    static char names[256];
    if (!names[0])
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
            snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? ", " : "", shapes[i].name);
    return names;
}

void bench_die(const char *what) {
    fprintf(stderr, "bench_gpu_decode: %s: %s\n", what, bench_err.msg);
    exit(1);
}

static void *xmalloc(size_t bytes) {
    void *p = malloc(bytes);
    if (!p) {
        fprintf(stderr, "bench_gpu_decode: out of host memory (%zu bytes)\n", bytes);
        exit(1);
    }
    return p;
}

// A device buffer the model owns (released by bench_model_free).
static void *dalloc(mx_backend *be, bench_model *m, size_t bytes) {
    if (m->n_owned == m->max_owned) bench_die("too many buffers");
    void *p = be->ops->alloc(be, bytes, &bench_err);
    if (!p) bench_die("alloc");
    return m->owned[m->n_owned++] = p;
}

static void *dfrom(mx_backend *be, bench_model *m, const void *h, size_t bytes) {
    void *p = dalloc(be, m, bytes);
    if (be->ops->upload(be, p, h, bytes, &bench_err) != 0) bench_die("upload");
    return p;
}

// A random 4-bit g64 host matrix [experts, rows, cols] (data, bf16 scales/biases) reused as the
// source of many uploads.
static mx_matrix host_q4(bench_model *model, int64_t experts, int64_t rows, int64_t cols) {
    mx_matrix m = {{MX_QUANT_AFFINE, 4, 64}, MX_DTYPE_U32, MX_DTYPE_BF16, experts, rows, cols, NULL, NULL, NULL};
    int64_t db = mx_matrix_data_bytes(&m), sb = mx_matrix_scale_bytes(&m);
    uint64_t *d = xmalloc((size_t)db);
    for (int64_t i = 0; i < db / 8; i++) d[i] = next();
    uint16_t *s = xmalloc((size_t)sb), *b = xmalloc((size_t)sb);
    for (int64_t i = 0; i < sb / 2; i++) {
        float sv = ((float)(next() % 1000) + 500.0f) * 2e-6f, bv = -8.0f * sv;
        s[i] = mx_f32_to_bf16(sv);
        b[i] = mx_f32_to_bf16(bv);
    }
    m.data = d, m.scales = s, m.biases = b;
    void **keep = model->host + model->n_host;
    model->n_host += 3;
    MX_ASSERT(model->n_host <= (int)(sizeof model->host / sizeof model->host[0]));
    keep[0] = d, keep[1] = s, keep[2] = b;
    return m;
}

static double matrix_bytes(const mx_matrix *w) {
    return (double)mx_matrix_data_bytes(w) + 2.0 * (double)mx_matrix_scale_bytes(w);
}

// Uploads host matrix src into dst; its bytes are added to *all, and `read` of them to *active (the
// share of a stacked expert matrix a decode token reads).
static void upload(mx_backend *be, const mx_matrix *src, mx_matrix *dst, double read, double *all, double *active) {
    if (be->ops->upload_matrix(be, src, dst, &bench_err) != 0) bench_die("upload_matrix");
    *all += matrix_bytes(src);
    *active += read * matrix_bytes(src);
}

void bench_model_init(mx_backend *be, bench_model *m, const bench_shape *s, int cap, int max_ctx, int kv_slots,
                      int last_row0) {
    memset(m, 0, sizeof *m);
    m->s = *s;
    m->cap = cap;
    const bool moe = s->experts > 0;
    const int E = moe ? s->experts : 1, K = moe ? s->top_k : 1;
    int qd = s->heads * s->head_dim, kd = s->kv_heads * s->head_dim;
    mx_matrix hq = host_q4(m, 1, qd, s->hidden), hk = host_q4(m, 1, kd, s->hidden), ho = host_q4(m, 1, s->hidden, qd);
    mx_matrix hg = host_q4(m, moe ? E : 1, s->inter, s->hidden), hd = host_q4(m, moe ? E : 1, s->hidden, s->inter);
    mx_matrix he = host_q4(m, 1, s->vocab, s->hidden);
    mx_matrix hr = moe ? host_q4(m, 1, E, s->hidden) : (mx_matrix){0};
    const double expert_read = moe ? (double)K / E : 1.0;
    double all = 0, active = 0;
    m->L = calloc((size_t)s->layers, sizeof(bench_layer));
    m->max_owned = 4 * s->layers + 32;  // each layer's four norms, then the model's buffers
    m->owned = calloc((size_t)m->max_owned, sizeof(void *));
    if (!m->L || !m->owned) bench_die("layers");
    int widest = s->inter > s->hidden ? s->inter : s->hidden;
    float *ones = xmalloc(sizeof(float) * (size_t)widest);
    for (int i = 0; i < widest; i++) ones[i] = 1.0f + (float)(next() % 100) * 1e-3f;
    for (int l = 0; l < s->layers; l++) {
        bench_layer *L = &m->L[l];
        upload(be, &hq, &L->q, 1, &all, &active);
        upload(be, &hk, &L->k, 1, &all, &active);
        upload(be, &hk, &L->v, 1, &all, &active);
        upload(be, &ho, &L->o, 1, &all, &active);
        if (moe) upload(be, &hr, &L->router, 1, &all, &active);
        upload(be, &hg, &L->gate, expert_read, &all, &active);
        upload(be, &hg, &L->up, expert_read, &all, &active);
        upload(be, &hd, &L->down, expert_read, &all, &active);
        L->in_norm = dfrom(be, m, ones, sizeof(float) * s->hidden);
        L->post_norm = dfrom(be, m, ones, sizeof(float) * s->hidden);
        L->q_norm = dfrom(be, m, ones, sizeof(float) * s->head_dim);
        L->k_norm = dfrom(be, m, ones, sizeof(float) * s->head_dim);
    }
    m->layers_bytes = all;
    if (be->ops->upload_matrix(be, &he, &m->embed, &bench_err) != 0) bench_die("upload_matrix");
    if (s->tied) {
        m->lm_head = m->embed;
    } else if (be->ops->upload_matrix(be, &he, &m->lm_head, &bench_err) != 0) {
        bench_die("upload_matrix");
    }
    m->weight_bytes = all + matrix_bytes(&he);
    m->read_bytes = active + matrix_bytes(&he);
    m->final_norm = dfrom(be, m, ones, sizeof(float) * s->hidden);
    float *inv = xmalloc(sizeof(float) * s->head_dim / 2);
    for (int j = 0; j < s->head_dim / 2; j++) inv[j] = 1.0f / (float)pow(1000000.0, 2.0 * j / s->head_dim);
    m->inv_freq = dfrom(be, m, inv, sizeof(float) * s->head_dim / 2);
    m->lay = (mx_kv_layout){s->layers, kv_slots, max_ctx, s->kv_heads, s->head_dim, 0};
    m->kv = dalloc(be, m, mx_kv_bytes(&m->lay, be->kv_dtype));
    size_t entries = (size_t)kv_slots * mx_kv_table_len(&m->lay);
    int32_t *table = xmalloc(4 * entries);
    for (size_t i = 0; i < entries; i++) table[i] = (int32_t)i;
    m->table = dfrom(be, m, table, 4 * entries);
    size_t c = (size_t)cap, ck = c * (size_t)K;
    m->x = dalloc(be, m, 4 * c * s->hidden), m->h = dalloc(be, m, 4 * c * s->hidden);
    m->q = dalloc(be, m, 4 * c * qd), m->k = dalloc(be, m, 4 * c * kd), m->v = dalloc(be, m, 4 * c * kd);
    m->att = dalloc(be, m, 4 * c * qd), m->tmp = dalloc(be, m, 4 * c * s->hidden);
    m->g = dalloc(be, m, 4 * ck * s->inter), m->u = dalloc(be, m, 4 * ck * s->inter);
    if (moe) {
        m->router = dalloc(be, m, 4 * c * E), m->moe_w = dalloc(be, m, 4 * ck);
        m->moe_ids = dalloc(be, m, 4 * ck), m->moe_y = dalloc(be, m, 4 * ck * s->hidden);
    }
    m->last = dalloc(be, m, 4 * (size_t)s->hidden), m->logits = dalloc(be, m, 4 * (size_t)s->vocab);
    int32_t *hid = xmalloc(4 * c), *hpos = xmalloc(4 * c), *hslot = calloc(c, 4);
    if (!hslot) bench_die("slots");
    for (size_t i = 0; i < c; i++) hid[i] = (int32_t)(next() % (uint64_t)s->vocab), hpos[i] = (int32_t)i;
    m->ids = dfrom(be, m, hid, 4 * c), m->pos = dfrom(be, m, hpos, 4 * c), m->slot = dfrom(be, m, hslot, 4 * c);
    m->next_id = dalloc(be, m, 4);
    int32_t last_rows[2] = {last_row0, 0};
    m->last_row = dfrom(be, m, last_rows, sizeof last_rows);
    if (be->ops->sync(be, &bench_err) != 0) bench_die("uploads");
    free(hid), free(hpos), free(hslot), free(inv), free(ones), free(table);  // uploaded: the sync above
    // The host matrices stay until bench_model_free: a backend may keep pointing at them (the CPU
    // backend does).
}

void bench_model_free(mx_backend *be, bench_model *m) {
    for (int l = 0; l < m->s.layers; l++) {
        bench_layer *L = &m->L[l];
        mx_matrix *w[] = {&L->q, &L->k, &L->v, &L->o, &L->gate, &L->up, &L->down, &L->router};
        for (size_t i = 0; i < sizeof w / sizeof w[0]; i++)
            if (w[i]->data) be->ops->release_matrix(be, w[i]);
    }
    be->ops->release_matrix(be, &m->embed);
    if (!m->s.tied) be->ops->release_matrix(be, &m->lm_head);
    for (int i = 0; i < m->n_owned; i++) be->ops->release(be, m->owned[i]);
    for (int i = 0; i < m->n_host; i++) free(m->host[i]);
    free(m->L), free(m->owned);
    memset(m, 0, sizeof *m);
}

mx_kv_ref bench_kv_ref(const bench_model *m, int layer) {
    return (mx_kv_ref){.kv = m->kv, .lay = m->lay, .layer = layer, .slot = m->slot, .pos = m->pos, .table = m->table};
}

#define ADD(p, KIND, field, ...) mx_plan_add(p, (mx_op){.kind = KIND, .field = {__VA_ARGS__}})

void bench_add_qk_rope_kv(mx_plan *p, const bench_model *m, const bench_layer *L, mx_kv_ref kv, int n) {
    const bench_shape *s = &m->s;
    mx_rope rope = {.inv_freq = m->inv_freq, .head_dim = s->head_dim, .attn_factor = 1.0f, .rot_dim = s->head_dim};
    ADD(p, MX_OP_RMSNORM, rmsnorm, m->q, m->q, L->q_norm, n * s->heads, s->head_dim, 1e-6f);
    ADD(p, MX_OP_RMSNORM, rmsnorm, m->k, m->k, L->k_norm, n * s->kv_heads, s->head_dim, 1e-6f);
    ADD(p, MX_OP_ROPE, rope, m->q, m->pos, n, s->heads, rope);
    ADD(p, MX_OP_ROPE, rope, m->k, m->pos, n, s->kv_heads, rope);
    ADD(p, MX_OP_KV_STORE, kv_store, kv, m->k, m->v, n);
}

void bench_add_attn_half(mx_plan *p, const bench_model *m, const bench_layer *L, mx_kv_ref kv, int n, bool decode) {
    const bench_shape *s = &m->s;
    ADD(p, MX_OP_RMSNORM, rmsnorm, m->h, m->x, L->in_norm, n, s->hidden, 1e-6f);
    ADD(p, MX_OP_MATMUL, matmul, m->q, m->h, &L->q, NULL, n);
    ADD(p, MX_OP_MATMUL, matmul, m->k, m->h, &L->k, NULL, n);
    ADD(p, MX_OP_MATMUL, matmul, m->v, m->h, &L->v, NULL, n);
    bench_add_qk_rope_kv(p, m, L, kv, n);
    ADD(p, MX_OP_ATTENTION, attention, m->att, m->q, kv, n, s->heads, 0.08838834764f, 0, NULL, decode);
}

// forward.c mlp_records, MoE branch: rmsnorm(h, x); matmul(router, h); moe_route(ids, w, router).
void bench_add_moe_router(mx_plan *p, const bench_model *m, const bench_layer *L, int n) {
    const bench_shape *s = &m->s;
    ADD(p, MX_OP_RMSNORM, rmsnorm, m->h, m->x, L->post_norm, n, s->hidden, 1e-6f);
    ADD(p, MX_OP_MATMUL, matmul, m->router, m->h, &L->router, NULL, n);
    ADD(p, MX_OP_MOE_ROUTE, moe_route, m->moe_ids, m->moe_w, m->router, n, s->experts, s->top_k, true);
}

// moe_matmul(gate, h, e_gate, ids, n*k, x_div k); the same for up; swiglu(gate, gate, up).
void bench_add_moe_gate_up(mx_plan *p, const bench_model *m, const bench_layer *L, int n) {
    const bench_shape *s = &m->s;
    const int K = s->top_k;
    ADD(p, MX_OP_MOE_MATMUL, moe_matmul, m->g, m->h, &L->gate, m->moe_ids, n * K, K);
    ADD(p, MX_OP_MOE_MATMUL, moe_matmul, m->u, m->h, &L->up, m->moe_ids, n * K, K);
    ADD(p, MX_OP_SWIGLU, swiglu, m->g, m->g, m->u, (int64_t)n * K * s->inter);
}

// moe_matmul(moe_y, gate, e_down, ids, n*k, x_div 1); moe_combine(x, moe_y, w).
void bench_add_moe_down(mx_plan *p, const bench_model *m, const bench_layer *L, int n) {
    const bench_shape *s = &m->s;
    ADD(p, MX_OP_MOE_MATMUL, moe_matmul, m->moe_y, m->g, &L->down, m->moe_ids, n * s->top_k, 1);
    ADD(p, MX_OP_MOE_COMBINE, moe_combine, m->x, m->moe_y, m->moe_w, n, s->top_k, s->hidden);
}

void bench_add_mlp_half(mx_plan *p, const bench_model *m, const bench_layer *L, int n, bool o_proj) {
    const bench_shape *s = &m->s;
    if (o_proj) {
        ADD(p, MX_OP_MATMUL, matmul, m->tmp, m->att, &L->o, NULL, n);
        ADD(p, MX_OP_ADD, add, m->x, m->tmp, (int64_t)n * s->hidden);
    }
    if (s->experts > 0) {
        bench_add_moe_router(p, m, L, n);
        bench_add_moe_gate_up(p, m, L, n);
        bench_add_moe_down(p, m, L, n);
        return;
    }
    ADD(p, MX_OP_RMSNORM, rmsnorm, m->h, m->x, L->post_norm, n, s->hidden, 1e-6f);
    ADD(p, MX_OP_MATMUL, matmul, m->g, m->h, &L->gate, NULL, n);
    ADD(p, MX_OP_MATMUL, matmul, m->u, m->h, &L->up, NULL, n);
    ADD(p, MX_OP_SWIGLU, swiglu, m->g, m->g, m->u, (int64_t)n * s->inter);
    ADD(p, MX_OP_MATMUL, matmul, m->tmp, m->g, &L->down, NULL, n);
    ADD(p, MX_OP_ADD, add, m->x, m->tmp, (int64_t)n * s->hidden);
}

mx_plan *bench_forward_plan(const bench_model *m, int n, const int32_t *last_row, bool decode) {
    const bench_shape *s = &m->s;
    mx_plan *p = mx_plan_create(&bench_err);
    if (!p) bench_die("plan");
    ADD(p, MX_OP_EMBED, embed, m->x, &m->embed, m->ids, n);
    for (int l = 0; l < s->layers; l++) {
        const bench_layer *L = &m->L[l];
        bench_add_attn_half(p, m, L, bench_kv_ref(m, l), n, decode);
        bench_add_mlp_half(p, m, L, n, true);
    }
    if (last_row) {
        ADD(p, MX_OP_GATHER_ROWS, gather_rows, m->last, m->x, last_row, 1, s->hidden);
        ADD(p, MX_OP_RMSNORM, rmsnorm, m->last, m->last, m->final_norm, 1, s->hidden, 1e-6f);
    } else {
        ADD(p, MX_OP_RMSNORM, rmsnorm, m->last, m->x, m->final_norm, 1, s->hidden, 1e-6f);
    }
    ADD(p, MX_OP_MATMUL, matmul, m->logits, m->last, &m->lm_head, NULL, 1);
    ADD(p, MX_OP_ARGMAX, argmax, m->next_id, m->logits, 1, s->vocab);
    return p;
}
