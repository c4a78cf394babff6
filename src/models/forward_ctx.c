// SPDX-License-Identifier: MIT
// The context of the forward pass: created once for n_slots sequences of max_ctx positions (or a
// pool of KV blocks shared through per-slot block tables), after the memory check, with every
// backend buffer a step needs sized for max_batch tokens and LOGIT_ROWS output rows, so a step
// allocates nothing. Also the block tables' edits and copy-on-write copies of one block, and the
// KV cache's size in bytes for a layout.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/env_switch.h"
#include "models/forward_internal.h"

static void *ctx_alloc(mx_ctx *c, size_t bytes, mx_error *err) {
    void *p = c->be->ops->alloc(c->be, bytes ? bytes : 4, err);
    if (p) c->bufs[c->n_bufs++] = p;
    return p;
}

mx_ctx *mx_ctx_create(mx_model *m, int n_slots, int max_ctx, int max_batch, mx_error *err) {
    return mx_ctx_create_pool(m, n_slots, max_ctx, max_batch, 0, err);
}

// Bytes of one block of one layer (K and V, every head), and of its I16/I8/I4 scales (0 for other types).
static size_t block_elem_bytes(const mx_kv_layout *lay, mx_dtype dt) {
    return (size_t)2 * lay->n_kv_heads * MX_KV_BLOCK * mx_kv_elem_bytes(dt, (size_t)lay->head_dim);
}
static size_t block_scale_bytes(const mx_kv_layout *lay, mx_dtype dt) {
    return mx_kv_scaled(dt) ? (size_t)2 * lay->n_kv_heads * MX_KV_BLOCK * mx_kv_row_scales(dt, lay->head_dim) * sizeof(float)
                            : 0;
}

