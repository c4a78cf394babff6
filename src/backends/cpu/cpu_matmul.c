// SPDX-License-Identifier: MIT
// CPU matrix products: Linear layers (any format in quant.h), embedding lookup and the per-expert
// products of MoE layers. At batch 1 each block of rows is decoded and dotted in registers
// (cpu_kernels_gemv); batches are split into (row block x token block) tiles where 4 decoded weight
// rows at a time are multiplied with the token block (cpu_kernels_gemm), so the weights are read
// once per token block and the activations stay in cache; where the kernel set has integer tile
// kernels (AMX), batches of affine 4/8-bit weights go through them instead. MoE rows keep the simple
// decode-row-then-dot loop. Where c->bit_equal (the int8 KV cache's integer attention), the dense
// products take the kernel set's bit-equal integer pair (cpu_kernels.h), so a row of x gives the
// same bits through a decode step's gemv and a prompt's batched product. Kernels come from cpu_kernels.h, which picks SIMD versions at run time.
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_internal.h"
#include "backends/cpu/cpu_kernels.h"

#define ROWS_PER_TASK 16
// Batch-1 products: a task is a run of consecutive rows, one contiguous stream of weights. Tasks of
// 16 rows (9 KB at 1024 columns) cut each thread's stream every few KB (the hardware prefetcher
// starts over, and the kernel's prefetch, 4 KB ahead then, read the next task, which the other thread
// usually takes): two threads read 12.8 GB/s where tasks of ~128 KB read 16.6 (RESULTS, step 5.2).
// Small matrices keep at least GEMV_TASKS_PER_THREAD tasks per thread, so a descheduled thread
// leaves the others work to take.
#define GEMV_TASK_BYTES (128 * 1024)
#define GEMV_TASKS_PER_THREAD 4

static int gemv_task_rows(const mx_matrix *w, int threads) {
    int64_t row_bytes = mx_matrix_data_bytes(w) / (w->rows * w->n_experts);
    int64_t r = GEMV_TASK_BYTES / (row_bytes > 0 ? row_bytes : 1);
    int64_t per = (int64_t)threads * GEMV_TASKS_PER_THREAD, cap = (w->rows + per - 1) / per;
    r = (r < cap ? r : cap + 3) & ~(int64_t)3;
    return r < ROWS_PER_TASK ? ROWS_PER_TASK : (int)r;
}
#define MOE_Q_MAX_ROWS 4  // MoE experts with at most this many rows use the integer gemv
// Dense products: a task is a block of GEMM_ROW_BLOCK output rows times a block of tokens small
// enough that the block of x stays in L2 while each 4-row tile of decoded weights sweeps over it.
#define GEMM_ROW_BLOCK 32
#define GEMM_X_FLOATS (96 * 1024)  // target floats of x per token block (384 KB)
// Integer batches: prepared x of one token chunk is read by every row block, so a chunk is kept to
// about this many bytes (it stays in L2 while the threads sweep the row blocks over it).
#define GEMM_Q_CHUNK_BYTES (1 << 20)

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
    int token_block;        // tokens per task (dense batches)
    int row_blocks;         // tasks per token block (dense batches)
    const void *qx;         // quantized x (integer gemv), or NULL
    size_t qx_stride;       // bytes per quantized row (MoE: one per gathered row)
    int chunk_tiles;        // integer batches: 16-token tiles per token chunk
    size_t tile_bytes;      // integer batches: bytes of prepared x per tile
    int task_rows;          // batch 1: rows per task (gemv_task_rows)
} matmul_job;

