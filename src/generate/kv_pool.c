// SPDX-License-Identifier: MIT
// KV pool bookkeeping (see kv_pool.h). Every array is sized by the block count at creation; nothing
// is allocated afterwards. Published blocks sit in a chained hash table (bucket heads plus one
// `next` per block); cached blocks also sit on a doubly linked LRU list, oldest at the head.
#include "generate/kv_pool.h"

#include <stdlib.h>
#include <string.h>

#include "core/sample_noise.h"  // mx_noise_mix, the project's 64-bit mixer

struct mx_kv_pool {
    int n, bs;
    int *ref;               // [n] holders of each block
    bool *published;        // [n] in the hash table
    uint64_t *hash;         // [n] key of a published block
    int32_t *tokens;        // [n * bs] tokens of a published block
    int *bucket;            // [n_buckets] first published block of each bucket, -1: none
    int *chain;             // [n] next published block in the same bucket
    int n_buckets;          // a power of two >= n
    int *prev, *next;       // [n] LRU links of cached blocks
    int lru_head, lru_tail; // oldest and newest cached block, -1: none
    int *free_stack;        // [n]
    int n_free, n_cached, n_referenced;
    uint64_t hits, misses, evictions;
};

mx_kv_pool *mx_kv_pool_create(int n_blocks, int block_size, mx_error *err) {
    if (n_blocks < 1 || block_size < 1) {
        mx_fail(err, "a KV pool needs at least one block of at least one position (got %d x %d)", n_blocks, block_size);
        return NULL;
    }
    mx_kv_pool *p = calloc(1, sizeof *p);
    if (!p) {
        mx_fail(err, "out of memory");
        return NULL;
    }
    size_t n = (size_t)n_blocks;
    p->n = n_blocks, p->bs = block_size;
    p->n_buckets = 1;
    while (p->n_buckets < n_blocks) p->n_buckets *= 2;
    p->ref = calloc(n, sizeof *p->ref);
    p->published = calloc(n, sizeof *p->published);
    p->hash = calloc(n, sizeof *p->hash);
    p->tokens = malloc(n * (size_t)block_size * sizeof *p->tokens);
    p->bucket = malloc((size_t)p->n_buckets * sizeof *p->bucket);
    p->chain = malloc(n * sizeof *p->chain);
    p->prev = malloc(n * sizeof *p->prev);
    p->next = malloc(n * sizeof *p->next);
    p->free_stack = malloc(n * sizeof *p->free_stack);
    if (!p->ref || !p->published || !p->hash || !p->tokens || !p->bucket || !p->chain || !p->prev || !p->next ||
        !p->free_stack) {
        mx_kv_pool_free(p);
        mx_fail(err, "out of memory for a KV pool of %d blocks", n_blocks);
        return NULL;
    }
    for (int i = 0; i < p->n_buckets; i++) p->bucket[i] = -1;
    // Lowest ids first, so a fresh pool hands out blocks 0, 1, 2, ...
    for (int i = 0; i < n_blocks; i++) p->free_stack[i] = n_blocks - 1 - i;
    p->n_free = n_blocks;
    p->lru_head = p->lru_tail = -1;
    return p;
}

void mx_kv_pool_free(mx_kv_pool *p) {
    if (!p) return;
    free(p->ref), free(p->published), free(p->hash), free(p->tokens), free(p->bucket), free(p->chain);
    free(p->prev), free(p->next), free(p->free_stack);
    free(p);
}

int mx_kv_pool_block_size(const mx_kv_pool *p) { return p->bs; }
int mx_kv_pool_available(const mx_kv_pool *p) { return p->n_free + p->n_cached; }
int mx_kv_pool_refcount(const mx_kv_pool *p, int block) { return p->ref[block]; }

static void lru_remove(mx_kv_pool *p, int b) {
    if (p->prev[b] >= 0) p->next[p->prev[b]] = p->next[b];
    else p->lru_head = p->next[b];
    if (p->next[b] >= 0) p->prev[p->next[b]] = p->prev[b];
    else p->lru_tail = p->prev[b];
    p->n_cached--;
}

static void lru_append(mx_kv_pool *p, int b) {
    p->prev[b] = p->lru_tail, p->next[b] = -1;
    if (p->lru_tail >= 0) p->next[p->lru_tail] = b;
    else p->lru_head = b;
    p->lru_tail = b;
    p->n_cached++;
}

