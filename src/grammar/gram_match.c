// SPDX-License-Identifier: MIT
// The matcher: a grammar position is a set of parser stacks (a pushdown automaton run on all
// alternatives at once, as in llama.cpp), and the allowed tokens of a step are the tokens whose
// bytes some stack can consume.
//
// Stacks are hash-consed linked frames (element position, repetition count, parent): equal stacks
// are the same pointer, so a set deduplicates by pointer and a stack is its own cache key. A set
// allows a token exactly when one of its stacks does, so the mask of a set is the union of the
// cached masks of its stacks. A stack's mask is computed one of two ways:
//   - top is a repeated class (REP, e.g. the characters of a JSON string): the tokens made only of
//     class characters that fit the remaining count come from a precomputed per-class bitset, the
//     tokens that leave the repetition at their first character are the mask of the continuation
//     (recursively cached), and only the few tokens that leave it later (`abc"`) are simulated;
//   - otherwise: a depth-first walk of the vocabulary trie that carries the set of stacks and
//     prunes a subtree as soon as no stack survives.
// Counts of a repetition only change the mask near its bounds, so stacks that differ only in counts
// far from the bounds (in any frame) share one cache entry (mask_key). Unbounded repetitions keep
// their count at min, so a long string stays one stack.
// Everything that creates frames or masks runs under the index's mutex.
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/gram_internal.h"

#define MASK_CACHE_BYTES ((size_t)192 << 20)  // masks kept per index before the cache is cleared
#define FRAME_CHUNK 4096
#define SHORT_BUDGET 32  // per-class bitsets of "at most k characters" for k up to this
#define GRAM_MAX_MASK_DEPTH 512  // nested repetition masks (see stack_mask)

enum { GRAM_BOUND_NONE, GRAM_BOUND_WORK, GRAM_BOUND_FRAMES };

typedef struct gram_frame gram_frame;
struct gram_frame {
    int32_t pos, count;
    const gram_frame *parent;
    gram_frame *chain;  // next in the intern bucket
    const gram_frame *key;  // the frame whose mask this stack shares (mask_key), NULL until known
    uint32_t hash;
    int32_t mask;       // entry in ix->entries, -1 until computed
    size_t pool_at;     // where pool_add last put this frame
};

typedef struct frame_chunk {
    struct frame_chunk *next;
    int32_t used;
    gram_frame f[FRAME_CHUNK];
} frame_chunk;

typedef struct mask_entry {
    int32_t n;       // allowed tokens
    bool dense;      // data: [words] bitmask, else n ids
    uint32_t *data;
} mask_entry;

typedef struct class_table {
    bool built;
    uint32_t *full;     // [words] tokens all of whose bytes are whole characters of the class
    uint32_t *upto;     // [SHORT_BUDGET + 1][words]: those of them with at most k characters
    int32_t *all_ids;   // those tokens, most characters first
    int32_t *all_chars;
    int32_t n_all;
    int32_t *mixed;     // tokens not in full whose first character (or its start) can be in the class
    int32_t n_mixed;
} class_table;

struct mx_gram_index {
    pthread_mutex_t mu;
    int refs;
    mx_grammar *g;
    const mx_gram_vocab *v;
    gram_frame **buckets;
    size_t n_buckets, n_frames;
    frame_chunk *chunks;
    mask_entry *entries;
    int32_t n_entries, cap_entries;
    size_t mask_bytes;
    class_table *tables;  // [n_classes]
    const gram_frame **pool;  // sets under construction: ranges [start, end)
    size_t pool_n, pool_cap;
    size_t null_at;           // where pool_add last put the complete stack (NULL)
    uint64_t work_left;       // steps left to the current mask or accept (max_work)
    uint64_t max_work;        // MX_GRAM_MAX_WORK unless a test set it (mx_gram_index_set_limits)
    size_t max_frames;        // MX_GRAM_MAX_FRAMES likewise
    int bound;                // GRAM_BOUND_*: which bound stopped the current step (oom is set too,
                              // so that everything stops)
    int mask_depth;           // repetition masks being computed, each waiting for the next
    const gram_frame **work;  // expand's stack of frames still to expand
    size_t work_n, work_cap;
    bool oom;
};

struct mx_matcher {
    mx_gram_index *ix;
    const gram_frame **set;
    size_t n_set, cap_set;
    gram_utf8 u;      // a character in progress across tokens
    bool ended;       // a stop token was accepted
};

// ---- frames

static uint32_t frame_hash(int32_t pos, int32_t count, const gram_frame *parent) {
    uint64_t h = (uint64_t)(uint32_t)pos * 0x9E3779B97F4A7C15ull ^ (uint64_t)(uint32_t)count * 0xC2B2AE3D27D4EB4Full ^
                 (uint64_t)(uintptr_t)parent * 0x165667B19E3779F9ull;
    h ^= h >> 29;
    return (uint32_t)(h ^ (h >> 32));
}