// MoE rows (gathered x and scattered out): decode each weight row once, dot it with every row.
static void matmul_task(void *arg, int task, int thread) {
    matmul_job *j = arg;
    const mx_matrix *w = j->w;
    float *row = j->c->scratch[thread];
    int64_t r0 = (int64_t)task * ROWS_PER_TASK;
    int64_t r1 = r0 + ROWS_PER_TASK < j->rows ? r0 + ROWS_PER_TASK : j->rows;
    for (int64_t r = r0; r < r1; r++) {
        cpu_kernels_dequant_row(w, j->row_offset + r, row);
        for (int t = 0; t < j->n; t++) {
            int xr = j->x_rows ? j->x_rows[t] : t;
            int orow = j->out_rows ? j->out_rows[t] : t;
            float v = cpu_kernels_dot(row, j->x + (int64_t)xr * w->cols, w->cols);
            j->out[(int64_t)orow * j->rows + r] = j->bias ? v + j->bias[r] : v;
        }
    }
}

// MoE rows, integer kernels: each gathered row (quantized by the caller) against the row block.
static void moe_q_task(void *arg, int task, int thread) {
    (void)thread;
    matmul_job *j = arg;
    float tmp[ROWS_PER_TASK];
    int64_t r0 = (int64_t)task * ROWS_PER_TASK;
    int64_t r1 = r0 + ROWS_PER_TASK < j->rows ? r0 + ROWS_PER_TASK : j->rows;
    for (int t = 0; t < j->n; t++) {
        cpu_kernels_gemv_q(j->w, j->row_offset + r0, j->row_offset + r1, (const uint8_t *)j->qx + t * j->qx_stride,
                           tmp, false);
        float *o = j->out + (int64_t)j->out_rows[t] * j->rows;
        for (int64_t r = r0; r < r1; r++) o[r] = tmp[r - r0];
    }
}

// Batch 1: fused decode-and-dot over a block of rows.
static void gemv_task(void *arg, int task, int thread) {
    matmul_job *j = arg;
    int64_t r0 = (int64_t)task * j->task_rows;
    int64_t r1 = r0 + j->task_rows < j->rows ? r0 + j->task_rows : j->rows;
    cpu_kernels_gemv(j->w, r0, r1, j->x, j->out + r0, j->c->scratch[thread]);
    if (j->bias)
        for (int64_t r = r0; r < r1; r++) j->out[r] += j->bias[r];
}

// Batch 1, integer kernels: x was quantized once by the caller.
static void gemv_q_task(void *arg, int task, int thread) {
    (void)thread;
    matmul_job *j = arg;
    int64_t r0 = (int64_t)task * j->task_rows;
    int64_t r1 = r0 + j->task_rows < j->rows ? r0 + j->task_rows : j->rows;
    cpu_kernels_gemv_q(j->w, r0, r1, j->qx, j->out + r0, j->c->bit_equal);
    if (j->bias)
        for (int64_t r = r0; r < r1; r++) j->out[r] += j->bias[r];
}

// Batches: (row block, token block) tiles, 4 rows at a time.
static void gemm_task(void *arg, int task, int thread) {
    matmul_job *j = arg;
    int64_t cols = j->w->cols;
    int tb = task / j->row_blocks, rb = task % j->row_blocks;
    int t0 = tb * j->token_block, nt = j->n - t0 < j->token_block ? j->n - t0 : j->token_block;
    int64_t r0 = (int64_t)rb * GEMM_ROW_BLOCK;
    int64_t r1 = r0 + GEMM_ROW_BLOCK < j->rows ? r0 + GEMM_ROW_BLOCK : j->rows;
    for (int64_t r = r0; r < r1; r += CPU_KERNELS_GEMM_ROWS) {
        int nr = r1 - r < CPU_KERNELS_GEMM_ROWS ? (int)(r1 - r) : CPU_KERNELS_GEMM_ROWS;
        cpu_kernels_gemm(j->w, r, nr, j->x + (int64_t)t0 * cols, nt, j->out + (int64_t)t0 * j->rows + r, j->rows,
                         j->c->scratch[thread]);
    }
    if (j->bias)
        for (int t = t0; t < t0 + nt; t++)
            for (int64_t r = r0; r < r1; r++) j->out[(int64_t)t * j->rows + r] += j->bias[r];
}