static int bucket_of(const mx_kv_pool *p, uint64_t hash) { return (int)(hash & (uint64_t)(p->n_buckets - 1)); }

static void unpublish(mx_kv_pool *p, int b) {
    int *link = &p->bucket[bucket_of(p, p->hash[b])];
    while (*link != b) link = &p->chain[*link];
    *link = p->chain[b];
    p->published[b] = false;
}

int mx_kv_pool_alloc(mx_kv_pool *p, mx_error *err) {
    int b;
    if (p->n_free > 0) {
        b = p->free_stack[--p->n_free];
    } else if (p->lru_head >= 0) {
        b = p->lru_head;
        lru_remove(p, b);
        unpublish(p, b);
        p->evictions++;
    } else {
        mx_fail(err, "the KV pool is exhausted: all %d blocks of %d positions are in use", p->n, p->bs);
        return -1;
    }
    p->ref[b] = 1;
    p->n_referenced++;
    return b;
}

void mx_kv_pool_ref(mx_kv_pool *p, int block) {
    if (p->ref[block]++ == 0) {
        lru_remove(p, block);  // only a published block can be unreferenced and still hold contents
        p->n_referenced++;
    }
}

void mx_kv_pool_unref(mx_kv_pool *p, int block) {
    if (--p->ref[block] > 0) return;
    p->n_referenced--;
    if (p->published[block]) lru_append(p, block);
    else p->free_stack[p->n_free++] = block;
}

int mx_kv_pool_writable(mx_kv_pool *p, int block, int *copy_from, mx_error *err) {
    *copy_from = -1;
    if (p->ref[block] == 1 && !p->published[block]) return block;
    int fresh = mx_kv_pool_alloc(p, err);
    if (fresh < 0) return -1;
    mx_kv_pool_unref(p, block);
    *copy_from = block;
    return fresh;
}

uint64_t mx_kv_hash(uint64_t parent, const int32_t *tokens, int n) {
    uint64_t h = mx_noise_mix(parent ^ 0x9e3779b97f4a7c15ull);
    for (int i = 0; i < n; i++)
        h = mx_noise_mix(h ^ ((uint64_t)(uint32_t)tokens[i] + 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1)));
    return mx_noise_mix(h ^ (uint64_t)n);
}

static int find(const mx_kv_pool *p, uint64_t hash, const int32_t *tokens) {
    for (int b = p->bucket[bucket_of(p, hash)]; b >= 0; b = p->chain[b])
        if (p->hash[b] == hash && memcmp(p->tokens + (size_t)b * p->bs, tokens, sizeof *tokens * (size_t)p->bs) == 0)
            return b;
    return -1;
}

int mx_kv_pool_lookup(mx_kv_pool *p, uint64_t hash, const int32_t *tokens) {
    int b = find(p, hash, tokens);
    if (b >= 0) mx_kv_pool_ref(p, b);
    return b;
}

void mx_kv_pool_count(mx_kv_pool *p, int hits, int misses) {
    p->hits += (uint64_t)(hits > 0 ? hits : 0);
    p->misses += (uint64_t)(misses > 0 ? misses : 0);
}

bool mx_kv_pool_publish(mx_kv_pool *p, int block, uint64_t hash, const int32_t *tokens) {
    if (p->published[block] || find(p, hash, tokens) >= 0) return false;
    p->published[block] = true;
    p->hash[block] = hash;
    memcpy(p->tokens + (size_t)block * p->bs, tokens, sizeof *tokens * (size_t)p->bs);
    int *head = &p->bucket[bucket_of(p, hash)];
    p->chain[block] = *head;
    *head = block;
    return true;
}

void mx_kv_pool_forget(mx_kv_pool *p) {
    while (p->lru_head >= 0) {
        int b = p->lru_head;
        lru_remove(p, b);
        unpublish(p, b);
        p->free_stack[p->n_free++] = b;
    }
}

void mx_kv_pool_stats_get(const mx_kv_pool *p, mx_kv_pool_stats *out) {
    *out = (mx_kv_pool_stats){.n_blocks = p->n, .referenced = p->n_referenced, .cached = p->n_cached,
                              .free = p->n_free, .hits = p->hits, .misses = p->misses, .evictions = p->evictions};
}
