// SPDX-License-Identifier: MIT
// A bump allocator for the Jinja interpreter. A parsed template keeps its AST in one arena; each
// render gets its own arena for every value it creates, freed all at once when the render ends, so
// values need no reference counts. An arena has a byte limit: an allocation past it fails (returns
// NULL) and sets `exhausted`, which turns a runaway template into an error instead of eating memory.
#ifndef MX_CHAT_JINJA_ARENA_H
#define MX_CHAT_JINJA_ARENA_H

#include <stdbool.h>
#include <stddef.h>

typedef struct jinja_arena_chunk jinja_arena_chunk;

typedef struct jinja_arena {
    jinja_arena_chunk *head; // newest chunk first
    size_t used;             // bytes handed out so far (all chunks)
    size_t limit;            // most bytes this arena may hand out
    bool exhausted;          // an allocation failed (limit or out of memory)
} jinja_arena;

void jinja_arena_init(jinja_arena *a, size_t limit);
// Returns `size` zeroed bytes aligned for any type, or NULL (limit reached or out of memory).
void *jinja_arena_alloc(jinja_arena *a, size_t size);
// Copies n bytes and a terminating NUL; NULL on failure.
char *jinja_arena_strndup(jinja_arena *a, const char *s, size_t n);
void jinja_arena_free(jinja_arena *a);

#endif