// Integer batches: prepares one 16-token tile of x.
static void quantize_tiles_task(void *arg, int task, int thread) {
    (void)thread;
    matmul_job *j = arg;
    cpu_kernels_quantize_x_tiles(j->w, j->x, j->n, task, (void *)j->qx);
}

// Integer batches: (token chunk, block of 16 rows); chunk-major, so all threads work on one chunk.
static void gemm_q_task(void *arg, int task, int thread) {
    matmul_job *j = arg;
    int chunk = task / j->row_blocks, rb = task % j->row_blocks;
    int t0 = chunk * j->chunk_tiles * 16, nt = j->n - t0 < j->chunk_tiles * 16 ? j->n - t0 : j->chunk_tiles * 16;
    int64_t r0 = (int64_t)rb * CPU_KERNELS_GEMM_Q_ROWS;
    int nr = j->rows - r0 < CPU_KERNELS_GEMM_Q_ROWS ? (int)(j->rows - r0) : CPU_KERNELS_GEMM_Q_ROWS;
    const uint8_t *qx = (const uint8_t *)j->qx + (size_t)(t0 / 16) * j->tile_bytes;
    cpu_kernels_gemm_q(j->w, r0, nr, qx, nt, j->out + (int64_t)t0 * j->rows, j->rows, j->c->scratch[thread],
                       j->c->bit_equal);
    if (j->bias)
        for (int t = t0; t < t0 + nt; t++)
            for (int64_t r = r0; r < r0 + nr; r++) j->out[(int64_t)t * j->rows + r] += j->bias[r];
}

// Batches through the integer tile kernels; returns false when the active set has none for w.
static bool matmul_q(cpu_ctx *c, matmul_job *j) {
    size_t bytes = cpu_kernels_qx_tiles_bytes(j->w, j->n, c->bit_equal);
    if (!bytes) return false;
    MX_ASSERT(cpu_kernels_gemm_q_scratch_bytes(j->w) <= c->scratch_floats * sizeof(float));
    int tiles = (j->n + 15) / 16;
    j->qx = cpu_act_buf(c, bytes);
    if (!j->qx) return true;  // out of memory: cpu_run_plan reports it
    j->tile_bytes = bytes / (size_t)tiles;
    j->chunk_tiles = (int)(GEMM_Q_CHUNK_BYTES / j->tile_bytes);
    j->chunk_tiles = j->chunk_tiles < 1 ? 1 : j->chunk_tiles;
    j->row_blocks = (int)((j->rows + CPU_KERNELS_GEMM_Q_ROWS - 1) / CPU_KERNELS_GEMM_Q_ROWS);
    mx_pool_run(c->pool, tiles, quantize_tiles_task, j);
    int chunks = (tiles + j->chunk_tiles - 1) / j->chunk_tiles;
    mx_pool_run(c->pool, chunks * j->row_blocks, gemm_q_task, j);
    return true;
}

// Whether out [n, rows] overlaps x [n, cols].
static bool overlaps_x(const float *out, const float *x, int64_t n, int64_t cols, int64_t rows) {
    return out < x + n * cols && x < out + n * rows;
}

// On the 4-bit and int8 caches the products must give a decode step's and a recomputed prompt's
// rows the same bits (cpu_kernels.h, eq): their codes are coarse enough that a last-bit difference
// of a K or V value moves one often enough that a preempted request's resumed text differed
// (server_engine_kv_i4: 2 runs in 5 before, 0 in 6 after; server_engine_kv_i8 with the avx2 set's
// float batched product: 1 in 1), and the int8 cache's integer attention also rounds the query and
// the P.V weights. Read per product: --kv-bits sets the cache type after the backend's start.
static void set_bit_equal(mx_backend *be) {
    cpu_of(be)->bit_equal = (be->kv_dtype == MX_DTYPE_I8 || be->kv_dtype == MX_DTYPE_I4) && cpu_kernels_has_bit_equal();
}

