// SPDX-License-Identifier: MIT
// The BPE model: one pre-tokenized piece -> ids. Symbols start as the piece's characters (for
// byte-level models one per byte, looked up through tok->byte_ids without hashing) and are merged
// lowest rank first, leftmost first among equal ranks, using a binary heap of candidate pairs
// whose stale entries are skipped when popped. That is O(n log n) per piece, so pathological
// pieces (long runs of one character) stay cheap. Results for short pieces are remembered in a
// per-call cache bounded in entries and piece length, so no state is shared between threads.
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"

typedef struct tok_sym {
    int32_t id;   // -1 once merged into its left neighbour
    int32_t prev; // index of the previous live symbol, -1 at the start
    int32_t next; // index of the next live symbol, -1 at the end
} tok_sym;

typedef struct tok_heap_item {
    int32_t rank, left, right, left_id, right_id, new_id;
} tok_heap_item;

typedef struct tok_cache_slot {
    uint32_t hash, key_len; // key_len 0 = empty (empty pieces are never looked up)
    uint32_t key_off, ids_off, n_ids;
} tok_cache_slot;

enum {
    TOK_CACHE_MAX_PIECE = 64,        // longer pieces are not cached
    TOK_CACHE_MAX_SLOTS = 1 << 16,   // at most half of them are filled
    TOK_CACHE_FIRST_SLOTS = 1 << 10,
};

int tok_ids_push(tok_ids *ids, int32_t id) {
    if (ids->n == ids->cap) {
        size_t cap = ids->cap ? ids->cap * 2 : 256;
        int32_t *v = realloc(ids->v, cap * sizeof *v);
        if (!v) return -1;
        ids->v = v;
        ids->cap = cap;
    }
    ids->v[ids->n++] = id;
    return 0;
}

void tok_bpe_scratch_free(tok_bpe_scratch *s) {
    free(s->sym);
    free(s->heap);
    free(s->str);
    free(s->cache);
    free(s->cache_keys);
    free(s->cache_ids.v);
    memset(s, 0, sizeof *s);
}

// ---- heap ordered by (rank, left) ------------------------------------------------------------

static bool heap_less(const tok_heap_item *a, const tok_heap_item *b) {
    return a->rank != b->rank ? a->rank < b->rank : a->left < b->left;
}

static void heap_push(tok_heap_item *h, size_t *n, tok_heap_item it) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!heap_less(&it, &h[parent])) break;
        h[i] = h[parent];
        i = parent;
    }
    h[i] = it;
}

static tok_heap_item heap_pop(tok_heap_item *h, size_t *n) {
    tok_heap_item top = h[0], last = h[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && heap_less(&h[c + 1], &h[c])) c++;
        if (!heap_less(&h[c], &last)) break;
        h[i] = h[c];
        i = c;
    }
    h[i] = last;
    return top;
}

// ---- word cache --------------------------------------------------------------------------------

static const tok_cache_slot *cache_find(const tok_bpe_scratch *s, const char *key, size_t n, uint32_t h) {
    if (!s->cache) return NULL;
    size_t j = h & (s->cache_cap - 1);
    while (s->cache[j].key_len) {
        const tok_cache_slot *c = &s->cache[j];
        if (c->hash == h && c->key_len == n && memcmp(s->cache_keys + c->key_off, key, n) == 0) return c;
        j = (j + 1) & (s->cache_cap - 1);
    }
    return NULL;
}

static void cache_place(tok_cache_slot *slots, size_t cap, tok_cache_slot c) {
    size_t j = c.hash & (cap - 1);
    while (slots[j].key_len) j = (j + 1) & (cap - 1);
    slots[j] = c;
}

// Remembers key -> ids[0, n_ids); silently does nothing when full or out of memory (a cache).
static void cache_insert(tok_bpe_scratch *s, const char *key, size_t n, uint32_t h, const int32_t *ids, size_t n_ids) {
    if ((s->cache_count + 1) * 2 > s->cache_cap) {
        if (s->cache_cap >= TOK_CACHE_MAX_SLOTS) return;
        size_t cap = s->cache_cap ? s->cache_cap * 2 : TOK_CACHE_FIRST_SLOTS;
        tok_cache_slot *slots = calloc(cap, sizeof *slots);
        if (!slots) return;
        for (size_t j = 0; j < s->cache_cap; j++)
            if (s->cache[j].key_len) cache_place(slots, cap, s->cache[j]);
        free(s->cache);
        s->cache = slots;
        s->cache_cap = cap;
    }
    if (tok_reserve((void **)&s->cache_keys, &s->keys_cap, s->keys_len + n, 1) != 0) return;
    size_t ids_off = s->cache_ids.n;
    for (size_t i = 0; i < n_ids; i++)
        if (tok_ids_push(&s->cache_ids, ids[i]) != 0) {
            s->cache_ids.n = ids_off;
            return;
        }
    memcpy(s->cache_keys + s->keys_len, key, n);
    cache_place(s->cache, s->cache_cap,
                (tok_cache_slot){h, (uint32_t)n, (uint32_t)s->keys_len, (uint32_t)ids_off, (uint32_t)n_ids});
    s->keys_len += n;
    s->cache_count++;
}

// ---- merging -----------------------------------------------------------------------------------

static int push_sym(tok_bpe_scratch *s, size_t *n, int32_t id) {
    if (tok_reserve((void **)&s->sym, &s->sym_cap, *n + 1, sizeof(tok_sym)) != 0) return -1;
    s->sym[*n] = (tok_sym){id, (int32_t)*n - 1, (int32_t)*n + 1};
    (*n)++;
    return 0;
}

