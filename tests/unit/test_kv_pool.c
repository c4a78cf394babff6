// SPDX-License-Identifier: MIT
// The KV pool's bookkeeping (src/generate/kv_pool.h): allocation, sharing, copy-on-write of a shared
// or published block, LRU eviction of cached blocks, exhaustion, and the prefix hash chain (a hit
// needs the same hash and the same tokens; the hash depends on the whole prefix).
#include "generate/kv_pool.h"

#include "check.h"

static void test_alloc_and_exhaustion(void) {
    mx_error err = {0};
    mx_kv_pool *p = mx_kv_pool_create(4, 16, &err);
    CHECK(p != NULL);
    int got[4];
    for (int i = 0; i < 4; i++) {
        got[i] = mx_kv_pool_alloc(p, &err);
        CHECK(got[i] == i);  // a fresh pool hands out 0, 1, 2, 3
        CHECK(mx_kv_pool_refcount(p, got[i]) == 1);
    }
    CHECK(mx_kv_pool_available(p) == 0);
    CHECK(mx_kv_pool_alloc(p, &err) == -1);
    CHECK_MSG(strstr(err.msg, "all 4 blocks of 16 positions") != NULL, "%s", err.msg);
    mx_kv_pool_unref(p, got[2]);
    CHECK(mx_kv_pool_available(p) == 1);
    CHECK(mx_kv_pool_alloc(p, &err) == 2);  // the freed block comes back
    mx_kv_pool_stats st;
    mx_kv_pool_stats_get(p, &st);
    CHECK(st.referenced == 4 && st.free == 0 && st.cached == 0 && st.evictions == 0);
    mx_kv_pool_free(p);
    CHECK(mx_kv_pool_create(0, 16, &err) == NULL);
}

static void test_sharing_and_cow(void) {
    mx_error err = {0};
    mx_kv_pool *p = mx_kv_pool_create(4, 4, &err);
    int a = mx_kv_pool_alloc(p, &err), from = 7;
    // Sole holder of an unpublished block: writes in place.
    CHECK(mx_kv_pool_writable(p, a, &from, &err) == a && from == -1);
    // Shared (two block tables hold it, e.g. n > 1 choices after a partly filled prompt block).
    mx_kv_pool_ref(p, a);
    CHECK(mx_kv_pool_refcount(p, a) == 2);
    int w = mx_kv_pool_writable(p, a, &from, &err);
    CHECK(w >= 0 && w != a && from == a);
    CHECK(mx_kv_pool_refcount(p, a) == 1 && mx_kv_pool_refcount(p, w) == 1);
    // The other holder is now alone: in place again.
    CHECK(mx_kv_pool_writable(p, a, &from, &err) == a && from == -1);
    // A published block is never written, even by its only holder.
    int32_t toks[4] = {1, 2, 3, 4};
    CHECK(mx_kv_pool_publish(p, a, mx_kv_hash(MX_KV_HASH_ROOT, toks, 4), toks));
    int w2 = mx_kv_pool_writable(p, a, &from, &err);
    CHECK(w2 >= 0 && w2 != a && from == a);
    mx_kv_pool_stats st;
    mx_kv_pool_stats_get(p, &st);
    CHECK(st.cached == 1 && st.referenced == 2);  // a is kept for the prefix cache
    // COW with nothing left to copy into: exhaustion, and the reference stays where it was.
    int x = mx_kv_pool_alloc(p, &err), y = mx_kv_pool_alloc(p, &err), z = mx_kv_pool_alloc(p, &err);
    CHECK(x == 3 && y == a && z == -1);  // the free block, then the cached one (evicted)
    mx_kv_pool_ref(p, w2);
    CHECK(mx_kv_pool_writable(p, w2, &from, &err) == -1);
    CHECK(mx_kv_pool_refcount(p, w2) == 2);
    mx_kv_pool_free(p);
}

