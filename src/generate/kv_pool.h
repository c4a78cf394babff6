// SPDX-License-Identifier: MIT
// The KV pool's bookkeeping on the host: which of the pool's fixed-size blocks (MX_KV_BLOCK positions
// each, backend.h) are free, who references them, and which full blocks are in the prefix cache.
// The keys and values themselves live in the backend's KV buffer; a block id here is an index into
// it (the same id in every layer). Sequences hold blocks through their block tables (engine.c).
//
// A block is in one of three states:
// - free: on the free list, contents meaningless;
// - referenced: refcount > 0 (held by one or more block tables);
// - cached: refcount 0 but published in the prefix cache, kept on an LRU list and reused by a later
//   sequence whose tokens match, or evicted (least recently released first) when a block is needed
//   and the free list is empty.
// Published blocks are full and never written again: a sequence that must write into a block it
// shares (or one that is published) gets a private copy first (mx_kv_pool_writable).
//
// Prefix cache: a full block is keyed by the hash chain of its tokens, hash(parent hash, the block's
// tokens), so a key names the whole prefix up to the block's end, not just its own tokens. The pool
// keeps each published block's tokens and hash and compares both on a hit, so a hash collision can
// only cost a miss, never wrong keys.
//
// Threading: one thread (the engine's) calls every function.
#ifndef MX_GENERATE_KV_POOL_H
#define MX_GENERATE_KV_POOL_H

#include <stdbool.h>
#include <stdint.h>

#include "core/error.h"

typedef struct mx_kv_pool mx_kv_pool;

typedef struct mx_kv_pool_stats {
    int n_blocks;     // blocks in the pool
    int referenced;   // blocks held by at least one sequence
    int cached;       // unreferenced blocks kept for the prefix cache (evictable)
    int free;         // blocks on the free list
    uint64_t hits;    // full prompt blocks found in the prefix cache
    uint64_t misses;  // full prompt blocks that had to be computed
    uint64_t evictions;  // cached blocks taken back for new contents
} mx_kv_pool_stats;

// The hash chain's start (the parent of a sequence's first block).
#define MX_KV_HASH_ROOT 0x6d6c7863656c4b56ull

mx_kv_pool *mx_kv_pool_create(int n_blocks, int block_size, mx_error *err);
void mx_kv_pool_free(mx_kv_pool *p);
int mx_kv_pool_block_size(const mx_kv_pool *p);
// Blocks a new allocation can take now: free plus cached (evictable).
int mx_kv_pool_available(const mx_kv_pool *p);

// A block with refcount 1: from the free list, else the least recently released cached block
// (evicted from the prefix cache). Returns -1 when every block is referenced (err names the numbers).
int mx_kv_pool_alloc(mx_kv_pool *p, mx_error *err);
// One more reference to a referenced or cached block (sharing).
void mx_kv_pool_ref(mx_kv_pool *p, int block);
// Drops one reference; at zero the block becomes cached (when published) or free.
void mx_kv_pool_unref(mx_kv_pool *p, int block);
int mx_kv_pool_refcount(const mx_kv_pool *p, int block);

// Copy-on-write before writing into `block`, which the caller holds one reference to. Returns the
// block to write: `block` itself when the caller is its only holder and it is not published, else a
// fresh block (the caller's reference moves to it) and *copy_from = block, whose contents the
// caller must copy into it before writing. *copy_from = -1 when no copy is needed. -1: exhausted.
int mx_kv_pool_writable(mx_kv_pool *p, int block, int *copy_from, mx_error *err);

// hash(parent, tokens[0..n)): the key of a block whose tokens follow the prefix `parent` names.
uint64_t mx_kv_hash(uint64_t parent, const int32_t *tokens, int n);
// The cached or referenced block published under `hash` with exactly these block_size tokens: takes a
// reference and returns it (a hit), or returns -1 (a miss). Not counted: a sequence that cannot be
// admitted yet gives its blocks back and looks them up again later (mx_kv_pool_count).
int mx_kv_pool_lookup(mx_kv_pool *p, uint64_t hash, const int32_t *tokens);
// Counts the prefix-cache outcome of one admitted prompt: blocks found, full blocks computed.
void mx_kv_pool_count(mx_kv_pool *p, int hits, int misses);
// Publishes full block `block` (referenced by the caller) under `hash` with its block_size tokens.
// Returns false (and publishes nothing) when another block already holds that key or this block is
// published already.
bool mx_kv_pool_publish(mx_kv_pool *p, int block, uint64_t hash, const int32_t *tokens);
// Returns every cached block to the free list (chat's /reset, the server without a prefix cache).
void mx_kv_pool_forget(mx_kv_pool *p);

void mx_kv_pool_stats_get(const mx_kv_pool *p, mx_kv_pool_stats *out);

#endif
