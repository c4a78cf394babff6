// SPDX-License-Identifier: MIT
// Storage for the tokenizer's tables (their strings live in the tokenizer's core/arena.h arena): a
// string -> id hash map and a (left, right) -> merge hash map. Both maps use open addressing with
// linear probing over power-of-two tables kept at most half full; they are filled at load time and
// only read afterwards. Also the doubling array growth every scratch uses.
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"

// FNV-1a over 32 bits, then a finalizer so the low bits (used for the slot index) mix well.
uint32_t tok_hash_bytes(const void *p, size_t n) {
    const unsigned char *s = p;
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 16777619u;
    h ^= h >> 16;
    h *= 0x85ebca6bu;
    h ^= h >> 13;
    return h;
}

static size_t table_cap_for(size_t expected) {
    size_t cap = 16;
    while (cap < expected * 2 + 1) cap <<= 1;
    return cap;
}

int tok_strmap_init(tok_strmap *m, size_t expected) {
    m->cap = table_cap_for(expected);
    m->count = 0;
    m->slots = calloc(m->cap, sizeof *m->slots);
    return m->slots ? 0 : -1;
}

static int strmap_grow(tok_strmap *m) {
    size_t cap = m->cap * 2;
    tok_str_slot *slots = calloc(cap, sizeof *slots);
    if (!slots) return -1;
    for (size_t i = 0; i < m->cap; i++) {
        tok_str_slot *s = &m->slots[i];
        if (!s->key) continue;
        size_t j = s->hash & (cap - 1);
        while (slots[j].key) j = (j + 1) & (cap - 1);
        slots[j] = *s;
    }
    free(m->slots);
    m->slots = slots;
    m->cap = cap;
    return 0;
}

int tok_strmap_put(tok_strmap *m, const char *key, size_t len, int32_t id) {
    if ((m->count + 1) * 2 > m->cap && strmap_grow(m) != 0) return -1;
    uint32_t h = tok_hash_bytes(key, len);
    size_t j = h & (m->cap - 1);
    while (m->slots[j].key) {
        tok_str_slot *s = &m->slots[j];
        if (s->hash == h && s->len == len && memcmp(s->key, key, len) == 0) return 0;
        j = (j + 1) & (m->cap - 1);
    }
    m->slots[j] = (tok_str_slot){.key = key, .len = (uint32_t)len, .hash = h, .id = id};
    m->count++;
    return 0;
}

int32_t tok_strmap_get(const tok_strmap *m, const char *key, size_t len) {
    if (!m->slots) return -1;
    uint32_t h = tok_hash_bytes(key, len);
    size_t j = h & (m->cap - 1);
    while (m->slots[j].key) {
        const tok_str_slot *s = &m->slots[j];
        if (s->hash == h && s->len == len && memcmp(s->key, key, len) == 0) return s->id;
        j = (j + 1) & (m->cap - 1);
    }
    return -1;
}

void tok_strmap_free(tok_strmap *m) {
    free(m->slots);
    m->slots = NULL;
    m->cap = m->count = 0;
}

static size_t pair_index(uint64_t key, size_t cap) {
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdULL;
    key ^= key >> 33;
    return (size_t)key & (cap - 1);
}

int tok_pairmap_init(tok_pairmap *m, size_t expected) {
    m->cap = table_cap_for(expected);
    m->count = 0;
    m->slots = calloc(m->cap, sizeof *m->slots); // all slots empty (rank 0)
    return m->slots ? 0 : -1;
}

static int pairmap_grow(tok_pairmap *m) {
    size_t cap = m->cap * 2;
    tok_pair_slot *slots = calloc(cap, sizeof *slots);
    if (!slots) return -1;
    for (size_t i = 0; i < m->cap; i++) {
        if (m->slots[i].rank == 0) continue;
        size_t j = pair_index(m->slots[i].key, cap);
        while (slots[j].rank) j = (j + 1) & (cap - 1);
        slots[j] = m->slots[i];
    }
    free(m->slots);
    m->slots = slots;
    m->cap = cap;
    return 0;
}

int tok_pairmap_put(tok_pairmap *m, int32_t left, int32_t right, int32_t rank, int32_t new_id) {
    if ((m->count + 1) * 2 > m->cap && pairmap_grow(m) != 0) return -1;
    uint64_t key = ((uint64_t)(uint32_t)left << 32) | (uint32_t)right;
    size_t j = pair_index(key, m->cap);
    while (m->slots[j].rank) {
        if (m->slots[j].key == key) return 0; // first (lowest) rank wins
        j = (j + 1) & (m->cap - 1);
    }
    m->slots[j] = (tok_pair_slot){.key = key, .rank = rank + 1, .new_id = new_id};
    m->count++;
    return 0;
}

const tok_pair_slot *tok_pairmap_get(const tok_pairmap *m, int32_t left, int32_t right) {
    if (!m->slots) return NULL;
    uint64_t key = ((uint64_t)(uint32_t)left << 32) | (uint32_t)right;
    size_t j = pair_index(key, m->cap);
    while (m->slots[j].rank) {
        if (m->slots[j].key == key) return &m->slots[j];
        j = (j + 1) & (m->cap - 1);
    }
    return NULL;
}

void tok_pairmap_free(tok_pairmap *m) {
    free(m->slots);
    m->slots = NULL;
    m->cap = m->count = 0;
}

int tok_reserve(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    void *q = realloc(*p, c * elem);
    if (!q) return -1;
    *p = q;
    *cap = c;
    return 0;
}
