// SPDX-License-Identifier: MIT
// CPU KV cache and attention. Cache layout (private to this backend), elements of be->kv_dtype, a
// pool of blocks of MX_KV_BLOCK positions (backend.h):
//   kv = [layer][block][K or V][n_kv_heads][MX_KV_BLOCK][head_dim]
// then, for MX_DTYPE_I16, I8 and I4, one float scale per mx_kv_scale_block elements of a row (16; 32 for I4):
//   scales = [layer][block][K or V][n_kv_heads][MX_KV_BLOCK][mx_kv_row_scales(kv_dtype, head_dim)]
// A sequence's position p is in block table[slot][p / MX_KV_BLOCK] (mx_kv_ref), at offset
// p % MX_KV_BLOCK. Head-major inside a block, so the 16 keys attention streams for one KV head are
// contiguous (with all heads of a position side by side, consecutive keys of a head sat 4 KB apart,
// one page each, and decode at 2k context read them at a third of the streaming rate); a block is
// exactly one 16-key step of the attention kernel, so the table is read once per step.
// An I16 block holds round(x / s) with s = max|x| / 32767 over the block: 2.25 bytes per element
// instead of float32's 4 (decode reads the whole cache every token), with an error of at most
// max|x| / 65534 per element. On the parity fixtures (relative logit error, bound 1e-3) float16 keys
// and values measured up to 3.1e-3 (Gemma 3; 1.2e-3 on the others) and bfloat16 up to 7e-2; I16 with one scale per row of 128
// 1.1e-4 on the Qwen fixtures; on Gemma 3, 4.6e-4 with blocks of 32 and 3.7e-4 with blocks of 16.
// The opt-in I8 cache (--kv-bits 8) holds round(x / s) with s = max|x| / 127, 1.25 bytes per
// element (decode at long context reads 44% fewer cache bytes than I16), an error of at most
// max|x| / 254 per element: logits within 2.4e-2 of the fixtures (6.7e-2 on Gemma 3, bound 8e-2).
// The opt-in I4 cache (--kv-bits 4) holds 4-bit codes, two a byte, with a float scale per 32 values
// (cpu_kv_i4.c): 0.625 bytes per element, half of I8's cache bytes, an error of max|x| / 16 of the
// group per element (test_model_parity.c has the logits' measured error and bound).
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

// Elements of one (block, K or V, KV head): MX_KV_BLOCK rows of head_dim.
static size_t head_elems(const mx_kv_layout *lay) { return (size_t)MX_KV_BLOCK * lay->head_dim; }

// Index of (layer, block, K (which = 0) or V (1), KV head) in units of head_elems rows (or, for the
// scales, of MX_KV_BLOCK rows of scales).
static size_t head_index(const mx_kv_layout *lay, int layer, int block, int which, int head) {
    return (((size_t)layer * mx_kv_blocks(lay) + (size_t)block) * 2 + (size_t)which) * lay->n_kv_heads + (size_t)head;
}

// Scales of the I16, I8 or I4 rows: after all the elements.
static float *kv_scales_base(const void *kv, const mx_kv_layout *lay, mx_dtype dt) {
    size_t heads = (size_t)lay->n_layers * mx_kv_blocks(lay) * 2 * lay->n_kv_heads;
    return (float *)((uint8_t *)kv + heads * mx_kv_elem_bytes(dt, head_elems(lay)));
}

// The block holding position pos of slot `slot`.
static int block_of(const int32_t *table, const mx_kv_layout *lay, int slot, int pos) {
    int i = (size_t)slot * mx_kv_table_len(lay) + pos / MX_KV_BLOCK;
    int b = table ? table[i] : i;
    MX_ASSERT(b >= 0 && b < mx_kv_blocks(lay));
    return b;
}

// Writes one position's rows (n_kv_heads rows of hd) in the cache's element type.
static void store_rows(uint8_t *dst, float *scales, const float *src, int n_rows, int hd, mx_dtype dt) {
    size_t n = (size_t)n_rows * hd;
    if (dt == MX_DTYPE_F32) {
        memcpy(dst, src, n * sizeof(float));
        return;
    }
    if (mx_kv_scaled(dt)) {  // I16, I8, I4: codes and mx_kv_row_scales scales per row
        size_t row_bytes = mx_kv_elem_bytes(dt, (size_t)hd), nsc = (size_t)mx_kv_row_scales(dt, hd);
        for (int r = 0; r < n_rows; r++) {
            uint8_t *d = dst + (size_t)r * row_bytes;
            float *s = scales + (size_t)r * nsc;
            const float *x = src + (size_t)r * hd;
            if (dt == MX_DTYPE_I16) cpu_kernels_kv_i16_row((int16_t *)d, s, x, hd);
            else if (dt == MX_DTYPE_I8) cpu_kernels_kv_i8_row((int8_t *)d, s, x, hd);
            else cpu_kernels_kv_i4_row(d, s, x, hd);
        }
        return;
    }
    uint16_t *d = (uint16_t *)dst;
    for (size_t i = 0; i < n; i++) d[i] = dt == MX_DTYPE_F16 ? mx_f32_to_f16(src[i]) : mx_f32_to_bf16(src[i]);
}