mx_ctx *mx_ctx_create_pool(mx_model *m, int n_slots, int max_ctx, int max_batch, int n_blocks, mx_error *err) {
    const mx_config *cfg = &m->cfg;
    if (n_slots < 1 || max_ctx < 1 || max_batch < 1 || n_blocks < 0) {
        mx_fail(err, "context needs at least one slot, position and token per step");
        return NULL;
    }
    mx_kv_layout want = mx_model_kv_layout(cfg, n_slots, max_ctx, n_blocks);
    // Block ids are int32 and the cache's bytes a size_t.
    if ((int64_t)n_slots * (((int64_t)max_ctx + MX_KV_BLOCK - 1) / MX_KV_BLOCK) > INT32_MAX ||
        mx_kv_bytes(&want, m->be->kv_dtype) == SIZE_MAX) {
        mx_fail(err, "a KV cache of %d slots x %d positions (%d KV blocks) of %d layers x %d heads x %d is too large", n_slots,
                max_ctx, n_blocks, want.n_layers, want.n_kv_heads, want.head_dim);
        return NULL;
    }
    // Two 4-bit codes a byte: a row of an odd head_dim would end inside a byte.
    if (m->be->kv_dtype == MX_DTYPE_I4 && want.head_dim % 2) {
        mx_fail(err, "the 4-bit KV cache (--kv-bits 4) needs an even cached head size (this model's is %d)",
                want.head_dim);
        return NULL;
    }
    if (mx_ctx_memory_check(m, &want, max_batch, err)) return NULL;
    mx_ctx *c = calloc(1, sizeof *c);
    if (!c || !(c->bufs = calloc(32, sizeof *c->bufs))) {
        free(c);
        mx_fail(err, "out of memory");
        return NULL;
    }
    c->m = m;
    c->be = m->be;
    c->max_batch = max_batch;
    c->split_mixed = mx_env_switch_default("MLXCEL_GPU_SPLIT_MIXED", true);
    c->lay = want;
    size_t table_len = (size_t)mx_kv_table_len(&c->lay), n_entries = (size_t)n_slots * table_len;
    if (!(c->table = malloc(4 * n_entries)) || !(c->slot_tokens = calloc((size_t)n_slots, sizeof *c->slot_tokens))) {
        mx_ctx_free(c);
        mx_fail(err, "out of memory");
        return NULL;
    }
    // Without a pool size every slot owns its blocks in order; a pool's tables start empty (-1) and
    // the caller fills them (mx_ctx_set_blocks).
    for (size_t i = 0; i < n_entries; i++) c->table[i] = n_blocks > 0 ? -1 : (int32_t)i;
    c->table_dirty = true;
    size_t B = (size_t)max_batch, H = cfg->hidden_size, QD = (size_t)cfg->n_heads * cfg->head_dim,
           KD = (size_t)cfg->n_kv_heads * cfg->head_dim;
    size_t K = cfg->num_experts_per_tok > 0 ? (size_t)cfg->num_experts_per_tok : 1;
    size_t I = (size_t)mx_model_dense_intermediate(m), moeI = (size_t)cfg->moe_intermediate_size;
    size_t ff = B * I > B * K * moeI ? B * I : B * K * moeI;
    if (B * moeI * (size_t)cfg->n_shared_experts > ff) ff = B * moeI * (size_t)cfg->n_shared_experts;
    bool ok = (c->kv = ctx_alloc(c, mx_kv_bytes(&c->lay, c->be->kv_dtype), err)) &&
              (c->d_table = ctx_alloc(c, 4 * n_entries, err)) &&
              (c->d_tokens = ctx_alloc(c, 4 * B, err)) && (c->d_pos = ctx_alloc(c, 4 * B, err)) &&
              (c->d_slot = ctx_alloc(c, 4 * B, err)) && (c->d_rows = ctx_alloc(c, 4 * LOGIT_ROWS, err)) && (c->x = ctx_alloc(c, 4 * B * H, err)) &&
              (c->h = ctx_alloc(c, 4 * B * H, err)) && (c->tmp = ctx_alloc(c, 4 * B * H, err)) &&
              (c->q = ctx_alloc(c, 4 * B * QD, err)) && (c->att = ctx_alloc(c, 4 * B * QD, err)) &&
              (c->k = ctx_alloc(c, 4 * B * KD, err)) && (c->v = ctx_alloc(c, 4 * B * KD, err)) &&
              (c->gate = ctx_alloc(c, 4 * ff, err)) && (c->up = ctx_alloc(c, 4 * ff, err)) &&
              (c->out_h = ctx_alloc(c, 4 * LOGIT_ROWS * H, err)) &&
              (c->logits = ctx_alloc(c, 4 * (size_t)LOGIT_ROWS * cfg->vocab_size, err)) &&
              (c->d_argmax = ctx_alloc(c, 4 * LOGIT_ROWS, err)) &&
              (c->d_srows = ctx_alloc(c, sizeof(mx_sample_row) * LOGIT_ROWS, err)) &&
              (c->d_outs = ctx_alloc(c, sizeof(mx_sample_out) * LOGIT_ROWS, err)) &&
              (c->d_mods = ctx_alloc(c, sizeof(mx_logit_mod) * MAX_EDITS, err)) &&
              (c->d_masks = ctx_alloc(c, 4 * LOGIT_ROWS * (size_t)((cfg->vocab_size + 31) / 32), err));
    if (ok && cfg->num_experts > 0)
        ok = (c->router = ctx_alloc(c, 4 * B * cfg->num_experts, err)) && (c->moe_ids = ctx_alloc(c, 4 * B * K, err)) &&
             (c->moe_w = ctx_alloc(c, 4 * B * K, err)) && (c->moe_y = ctx_alloc(c, 4 * B * K * H, err));
    if (ok && cfg->kv_lora_rank > 0) ok = (c->mla = mx_mla_create(m, max_batch, err)) != NULL;
    if (!ok) {
        mx_fail_prefix(err, "creating a context (%d slots x %d positions, %d KV blocks, %.1f MB): ", n_slots, max_ctx,
                       mx_kv_blocks(&c->lay), mx_kv_bytes(&c->lay, c->be->kv_dtype) / 1e6);
        mx_ctx_free(c);
        return NULL;
    }
    return c;
}

void mx_ctx_free(mx_ctx *c) {
    if (!c) return;
    for (int i = 0; i < PLAN_CACHE; i++) mx_plan_free(c->be, c->plans[i].plan);
    for (int i = 0; i < c->n_bufs; i++) c->be->ops->release(c->be, c->bufs[i]);
    mx_mla_free(c->be, c->mla);
    free(c->bufs);
    free(c->table);
    free(c->slot_tokens);
    free(c);
}