static int rehash(mx_gram_index *ix) {
    size_t nb = ix->n_buckets ? ix->n_buckets * 2 : 4096;
    gram_frame **b = calloc(nb, sizeof *b);
    if (!b) return -1;
    for (size_t i = 0; i < ix->n_buckets; i++) {
        for (gram_frame *f = ix->buckets[i], *next; f; f = next) {
            next = f->chain;
            f->chain = b[f->hash & (nb - 1)];
            b[f->hash & (nb - 1)] = f;
        }
    }
    free(ix->buckets);
    ix->buckets = b;
    ix->n_buckets = nb;
    return 0;
}

static const gram_frame *intern(mx_gram_index *ix, int32_t pos, int32_t count, const gram_frame *parent) {
    uint32_t h = frame_hash(pos, count, parent);
    if (ix->n_buckets) {
        for (gram_frame *f = ix->buckets[h & (ix->n_buckets - 1)]; f; f = f->chain)
            if (f->hash == h && f->pos == pos && f->count == count && f->parent == parent) return f;
    }
    if (ix->n_frames >= ix->max_frames) return ix->bound = GRAM_BOUND_FRAMES, ix->oom = true, NULL;
    if (ix->n_frames >= ix->n_buckets && rehash(ix)) return ix->oom = true, NULL;
    if (!ix->chunks || ix->chunks->used == FRAME_CHUNK) {
        frame_chunk *c = malloc(sizeof *c);
        if (!c) return ix->oom = true, NULL;
        c->next = ix->chunks;
        c->used = 0;
        ix->chunks = c;
    }
    gram_frame *f = &ix->chunks->f[ix->chunks->used++];
    *f = (gram_frame){.pos = pos, .count = count, .parent = parent, .hash = h, .mask = -1};
    f->chain = ix->buckets[h & (ix->n_buckets - 1)];
    ix->buckets[h & (ix->n_buckets - 1)] = f;
    ix->n_frames++;
    return f;
}

static bool ends_alt(const gram_elem *e) { return e->type == GRAM_ALT || e->type == GRAM_END; }

// The stack after the element at f's top is done.
static const gram_frame *cont(mx_gram_index *ix, const gram_frame *f) {
    if (ends_alt(&ix->g->elems[f->pos + 1])) return f->parent;
    return intern(ix, f->pos + 1, 0, f->parent);
}

// ---- sets of stacks in the pool

// Adds f to the set [start, pool_n) unless it is there. Only the newest set is ever added to (a
// set is complete before another is started above it), so the position where f was last added
// tells in one look whether it is in this set: sets of many stacks stay linear to build.
static void pool_add(mx_gram_index *ix, size_t start, const gram_frame *f) {
    size_t at = f ? f->pool_at : ix->null_at;
    if (at >= start && at < ix->pool_n && ix->pool[at] == f) return;
    if (ix->pool_n == ix->pool_cap) {
        size_t cap = ix->pool_cap ? ix->pool_cap * 2 : 1024;
        const gram_frame **p = realloc(ix->pool, sizeof *p * cap);
        if (!p) {
            ix->oom = true;
            return;
        }
        ix->pool = p;
        ix->pool_cap = cap;
    }
    if (f) ((gram_frame *)f)->pool_at = ix->pool_n;
    else ix->null_at = ix->pool_n;
    ix->pool[ix->pool_n++] = f;
}

static void work_push(mx_gram_index *ix, const gram_frame *f) {
    if (ix->work_n == ix->work_cap) {
        size_t cap = ix->work_cap ? ix->work_cap * 2 : 256;
        const gram_frame **w = realloc(ix->work, sizeof *w * cap);
        if (!w) {
            ix->oom = true;
            return;
        }
        ix->work = w;
        ix->work_cap = cap;
    }
    ix->work[ix->work_n++] = f;
}

