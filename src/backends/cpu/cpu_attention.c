// SPDX-License-Identifier: MIT
// CPU KV cache and attention. Cache layout (private to this backend), elements of be->kv_dtype:
//   kv = [layer][slot][K or V][n_kv_heads][max_ctx][head_dim]
// then, for MX_DTYPE_I16, one float scale per block of CPU_KV_SCALE_BLOCK elements of a row:
//   scales = [layer][slot][K or V][n_kv_heads][max_ctx][ceil(head_dim / CPU_KV_SCALE_BLOCK)]
// Head-major, so the keys attention streams for one KV head are contiguous: with all heads of a
// position side by side, consecutive keys of a head sat 4 KB apart (0.6B, float32), one page
// each, and decode at 2k context read them at a third of the streaming rate.
// An I16 block holds round(x / s) with s = max|x| / 32767 over the block: 2.25 bytes per element
// instead of float32's 4 (decode reads the whole cache every token), with an error of at most
// max|x| / 65534 per element. On the parity fixtures (relative logit error, bound 1e-3) float16 keys
// and values measured up to 1.2e-3 and bfloat16 up to 7e-2; I16 with one scale per row of 128
// 1.1e-4 on the Qwen fixtures; on Gemma 3, 4.6e-4 with blocks of 32 and 3.7e-4 with blocks of 16.
// Attention streams over the keys with an online softmax (running max and sum), so no [T, T] score
// matrix and no scratch sized by the context are needed. A task is one KV head and a block of
// consecutive tokens of the batch (CPU_ATTN_MAX_ROWS / group of them): all their query heads of that
// KV head's group go to the kernel together (cpu_kernels_attn_rows), which reads each block of keys
// once for them. Consecutive tokens of a prefill share a slot and nearly the same key range, so this
// cuts the cache traffic by the number of queries per task. Tasks are numbered head-major, so the
// threads sweep one KV head's keys (512 KB at 512 positions, head_dim 128) while they are in L2.
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "core/dtype.h"

#include "backends/cpu/cpu_internal.h"
#include "backends/cpu/cpu_kernels.h"

#define MAX_HEAD_DIM 512

static size_t plane_elems(const mx_kv_layout *lay) { return (size_t)lay->max_ctx * lay->n_kv_heads * lay->head_dim; }

// Start of K (which = 0) or V (which = 1) for a layer and slot, in elements of `es` bytes.
static uint8_t *kv_plane(const void *kv, const mx_kv_layout *lay, int layer, int slot, int which, size_t es) {
    size_t plane = plane_elems(lay);
    return (uint8_t *)kv + (((size_t)layer * lay->n_slots + slot) * 2 + which) * plane * es;
}

// Scales of the I16 rows: after all the planes; CPU_KV_SCALES(head_dim) floats per (position, KV head).
static float *kv_scales(const void *kv, const mx_kv_layout *lay, int layer, int slot, int which) {
    size_t planes = (size_t)lay->n_layers * lay->n_slots * 2;
    size_t per_plane = (size_t)lay->max_ctx * lay->n_kv_heads * CPU_KV_SCALES(lay->head_dim);
    float *base = (float *)((uint8_t *)kv + planes * plane_elems(lay) * 2);
    return base + (((size_t)layer * lay->n_slots + slot) * 2 + which) * per_plane;
}

// Writes one position's rows (n_kv_heads rows of hd) in the cache's element type.
static void store_rows(uint8_t *dst, float *scales, const float *src, int n_rows, int hd, mx_dtype dt) {
    size_t n = (size_t)n_rows * hd;
    if (dt == MX_DTYPE_F32) {
        memcpy(dst, src, n * sizeof(float));
        return;
    }
    if (dt == MX_DTYPE_I16) {
        for (int r = 0; r < n_rows; r++)
            for (int b0 = 0, b = 0; b0 < hd; b0 += CPU_KV_SCALE_BLOCK, b++) {
                const float *x = src + (size_t)r * hd + b0;
                int16_t *d = (int16_t *)dst + (size_t)r * hd + b0;
                int len = hd - b0 < CPU_KV_SCALE_BLOCK ? hd - b0 : CPU_KV_SCALE_BLOCK;
                float amax = 0.0f;
                for (int i = 0; i < len; i++) amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax;
                float inv = amax > 0.0f ? 32767.0f / amax : 0.0f;
                for (int i = 0; i < len; i++) d[i] = (int16_t)lrintf(x[i] * inv);
                scales[(size_t)r * CPU_KV_SCALES(hd) + b] = amax / 32767.0f;
            }
        return;
    }
    uint16_t *d = (uint16_t *)dst;
    for (size_t i = 0; i < n; i++) d[i] = dt == MX_DTYPE_F16 ? mx_f32_to_f16(src[i]) : mx_f32_to_bf16(src[i]);
}