int mx_ctx_max_ctx(const mx_ctx *c) { return c->lay.max_ctx; }
bool mx_ctx_split_mixed(const mx_ctx *c) { return c->split_mixed; }
int64_t mx_ctx_kv_bytes(const mx_ctx *c) { return (int64_t)mx_kv_bytes(&c->lay, c->be->kv_dtype); }

int mx_ctx_kv_blocks(const mx_ctx *c) { return mx_kv_blocks(&c->lay); }

int64_t mx_model_kv_block_bytes(const mx_model *m) {
    const mx_config *cfg = &m->cfg;
    mx_kv_layout one = mx_model_kv_layout(cfg, 1, MX_KV_BLOCK, 1);
    return (int64_t)mx_kv_bytes(&one, m->be->kv_dtype);
}

int mx_ctx_set_blocks(mx_ctx *c, int slot, const int32_t *blocks, int n, mx_error *err) {
    int len = mx_kv_table_len(&c->lay), nb = mx_kv_blocks(&c->lay);
    if (slot < 0 || slot >= c->lay.n_slots || n < 0 || n > len)
        return mx_fail(err, "block table of slot %d: %d blocks for a row of %d (%d slots)", slot, n, len, c->lay.n_slots);
    int32_t *row = c->table + (size_t)slot * len;
    for (int i = 0; i < len; i++) {
        int32_t b = i < n ? blocks[i] : -1;
        if (b < -1 || b >= nb) return mx_fail(err, "KV block %d does not exist (%d blocks)", b, nb);
        if (row[i] != b) row[i] = b, c->table_dirty = true;
    }
    return 0;
}

int mx_ctx_copy_block(mx_ctx *c, int src, int dst, mx_error *err) {
    int nb = mx_kv_blocks(&c->lay);
    if (src < 0 || src >= nb || dst < 0 || dst >= nb) return mx_fail(err, "KV block copy %d -> %d: %d blocks", src, dst, nb);
    const mx_backend_ops *o = c->be->ops;
    size_t eb = block_elem_bytes(&c->lay, c->be->kv_dtype), sb = block_scale_bytes(&c->lay, c->be->kv_dtype);
    size_t layers = (size_t)c->lay.n_layers;
    uint8_t *kv = c->kv, *scales = kv + layers * nb * eb;
    // Block b of layer l is run l of a stride of nb blocks: one copy of n_layers runs for the
    // elements, one for the scales, queued on the backend (no round trip through the host).
    if (o->copy_runs(c->be, kv + (size_t)dst * eb, kv + (size_t)src * eb, eb, layers, nb * eb, err)) return -1;
    if (sb && o->copy_runs(c->be, scales + (size_t)dst * sb, scales + (size_t)src * sb, sb, layers, nb * sb, err)) return -1;
    return 0;
}

size_t mx_kv_bytes(const mx_kv_layout *lay, mx_dtype kv_dtype) {
    // rows = layers x blocks x K|V x MX_KV_BLOCK x heads, each of head_dim elements, then for I16
    // (the default cache of the CPU and GPU backends, see cpu_attention.c), I8 and I4 one float scale
    // per mx_kv_scale_block elements of a row. The factors come from the config and the flags: checked.
    size_t rows = 1, data, scales = 0, total;
    size_t factors[5] = {(size_t)lay->n_layers, (size_t)mx_kv_blocks(lay), 2 * MX_KV_BLOCK, (size_t)lay->n_kv_heads, 1};
    for (int i = 0; i < 4; i++)
        if (__builtin_mul_overflow(rows, factors[i], &rows)) return SIZE_MAX;
    if (__builtin_mul_overflow(rows, mx_kv_elem_bytes(kv_dtype, (size_t)lay->head_dim), &data)) return SIZE_MAX;
    if (mx_kv_scaled(kv_dtype) &&
        __builtin_mul_overflow(rows, (size_t)mx_kv_row_scales(kv_dtype, lay->head_dim) * sizeof(float), &scales))
        return SIZE_MAX;
    return __builtin_add_overflow(data, scales, &total) ? SIZE_MAX : total;
}
