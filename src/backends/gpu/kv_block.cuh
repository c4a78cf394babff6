// SPDX-License-Identifier: MIT
// Where a position's keys and values live in the GPU's paged KV cache (f16, layout in kernels.h):
// the block table row of the token's slot names the block, the position's offset in the block the
// row. Shared by the kv_store and attention kernels, the only readers of the block table.
#ifndef MX_BACKENDS_GPU_KV_BLOCK_CUH
#define MX_BACKENDS_GPU_KV_BLOCK_CUH

#include <stdint.h>

#include "backends/backend.h"

// What a kernel needs of an mx_kv_ref, as plain values.
struct KvPages {
    const int32_t *table;  // [n_slots][table_len], NULL: slot s owns blocks s * table_len ..
    int table_len, n_blocks, layer, n_kv_heads, head_dim;
};

static inline KvPages kv_pages(const mx_kv_ref *r) {
    KvPages p;
    p.table = r->table, p.table_len = mx_kv_table_len(&r->lay), p.n_blocks = mx_kv_blocks(&r->lay);
    p.layer = r->layer, p.n_kv_heads = r->lay.n_kv_heads, p.head_dim = r->lay.head_dim;
    return p;
}

// Element offset of the head_dim-long row of (slot, pos, K (which = 0) or V (1), KV head).
__device__ __forceinline__ int64_t kv_row(const KvPages &p, int slot, int pos, int which, int head) {
    const int i = slot * p.table_len + pos / MX_KV_BLOCK;
    const int64_t b = p.table ? p.table[i] : i;
    return (((((int64_t)p.layer * p.n_blocks + b) * 2 + which) * p.n_kv_heads + head) * MX_KV_BLOCK + pos % MX_KV_BLOCK) *
           p.head_dim;
}

#endif