typedef struct kv_store_job {
    const mx_kv_ref *r;
    const float *k, *v;  // [n, n_kv_heads, head_dim]
    int n;
    mx_dtype dt;
} kv_store_job;

// One (K or V, KV head) for every token of the step, in token order (so a position written twice in
// one step ends as the serial loop would leave it).
static void kv_store_task(void *arg, int task, int thread) {
    (void)thread;
    const kv_store_job *j = arg;
    const mx_kv_ref *r = j->r;
    const mx_kv_layout *lay = &r->lay;
    int nh = lay->n_kv_heads, hd = lay->head_dim, which = task / nh, h = task % nh;
    size_t row = (size_t)nh * hd, nsc = (size_t)mx_kv_row_scales(j->dt, hd);
    float *scales = mx_kv_scaled(j->dt) ? kv_scales_base(r->kv, lay, j->dt) : NULL;
    for (int t = 0; t < j->n; t++) {
        int block = block_of(r->table, lay, r->slot[t], r->pos[t]), off = r->pos[t] % MX_KV_BLOCK;
        size_t at = head_index(lay, r->layer, block, which, h) * MX_KV_BLOCK + (size_t)off;  // in rows
        store_rows((uint8_t *)r->kv + mx_kv_elem_bytes(j->dt, at * hd), scales ? scales + at * nsc : NULL,
                   (which ? j->v : j->k) + t * row + (size_t)h * hd, 1, hd, j->dt);
    }
}

// Tokens of a step above which the store is split over the pool (a decode step's few rows stay on
// the calling thread).
#define KV_STORE_POOL_TOKENS 8

void cpu_kv_store(mx_backend *be, const mx_kv_ref *r, const float *k, const float *v, int n) {
    const mx_kv_layout *lay = &r->lay;
    for (int t = 0; t < n; t++)
        MX_ASSERT(r->slot[t] >= 0 && r->slot[t] < lay->n_slots && r->pos[t] >= 0 && r->pos[t] < lay->max_ctx);
    kv_store_job j = {r, k, v, n, be->kv_dtype};
    int tasks = 2 * lay->n_kv_heads;
    if (n < KV_STORE_POOL_TOKENS) {
        for (int t = 0; t < tasks; t++) kv_store_task(&j, t, 0);
        return;
    }
    mx_pool_run(cpu_of(be)->pool, tasks, kv_store_task, &j);
}

typedef struct attn_job {
    float *out;
    const float *q;
    const void *kv;
    const mx_kv_ref *r;
    int n_heads, window, n;
    const float *sinks;  // [n_heads] attention sinks or NULL
    int tokens, blocks;  // tokens per task, token blocks
    mx_dtype kv_dtype;   // cache element type
    float scale;
    cpu_ctx *c;
} attn_job;

// The KV head of the i-th head-major run of tasks: the two halves of the heads interleaved (0, 4, 1,
// 5, ... of 8). A head's block of keys lies next to the neighbouring heads' (the cache layout above),
// and two threads reading neighbouring heads at the same time ran each head 25% slower than one
// thread alone (attention lab with the pool, bench/RESULTS.md CPU round 14); a decode step's tasks
// are one per head, claimed in order, so neighbours in the task order are kept heads apart.
static int task_head(int i, int n_kv_heads) { return i % 2 * ((n_kv_heads + 1) / 2) + i / 2; }