// Pushes the stacks one step of expansion leads to from f (f's top is not a character), in
// reverse so that they are expanded in order.
static void expand_step(mx_gram_index *ix, const gram_frame *f) {
    size_t first = ix->work_n;
    const gram_elem *e = &ix->g->elems[f->pos], *el = ix->g->elems;
    if (e->type == GRAM_REP) {
        if (f->count >= e->min) work_push(ix, cont(ix, f));
    } else if (e->type == GRAM_REPREF) {
        // One more match of the rule, after which the frame is back here with the count advanced
        // (the rule cannot match the empty string, so this ends); or, past min, what follows.
        if (e->max < 0 || f->count < e->max) {
            int32_t c = f->count + 1;
            if (e->max < 0 && c > e->min) c = e->min;
            const gram_frame *again = intern(ix, f->pos, c, f->parent);
            for (int32_t a = ix->g->rule_start[e->arg];;) {
                MX_ASSERT(!ends_alt(&el[a]));
                work_push(ix, intern(ix, a, 0, again));
                while (!ends_alt(&el[a])) a++;
                if (el[a].type == GRAM_END) break;
                a++;
            }
        }
        if (f->count >= e->min) work_push(ix, cont(ix, f));
    } else {
        MX_ASSERT(e->type == GRAM_REF);
        const gram_frame *after = cont(ix, f);
        for (int32_t a = ix->g->rule_start[e->arg];;) {
            work_push(ix, ends_alt(&el[a]) ? after : intern(ix, a, 0, after));
            while (!ends_alt(&el[a])) a++;
            if (el[a].type == GRAM_END) break;
            a++;
        }
    }
    if (ix->oom) return;
    for (size_t lo = first, hi = ix->work_n; lo + 1 < hi; lo++, hi--) {
        const gram_frame *t = ix->work[lo];
        ix->work[lo] = ix->work[hi - 1];
        ix->work[hi - 1] = t;
    }
}

// Adds to the set starting at start every stack f can be at when its top is a character to match
// (CHAR or REP) or it is complete (NULL). Iterative: a chain of rule references may be as long as
// the grammar.
static void expand(mx_gram_index *ix, const gram_frame *f, size_t start) {
    size_t base = ix->work_n;
    work_push(ix, f);
    while (ix->work_n > base && !ix->oom) {
        if (!ix->work_left) {
            ix->bound = GRAM_BOUND_WORK, ix->oom = true;
            break;
        }
        ix->work_left--;
        f = ix->work[--ix->work_n];
        if (!f) {
            pool_add(ix, start, NULL);
            continue;
        }
        const gram_elem *e = &ix->g->elems[f->pos];
        if (e->type == GRAM_CHAR || (e->type == GRAM_REP && (e->max < 0 || f->count < e->max))) pool_add(ix, start, f);
        if (e->type != GRAM_CHAR) expand_step(ix, f);
    }
    ix->work_n = base;
}

// Appends the set reached from [s0, s1) by code point cp; returns its start.
static size_t advance(mx_gram_index *ix, size_t s0, size_t s1, uint32_t cp) {
    size_t ns = ix->pool_n;
    if (ix->work_left < s1 - s0) {
        ix->work_left = 0;
        ix->bound = GRAM_BOUND_WORK, ix->oom = true;
        return ns;
    }
    ix->work_left -= s1 - s0;
    for (size_t i = s0; i < s1; i++) {
        const gram_frame *f = ix->pool[i];
        if (!f) continue;
        const gram_elem *e = &ix->g->elems[f->pos];
        if (!gram_class_has(ix->g, e->arg, cp)) continue;
        if (e->type == GRAM_CHAR) {
            expand(ix, cont(ix, f), ns);
        } else {
            int32_t c = f->count + 1;
            if (e->max < 0 && c > e->min) c = e->min;
            expand(ix, intern(ix, f->pos, c, f->parent), ns);
        }
    }
    return ns;
}

static bool set_meets(const mx_gram_index *ix, size_t s0, size_t s1, const gram_utf8 *u) {
    uint32_t lo, hi;
    gram_utf8_range(u, &lo, &hi);
    for (size_t i = s0; i < s1; i++)
        if (ix->pool[i] && gram_class_meets(ix->g, ix->g->elems[ix->pool[i]->pos].arg, lo, hi)) return true;
    return false;
}

// Advances the set [*s0, *s1) over bytes b[0..n), decoding with *u (which carries a partial
// character from one call to the next). True when every complete character was taken by some
// stack and, when a partial character is left, some stack can still take a character it may
// become. New sets are pushed onto the pool; the caller decides whether to keep them.
static bool consume(mx_gram_index *ix, size_t *s0, size_t *s1, gram_utf8 *u, const uint8_t *b, size_t n) {
    bool ok = true;
    for (size_t k = 0; k < n && ok; k++) {
        uint32_t cp;
        int r = gram_utf8_feed(u, b[k], &cp);
        if (r < 0) {
            ok = false;
        } else if (r == 1) {
            *s0 = advance(ix, *s0, *s1, cp);
            *s1 = ix->pool_n;
            ok = *s1 > *s0;
        }
    }
    return ok && (!u->need || set_meets(ix, *s0, *s1, u));
}

// True when the set [s0, s1) can consume bytes b[0..n) from a character boundary. The pool is
// left as it was.
static bool simulate(mx_gram_index *ix, size_t s0, size_t s1, const uint8_t *b, size_t n) {
    size_t top = ix->pool_n;
    gram_utf8 u = {0};
    bool ok = consume(ix, &s0, &s1, &u, b, n);
    ix->pool_n = top;
    return ok && !ix->oom;
}

// ---- masks

