// SPDX-License-Identifier: MIT
// Per-record timing of the CPU plan runner, on with MLXCEL_CPU_PROFILE=1: wall time and the
// process's CPU time of each record (or group of matmuls, cpu_matmul_group) summed by kind, matmuls
// also by shape and by batch-1 or batch, printed to stderr when the backend is destroyed. The CPU
// time (all threads) is the figure to read when other processes share the cores: wall time then
// counts the time a thread was descheduled, CPU time does not (it does count a thread spinning at a
// hand-off). Finding where a prefill's or a decode step's time goes without perf; off, the runner
// reads no clock. The table is fixed (a
// model has a handful of shapes); keys past its end are summed under "other".
#include "backends/cpu/cpu_profile.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/plan.h"
#include "core/env_switch.h"

#define PROFILE_KEYS 64

typedef struct profile_key {
    int kind;            // mx_op_kind, or -1 for "other"
    int64_t rows, cols;  // matmuls: the first matrix's shape
    int batch;           // matmuls: 0 batch 1, 1 batch
    int group;           // matmuls: records run together
} profile_key;

struct cpu_profile {
    profile_key keys[PROFILE_KEYS];
    double seconds[PROFILE_KEYS];
    double cpu_seconds[PROFILE_KEYS];  // CPU seconds of all threads
    long long calls[PROFILE_KEYS];
    long long items[PROFILE_KEYS];  // tokens (matmul n) summed, for per-token figures
    int n;
};

cpu_profile *cpu_profile_create(void) {
    if (!mx_env_switch("MLXCEL_CPU_PROFILE")) return NULL;
    return calloc(1, sizeof(cpu_profile));
}

void cpu_profile_add(cpu_profile *p, const mx_op *op, int ran, double seconds, double cpu_seconds) {
    profile_key k = {.kind = (int)op->kind};
    long long items = 0;
    if (op->kind == MX_OP_MATMUL) {
        k.rows = op->matmul.w->rows;
        k.cols = op->matmul.w->cols;
        k.batch = op->matmul.n > 1;
        k.group = ran;
        items = op->matmul.n;
    }
    int i = 0;
    while (i < p->n && memcmp(&p->keys[i], &k, sizeof k) != 0) i++;
    if (i == p->n && p->n < PROFILE_KEYS - 1) {
        p->keys[p->n++] = k;
    } else if (i == p->n) {  // table full: the last slot sums the rest
        i = PROFILE_KEYS - 1;
        p->keys[i] = (profile_key){.kind = -1};
    }
    p->seconds[i] += seconds;
    p->cpu_seconds[i] += cpu_seconds;
    p->calls[i]++;
    p->items[i] += items;
}

void cpu_profile_free(cpu_profile *p) {
    if (!p) return;
    double total = 0, cpu_total = 0;
    for (int i = 0; i < PROFILE_KEYS; i++) total += p->seconds[i], cpu_total += p->cpu_seconds[i];
    fprintf(stderr, "cpu profile: %.3f s in records, %.3f CPU-s (all threads)\n", total, cpu_total);
    for (int i = 0; i < PROFILE_KEYS; i++) {
        if (!p->calls[i]) continue;
        const profile_key *k = &p->keys[i];
        char name[96];
        if (k->kind == MX_OP_MATMUL)
            snprintf(name, sizeof name, "matmul %lldx%lld %s%s", (long long)k->rows, (long long)k->cols,
                     k->batch ? "batch" : "n=1", k->group > 1 ? (k->group == 2 ? " x2" : k->group == 3 ? " x3" : " x4")
                                                                : "");
        else
            snprintf(name, sizeof name, "%s", k->kind < 0 ? "other" : mx_op_kind_name((mx_op_kind)k->kind));
        fprintf(stderr, "  %-34s %8.3f s %5.1f%% %8.3f CPU-s  %8lld calls  %10.1f us/call", name, p->seconds[i],
                total > 0 ? 100.0 * p->seconds[i] / total : 0.0, p->cpu_seconds[i], p->calls[i],
                1e6 * p->seconds[i] / (double)p->calls[i]);
        if (p->items[i] && k->batch)
            fprintf(stderr, "  %8.2f us/token  %8.2f CPU-us/token", 1e6 * p->seconds[i] / (double)p->items[i],
                    1e6 * p->cpu_seconds[i] / (double)p->items[i]);
        fprintf(stderr, "\n");
    }
    free(p);
}
