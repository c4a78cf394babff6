// SPDX-License-Identifier: MIT
// The bump allocator (see arena.h for the contract): chunks of 64 KiB (or one chunk per large
// block), freed together.
#include "core/arena.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MX_ARENA_CHUNK (64 * 1024)

struct mx_arena_chunk {
    mx_arena_chunk *next;
    size_t size, used;
    max_align_t data[];
};

void mx_arena_init(mx_arena *a, size_t limit) {
    a->head = NULL;
    a->used = 0;
    a->limit = limit;
    a->exhausted = false;
}

// `size` bytes at a multiple of `align` (a power of two, at most max_align_t's) in the newest chunk,
// or in a new one: a block over a quarter of a chunk gets a chunk of its own, placed behind the
// newest so that chunk's free space stays usable. NULL past the limit or out of memory.
static void *take(mx_arena *a, size_t size, size_t align) {
    if (size == 0) size = 1;
    if (size > SIZE_MAX / 2 || a->used + size > a->limit) {
        a->exhausted = true;
        return NULL;
    }
    mx_arena_chunk *c = a->head;
    size_t at = c ? (c->used + align - 1) & ~(align - 1) : 0;
    if (!c || at > c->size || c->size - at < size) {
        size_t cap = size > MX_ARENA_CHUNK / 4 ? size : MX_ARENA_CHUNK;
        mx_arena_chunk *n = malloc(sizeof *n + cap);
        if (!n) {
            a->exhausted = true;
            return NULL;
        }
        n->size = cap;
        n->used = 0;
        if (cap == size && c) {
            n->next = c->next;
            c->next = n;
        } else {
            n->next = c;
            a->head = n;
        }
        c = n;
        at = 0;
    }
    c->used = at + size;
    a->used += size;
    return (char *)c->data + at;
}

void *mx_arena_alloc(mx_arena *a, size_t size) {
    void *p = take(a, size, sizeof(max_align_t));
    if (p) memset(p, 0, size ? size : 1);
    return p;
}

// Strings need no alignment: they are packed end to end.
char *mx_arena_strndup(mx_arena *a, const char *s, size_t n) {
    char *p = take(a, n + 1, 1);
    if (!p) return NULL;
    if (n) memcpy(p, s, n);
    p[n] = 0;
    return p;
}

void mx_arena_free(mx_arena *a) {
    mx_arena_chunk *c = a->head;
    while (c) {
        mx_arena_chunk *next = c->next;
        free(c);
        c = next;
    }
    a->head = NULL;
    a->used = 0;
}