static inline void bit_set(uint32_t *m, int32_t id) { m[id >> 5] |= 1u << (id & 31); }
static inline void bit_clear(uint32_t *m, int32_t id) { m[id >> 5] &= ~(1u << (id & 31)); }

static void set_token(const mx_gram_vocab *v, uint32_t *out, int32_t id) {
    for (; id >= 0; id = v->dup_next[id]) bit_set(out, id);
}

// Depth-first walk of the trie below node with the set [s0, s1) and character state u.
static void walk(mx_gram_index *ix, int32_t node, size_t s0, size_t s1, gram_utf8 u, uint32_t *out) {
    const mx_gram_vocab *v = ix->v;
    for (int32_t c = v->nodes[node].first_child; c >= 0 && !ix->oom; c = v->nodes[c].next_sibling) {
        gram_utf8 u2 = u;
        uint32_t cp;
        int r = gram_utf8_feed(&u2, v->nodes[c].byte, &cp);
        if (r < 0) continue;
        size_t top = ix->pool_n, n0 = s0, n1 = s1;
        if (r == 1) {
            n0 = advance(ix, s0, s1, cp);
            n1 = ix->pool_n;
            if (n1 == n0) continue;
        } else if (!set_meets(ix, s0, s1, &u2)) {
            continue;
        }
        if (v->nodes[c].token >= 0) set_token(v, out, v->nodes[c].token);
        walk(ix, c, n0, n1, u2, out);
        ix->pool_n = top;
    }
}

static int cmp_desc_chars(const void *a, const void *b) {
    const int32_t *x = a, *y = b;
    return x[1] > y[1] ? -1 : x[1] < y[1] ? 1 : x[0] - y[0];
}

static class_table *class_table_get(mx_gram_index *ix, int32_t cls) {
    class_table *t = &ix->tables[cls];
    if (t->built) return t;
    const mx_gram_vocab *v = ix->v;
    const mx_grammar *g = ix->g;
    t->full = calloc((size_t)v->words, sizeof *t->full);
    int32_t *pairs = malloc(sizeof(int32_t) * 2 * (size_t)v->vocab);
    t->mixed = malloc(sizeof(int32_t) * (size_t)v->vocab);
    if (!t->full || !pairs || !t->mixed) {
        free(pairs);
        ix->oom = true;
        return NULL;
    }
    for (int32_t id = 0; id < v->vocab; id++) {
        if (!v->bytes[id]) continue;
        gram_utf8 u = {0};
        bool all = true, first_meets = false;
        int32_t chars = 0;
        for (uint32_t k = 0; k < v->len[id] && all; k++) {
            uint32_t cp;
            int r = gram_utf8_feed(&u, v->bytes[id][k], &cp);
            if (r < 0) {
                all = false;
            } else if (r == 1) {
                bool in = gram_class_has(g, cls, cp);
                if (chars == 0) first_meets = in;
                all = in;
                chars++;
            }
        }
        if (all && u.need) {
            all = false;
            if (chars == 0) {
                uint32_t lo, hi;
                gram_utf8_range(&u, &lo, &hi);
                first_meets = gram_class_meets(g, cls, lo, hi);
            }
        }
        if (all) {
            bit_set(t->full, id);
            pairs[2 * t->n_all] = id;
            pairs[2 * t->n_all + 1] = chars;
            t->n_all++;
        } else if (first_meets) {
            t->mixed[t->n_mixed++] = id;
        }
    }
    qsort(pairs, (size_t)t->n_all, sizeof(int32_t) * 2, cmp_desc_chars);
    t->all_ids = malloc(sizeof(int32_t) * (size_t)(t->n_all + 1));
    t->all_chars = malloc(sizeof(int32_t) * (size_t)(t->n_all + 1));
    if (!t->all_ids || !t->all_chars) {
        free(pairs);
        ix->oom = true;
        return NULL;
    }
    for (int32_t i = 0; i < t->n_all; i++) t->all_ids[i] = pairs[2 * i], t->all_chars[i] = pairs[2 * i + 1];
    free(pairs);
    t->upto = calloc((size_t)(SHORT_BUDGET + 1) * (size_t)v->words, sizeof *t->upto);
    if (!t->upto) {
        ix->oom = true;
        return NULL;
    }
    for (int32_t i = 0; i < t->n_all; i++)
        for (int32_t k = t->all_chars[i]; k <= SHORT_BUDGET; k++) bit_set(t->upto + (size_t)k * (size_t)v->words, t->all_ids[i]);
    t->built = true;
    return t;
}

static int32_t stack_mask(mx_gram_index *ix, const gram_frame *f);

static void or_entry(const mx_gram_index *ix, int32_t idx, uint32_t *out) {
    const mask_entry *e = &ix->entries[idx];
    if (e->dense) {
        for (int w = 0; w < ix->v->words; w++) out[w] |= e->data[w];
    } else {
        for (int32_t i = 0; i < e->n; i++) bit_set(out, (int32_t)e->data[i]);
    }
}