void cpu_kv_store(mx_backend *be, void *kv, const mx_kv_layout *lay, int layer, const float *k, const float *v,
                  const int32_t *slot, const int32_t *pos, int n) {
    int nh = lay->n_kv_heads, hd = lay->head_dim;
    size_t row = (size_t)nh * hd, es = mx_dtype_size(be->kv_dtype);
    bool scaled = be->kv_dtype == MX_DTYPE_I16;
    for (int t = 0; t < n; t++) {
        MX_ASSERT(slot[t] >= 0 && slot[t] < lay->n_slots && pos[t] >= 0 && pos[t] < lay->max_ctx);
        for (int which = 0; which < 2; which++) {
            for (int h = 0; h < nh; h++) {
                size_t at = (size_t)h * lay->max_ctx + pos[t];  // head-major: [head][position]
                uint8_t *dst = kv_plane(kv, lay, layer, slot[t], which, es) + at * hd * es;
                float *sc = scaled ? kv_scales(kv, lay, layer, slot[t], which) + at * CPU_KV_SCALES(hd) : NULL;
                store_rows(dst, sc, (which ? v : k) + t * row + (size_t)h * hd, 1, hd, be->kv_dtype);
            }
        }
    }
}

typedef struct attn_job {
    float *out;
    const float *q;
    const void *kv;
    const mx_kv_layout *lay;
    int layer, n_heads, window, n;
    int tokens, blocks;  // tokens per task, token blocks
    mx_dtype kv_dtype;   // cache element type
    size_t es;           // its size in bytes
    const int32_t *slot, *pos;
    float scale;
    cpu_ctx *c;
} attn_job;

// Task = (KV head, block of `tokens` tokens); tokens of one slot in the block go in one call.
static void attn_task(void *arg, int task, int thread) {
    const attn_job *j = arg;
    const mx_kv_layout *lay = j->lay;
    int kvh = task / j->blocks, blk = task % j->blocks;
    int hd = lay->head_dim, group = j->n_heads / lay->n_kv_heads;
    size_t head = (size_t)kvh * lay->max_ctx;  // first row of this KV head in a plane
    int t_end = (blk + 1) * j->tokens < j->n ? (blk + 1) * j->tokens : j->n;
    for (int t0 = blk * j->tokens; t0 < t_end;) {
        int t1 = t0 + 1;
        while (t1 < t_end && j->slot[t1] == j->slot[t0] && (t1 - t0 + 1) * group <= CPU_ATTN_MAX_ROWS) t1++;
        const float *q[CPU_ATTN_MAX_ROWS];
        float *out[CPU_ATTN_MAX_ROWS];
        int first[CPU_ATTN_MAX_ROWS], last[CPU_ATTN_MAX_ROWS], nq = 0;
        for (int t = t0; t < t1; t++)
            for (int g = 0; g < group; g++, nq++) {
                size_t at = ((size_t)t * j->n_heads + (size_t)kvh * group + g) * hd;
                q[nq] = j->q + at;
                out[nq] = j->out + at;
                last[nq] = j->pos[t];
                first[nq] = j->window > 0 && last[nq] - j->window + 1 > 0 ? last[nq] - j->window + 1 : 0;
            }
        cpu_attn_args a = {.q = q, .out = out, .nq = nq, .first = first, .last = last,
                           .K = kv_plane(j->kv, lay, j->layer, j->slot[t0], 0, j->es) + head * hd * j->es,
                           .V = kv_plane(j->kv, lay, j->layer, j->slot[t0], 1, j->es) + head * hd * j->es,
                           .stride = hd, .kv_dtype = j->kv_dtype, .hd = hd, .scale = j->scale};
        if (j->kv_dtype == MX_DTYPE_I16) {
            a.K_scale = kv_scales(j->kv, lay, j->layer, j->slot[t0], 0) + head * CPU_KV_SCALES(hd);
            a.V_scale = kv_scales(j->kv, lay, j->layer, j->slot[t0], 1) + head * CPU_KV_SCALES(hd);
            a.scale_stride = CPU_KV_SCALES(hd);
        }
        cpu_kernels_attn_rows(&a, j->c->scratch[thread]);
        t0 = t1;
    }
}

void cpu_attention(mx_backend *be, float *out, const float *q, const void *kv, const mx_kv_layout *lay, int layer,
                   const int32_t *slot, const int32_t *pos, int n, int n_heads, float scale, int window) {
    MX_ASSERT(lay->head_dim <= MAX_HEAD_DIM && n_heads % lay->n_kv_heads == 0);
    MX_ASSERT(n_heads / lay->n_kv_heads <= CPU_ATTN_MAX_ROWS);
    MX_ASSERT(cpu_of(be)->scratch_floats >= CPU_ATTN_SCRATCH(lay->head_dim));
    cpu_ctx *c = cpu_of(be);
    int tokens = CPU_ATTN_MAX_ROWS / (n_heads / lay->n_kv_heads);
    attn_job j = {out, q, kv, lay, layer, n_heads, window, n, tokens, (n + tokens - 1) / tokens,
                  be->kv_dtype, mx_dtype_size(be->kv_dtype), slot, pos, scale, c};
    mx_pool_run(c->pool, j.blocks * lay->n_kv_heads, attn_task, &j);
}