// A character missing from the vocabulary: its bytes' <0xAB> tokens, else the unknown token
// (fused with a preceding unknown when fuse_unk), else nothing (as Hugging Face does without unk).
static int push_unknown(const mx_tokenizer *tok, tok_bpe_scratch *s, size_t *n, const unsigned char *ch, size_t len) {
    if (tok->byte_fallback && !tok->byte_level) {
        size_t k = 0;
        while (k < len && tok->byte_ids[ch[k]] >= 0) k++;
        if (k == len) {
            for (k = 0; k < len; k++)
                if (push_sym(s, n, tok->byte_ids[ch[k]]) != 0) return -1;
            return 0;
        }
    }
    if (tok->unk_id < 0) return 0;
    if (tok->fuse_unk && *n > 0 && s->sym[*n - 1].id == tok->unk_id) return 0;
    return push_sym(s, n, tok->unk_id);
}

static void push_pair(const mx_tokenizer *tok, tok_bpe_scratch *s, size_t *n_heap, int32_t left, int32_t right) {
    const tok_pair_slot *m = tok_pairmap_get(&tok->merges, s->sym[left].id, s->sym[right].id);
    if (!m) return;
    heap_push(s->heap, n_heap,
              (tok_heap_item){m->rank, left, right, s->sym[left].id, s->sym[right].id, m->new_id});
}

static int bpe_merge(const mx_tokenizer *tok, tok_bpe_scratch *s, const char *str, size_t len, tok_ids *out) {
    size_t n = 0;
    if (tok->byte_level) {
        for (size_t i = 0; i < len; i++) {
            unsigned char b = (unsigned char)str[i];
            int rc = tok->byte_ids[b] >= 0 ? push_sym(s, &n, tok->byte_ids[b])
                                           : push_unknown(tok, s, &n, (const unsigned char *)tok_bytelevel_char(b),
                                                          strlen(tok_bytelevel_char(b)));
            if (rc != 0) return -1;
        }
    } else {
        for (size_t i = 0; i < len;) {
            size_t k = 1;
            if (tok_utf8_classify((const unsigned char *)str + i, len - i, &k) != 1) k = 1;
            int32_t id = tok_strmap_get(&tok->vocab, str + i, k);
            int rc = id >= 0 ? push_sym(s, &n, id) : push_unknown(tok, s, &n, (const unsigned char *)str + i, k);
            if (rc != 0) return -1;
            i += k;
        }
    }
    if (n == 0) return 0;
    s->sym[n - 1].next = -1;
    // n - 1 initial pairs, and each of at most n - 1 merges pushes two: the heap stays below 3n.
    if (tok_reserve((void **)&s->heap, &s->heap_cap, 3 * n + 2, sizeof(tok_heap_item)) != 0) return -1;
    size_t n_heap = 0;
    for (size_t i = 0; i + 1 < n; i++) push_pair(tok, s, &n_heap, (int32_t)i, (int32_t)i + 1);
    while (n_heap > 0) {
        tok_heap_item top = heap_pop(s->heap, &n_heap);
        tok_sym *l = &s->sym[top.left];
        if (l->id != top.left_id || l->next != top.right || s->sym[top.right].id != top.right_id) continue;
        tok_sym *r = &s->sym[top.right];
        l->id = top.new_id;
        l->next = r->next;
        if (r->next >= 0) s->sym[r->next].prev = top.left;
        r->id = -1;
        if (l->prev >= 0) push_pair(tok, s, &n_heap, l->prev, top.left);
        if (l->next >= 0) push_pair(tok, s, &n_heap, top.left, l->next);
    }
    for (int32_t i = 0; i >= 0; i = s->sym[i].next)
        if (tok_ids_push(out, s->sym[i].id) != 0) return -1;
    return 0;
}

int tok_bpe_encode_piece(const mx_tokenizer *tok, tok_bpe_scratch *s, const char *piece, size_t n, tok_ids *out,
                         mx_error *err) {
    if (n == 0) return 0;
    uint32_t h = 0;
    bool cacheable = n <= TOK_CACHE_MAX_PIECE;
    if (cacheable) {
        h = tok_hash_bytes(piece, n);
        const tok_cache_slot *c = cache_find(s, piece, n, h);
        if (c) {
            for (uint32_t i = 0; i < c->n_ids; i++)
                if (tok_ids_push(out, s->cache_ids.v[c->ids_off + i]) != 0) return mx_fail(err, "out of memory");
            return 0;
        }
    }
    size_t start = out->n;
    int32_t whole = -1;
    if (tok->ignore_merges) { // the whole piece is a token: take it as is
        const char *str = piece;
        size_t len = n;
        if (tok->byte_level) {
            if (tok_reserve((void **)&s->str, &s->str_cap, 2 * n + 1, 1) != 0) return mx_fail(err, "out of memory");
            len = 0;
            for (size_t i = 0; i < n; i++) {
                const char *ch = tok_bytelevel_char((unsigned char)piece[i]);
                while (*ch) s->str[len++] = *ch++;
            }
            str = s->str;
        }
        whole = tok_strmap_get(&tok->vocab, str, len);
    }
    if (whole >= 0 ? tok_ids_push(out, whole) != 0 : bpe_merge(tok, s, piece, n, out) != 0)
        return mx_fail(err, "out of memory");
    if (cacheable && out->n > start) cache_insert(s, piece, n, h, out->v + start, out->n - start);
    return 0;
}
