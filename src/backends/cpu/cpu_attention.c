// SPDX-License-Identifier: MIT
// CPU KV cache and attention. Cache layout (private to this backend):
//   kv = [layer][slot][K or V][max_ctx][n_kv_heads][head_dim] float32.
// Attention streams over the keys with an online softmax (running max and sum), so no [T, T] score
// matrix and no scratch sized by the context are needed. A task is one KV head and a block of
// consecutive tokens of the batch (CPU_ATTN_MAX_ROWS / group of them): all their query heads of that
// KV head's group go to the kernel together (cpu_kernels_attn_rows), which reads each block of keys
// once for them. Consecutive tokens of a prefill share a slot and nearly the same key range, so this
// cuts the cache traffic by the number of queries per task. Tasks are numbered head-major, so the
// threads sweep one KV head's keys (512 KB at 512 positions, head_dim 128) while they are in L2.
#include <string.h>

#include "backends/cpu/cpu_internal.h"
#include "backends/cpu/cpu_kernels.h"

#define MAX_HEAD_DIM 512

static size_t plane_floats(const mx_kv_layout *lay) { return (size_t)lay->max_ctx * lay->n_kv_heads * lay->head_dim; }

// Start of K (which = 0) or V (which = 1) for a layer and slot.
static float *kv_plane(const void *kv, const mx_kv_layout *lay, int layer, int slot, int which) {
    size_t plane = plane_floats(lay);
    return (float *)kv + (((size_t)layer * lay->n_slots + slot) * 2 + which) * plane;
}

void cpu_kv_store(mx_backend *be, void *kv, const mx_kv_layout *lay, int layer, const float *k, const float *v,
                  const int32_t *slot, const int32_t *pos, int n) {
    (void)be;
    size_t row = (size_t)lay->n_kv_heads * lay->head_dim;
    for (int t = 0; t < n; t++) {
        MX_ASSERT(slot[t] >= 0 && slot[t] < lay->n_slots && pos[t] >= 0 && pos[t] < lay->max_ctx);
        memcpy(kv_plane(kv, lay, layer, slot[t], 0) + (size_t)pos[t] * row, k + t * row, row * sizeof(float));
        memcpy(kv_plane(kv, lay, layer, slot[t], 1) + (size_t)pos[t] * row, v + t * row, row * sizeof(float));
    }
}

typedef struct attn_job {
    float *out;
    const float *q;
    const void *kv;
    const mx_kv_layout *lay;
    int layer, n_heads, window, n;
    int tokens, blocks;  // tokens per task, token blocks
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
    size_t row = (size_t)lay->n_kv_heads * hd;
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
                           .K = kv_plane(j->kv, lay, j->layer, j->slot[t0], 0) + (size_t)kvh * hd,
                           .V = kv_plane(j->kv, lay, j->layer, j->slot[t0], 1) + (size_t)kvh * hd,
                           .stride = (int64_t)row, .kv_dtype = MX_DTYPE_F32, .hd = hd, .scale = j->scale};
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
    attn_job j = {out, q, kv, lay, layer, n_heads, window, n, tokens, (n + tokens - 1) / tokens, slot, pos, scale, c};
    mx_pool_run(c->pool, j.blocks * lay->n_kv_heads, attn_task, &j);
}
