// SPDX-License-Identifier: MIT
// A bump allocator: allocations live until the arena is freed, all at once, and never move, so
// pointers into them stay valid (the tokenizer's token strings, pointed at from several tables). A
// parsed Jinja template keeps its AST in one arena; each render gets its own arena for every value it
// creates, so values need no reference counts. An arena has a byte limit (SIZE_MAX: none): an
// allocation past it fails (returns NULL) and sets `exhausted`, which turns a runaway template into
// an error instead of eating memory.
#ifndef MX_CORE_ARENA_H
#define MX_CORE_ARENA_H

#include <stdbool.h>
#include <stddef.h>

typedef struct mx_arena_chunk mx_arena_chunk;

typedef struct mx_arena {
    mx_arena_chunk *head;  // newest chunk first
    size_t used;           // bytes handed out so far (all chunks)
    size_t limit;          // most bytes this arena may hand out
    bool exhausted;        // an allocation failed (limit or out of memory)
} mx_arena;

// An empty arena; `limit`: the most bytes it may hand out (SIZE_MAX: no limit).
void mx_arena_init(mx_arena *a, size_t limit);
// Returns `size` zeroed bytes aligned for any type, or NULL (limit reached or out of memory).
void *mx_arena_alloc(mx_arena *a, size_t size);
// Copies n bytes and a terminating NUL, packed after the previous string (no alignment); NULL on
// failure.
char *mx_arena_strndup(mx_arena *a, const char *s, size_t n);
// Frees every allocation; the arena is empty again (same limit).
void mx_arena_free(mx_arena *a);

#endif
