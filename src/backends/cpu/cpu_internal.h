// SPDX-License-Identifier: MIT
// State shared by the CPU backend's files: the thread pool and per-thread scratch. Private to
// src/backends/cpu/.
#ifndef MX_BACKENDS_CPU_INTERNAL_H
#define MX_BACKENDS_CPU_INTERNAL_H

#include "backends/backend.h"
#include "core/thread_pool.h"

typedef struct cpu_ctx {
    mx_pool *pool;
    int n_threads;
    float **scratch;        // per thread, scratch_floats each
    size_t scratch_floats;
    struct cpu_weight_arena *weights;  // weights on huge pages (cpu_weight_arena.h)
    const void **owned;     // weight copies made for alignment, freed by release_matrix
    size_t n_owned, cap_owned;
    int32_t *moe_rows;      // MoE grouping lists: [2][CPU_MOE_ROWS] (input rows, output rows)
    void *act_buf;          // quantized activations of the current matmul (integer kernels), 64-byte aligned
    size_t act_cap;         // bytes; grown only when a bigger batch arrives
    size_t act_failed;      // bytes cpu_act_buf could not allocate during the current record; 0: none
    struct cpu_profile *profile;  // per-record timing (MLXCEL_CPU_PROFILE), or NULL
    struct cpu_rope_cache *rope_cache;  // cos/sin of the current step's positions (cpu_rope.c), or NULL
    bool bit_equal;         // the current product through the bit-equal pair (cpu_matmul.c sets it per call)
} cpu_ctx;

// Rows of one MoE grouping pass (cpu_moe_matmul takes larger batches in passes of this many rows).
#define CPU_MOE_ROWS 8192

static inline cpu_ctx *cpu_of(mx_backend *be) { return (cpu_ctx *)be->ctx; }

// The numbers of the /proc/meminfo lines named keys[0..n-1] ("MemTotal": kB; "HugePages_Free": a
// count) into values[0..n-1], 0 for a line not there. Returns 0, or -1 when the file cannot be read.
int cpu_meminfo(const char *const *keys, unsigned long long *values, int n);
// Host memory free for new allocations and in total: MemAvailable and MemTotal, capped by the
// cgroup's limit (containers) when it has one. Returns 0, or -1 when /proc/meminfo cannot be read.
int cpu_host_memory(size_t *free_bytes, size_t *total_bytes);

// Ensures every thread has at least n floats of scratch (called at upload time, never per token).
int cpu_reserve_scratch(cpu_ctx *c, size_t n);
// Returns c->act_buf with at least `bytes` bytes (grows it, never shrinks). When growing fails it
// returns NULL and records the size in c->act_failed: the caller skips its work and returns, and
// cpu_run_plan ends the plan with an out-of-memory error.
void *cpu_act_buf(cpu_ctx *c, size_t bytes);

void cpu_embed(mx_backend *be, float *out, const mx_matrix *w, const int32_t *ids, int n);
void cpu_matmul(mx_backend *be, float *out, const float *x, const mx_matrix *w, const float *bias, int n);
// Runs ops[0] (an MX_OP_MATMUL) and, when it is a batch-1 product or a batch on the integer tile
// kernels, the records right after it that multiply the same x (same batch) by matrices of the same
// column format, with x prepared once and one pool job for their products; returns how many records
// it ran (>= 1).
int cpu_matmul_group(mx_backend *be, const mx_op *ops, int n_ops);
void cpu_moe_matmul(mx_backend *be, float *out, const float *x, const mx_matrix *w, const int32_t *ids, int m, int x_div);
void cpu_kv_store(mx_backend *be, const mx_kv_ref *r, const float *k, const float *v, int n);
void cpu_attention(mx_backend *be, float *out, const float *q, const mx_kv_ref *r, int n, int n_heads, float scale,
                   int window, const float *sinks);
// One row (head, pos) of K (which 0) or V (1) of slot `slot` in the layer of r (cpu_attention.c):
// its start, its I16/I8/I4 scales (mx_kv_row_scales(dt, head_dim) floats), and the conversion of a
// float row into the cache's element type dt (scales: NULL unless I16, I8 or I4).
uint8_t *cpu_kv_row(const mx_kv_ref *r, int slot, int pos, int which, int head, mx_dtype dt);
float *cpu_kv_row_scales(const mx_kv_ref *r, int slot, int pos, int which, int head, mx_dtype dt);
void cpu_kv_write_row(uint8_t *dst, float *scales, const float *src, int hd, mx_dtype dt);
void cpu_latent_store(mx_backend *be, const mx_kv_ref *kv, const float *c_kv, const float *k_pe, int n, int kv_lora,
                      int rope);
void cpu_latent_attention(mx_backend *be, float *out, const float *q_lat, const float *q_pe, const mx_kv_ref *kv, int n,
                          int n_heads, int kv_lora, int rope, float scale);
void cpu_moe_route_grouped(mx_backend *be, int32_t *ids, float *weights, const float *logits, const float *bias, int n,
                           int n_experts, int k, int n_group, int topk_group, bool norm_topk, float scaling);
void cpu_rmsnorm(mx_backend *be, float *out, const float *x, const float *w, int n, int dim, float eps);
void cpu_rope(mx_backend *be, float *x, const int32_t *pos, int n, int n_heads, const mx_rope *rope);
void cpu_rope_cache_free(struct cpu_rope_cache *c);  // NULL is a no-op
void cpu_swiglu(mx_backend *be, float *out, const float *gate, const float *up, int64_t count);
void cpu_geglu(mx_backend *be, float *out, const float *gate, const float *up, int64_t count);
void cpu_scale(mx_backend *be, float *x, int64_t count, float scale);
void cpu_add(mx_backend *be, float *x, const float *y, int64_t count);
void cpu_moe_route(mx_backend *be, int32_t *ids, float *weights, const float *logits, int n, int n_experts, int k, bool norm_topk);
void cpu_moe_combine(mx_backend *be, float *out, const float *y, const float *weights, int n, int k, int dim);
void cpu_gather_rows(mx_backend *be, float *out, const float *x, const int32_t *rows, int n, int dim);
void cpu_argmax(mx_backend *be, int32_t *ids, const float *logits, int n, int vocab);
// cpu_gpt_oss.c (backend.h: swiglu_clamped, expert_bias).
void cpu_swiglu_clamped(mx_backend *be, float *out, const float *gate, const float *up, int64_t count, float limit,
                        float alpha);
void cpu_expert_bias(mx_backend *be, float *x, const float *bias, const int32_t *ids, int m, int dim);
void cpu_sample(mx_backend *be, mx_sample_out *out, float *logits, int n, int vocab, const mx_sample_row *rows,
                const mx_logit_mod *mods);

#endif