// Whether token t is allowed from a REP stack (see compute_rep) by leaving the repetition after
// its first character, or by ending inside it on a partial character.
static bool rep_scan(mx_gram_index *ix, int32_t cls, const uint8_t *b, uint32_t len, int32_t jlo, int32_t budget,
                     size_t e0, size_t e1, const uint32_t *first_bytes) {
    uint32_t off = 0;
    int32_t j = 0;
    if (jlo < 1) jlo = 1;
    for (;;) {
        if (j >= jlo && j <= budget && off < len && ((first_bytes[b[off] >> 5] >> (b[off] & 31)) & 1) &&
            simulate(ix, e0, e1, b + off, len - off))
            return true;
        if (off == len) return j <= budget;
        gram_utf8 u = {0};
        uint32_t cp = 0;
        int r = 0;
        while (off < len && (r = gram_utf8_feed(&u, b[off], &cp)) == 0) off++;
        if (r < 0) return false;
        if (r == 0) {  // the token ends inside a character
            uint32_t lo, hi;
            gram_utf8_range(&u, &lo, &hi);
            return j < budget && gram_class_meets(ix->g, cls, lo, hi);
        }
        off++;
        if (!gram_class_has(ix->g, cls, cp) || j >= budget) return false;
        j++;
    }
}

// The mask of a stack whose top is REP of class C with count c, bounds [min, max].
static void compute_rep(mx_gram_index *ix, const gram_frame *f, uint32_t *out) {
    const gram_elem *e = &ix->g->elems[f->pos];
    class_table *t = class_table_get(ix, e->arg);
    if (!t) return;
    const mx_gram_vocab *v = ix->v;
    int32_t budget = e->max < 0 ? INT32_MAX : e->max - f->count;
    int32_t jlo = e->min > f->count ? e->min - f->count : 0;
    size_t e0 = ix->pool_n;
    expand(ix, cont(ix, f), e0);
    size_t e1 = ix->pool_n;
    uint32_t first_bytes[8] = {0};
    for (size_t i = e0; i < e1; i++) {
        const gram_frame *x = ix->pool[i];
        if (!x) continue;
        int32_t k = ix->g->elems[x->pos].arg;
        for (uint32_t b = 0; b < 256; b++) {
            bool ok;
            if (b < 0x80) ok = gram_class_has(ix->g, k, b);
            else if (b >= 0xC2 && b <= 0xDF) ok = gram_class_meets(ix->g, k, (b & 0x1Fu) << 6, ((b & 0x1Fu) << 6) | 0x3F);
            else if (b >= 0xE0 && b <= 0xEF) ok = gram_class_meets(ix->g, k, (b & 0x0Fu) << 12, ((b & 0x0Fu) << 12) | 0xFFF);
            else if (b >= 0xF0 && b <= 0xF4) ok = gram_class_meets(ix->g, k, (b & 0x07u) << 18, ((b & 0x07u) << 18) | 0x3FFFF);
            else ok = false;
            if (ok) first_bytes[b >> 5] |= 1u << (b & 31);
        }
    }
    // Tokens made only of class characters stay inside the repetition when they fit the budget.
    // Longer ones can only be allowed by leaving it part way, at a class character the
    // continuation also starts with; when no byte starts both, they are simply out.
    bool overlap = false;
    for (uint32_t b = 0; b < 256 && !overlap; b++)
        if ((first_bytes[b >> 5] >> (b & 31)) & 1) overlap = gram_class_meets(ix->g, e->arg, b, b) || b >= 0x80;
    if (budget <= SHORT_BUDGET) {
        memcpy(out, t->upto + (size_t)budget * (size_t)v->words, sizeof *out * (size_t)v->words);
    } else {
        memcpy(out, t->full, sizeof *out * (size_t)v->words);
        for (int32_t i = 0; i < t->n_all && t->all_chars[i] > budget; i++) bit_clear(out, t->all_ids[i]);
    }
    for (int32_t i = 0; i < t->n_all && t->all_chars[i] > budget && overlap; i++) {
        int32_t id = t->all_ids[i];
        if (rep_scan(ix, e->arg, v->bytes[id], v->len[id], jlo, budget, e0, e1, first_bytes)) bit_set(out, id);
    }
    for (int32_t i = 0; i < t->n_mixed; i++) {
        int32_t id = t->mixed[i];
        if (rep_scan(ix, e->arg, v->bytes[id], v->len[id], jlo, budget, e0, e1, first_bytes)) bit_set(out, id);
    }
    if (jlo == 0) {
        for (size_t i = e0; i < e1 && !ix->oom; i++) {
            const gram_frame *x = ix->pool[i];
            if (!x) continue;
            int32_t idx = stack_mask(ix, x);
            if (idx >= 0) or_entry(ix, idx, out);
        }
    }
    ix->pool_n = e0;
}