// Task = (KV head, block of `tokens` tokens); tokens of one slot in the block go in one call.
static void attn_task(void *arg, int task, int thread) {
    const attn_job *j = arg;
    const mx_kv_layout *lay = &j->r->lay;
    const int32_t *slot = j->r->slot, *pos = j->r->pos;
    int kvh = task_head(task / j->blocks, lay->n_kv_heads), blk = task % j->blocks;
    int hd = lay->head_dim, group = j->n_heads / lay->n_kv_heads, tl = mx_kv_table_len(lay);
    int t_end = (blk + 1) * j->tokens < j->n ? (blk + 1) * j->tokens : j->n;
    // Rows of block 0 of this layer and KV head (K and V); block b is b * 2 * n_kv_heads heads further.
    size_t k0 = head_index(lay, j->r->layer, 0, 0, kvh), v0 = head_index(lay, j->r->layer, 0, 1, kvh);
    int64_t block_rows = (int64_t)2 * lay->n_kv_heads * MX_KV_BLOCK;
    const float *scales = mx_kv_scaled(j->kv_dtype) ? kv_scales_base(j->kv, lay, j->kv_dtype) : NULL;
    int64_t nsc = mx_kv_row_scales(j->kv_dtype, hd);
    for (int t0 = blk * j->tokens; t0 < t_end;) {
        int t1 = t0 + 1;
        while (t1 < t_end && slot[t1] == slot[t0] && (t1 - t0 + 1) * group <= CPU_ATTN_MAX_ROWS) t1++;
        const float *q[CPU_ATTN_MAX_ROWS];
        float *out[CPU_ATTN_MAX_ROWS], sink[CPU_ATTN_MAX_ROWS];
        int first[CPU_ATTN_MAX_ROWS], last[CPU_ATTN_MAX_ROWS], nq = 0;
        for (int t = t0; t < t1; t++)
            for (int g = 0; g < group; g++, nq++) {
                size_t at = ((size_t)t * j->n_heads + (size_t)kvh * group + g) * hd;
                q[nq] = j->q + at;
                out[nq] = j->out + at;
                sink[nq] = j->sinks ? j->sinks[kvh * group + g] : -INFINITY;
                last[nq] = pos[t];
                first[nq] = j->window > 0 && last[nq] - j->window + 1 > 0 ? last[nq] - j->window + 1 : 0;
            }
        cpu_attn_args a = {.q = q, .out = out, .nq = nq, .first = first, .last = last,
                           .K = (const uint8_t *)j->kv + mx_kv_elem_bytes(j->kv_dtype, k0 * MX_KV_BLOCK * hd),
                           .V = (const uint8_t *)j->kv + mx_kv_elem_bytes(j->kv_dtype, v0 * MX_KV_BLOCK * hd),
                           .stride = hd, .kv_dtype = j->kv_dtype, .hd = hd, .scale = j->scale,
                           .blocks = j->r->table ? j->r->table + (size_t)slot[t0] * tl : NULL,
                           .block0 = j->r->table ? 0 : slot[t0] * tl, .block_stride = block_rows * hd,
                           .sink = j->sinks ? sink : NULL};
        if (scales) {
            a.K_scale = scales + k0 * MX_KV_BLOCK * nsc;
            a.V_scale = scales + v0 * MX_KV_BLOCK * nsc;
            a.scale_stride = nsc;
            a.scale_block_stride = block_rows * nsc;
        }
        cpu_kernels_attn_rows(&a, j->c->scratch[thread]);
        t0 = t1;
    }
}

void cpu_attention(mx_backend *be, float *out, const float *q, const mx_kv_ref *r, int n, int n_heads, float scale,
                   int window, const float *sinks) {
    const mx_kv_layout *lay = &r->lay;
    MX_ASSERT(lay->head_dim <= MAX_HEAD_DIM && n_heads % lay->n_kv_heads == 0);
    MX_ASSERT(n_heads / lay->n_kv_heads <= CPU_ATTN_MAX_ROWS);
    MX_ASSERT(cpu_of(be)->scratch_floats >= CPU_ATTN_SCRATCH(lay->head_dim));
    cpu_ctx *c = cpu_of(be);
    int tokens = CPU_ATTN_MAX_ROWS / (n_heads / lay->n_kv_heads);
    attn_job j = {out, q, r->kv, r, n_heads, window, n, sinks, tokens, (n + tokens - 1) / tokens,
                  be->kv_dtype, scale, c};
    mx_pool_run(c->pool, j.blocks * lay->n_kv_heads, attn_task, &j);
}

// Row access for the latent cache (cpu_latent.c), so the layout above is written once.
uint8_t *cpu_kv_row(const mx_kv_ref *r, int slot, int pos, int which, int head, mx_dtype dt) {
    size_t at = head_index(&r->lay, r->layer, block_of(r->table, &r->lay, slot, pos), which, head) * MX_KV_BLOCK +
                (size_t)(pos % MX_KV_BLOCK);  // in rows
    return (uint8_t *)r->kv + mx_kv_elem_bytes(dt, at * r->lay.head_dim);
}

float *cpu_kv_row_scales(const mx_kv_ref *r, int slot, int pos, int which, int head, mx_dtype dt) {
    size_t at = head_index(&r->lay, r->layer, block_of(r->table, &r->lay, slot, pos), which, head) * MX_KV_BLOCK +
                (size_t)(pos % MX_KV_BLOCK);
    return kv_scales_base(r->kv, &r->lay, dt) + at * mx_kv_row_scales(dt, r->lay.head_dim);
}

void cpu_kv_write_row(uint8_t *dst, float *scales, const float *src, int hd, mx_dtype dt) {
    store_rows(dst, scales, src, 1, hd, dt);
}
