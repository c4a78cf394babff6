// SPDX-License-Identifier: MIT
// Weights on huge pages. The safetensors files are mapped with 4 KB pages (file-backed mappings get
// no transparent huge pages on most kernels), so a decode step that streams every weight once takes
// a TLB miss per 4 KB (a two-level walk under virtualization) and the hardware prefetcher restarts
// at every page. The arena copies the weights the CPU backend reads into 2 MB-aligned anonymous
// chunks: explicit huge pages (MAP_HUGETLB) when the system has reserved enough, else transparent
// huge pages (MADV_HUGEPAGE). Where neither exists, or with MLXCEL_CPU_WEIGHTS=mapped, the arena is
// off and the weights stay in the file mapping (no copy); a weight that would leave less than 512 MB
// of memory available (cpu_host_memory: a container's limit counts) stays mapped too, so loading
// never fails for the arena's sake.
//
// Ownership: the arena owns its chunks; a chunk is unmapped when the last copy placed in it is
// released, so a backend that loads and frees models does not grow. Copies are 64-byte aligned and
// first-fit over the open chunks, so a chunk's unused tail is at most one partly used huge page.
// Not thread-safe: called at model load and free only.
#ifndef MX_BACKENDS_CPU_WEIGHT_ARENA_H
#define MX_BACKENDS_CPU_WEIGHT_ARENA_H

#include <stdbool.h>
#include <stddef.h>

#include "core/error.h"

typedef struct cpu_weight_arena cpu_weight_arena;

// The arena for this process's settings, or NULL with a message when MLXCEL_CPU_WEIGHTS names no
// mode (huge, mapped) or memory runs out. An arena that is off is still an arena (copy returns src).
cpu_weight_arena *cpu_weight_arena_create(mx_error *err);
void cpu_weight_arena_free(cpu_weight_arena *a);

// True when weights are copied onto huge pages; the kind says where they went ("file mapping",
// "huge pages (transparent)", ...).
bool cpu_weight_arena_on(const cpu_weight_arena *a);
const char *cpu_weight_arena_kind(const cpu_weight_arena *a);

// Room for `bytes` (64-byte aligned) on huge pages, not yet touched, for the caller to copy a weight
// into; NULL when the arena is off, bytes is 0 or no huge pages (or too little memory) are left, and
// the weight should stay where it is.
void *cpu_weight_arena_alloc(cpu_weight_arena *a, size_t bytes);
// Releases room returned by cpu_weight_arena_alloc; returns false (and does nothing) when p is not
// in the arena (a mapped pointer, NULL).
bool cpu_weight_arena_release(cpu_weight_arena *a, const void *p);

#endif