// Frames whose masks are equal share one cache entry. A token has at most max_chars characters,
// and a repetition count changes nothing it can see while the count is at least max_chars away
// from both bounds (each count is a character, or a match of a rule that cannot be empty): such
// counts are replaced by one representative, here and in every parent frame, so the stacks inside
// the 3rd and the 300th item of a long array, or at character 40 and 90 of a string, share masks.
static int32_t key_count(const mx_gram_index *ix, const gram_frame *f) {
    const gram_elem *e = &ix->g->elems[f->pos];
    int32_t K = ix->v->max_chars, c = f->count;
    if (e->type != GRAM_REP && e->type != GRAM_REPREF) return c;
    bool far_from_max = e->max < 0 || e->max - c >= K;
    if (c < e->min) return e->min - c >= K && far_from_max ? 0 : c;
    return far_from_max ? e->min : c;
}

static const gram_frame *mask_key(mx_gram_index *ix, const gram_frame *f) {
    if (!f) return NULL;
    if (f->key) return f->key;
    const gram_frame *parent = mask_key(ix, f->parent);
    if (f->parent && !parent) return NULL;  // out of memory
    int32_t c = key_count(ix, f);
    const gram_frame *k = parent == f->parent && c == f->count ? f : intern(ix, f->pos, c, parent);
    if (!k) return NULL;
    ((gram_frame *)f)->key = k;
    ((gram_frame *)k)->key = k;
    return k;
}

static int32_t store_entry(mx_gram_index *ix, uint32_t *dense) {
    int32_t n = 0;
    for (int w = 0; w < ix->v->words; w++) n += __builtin_popcount(dense[w]);
    if (ix->n_entries == ix->cap_entries) {
        int32_t cap = ix->cap_entries ? ix->cap_entries * 2 : 256;
        mask_entry *p = realloc(ix->entries, sizeof *p * (size_t)cap);
        if (!p) return ix->oom = true, -1;
        ix->entries = p;
        ix->cap_entries = cap;
    }
    mask_entry me = {.n = n, .dense = n >= ix->v->words, .data = dense};
    if (!me.dense) {
        uint32_t *ids = malloc(sizeof *ids * (size_t)(n ? n : 1));
        if (!ids) return ix->oom = true, -1;
        int32_t k = 0;
        for (int w = 0; w < ix->v->words; w++)
            for (uint32_t bits = dense[w]; bits; bits &= bits - 1) ids[k++] = (uint32_t)(w * 32 + __builtin_ctz(bits));
        free(dense);
        me.data = ids;
    }
    ix->mask_bytes += me.dense ? sizeof(uint32_t) * (size_t)ix->v->words : sizeof(uint32_t) * (size_t)n;
    ix->entries[ix->n_entries] = me;
    return ix->n_entries++;
}

// The cache entry of stack f (top CHAR or REP), computing it when missing; -1 when out of memory.
static int32_t stack_mask(mx_gram_index *ix, const gram_frame *f) {
    gram_frame *key = (gram_frame *)mask_key(ix, f);
    if (!key) return -1;
    if (key->mask >= 0) return key->mask;
    // A repetition's mask needs its continuation's, which may be another repetition's, and so on
    // (`[a-z]* [0-9]* [a-z]* ...`): that recursion is bounded like the work.
    if (ix->mask_depth >= GRAM_MAX_MASK_DEPTH) {
        ix->bound = GRAM_BOUND_WORK, ix->oom = true;
        return -1;
    }
    if (key->mask == -2) return -1;  // already being computed further up (cannot happen without left recursion)
    key->mask = -2;
    uint32_t *out = calloc((size_t)ix->v->words, sizeof *out);
    if (!out) return key->mask = -1, ix->oom = true, -1;
    if (ix->g->elems[key->pos].type == GRAM_REP) {
        ix->mask_depth++;
        compute_rep(ix, key, out);
        ix->mask_depth--;
    } else {
        size_t s0 = ix->pool_n;
        pool_add(ix, s0, key);
        walk(ix, 0, s0, ix->pool_n, (gram_utf8){0}, out);
        ix->pool_n = s0;
    }
    if (ix->oom) {
        free(out);
        key->mask = -1;
        return -1;
    }
    key->mask = store_entry(ix, out);
    return key->mask;
}

static void clear_cache(mx_gram_index *ix) {
    for (int32_t i = 0; i < ix->n_entries; i++) free(ix->entries[i].data);
    ix->n_entries = 0;
    ix->mask_bytes = 0;
    for (frame_chunk *c = ix->chunks; c; c = c->next)
        for (int32_t i = 0; i < c->used; i++) c->f[i].mask = -1;
}

