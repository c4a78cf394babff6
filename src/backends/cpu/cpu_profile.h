// SPDX-License-Identifier: MIT
// Per-record timing of the CPU plan runner (MLXCEL_CPU_PROFILE=1); see cpu_profile.c.
#ifndef MX_BACKENDS_CPU_PROFILE_H
#define MX_BACKENDS_CPU_PROFILE_H

#include "backends/backend.h"

typedef struct cpu_profile cpu_profile;

// NULL unless MLXCEL_CPU_PROFILE is set (and not "0"), or when it cannot be allocated.
cpu_profile *cpu_profile_create(void);
// Adds `seconds` (wall) and `cpu_seconds` (all threads) to the entry of op (which ran together with
// ran - 1 records after it).
void cpu_profile_add(cpu_profile *p, const mx_op *op, int ran, double seconds, double cpu_seconds);
// Prints the table to stderr and frees it; NULL is a no-op.
void cpu_profile_free(cpu_profile *p);

#endif
