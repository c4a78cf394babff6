// SPDX-License-Identifier: MIT
// Bump allocator behind the Jinja interpreter: chunks of 64 KiB (or one chunk per large block),
// freed together. See jinja_arena.h for the contract.
#include "chat/jinja_arena.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define JINJA_ARENA_CHUNK (64 * 1024)

struct jinja_arena_chunk {
    jinja_arena_chunk *next;
    size_t size, used;
    max_align_t data[];
};

void jinja_arena_init(jinja_arena *a, size_t limit) {
    a->head = NULL;
    a->used = 0;
    a->limit = limit;
    a->exhausted = false;
}

void *jinja_arena_alloc(jinja_arena *a, size_t size) {
    const size_t align = sizeof(max_align_t);
    if (size == 0) size = 1;
    if (size > SIZE_MAX / 2 || a->used + size > a->limit) {
        a->exhausted = true;
        return NULL;
    }
    size = (size + align - 1) / align * align;
    jinja_arena_chunk *c = a->head;
    if (!c || c->size - c->used < size) {
        size_t cap = size > JINJA_ARENA_CHUNK / 4 ? size : JINJA_ARENA_CHUNK;
        jinja_arena_chunk *n = malloc(sizeof *n + cap);
        if (!n) {
            a->exhausted = true;
            return NULL;
        }
        n->size = cap;
        n->used = 0;
        if (cap == size && c) {
            // A large block goes behind the current chunk so its free space stays usable.
            n->next = c->next;
            c->next = n;
        } else {
            n->next = c;
            a->head = n;
        }
        c = n;
    }
    void *p = (char *)c->data + c->used;
    c->used += size;
    a->used += size;
    memset(p, 0, size);
    return p;
}

char *jinja_arena_strndup(jinja_arena *a, const char *s, size_t n) {
    char *p = jinja_arena_alloc(a, n + 1);
    if (!p) return NULL;
    if (n) memcpy(p, s, n);
    p[n] = 0;
    return p;
}

void jinja_arena_free(jinja_arena *a) {
    jinja_arena_chunk *c = a->head;
    while (c) {
        jinja_arena_chunk *next = c->next;
        free(c);
        c = next;
    }
    a->head = NULL;
    a->used = 0;
}