// ---- index

mx_gram_index *mx_gram_index_create(mx_grammar *g, const mx_gram_vocab *v, mx_error *err) {
    mx_gram_index *ix = calloc(1, sizeof *ix);
    if (ix) ix->tables = calloc((size_t)(g->n_classes ? g->n_classes : 1), sizeof *ix->tables);
    if (!ix || !ix->tables) {
        free(ix);
        mx_grammar_free(g);
        mx_fail(err, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&ix->mu, NULL);
    ix->refs = 1;
    ix->g = g;
    ix->v = v;
    ix->max_work = MX_GRAM_MAX_WORK;
    ix->max_frames = MX_GRAM_MAX_FRAMES;
    return ix;
}

void mx_gram_index_set_limits(mx_gram_index *ix, uint64_t max_work, size_t max_frames) {
    pthread_mutex_lock(&ix->mu);
    ix->max_work = max_work;
    ix->max_frames = max_frames;
    pthread_mutex_unlock(&ix->mu);
}

// The message of a mask or accept that stopped (index lock held): the bound it hit, or an
// allocation failure. Resets the step's failure state. Returns MX_GRAM_BOUND or MX_GRAM_NO_MEMORY.
static int step_failed(mx_gram_index *ix, mx_error *err) {
    int bound = ix->bound;
    ix->oom = false;
    ix->bound = GRAM_BOUND_NONE;
    if (bound == GRAM_BOUND_WORK) {
        mx_fail(err, "grammar: too ambiguous to follow within the matcher's work limit (%llu steps or %d nested "
                "repetitions per token)", (unsigned long long)ix->max_work, GRAM_MAX_MASK_DEPTH);
        return MX_GRAM_BOUND;
    }
    if (bound == GRAM_BOUND_FRAMES) {
        mx_fail(err, "grammar: the matcher's parser stacks passed their limit (%zu frames, %zu MB)", ix->max_frames,
                ix->max_frames * sizeof(gram_frame) >> 20);
        return MX_GRAM_BOUND;
    }
    mx_fail(err, "grammar: out of memory in the matcher");
    return MX_GRAM_NO_MEMORY;
}

void mx_gram_index_retain(mx_gram_index *ix) {
    pthread_mutex_lock(&ix->mu);
    ix->refs++;
    pthread_mutex_unlock(&ix->mu);
}

size_t mx_gram_index_bytes(mx_gram_index *ix) {
    pthread_mutex_lock(&ix->mu);
    size_t n = ix->n_frames * sizeof(gram_frame) + ix->n_buckets * sizeof(gram_frame *) + ix->mask_bytes;
    pthread_mutex_unlock(&ix->mu);
    return n;
}

void mx_gram_index_release(mx_gram_index *ix) {
    if (!ix) return;
    pthread_mutex_lock(&ix->mu);
    int refs = --ix->refs;
    pthread_mutex_unlock(&ix->mu);
    if (refs > 0) return;
    clear_cache(ix);
    free(ix->entries);
    for (int32_t c = 0; c < ix->g->n_classes; c++) {
        free(ix->tables[c].full);
        free(ix->tables[c].upto);
        free(ix->tables[c].all_ids);
        free(ix->tables[c].all_chars);
        free(ix->tables[c].mixed);
    }
    free(ix->tables);
    for (frame_chunk *c = ix->chunks, *next; c; c = next) {
        next = c->next;
        free(c);
    }
    free(ix->buckets);
    free(ix->pool);
    free(ix->work);
    mx_grammar_free(ix->g);
    pthread_mutex_destroy(&ix->mu);
    free(ix);
}

// ---- matcher

static int matcher_store(mx_matcher *m, size_t s0, size_t s1) {
    const mx_gram_index *ix = m->ix;
    size_t n = s1 - s0;
    if (n > m->cap_set) {
        const gram_frame **p = realloc(m->set, sizeof *p * n);
        if (!p) return -1;
        m->set = p;
        m->cap_set = n;
    }
    memcpy(m->set, ix->pool + s0, sizeof *m->set * n);
    m->n_set = n;
    return 0;
}

static size_t matcher_load(mx_matcher *m) {
    mx_gram_index *ix = m->ix;
    size_t s0 = ix->pool_n;
    for (size_t i = 0; i < m->n_set; i++) pool_add(ix, s0, m->set[i]);
    return s0;
}

mx_matcher *mx_matcher_create(mx_gram_index *ix, int *failure, mx_error *err) {
    mx_matcher *m = calloc(1, sizeof *m);
    if (!m) {
        if (failure) *failure = MX_GRAM_NO_MEMORY;
        return mx_fail(err, "out of memory"), NULL;
    }
    m->ix = ix;
    mx_gram_index_retain(ix);
    pthread_mutex_lock(&ix->mu);
    ix->work_left = ix->max_work;
    size_t s0 = ix->pool_n;
    // The start: every alternative of root, with nothing after it.
    const gram_elem *el = ix->g->elems;
    for (int32_t a = ix->g->rule_start[ix->g->root];;) {
        if (ends_alt(&el[a])) expand(ix, NULL, s0);
        else expand(ix, intern(ix, a, 0, NULL), s0);
        while (!ends_alt(&el[a])) a++;
        if (el[a].type == GRAM_END) break;
        a++;
    }
    int rc = ix->oom || matcher_store(m, s0, ix->pool_n) ? step_failed(ix, err) : 0;
    ix->pool_n = s0;
    pthread_mutex_unlock(&ix->mu);
    if (rc) {
        if (failure) *failure = rc;
        mx_matcher_free(m);
        return NULL;
    }
    return m;
}

void mx_matcher_free(mx_matcher *m) {
    if (!m) return;
    mx_gram_index_release(m->ix);
    free(m->set);
    free(m);
}

bool mx_matcher_complete(const mx_matcher *m) {
    if (m->ended) return true;
    if (m->u.need) return false;
    for (size_t i = 0; i < m->n_set; i++)
        if (!m->set[i]) return true;
    return false;
}

int mx_matcher_mask(mx_matcher *m, uint32_t *mask, mx_error *err) {
    mx_gram_index *ix = m->ix;
    const mx_gram_vocab *v = ix->v;
    memset(mask, 0, sizeof *mask * (size_t)v->words);
    if (m->ended) return 0;
    pthread_mutex_lock(&ix->mu);
    ix->work_left = ix->max_work;
    if (ix->mask_bytes > MASK_CACHE_BYTES) clear_cache(ix);
    bool complete = false;
    if (m->u.need) {
        size_t s0 = matcher_load(m);
        walk(ix, 0, s0, ix->pool_n, m->u, mask);
        ix->pool_n = s0;
    } else {
        for (size_t i = 0; i < m->n_set && !ix->oom; i++) {
            if (!m->set[i]) {
                complete = true;
                continue;
            }
            int32_t idx = stack_mask(ix, m->set[i]);
            if (idx >= 0) or_entry(ix, idx, mask);
        }
    }
    int rc = ix->oom ? step_failed(ix, err) : 0;
    pthread_mutex_unlock(&ix->mu);
    if (rc) {
        memset(mask, 0, sizeof *mask * (size_t)v->words);
        return rc;
    }
    if (complete)
        for (int i = 0; i < v->n_stop; i++) bit_set(mask, v->stop_ids[i]);
    int n = 0;
    for (int w = 0; w < v->words; w++) n += __builtin_popcount(mask[w]);
    return n;
}

int mx_matcher_accept(mx_matcher *m, int32_t id, mx_error *err) {
    mx_gram_index *ix = m->ix;
    const mx_gram_vocab *v = ix->v;
    if (m->ended) return mx_fail(err, "grammar: token %d after the end of the sequence", id);
    for (int i = 0; i < v->n_stop; i++) {
        if (v->stop_ids[i] != id) continue;
        if (!mx_matcher_complete(m)) return mx_fail(err, "grammar: end of sequence before the grammar is complete");
        m->ended = true;
        return 0;
    }
    if (id < 0 || id >= v->vocab || !v->bytes[id]) return mx_fail(err, "grammar: token %d cannot match any grammar text", id);
    pthread_mutex_lock(&ix->mu);
    ix->work_left = ix->max_work;
    size_t top = ix->pool_n;
    size_t s0 = matcher_load(m), s1 = ix->pool_n;
    gram_utf8 u = m->u;
    bool ok = consume(ix, &s0, &s1, &u, v->bytes[id], v->len[id]);
    int rc = ix->oom || (ok && matcher_store(m, s0, s1)) ? step_failed(ix, err) : 0;
    if (ok && rc == 0) m->u = u;
    ix->pool_n = top;
    pthread_mutex_unlock(&ix->mu);
    if (rc) return rc;
    if (!ok) return mx_fail(err, "grammar: token %d is not allowed here", id), MX_GRAM_REFUSED;
    return 0;
}

void mx_mask_logits(const uint32_t *mask, float *logits, int vocab) {
    int full = vocab / 32;
    for (int w = 0; w < full; w++) {
        uint32_t banned = ~mask[w];
        if (banned == 0xFFFFFFFFu) {
            for (int i = 0; i < 32; i++) logits[w * 32 + i] = -INFINITY;
        } else {
            for (; banned; banned &= banned - 1) logits[w * 32 + __builtin_ctz(banned)] = -INFINITY;
        }
    }
    for (int i = full * 32; i < vocab; i++)
        if (!((mask[i >> 5] >> (i & 31)) & 1)) logits[i] = -INFINITY;
}
