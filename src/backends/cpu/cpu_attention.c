// SPDX-License-Identifier: MIT
// CPU KV cache and attention. Cache layout (private to this backend):
//   kv = [layer][slot][K or V][max_ctx][n_kv_heads][head_dim] float32.
// Attention streams over the keys of one (token, head) with an online softmax (running max and
// sum), so no [T, T] score matrix and no scratch sized by the context are needed.
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
    int layer, n_heads, window;
    const int32_t *slot, *pos;
    float scale;
} attn_job;

static void attn_task(void *arg, int task, int thread) {
    (void)thread;
    const attn_job *j = arg;
    const mx_kv_layout *lay = j->lay;
    int t = task / j->n_heads, h = task % j->n_heads;
    int hd = lay->head_dim, group = j->n_heads / lay->n_kv_heads, kvh = h / group;
    size_t row = (size_t)lay->n_kv_heads * hd;
    const float *q = j->q + ((size_t)t * j->n_heads + h) * hd;
    const float *K = kv_plane(j->kv, lay, j->layer, j->slot[t], 0) + (size_t)kvh * hd;
    const float *V = kv_plane(j->kv, lay, j->layer, j->slot[t], 1) + (size_t)kvh * hd;
    int last = j->pos[t];
    int first = j->window > 0 && last - j->window + 1 > 0 ? last - j->window + 1 : 0;
    float *o = j->out + ((size_t)t * j->n_heads + h) * hd;
    cpu_kernels_attn_head(q, K, V, (int64_t)row, first, last, hd, j->scale, o);
}

void cpu_attention(mx_backend *be, float *out, const float *q, const void *kv, const mx_kv_layout *lay, int layer,
                   const int32_t *slot, const int32_t *pos, int n, int n_heads, float scale, int window) {
    MX_ASSERT(lay->head_dim <= MAX_HEAD_DIM && n_heads % lay->n_kv_heads == 0);
    attn_job j = {out, q, kv, lay, layer, n_heads, window, slot, pos, scale};
    mx_pool_run(cpu_of(be)->pool, n * n_heads, attn_task, &j);
}