void cpu_matmul(mx_backend *be, float *out, const float *x, const mx_matrix *w, const float *bias, int n) {
    set_bit_equal(be);
    cpu_ctx *c = cpu_of(be);
    matmul_job j = {.out = out, .x = x, .w = w, .bias = bias, .n = n, .c = c, .rows = w->rows};
    if (n == 1) {
        j.task_rows = gemv_task_rows(w, c->n_threads);
        size_t qb = cpu_kernels_qx_row_bytes(w, c->bit_equal);
        if (qb) {
            void *qx = cpu_act_buf(c, qb);
            if (!qx) return;  // out of memory: cpu_run_plan reports it
            cpu_kernels_quantize_x(w, x, 1, qx, c->bit_equal);
            j.qx = qx;
            mx_pool_run(c->pool, (int)((w->rows + j.task_rows - 1) / j.task_rows), gemv_q_task, &j);
            return;
        }
        mx_pool_run(c->pool, (int)((w->rows + j.task_rows - 1) / j.task_rows), gemv_task, &j);
        return;
    }
    if (matmul_q(c, &j)) return;
    // The float tiles read x while other tiles write out: a product in place (out overlapping x)
    // reads a copy (the integer tiles read their prepared x, so they need none).
    if (overlaps_x(out, x, n, w->cols, w->rows)) {
        float *copy = cpu_act_buf(c, sizeof(float) * (size_t)n * (size_t)w->cols);
        if (!copy) return;  // out of memory: cpu_run_plan reports it
        memcpy(copy, x, sizeof(float) * (size_t)n * (size_t)w->cols);
        j.x = copy;
    }
    int tb = (int)(GEMM_X_FLOATS / (w->cols > 0 ? w->cols : 1)) / 6 * 6;
    j.token_block = tb < 6 ? 6 : tb;
    j.row_blocks = (int)((w->rows + GEMM_ROW_BLOCK - 1) / GEMM_ROW_BLOCK);
    int token_blocks = (n + j.token_block - 1) / j.token_block;
    mx_pool_run(c->pool, token_blocks * j.row_blocks, gemm_task, &j);
}

// Products of one x, run as one pool job: the q, k and v projections (and gate and up) read the
// same normalized rows, so x is quantized once and the threads take the row blocks of all the
// matrices from one task list, with one hand-off instead of one per matrix. Batch 1: the gemv tasks
// of every matrix in turn. Batches on the integer tile kernels: the prepared tiles are shared, and
// the tasks go chunk by chunk, each chunk's row blocks of every matrix in turn, so a chunk of x is
// read by all the matrices while it is in L2.
#define MATMUL_GROUP_MAX 4
typedef struct matmul_group_job {
    matmul_job jobs[MATMUL_GROUP_MAX];
    int first_task[MATMUL_GROUP_MAX + 1];  // tasks of jobs[k] (batches: per chunk): first_task[k] .. first_task[k + 1] - 1
    int n_jobs;
} matmul_group_job;

static void matmul_group_task(void *arg, int task, int thread) {
    matmul_group_job *g = arg;
    int k = 0;
    while (task >= g->first_task[k + 1]) k++;
    matmul_job *j = &g->jobs[k];
    (j->qx ? gemv_q_task : gemv_task)(j, task - g->first_task[k], thread);
}

// Batches: task = chunk * (tasks of one chunk) + the task's place among the chunk's row blocks.
static void matmul_group_q_task(void *arg, int task, int thread) {
    matmul_group_job *g = arg;
    int per_chunk = g->first_task[g->n_jobs], chunk = task / per_chunk, k = 0;
    task %= per_chunk;
    while (task >= g->first_task[k + 1]) k++;
    matmul_job *j = &g->jobs[k];
    gemm_q_task(j, chunk * j->row_blocks + task - g->first_task[k], thread);
}

