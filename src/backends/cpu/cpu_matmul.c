// SPDX-License-Identifier: MIT
// CPU matrix products: Linear layers (any format in quant.h), embedding lookup and the per-expert
// products of MoE layers. Work is split over blocks of output rows; each weight row is decoded once
// per call into per-thread scratch and then dotted with every input row, so a prefill chunk reads
// the weights once. Row decoding and dot products go through cpu_kernels.h, which picks SIMD
// versions at run time.
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_internal.h"
#include "backends/cpu/cpu_kernels.h"

#define ROWS_PER_TASK 16

typedef struct matmul_job {
    float *out;             // [n, rows] (or [m, rows] for MoE)
    const float *x;         // [n, cols]
    const mx_matrix *w;
    const float *bias;
    int n;
    int64_t row_offset;     // first matrix row of the expert (MoE)
    const int32_t *x_rows;  // MoE: which x rows (NULL: all n rows in order)
    const int32_t *out_rows;
    cpu_ctx *c;
    int64_t rows;
} matmul_job;

static void matmul_task(void *arg, int task, int thread) {
    matmul_job *j = arg;
    const mx_matrix *w = j->w;
    float *row = j->c->scratch[thread];
    int64_t r0 = (int64_t)task * ROWS_PER_TASK;
    int64_t r1 = r0 + ROWS_PER_TASK < j->rows ? r0 + ROWS_PER_TASK : j->rows;
    for (int64_t r = r0; r < r1; r++) {
        if (j->n == 1 && !j->x_rows) {
            float v = cpu_kernels_row_dot(w, j->row_offset + r, j->x, row);
            j->out[r] = j->bias ? v + j->bias[r] : v;
            continue;
        }
        cpu_kernels_dequant_row(w, j->row_offset + r, row);
        for (int t = 0; t < j->n; t++) {
            int xr = j->x_rows ? j->x_rows[t] : t;
            int orow = j->out_rows ? j->out_rows[t] : t;
            float v = cpu_kernels_dot(row, j->x + (int64_t)xr * w->cols, w->cols);
            j->out[(int64_t)orow * j->rows + r] = j->bias ? v + j->bias[r] : v;
        }
    }
}

void cpu_matmul(mx_backend *be, float *out, const float *x, const mx_matrix *w, const float *bias, int n) {
    cpu_ctx *c = cpu_of(be);
    matmul_job j = {.out = out, .x = x, .w = w, .bias = bias, .n = n, .c = c, .rows = w->rows};
    int tasks = (int)((w->rows + ROWS_PER_TASK - 1) / ROWS_PER_TASK);
    mx_pool_run(c->pool, tasks, matmul_task, &j);
}

typedef struct embed_job {
    float *out;
    const mx_matrix *w;
    const int32_t *ids;
} embed_job;

static void embed_task(void *arg, int task, int thread) {
    (void)thread;
    embed_job *j = arg;
    cpu_kernels_dequant_row(j->w, j->ids[task], j->out + (int64_t)task * j->w->cols);
}

void cpu_embed(mx_backend *be, float *out, const mx_matrix *w, const int32_t *ids, int n) {
    embed_job j = {out, w, ids};
    for (int i = 0; i < n; i++) MX_ASSERT(ids[i] >= 0 && ids[i] < w->rows);
    mx_pool_run(cpu_of(be)->pool, n, embed_task, &j);
}

// MoE: group the m output rows by expert, then run one matmul per used expert over its rows.
void cpu_moe_matmul(mx_backend *be, float *out, const float *x, const mx_matrix *w, const int32_t *ids, int m,
                    int x_div) {
    cpu_ctx *c = cpu_of(be);
    if (c->moe_cap < (size_t)m) {
        free(c->moe_rows);
        c->moe_rows = malloc(2 * (size_t)m * sizeof *c->moe_rows);
        MX_ASSERT(c->moe_rows);
        c->moe_cap = (size_t)m;
    }
    int32_t *x_rows = c->moe_rows, *out_rows = c->moe_rows + m;
    for (int64_t e = 0; e < w->n_experts; e++) {
        int cnt = 0;
        for (int r = 0; r < m; r++) {
            if (ids[r] != e) continue;
            x_rows[cnt] = r / x_div;
            out_rows[cnt] = r;
            cnt++;
        }
        if (!cnt) continue;
        matmul_job j = {.out = out, .x = x, .w = w, .n = cnt, .row_offset = e * w->rows,
                        .x_rows = x_rows, .out_rows = out_rows, .c = c, .rows = w->rows};
        int tasks = (int)((w->rows + ROWS_PER_TASK - 1) / ROWS_PER_TASK);
        mx_pool_run(c->pool, tasks, matmul_task, &j);
    }
}