static void test_prefix_cache_and_eviction(void) {
    mx_error err = {0};
    mx_kv_pool *p = mx_kv_pool_create(3, 4, &err);
    int32_t t1[4] = {10, 11, 12, 13}, t2[4] = {20, 21, 22, 23};
    uint64_t h1 = mx_kv_hash(MX_KV_HASH_ROOT, t1, 4), h2 = mx_kv_hash(h1, t2, 4);
    int b1 = mx_kv_pool_alloc(p, &err), b2 = mx_kv_pool_alloc(p, &err);
    CHECK(mx_kv_pool_publish(p, b1, h1, t1));
    CHECK(mx_kv_pool_publish(p, b2, h2, t2));
    CHECK(!mx_kv_pool_publish(p, b2, h2, t2));  // already published
    // A second sequence with the same prefix shares the referenced blocks.
    CHECK(mx_kv_pool_lookup(p, h1, t1) == b1 && mx_kv_pool_refcount(p, b1) == 2);
    mx_kv_pool_unref(p, b1);
    // Both sequences end: the blocks stay cached, b1 released first (the older).
    mx_kv_pool_unref(p, b1);
    mx_kv_pool_unref(p, b2);
    mx_kv_pool_stats st;
    mx_kv_pool_stats_get(p, &st);
    CHECK(st.cached == 2 && st.free == 1 && st.referenced == 0);
    // A later prompt with the same first block hits it; the same tokens after another prefix miss.
    CHECK(mx_kv_pool_lookup(p, h1, t1) == b1);
    CHECK(mx_kv_pool_lookup(p, mx_kv_hash(MX_KV_HASH_ROOT, t2, 4), t2) == -1);
    // Same hash, other tokens (a collision): a miss, never the wrong block.
    int32_t wrong[4] = {10, 11, 12, 14};
    CHECK(mx_kv_pool_lookup(p, h1, wrong) == -1);
    // Allocation takes the free block, then evicts the least recently released cached block (b2:
    // b1 was referenced again by the hit).
    int f = mx_kv_pool_alloc(p, &err);
    CHECK(f != b1 && f != b2);
    int e = mx_kv_pool_alloc(p, &err);
    CHECK(e == b2);
    CHECK(mx_kv_pool_lookup(p, h2, t2) == -1);  // evicted: no longer found
    mx_kv_pool_stats_get(p, &st);
    CHECK(st.evictions == 1 && st.hits == 0 && st.misses == 0);  // lookups alone count nothing
    mx_kv_pool_count(p, 2, 5);
    mx_kv_pool_stats_get(p, &st);
    CHECK(st.hits == 2 && st.misses == 5);
    // forget(): cached blocks go back to the free list and are no longer found.
    mx_kv_pool_unref(p, b1);
    mx_kv_pool_forget(p);
    mx_kv_pool_stats_get(p, &st);
    CHECK(st.cached == 0 && st.free == 1);
    CHECK(mx_kv_pool_lookup(p, h1, t1) == -1);
    mx_kv_pool_free(p);
}

static void test_hash_chain(void) {
    int32_t a[4] = {1, 2, 3, 4}, b[4] = {1, 2, 3, 5}, c[4] = {4, 3, 2, 1};
    uint64_t r = MX_KV_HASH_ROOT;
    CHECK(mx_kv_hash(r, a, 4) == mx_kv_hash(r, a, 4));
    CHECK(mx_kv_hash(r, a, 4) != mx_kv_hash(r, b, 4));
    CHECK(mx_kv_hash(r, a, 4) != mx_kv_hash(r, c, 4));  // order matters
    CHECK(mx_kv_hash(r, a, 4) != mx_kv_hash(r, a, 3));
    // The key of a block depends on its whole prefix.
    CHECK(mx_kv_hash(mx_kv_hash(r, a, 4), c, 4) != mx_kv_hash(mx_kv_hash(r, b, 4), c, 4));
    // No collisions among 20,000 distinct one-token-apart blocks (a smoke test of the mixing).
    enum { N = 20000 };
    static uint64_t seen[N];
    int dup = 0;
    for (int i = 0; i < N; i++) {
        int32_t t[4] = {i, i / 7, 3, i % 5};
        seen[i] = mx_kv_hash(r, t, 4);
        for (int j = i - 64 > 0 ? i - 64 : 0; j < i; j++) dup += seen[j] == seen[i];
    }
    CHECK(dup == 0);
}

int main(void) {
    test_alloc_and_exhaustion();
    test_sharing_and_cow();
    test_prefix_cache_and_eviction();
    test_hash_chain();
    return check_finish();
}