// Whether a and b quantize x the same way (the integer path's prepared row depends on these only).
static bool same_x_format(const mx_matrix *a, const mx_matrix *b) {
    return a->cols == b->cols && a->q.mode == b->q.mode && a->q.bits == b->q.bits &&
           a->q.group_size == b->q.group_size;
}

// Whether the output of a product op overlaps its x ([n, cols]) (then a later record reading x
// must wait for it).
static bool writes_x(const mx_op *op, const float *x, int64_t cols) {
    return overlaps_x(op->matmul.out, x, op->matmul.n, cols, op->matmul.w->rows);
}

// Batches of a group (m matrices of one x format, on the integer tile kernels): x prepared once.
static void matmul_group_q(cpu_ctx *c, const mx_op *ops, int m) {
    const mx_matrix *w0 = ops[0].matmul.w;
    int n = ops[0].matmul.n, tiles = (n + 15) / 16;
    size_t bytes = cpu_kernels_qx_tiles_bytes(w0, n, c->bit_equal);
    void *qx = cpu_act_buf(c, bytes);
    if (!qx) return;  // out of memory: cpu_run_plan reports it
    size_t tile_bytes = bytes / (size_t)tiles;
    int chunk_tiles = (int)(GEMM_Q_CHUNK_BYTES / tile_bytes);
    chunk_tiles = chunk_tiles < 1 ? 1 : chunk_tiles;
    matmul_group_job g = {.n_jobs = m};
    for (int k = 0; k < m; k++) {
        const mx_op *op = &ops[k];
        MX_ASSERT(cpu_kernels_gemm_q_scratch_bytes(op->matmul.w) <= c->scratch_floats * sizeof(float));
        g.jobs[k] = (matmul_job){.out = op->matmul.out, .x = op->matmul.x, .w = op->matmul.w, .bias = op->matmul.bias,
                                 .n = n, .c = c, .rows = op->matmul.w->rows, .qx = qx, .tile_bytes = tile_bytes,
                                 .chunk_tiles = chunk_tiles};
        g.jobs[k].row_blocks = (int)((g.jobs[k].rows + CPU_KERNELS_GEMM_Q_ROWS - 1) / CPU_KERNELS_GEMM_Q_ROWS);
        g.first_task[k + 1] = g.first_task[k] + g.jobs[k].row_blocks;
    }
    mx_pool_run(c->pool, tiles, quantize_tiles_task, &g.jobs[0]);
    int chunks = (tiles + chunk_tiles - 1) / chunk_tiles;
    mx_pool_run(c->pool, chunks * g.first_task[m], matmul_group_q_task, &g);
}

