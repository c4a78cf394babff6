// SPDX-License-Identifier: MIT
// Weights copied onto huge pages (see cpu_weight_arena.h): chunks of at least CHUNK_MIN bytes,
// each its own 2 MB-aligned anonymous mapping, filled first-fit and unmapped when empty.
#include "backends/cpu/cpu_weight_arena.h"

#include "backends/cpu/cpu_internal.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define HUGE_PAGE ((size_t)2 << 20)
// Chunks are reserved in this size (virtual memory; pages are only committed when written), so a
// model's weights take a few chunks and each chunk wastes at most one partly used huge page.
#define CHUNK_MIN ((size_t)256 << 20)

typedef enum { ARENA_MAPPED, ARENA_HUGE } arena_mode;

typedef struct chunk {
    uint8_t *base;
    size_t size, used;  // bytes mapped, bytes handed out (bump pointer)
    size_t live;        // copies not yet released
    bool reserved;      // MAP_HUGETLB pages, else transparent huge pages
} chunk;

struct cpu_weight_arena {
    arena_mode mode;
    bool thp;                       // transparent huge pages offered (else only reserved ones are used)
    chunk *chunks;
    int n_chunks, cap_chunks;
    int n_reserved, n_transparent;  // chunks made of each kind, for the description
    int n_left_mapped;              // copies refused (no huge pages or memory): those stay mapped
};

// Transparent huge pages are usable when the kernel's mode is "always" or "madvise".
static bool thp_available(void) {
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    if (!f) return false;
    char line[128] = {0};
    bool ok = fgets(line, sizeof line, f) && (strstr(line, "[always]") || strstr(line, "[madvise]"));
    fclose(f);
    return ok;
}

// Free reserved huge pages (/proc/meminfo), 0 unless they are 2 MB ones.
static long hugetlb_free_pages(void) {
    static const char *const keys[] = {"HugePages_Free", "Hugepagesize"};
    unsigned long long v[2];
    if (cpu_meminfo(keys, v, 2) != 0) return 0;
    return v[1] == 2048 ? (long)v[0] : 0;
}

cpu_weight_arena *cpu_weight_arena_create(mx_error *err) {
    const char *env = getenv("MLXCEL_CPU_WEIGHTS");
    if (env && strcmp(env, "huge") != 0 && strcmp(env, "mapped") != 0) {
        mx_fail(err, "MLXCEL_CPU_WEIGHTS='%s': the CPU weight placement must be huge (the default) or mapped", env);
        return NULL;
    }
    cpu_weight_arena *a = calloc(1, sizeof *a);
    if (!a) {
        mx_fail(err, "out of memory");
        return NULL;
    }
    a->thp = thp_available();
    bool huge = a->thp || hugetlb_free_pages() > 0;
    a->mode = env && !strcmp(env, "mapped") ? ARENA_MAPPED : huge ? ARENA_HUGE : ARENA_MAPPED;
    return a;
}

void cpu_weight_arena_free(cpu_weight_arena *a) {
    if (!a) return;
    for (int i = 0; i < a->n_chunks; i++) munmap(a->chunks[i].base, a->chunks[i].size);
    free(a->chunks);
    free(a);
}

bool cpu_weight_arena_on(const cpu_weight_arena *a) { return a && a->mode == ARENA_HUGE; }

const char *cpu_weight_arena_kind(const cpu_weight_arena *a) {
    if (!cpu_weight_arena_on(a)) return "file mapping";
    if (a->n_left_mapped) return "huge pages, some left in the file mapping (memory)";
    if (a->n_reserved && !a->n_transparent) return "huge pages (reserved)";
    if (a->n_reserved) return "huge pages (reserved and transparent)";
    return "huge pages (transparent)";
}

// Memory left free after a new chunk, so that copying weights never pushes the machine into the
// out-of-memory killer: below it, weights stay in the file mapping.
#define KEEP_FREE ((size_t)512 << 20)

// A 2 MB-aligned anonymous mapping of `size` bytes (a multiple of 2 MB): reserved huge pages when
// the system has enough free, else (when the kernel offers transparent huge pages and the memory is
// available) an over-sized mapping trimmed to alignment and advised as huge. NULL when neither.
static uint8_t *map_chunk(size_t size, bool thp, bool *reserved) {
#ifdef MAP_HUGETLB
    if ((size_t)hugetlb_free_pages() >= size / HUGE_PAGE) {
        void *h = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
        if (h != MAP_FAILED) {
            *reserved = true;
            return h;
        }
    }
#endif
    *reserved = false;
    size_t available = 0, total = 0;
    if (!thp || cpu_host_memory(&available, &total) != 0 || available < size + KEEP_FREE) return NULL;
    size_t span = size + HUGE_PAGE;
    uint8_t *p = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
    uint8_t *base = (uint8_t *)(((uintptr_t)p + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
    if (base > p) munmap(p, (size_t)(base - p));
    if (base + size < p + span) munmap(base + size, (size_t)(p + span - (base + size)));
#ifdef MADV_HUGEPAGE
    madvise(base, size, MADV_HUGEPAGE);
#endif
    return base;
}

// The first chunk with room for `bytes` at 64-byte alignment, or a new one; NULL when no chunk can
// be had (no huge pages, too little memory available).
static chunk *chunk_for(cpu_weight_arena *a, size_t bytes) {
    for (int i = 0; i < a->n_chunks; i++) {
        chunk *c = &a->chunks[i];
        if (((c->used + 63) & ~(size_t)63) + bytes <= c->size) return c;
    }
    if (a->n_chunks == a->cap_chunks) {
        int cap = a->cap_chunks ? 2 * a->cap_chunks : 8;
        chunk *grown = realloc(a->chunks, (size_t)cap * sizeof *grown);
        if (!grown) return NULL;
        a->chunks = grown;
        a->cap_chunks = cap;
    }
    size_t size = bytes > CHUNK_MIN ? (bytes + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1) : CHUNK_MIN;
    bool reserved = false;
    uint8_t *base = map_chunk(size, a->thp, &reserved);
    if (!base) return NULL;
    if (reserved) a->n_reserved++;
    else a->n_transparent++;
    a->chunks[a->n_chunks] = (chunk){.base = base, .size = size, .reserved = reserved};
    return &a->chunks[a->n_chunks++];
}

void *cpu_weight_arena_alloc(cpu_weight_arena *a, size_t bytes) {
    if (!cpu_weight_arena_on(a) || bytes == 0) return NULL;
    chunk *c = chunk_for(a, bytes);
    if (!c) {
        a->n_left_mapped++;
        return NULL;
    }
    size_t at = (c->used + 63) & ~(size_t)63;
    c->used = at + bytes;
    c->live++;
    return c->base + at;
}

bool cpu_weight_arena_release(cpu_weight_arena *a, const void *p) {
    if (!a || !p) return false;
    const uint8_t *b = p;
    for (int i = 0; i < a->n_chunks; i++) {
        chunk *c = &a->chunks[i];
        if (b < c->base || b >= c->base + c->size) continue;
        if (--c->live == 0) {
            munmap(c->base, c->size);
            a->chunks[i] = a->chunks[--a->n_chunks];
        }
        return true;
    }
    return false;
}
