// SPDX-License-Identifier: MIT
// The cache of the decode-attention emulation tests (test_kv_emulated.cpp):
// two slots of `cap` rows (paged: blocks in a table of distinct blocks in reverse order, three spare),
// slot 1 filled with random rows through mxg_kv_store, that a decode step then overwrites one row at
// a time. Included after emu.h, emu_random.h, backends/backend.h and kernels_fused.h.
#ifndef MXG_TEST_DECODE_CACHE_H
#define MXG_TEST_DECODE_CACHE_H

#include <vector>

struct DecodeCache {
    mx_kv_layout lay;
    std::vector<int32_t> table;       // slot s's block b at table[s * blocks + b] (paged)
    std::vector<unsigned char> base;  // the cache's bytes, slot 1 filled
    // The table a step passes: the scrambled one where the cache is paged (a pool of its own blocks).
    const int32_t *block_table() const { return lay.n_blocks ? table.data() : NULL; }
};

static inline DecodeCache decode_cache_filled(mxg_launch *L, int D, int nkv, int cap, int paged) {
    DecodeCache c;
    const int tl = (cap + MX_KV_BLOCK - 1) / MX_KV_BLOCK;
    c.lay = {1, 2, cap, nkv, D, paged ? 2 * tl + 3 : 0};
    c.table.resize(2 * tl);
    for (int i = 0; i < 2 * tl; i++) c.table[i] = (int32_t)((2 * tl + 2 - i) % (2 * tl + 3));
    c.base.assign(mx_kv_bytes(&c.lay, L->kv_i16 ? MX_DTYPE_I16 : MX_DTYPE_F16), 0);
    const size_t per = (size_t)nkv * D;
    std::vector<float> k((size_t)cap * per), v((size_t)cap * per);
    emu_fill(k.data(), k.size(), -1, 1), emu_fill(v.data(), v.size(), -1, 1);
    std::vector<int32_t> sl(cap, 1), ps(cap);
    for (int i = 0; i < cap; i++) ps[i] = i;
    mx_kv_ref r = {c.base.data(), c.lay, 0, sl.data(), ps.data(), c.block_table()};
    mxg_kv_store(L, &r, k.data(), v.data(), cap);
    return c;
}

#endif
