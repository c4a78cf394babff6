// SPDX-License-Identifier: MIT
// CPU latent cache and latent attention (multi-head latent attention, DeepSeek-V3; records in
// backend.h). A position's latent row [c_kv | k_pe] of W = kv_lora + rope values is one KV head of
// head_dim W / 2 in the ordinary paged cache (cpu_attention.c, reached through the block table): its
// first half is that head's K row, its second half the V row, so the element type, I16 scales,
// blocks and layout are the cache's own (I8 and I4 scales too) and a latent cache is W values per position and layer.
// Attention reads each latent row once per task and scores it against a block of query heads of one
// token; every head keeps an online softmax (running max and sum) and accumulates its output in
// place in `out`, so no scratch sized by the context or the head count is needed.
#include <math.h>
#include <string.h>

#include "core/dtype.h"

#include "backends/cpu/cpu_internal.h"
#include "backends/cpu/cpu_kernels.h"

#define MAX_LATENT 8192  // W = kv_lora + rope at most (DeepSeek-V3, Kimi-K2: 576)
#define HEADS_PER_TASK 8

// One half row of the cache (hd values) as float32.
static void load_half(float *dst, const uint8_t *src, const float *scales, int hd, mx_dtype dt) {
    for (int i = 0; i < hd; i++) dst[i] = cpu_kv_value(src, scales, dt, i);
}

// The latent row of (slot, pos) as float32 [W].
static void load_latent(float *row, const mx_kv_ref *r, int slot, int pos, mx_dtype dt) {
    int hd = r->lay.head_dim;
    bool scaled = mx_kv_scaled(dt);
    for (int which = 0; which < 2; which++)
        load_half(row + which * hd, cpu_kv_row(r, slot, pos, which, 0, dt),
                  scaled ? cpu_kv_row_scales(r, slot, pos, which, 0, dt) : NULL, hd, dt);
}

void cpu_latent_store(mx_backend *be, const mx_kv_ref *r, const float *c_kv, const float *k_pe, int n, int kv_lora,
                      int rope) {
    const mx_kv_layout *lay = &r->lay;
    int hd = lay->head_dim;
    MX_ASSERT(lay->n_kv_heads == 1 && 2 * hd == kv_lora + rope && kv_lora + rope <= MAX_LATENT);
    mx_dtype dt = be->kv_dtype;
    bool scaled = mx_kv_scaled(be->kv_dtype);
    float row[MAX_LATENT];
    for (int t = 0; t < n; t++) {
        MX_ASSERT(r->slot[t] >= 0 && r->slot[t] < lay->n_slots && r->pos[t] >= 0 && r->pos[t] < lay->max_ctx);
        memcpy(row, c_kv + (size_t)t * kv_lora, sizeof(float) * (size_t)kv_lora);
        memcpy(row + kv_lora, k_pe + (size_t)t * rope, sizeof(float) * (size_t)rope);
        for (int which = 0; which < 2; which++)
            cpu_kv_write_row(cpu_kv_row(r, r->slot[t], r->pos[t], which, 0, dt),
                             scaled ? cpu_kv_row_scales(r, r->slot[t], r->pos[t], which, 0, dt) : NULL, row + which * hd,
                             hd, dt);
    }
}

typedef struct latent_job {
    float *out;
    const float *q_lat, *q_pe;
    const mx_kv_ref *kv;
    int n_heads, kv_lora, rope, head_blocks;
    float scale;
    mx_dtype dt;
    cpu_ctx *c;
} latent_job;

static float dot(const float *a, const float *b, int n) {
    float s = 0.0f;
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

// Task = (token, block of HEADS_PER_TASK query heads).
static void latent_task(void *arg, int task, int thread) {
    const latent_job *j = arg;
    int t = task / j->head_blocks, h0 = task % j->head_blocks * HEADS_PER_TASK;
    int h1 = h0 + HEADS_PER_TASK < j->n_heads ? h0 + HEADS_PER_TASK : j->n_heads;
    int KL = j->kv_lora, R = j->rope, slot = j->kv->slot[t], last = j->kv->pos[t];
    float *row = j->c->scratch[thread];
    float mx[HEADS_PER_TASK], sum[HEADS_PER_TASK];
    for (int h = h0; h < h1; h++) {
        memset(j->out + ((size_t)t * j->n_heads + h) * KL, 0, sizeof(float) * (size_t)KL);
        mx[h - h0] = -INFINITY;
        sum[h - h0] = 0.0f;
    }
    for (int p = 0; p <= last; p++) {
        load_latent(row, j->kv, slot, p, j->dt);
        for (int h = h0; h < h1; h++) {
            size_t q = (size_t)t * j->n_heads + h;
            float *o = j->out + q * KL;
            float s = j->scale * (dot(j->q_lat + q * KL, row, KL) + dot(j->q_pe + q * R, row + KL, R));
            float *m = &mx[h - h0], *l = &sum[h - h0];
            if (s > *m) {
                float corr = expf(*m - s);  // 0 for the first key (m = -inf)
                for (int d = 0; d < KL; d++) o[d] *= corr;
                *l *= corr;
                *m = s;
            }
            float w = expf(s - *m);
            for (int d = 0; d < KL; d++) o[d] += w * row[d];
            *l += w;
        }
    }
    for (int h = h0; h < h1; h++) {
        float *o = j->out + ((size_t)t * j->n_heads + h) * KL, inv = 1.0f / sum[h - h0];
        for (int d = 0; d < KL; d++) o[d] *= inv;
    }
}

void cpu_latent_attention(mx_backend *be, float *out, const float *q_lat, const float *q_pe, const mx_kv_ref *kv, int n,
                          int n_heads, int kv_lora, int rope, float scale) {
    cpu_ctx *c = cpu_of(be);
    MX_ASSERT(kv->lay.n_kv_heads == 1 && 2 * kv->lay.head_dim == kv_lora + rope && kv_lora + rope <= MAX_LATENT);
    MX_ASSERT(c->scratch_floats >= (size_t)(kv_lora + rope));
    for (int t = 0; t < n; t++)
        MX_ASSERT(kv->slot[t] >= 0 && kv->slot[t] < kv->lay.n_slots && kv->pos[t] >= 0 && kv->pos[t] < kv->lay.max_ctx);
    int blocks = (n_heads + HEADS_PER_TASK - 1) / HEADS_PER_TASK;
    latent_job j = {out, q_lat, q_pe, kv, n_heads, kv_lora, rope, blocks, scale, be->kv_dtype, c};
    mx_pool_run(c->pool, n * blocks, latent_task, &j);
}