int cpu_matmul_group(mx_backend *be, const mx_op *ops, int n_ops) {
    set_bit_equal(be);
    const mx_op *op0 = &ops[0];
    const mx_matrix *w0 = op0->matmul.w;
    const float *x = op0->matmul.x;
    int n = op0->matmul.n, m = 1;
    // Batches group only on the integer tile kernels (the float path has no prepared x to share).
    if ((n == 1 || cpu_kernels_qx_tiles_bytes(w0, n, cpu_of(be)->bit_equal)) && !writes_x(op0, x, w0->cols))
        while (m < n_ops && m < MATMUL_GROUP_MAX && ops[m].kind == MX_OP_MATMUL && ops[m].matmul.n == n &&
               ops[m].matmul.x == x && same_x_format(ops[m].matmul.w, w0) && !writes_x(&ops[m], x, w0->cols))
            m++;
    if (m == 1) {
        cpu_matmul(be, op0->matmul.out, op0->matmul.x, w0, op0->matmul.bias, op0->matmul.n);
        return 1;
    }
    cpu_ctx *c = cpu_of(be);
    if (n > 1) {
        matmul_group_q(c, ops, m);
        return m;
    }
    matmul_group_job g = {.n_jobs = m};
    size_t qb = cpu_kernels_qx_row_bytes(w0, c->bit_equal);
    void *qx = NULL;
    if (qb) {
        qx = cpu_act_buf(c, qb);
        if (!qx) return m;  // out of memory: cpu_run_plan reports it
        cpu_kernels_quantize_x(w0, op0->matmul.x, 1, qx, c->bit_equal);
    }
    for (int k = 0; k < m; k++) {
        const mx_op *op = &ops[k];
        g.jobs[k] = (matmul_job){.out = op->matmul.out, .x = op->matmul.x, .w = op->matmul.w,
                                 .bias = op->matmul.bias, .n = 1, .c = c, .rows = op->matmul.w->rows, .qx = qx};
        g.jobs[k].task_rows = gemv_task_rows(op->matmul.w, c->n_threads);
        g.first_task[k + 1] = g.first_task[k] + (int)((op->matmul.w->rows + g.jobs[k].task_rows - 1) / g.jobs[k].task_rows);
    }
    mx_pool_run(c->pool, g.first_task[m], matmul_group_task, &g);
    return m;
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

// Rows r0..r1-1 of cpu_moe_matmul.
static void moe_matmul_rows(cpu_ctx *c, float *out, const float *x, const mx_matrix *w, const int32_t *ids, int r0,
                            int r1, int x_div) {
    int32_t *x_rows = c->moe_rows, *out_rows = c->moe_rows + CPU_MOE_ROWS;
    int m = r1 - r0;
    // Few rows per expert (decode): integer gemv per gathered row; more rows: decode each weight
    // row once and dot it with all of them.
    size_t qb = cpu_kernels_qx_row_bytes(w, false);
    uint8_t *qx = qb ? cpu_act_buf(c, qb * (size_t)(m < MOE_Q_MAX_ROWS ? m : MOE_Q_MAX_ROWS)) : NULL;
    if (qb && !qx) return;  // out of memory: cpu_run_plan reports it
    for (int64_t e = 0; e < w->n_experts; e++) {
        int cnt = 0;
        for (int r = r0; r < r1; r++) {
            if (ids[r] != e) continue;
            x_rows[cnt] = r / x_div;
            out_rows[cnt] = r;
            cnt++;
        }
        if (!cnt) continue;
        matmul_job j = {.out = out, .x = x, .w = w, .n = cnt, .row_offset = e * w->rows,
                        .x_rows = x_rows, .out_rows = out_rows, .c = c, .rows = w->rows};
        int tasks = (int)((w->rows + ROWS_PER_TASK - 1) / ROWS_PER_TASK);
        if (qx && cnt <= MOE_Q_MAX_ROWS) {
            for (int t = 0; t < cnt; t++) cpu_kernels_quantize_x(w, x + (int64_t)x_rows[t] * w->cols, 1, qx + t * qb, false);
            j.qx = qx;
            j.qx_stride = qb;
            mx_pool_run(c->pool, tasks, moe_q_task, &j);
            continue;
        }
        mx_pool_run(c->pool, tasks, matmul_task, &j);
    }
}

// MoE: group the m output rows by expert, then run one matmul per used expert over its rows. The
// grouping lists hold CPU_MOE_ROWS rows (allocated with the backend, so a step allocates nothing);
// larger batches go in chunks of that many rows.
void cpu_moe_matmul(mx_backend *be, float *out, const float *x, const mx_matrix *w, const int32_t *ids, int m,
                    int x_div) {
    cpu_ctx *c = cpu_of(be);
    for (int r0 = 0; r0 < m && !c->act_failed; r0 += CPU_MOE_ROWS)
        moe_matmul_rows(c, out, x, w, ids, r0, m - r0 < CPU_MOE_ROWS ? m : r0 + CPU_MOE_ROWS, x_div);
}
