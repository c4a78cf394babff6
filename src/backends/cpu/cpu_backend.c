// SPDX-License-Identifier: MIT
// CPU backend object: memory (aligned host allocations; the large ones, the KV cache above all, on
// transparent huge pages where the kernel offers them), matrix "upload" (weights copied onto huge
// pages by the weight arena; where it is off they stay in the mapped file when their alignment
// allows, else one aligned copy), and the plan runner: the reference for
// every other backend, it runs the records one by one, except runs of batch-1 matmuls of one x
// (cpu_matmul_group). The one allocation a record may make (the activation scratch growing for a
// bigger batch, cpu_act_buf) can fail: the record then skips its work and the runner ends the plan
// with an out-of-memory error naming the record, so the step fails and the process goes on.
#include "backends/cpu/cpu_backend.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "backends/cpu/cpu_internal.h"
#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/cpu_profile.h"
#include "backends/cpu/cpu_weight_arena.h"
#include "backends/plan.h"
#include "core/clock.h"

// Allocations of at least this many bytes go on 2 MB-aligned memory advised as huge pages. Decode
// reads the whole paged KV cache every token, 4 KB block by 4 KB block in table order; on 4 KB
// pages each block is a TLB miss (a two-level walk under virtualization). The rounding wastes
// under 2 MB per such allocation.
#define HUGE_ALLOC_MIN ((size_t)8 << 20)
#define HUGE_PAGE ((size_t)2 << 20)

static void *cpu_alloc(mx_backend *be, size_t bytes, mx_error *err) {
    (void)be;
    size_t rounded = (bytes + 63) & ~(size_t)63;
    bool huge = rounded >= HUGE_ALLOC_MIN;
    if (huge) rounded = (rounded + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
    void *p = aligned_alloc(huge ? HUGE_PAGE : 64, rounded ? rounded : 64);
    if (!p) {
        mx_fail(err, "out of memory allocating %zu bytes", bytes);
        return NULL;
    }
#ifdef MADV_HUGEPAGE
    if (huge) madvise(p, rounded, MADV_HUGEPAGE);  // advisory: ignored where transparent huge pages are off
#endif
    memset(p, 0, rounded ? rounded : 64);
    return p;
}

static void cpu_release(mx_backend *be, void *ptr) {
    (void)be;
    free(ptr);
}

static int cpu_copy(mx_backend *be, void *dst, const void *src, size_t bytes, mx_error *err) {
    (void)be;
    (void)err;
    if (bytes) memmove(dst, src, bytes);
    return 0;
}

static int cpu_copy_runs(mx_backend *be, void *dst, const void *src, size_t bytes, size_t count, size_t stride,
                         mx_error *err) {
    (void)be;
    (void)err;
    for (size_t i = 0; i < count; i++) memcpy((char *)dst + i * stride, (const char *)src + i * stride, bytes);
    return 0;
}

// On failure every thread's scratch is gone (scratch_floats 0), so the next call allocates all of them
// again rather than leaving some threads a NULL buffer counted as large enough.
int cpu_reserve_scratch(cpu_ctx *c, size_t n) {
    if (n <= c->scratch_floats) return 0;
    c->scratch_floats = 0;
    for (int t = 0; t < c->n_threads; t++) {
        free(c->scratch[t]);
        c->scratch[t] = aligned_alloc(64, ((n * sizeof(float)) + 63) & ~(size_t)63);
    }
    for (int t = 0; t < c->n_threads; t++) {
        if (!c->scratch[t]) {
            for (int u = 0; u < c->n_threads; u++) {
                free(c->scratch[u]);
                c->scratch[u] = NULL;
            }
            return -1;
        }
    }
    c->scratch_floats = n;
    return 0;
}

void *cpu_act_buf(cpu_ctx *c, size_t bytes) {
    if (bytes <= c->act_cap) return c->act_buf;
    free(c->act_buf);
    c->act_cap = 0;
    c->act_buf = bytes <= SIZE_MAX - 4095 ? aligned_alloc(64, (bytes + 4095) & ~(size_t)4095) : NULL;
    if (!c->act_buf) {
        c->act_failed = bytes;
        return NULL;
    }
    c->act_cap = (bytes + 4095) & ~(size_t)4095;
    return c->act_buf;
}

// A copy onto huge pages, split over the pool in pieces of 2 MB: the first write to each huge page
// faults it in and clears it, which is most of the copy's time (and slow under a hypervisor that
// takes freed memory back: ~0.2-0.7 GB/s per thread measured here), so the threads fault in parallel.
typedef struct {
    uint8_t *dst;
    const uint8_t *src;
    size_t bytes;
} copy_job;

#define COPY_PIECE ((size_t)2 << 20)

static void copy_task(void *arg, int task, int thread) {
    (void)thread;
    const copy_job *j = arg;
    size_t at = (size_t)task * COPY_PIECE, n = j->bytes - at < COPY_PIECE ? j->bytes - at : COPY_PIECE;
    memcpy(j->dst + at, j->src + at, n);
}

// A copy on huge pages when the weight arena has room; else the mapped pointer when it is aligned
// for its element type, or an aligned copy (*copied, for remember_copy).
static const void *cpu_place(cpu_ctx *c, const void *src, size_t bytes, size_t align, bool *copied, mx_error *err) {
    *copied = false;
    uint8_t *huge = src ? cpu_weight_arena_alloc(c->weights, bytes) : NULL;
    if (huge) {
        copy_job j = {.dst = huge, .src = src, .bytes = bytes};
        mx_pool_run(c->pool, (int)((bytes + COPY_PIECE - 1) / COPY_PIECE), copy_task, &j);
        return huge;
    }
    if (!src || ((uintptr_t)src % align) == 0) return src;
    void *p = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    if (!p) {
        mx_fail(err, "out of memory copying a weight of %zu bytes", bytes);
        return NULL;
    }
    memcpy(p, src, bytes);
    *copied = true;
    return p;
}

// Copies made by cpu_place are recorded in the context so release_matrix frees exactly those.
static int remember_copy(cpu_ctx *c, const void *p, bool copied) {
    if (!copied) return 0;
    if (c->n_owned == c->cap_owned) {
        size_t cap = c->cap_owned ? 2 * c->cap_owned : 64;
        const void **grown = realloc(c->owned, cap * sizeof *grown);
        if (!grown) return -1;
        c->owned = grown;
        c->cap_owned = cap;
    }
    c->owned[c->n_owned++] = p;
    return 0;
}

static void forget_copy(cpu_ctx *c, const void *p) {
    if (cpu_weight_arena_release(c->weights, p)) return;
    for (size_t i = 0; p && i < c->n_owned; i++) {
        if (c->owned[i] == p) {
            free((void *)p);
            c->owned[i] = c->owned[--c->n_owned];
            return;
        }
    }
}

static int cpu_upload_matrix(mx_backend *be, const mx_matrix *host, mx_matrix *out, mx_error *err) {
    cpu_ctx *c = cpu_of(be);
    *out = *host;
    out->data = out->scales = out->biases = NULL;
    bool cd = false, cs = false, cb = false;
    size_t elem = host->q.mode == MX_QUANT_NONE ? mx_dtype_size(host->dtype) : 4;
    size_t sbytes = (size_t)mx_matrix_scale_bytes(host);
    size_t salign = host->scales ? mx_dtype_size(host->scale_dtype) : 1;
    out->data = cpu_place(c, host->data, (size_t)mx_matrix_data_bytes(host), elem, &cd, err);
    if (remember_copy(c, out->data, cd)) return mx_fail(err, "out of memory");
    if (host->data && !out->data) return -1;
    out->scales = cpu_place(c, host->scales, sbytes, salign, &cs, err);
    if (remember_copy(c, out->scales, cs)) return mx_fail(err, "out of memory");
    if (host->scales && !out->scales) return -1;
    out->biases = cpu_place(c, host->biases, sbytes, salign, &cb, err);
    if (remember_copy(c, out->biases, cb)) return mx_fail(err, "out of memory");
    if (host->biases && !out->biases) return -1;
    size_t need = CPU_KERNELS_SCRATCH(host->cols), tiles = (cpu_kernels_gemm_q_scratch_bytes(host) + 3) / 4;
    if (cpu_reserve_scratch(c, need > tiles ? need : tiles) != 0) return mx_fail(err, "out of memory for scratch");
    return 0;
}

static void cpu_release_matrix(mx_backend *be, mx_matrix *m) {
    cpu_ctx *c = cpu_of(be);
    forget_copy(c, m->data);
    forget_copy(c, m->scales);
    forget_copy(c, m->biases);
    m->data = m->scales = m->biases = NULL;
}

// The CPU backend implements every format through the reference path at least.
static bool cpu_supports(mx_backend *be, mx_op_kind kind, const mx_matrix *w) {
    (void)be;
    (void)kind;
    (void)w;
    return true;
}

static int cpu_sync(mx_backend *be, mx_error *err) {
    (void)be;
    (void)err;
    return 0;
}

static void cpu_destroy(mx_backend *be) {
    if (!be) return;
    cpu_ctx *c = cpu_of(be);
    if (c) {
        mx_pool_free(c->pool);
        for (int t = 0; c->scratch && t < c->n_threads; t++) free(c->scratch[t]);
        free(c->scratch);
        for (size_t i = 0; i < c->n_owned; i++) free((void *)c->owned[i]);
        free(c->owned);
        cpu_weight_arena_free(c->weights);
        free(c->moe_rows);
        free(c->act_buf);
        cpu_profile_free(c->profile);
        cpu_rope_cache_free(c->rope_cache);
        free(c);
    }
    free(be);
}

static void cpu_run_op(mx_backend *be, const mx_op *op) {
    switch (op->kind) {
    case MX_OP_EMBED: cpu_embed(be, op->embed.out, op->embed.w, op->embed.ids, op->embed.n); break;
    case MX_OP_MATMUL:
        cpu_matmul(be, op->matmul.out, op->matmul.x, op->matmul.w, op->matmul.bias, op->matmul.n);
        break;
    case MX_OP_RMSNORM:
        cpu_rmsnorm(be, op->rmsnorm.out, op->rmsnorm.x, op->rmsnorm.w, op->rmsnorm.n, op->rmsnorm.dim, op->rmsnorm.eps);
        break;
    case MX_OP_ROPE: cpu_rope(be, op->rope.x, op->rope.pos, op->rope.n, op->rope.n_heads, &op->rope.rope); break;
    case MX_OP_KV_STORE: {
        cpu_kv_store(be, &op->kv_store.kv, op->kv_store.k, op->kv_store.v, op->kv_store.n);
        break;
    }
    case MX_OP_ATTENTION: {
        cpu_attention(be, op->attention.out, op->attention.q, &op->attention.kv, op->attention.n, op->attention.n_heads,
                      op->attention.scale, op->attention.window, op->attention.sinks);
        break;
    }
    case MX_OP_SWIGLU: cpu_swiglu(be, op->swiglu.out, op->swiglu.gate, op->swiglu.up, op->swiglu.count); break;
    case MX_OP_ADD: cpu_add(be, op->add.x, op->add.y, op->add.count); break;
    case MX_OP_MOE_ROUTE:
        cpu_moe_route(be, op->moe_route.ids, op->moe_route.weights, op->moe_route.logits, op->moe_route.n,
                      op->moe_route.n_experts, op->moe_route.k, op->moe_route.norm_topk);
        break;
    case MX_OP_MOE_MATMUL:
        cpu_moe_matmul(be, op->moe_matmul.out, op->moe_matmul.x, op->moe_matmul.w, op->moe_matmul.ids,
                       op->moe_matmul.m, op->moe_matmul.x_div);
        break;
    case MX_OP_MOE_COMBINE:
        cpu_moe_combine(be, op->moe_combine.out, op->moe_combine.y, op->moe_combine.weights, op->moe_combine.n,
                        op->moe_combine.k, op->moe_combine.dim);
        break;
    case MX_OP_GATHER_ROWS:
        cpu_gather_rows(be, op->gather_rows.out, op->gather_rows.x, op->gather_rows.rows, op->gather_rows.n,
                        op->gather_rows.dim);
        break;
    case MX_OP_ARGMAX: cpu_argmax(be, op->argmax.ids, op->argmax.logits, op->argmax.n, op->argmax.vocab); break;
    case MX_OP_SAMPLE:
        cpu_sample(be, op->sample.out, op->sample.logits, op->sample.n, op->sample.vocab, op->sample.rows,
                   op->sample.mods);
        break;
    case MX_OP_GEGLU: cpu_geglu(be, op->geglu.out, op->geglu.gate, op->geglu.up, op->geglu.count); break;
    case MX_OP_SCALE: cpu_scale(be, op->scale.x, op->scale.count, op->scale.scale); break;
    case MX_OP_LATENT_STORE:
        cpu_latent_store(be, &op->latent_store.kv, op->latent_store.c_kv, op->latent_store.k_pe, op->latent_store.n,
                         op->latent_store.kv_lora, op->latent_store.rope);
        break;
    case MX_OP_LATENT_ATTENTION:
        cpu_latent_attention(be, op->latent_attention.out, op->latent_attention.q_lat, op->latent_attention.q_pe,
                             &op->latent_attention.kv, op->latent_attention.n, op->latent_attention.n_heads,
                             op->latent_attention.kv_lora, op->latent_attention.rope, op->latent_attention.scale);
        break;
    case MX_OP_MOE_ROUTE_GROUPED:
        cpu_moe_route_grouped(be, op->moe_route_grouped.ids, op->moe_route_grouped.weights,
                              op->moe_route_grouped.logits, op->moe_route_grouped.bias, op->moe_route_grouped.n,
                              op->moe_route_grouped.n_experts, op->moe_route_grouped.k, op->moe_route_grouped.n_group,
                              op->moe_route_grouped.topk_group, op->moe_route_grouped.norm_topk,
                              op->moe_route_grouped.scaling);
        break;
    case MX_OP_SWIGLU_CLAMPED:
        cpu_swiglu_clamped(be, op->swiglu_clamped.out, op->swiglu_clamped.gate, op->swiglu_clamped.up,
                           op->swiglu_clamped.count, op->swiglu_clamped.limit, op->swiglu_clamped.alpha);
        break;
    case MX_OP_EXPERT_BIAS:
        cpu_expert_bias(be, op->expert_bias.x, op->expert_bias.bias, op->expert_bias.ids, op->expert_bias.m,
                        op->expert_bias.dim);
        break;
    case MX_OP_KIND_COUNT: MX_ASSERT(!"not an op kind"); break;
    }
}

static int cpu_run_plan(mx_backend *be, const mx_plan *plan, mx_error *err) {
    be->plan_runs.direct++;
    for (int i = 0; i < plan->n_ops; i++) {
        if ((unsigned)plan->ops[i].kind >= MX_OP_KIND_COUNT)
            return mx_fail(err, "the cpu backend has no op of kind %d (record %d)", (int)plan->ops[i].kind, i);
        cpu_ctx *c = cpu_of(be);
        double t0 = c->profile ? mx_now() : 0, cpu0 = c->profile ? mx_process_cpu_now() : 0;
        int ran = 1;
        if (plan->ops[i].kind == MX_OP_MATMUL)
            ran = cpu_matmul_group(be, &plan->ops[i], plan->n_ops - i);
        else
            cpu_run_op(be, &plan->ops[i]);
        if (c->profile)
            cpu_profile_add(c->profile, &plan->ops[i], ran, mx_now() - t0, mx_process_cpu_now() - cpu0);
        if (c->act_failed) {
            size_t bytes = c->act_failed;
            c->act_failed = 0;
            return mx_fail(err, "out of memory: the cpu backend could not allocate %zu bytes of activation scratch "
                                "for record %d (%s)", bytes, i, mx_op_kind_name(plan->ops[i].kind));
        }
        i += ran - 1;
    }
    return 0;
}

int cpu_meminfo(const char *const *keys, unsigned long long *values, int n) {
    for (int i = 0; i < n; i++) values[i] = 0;
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return -1;
    char line[256];
    while (fgets(line, sizeof line, f)) {
        const char *colon = strchr(line, ':');
        for (int i = 0; colon && i < n; i++)
            if ((size_t)(colon - line) == strlen(keys[i]) && memcmp(line, keys[i], strlen(keys[i])) == 0)
                values[i] = strtoull(colon + 1, NULL, 10);
    }
    fclose(f);
    return 0;
}

// The number a one-line file starts with (a cgroup's memory.max or memory.current); false when it
// cannot be read or holds none ("max": no limit).
static bool read_number(const char *path, unsigned long long *v) {
    FILE *f = fopen(path, "r");
    if (!f) return false;
    bool ok = fscanf(f, "%llu", v) == 1;
    fclose(f);
    return ok;
}

int cpu_host_memory(size_t *free_bytes, size_t *total_bytes) {
    static const char *const keys[] = {"MemAvailable", "MemTotal"};
    unsigned long long kb[2], limit, used;
    if (cpu_meminfo(keys, kb, 2) != 0 || !kb[1]) return -1;
    unsigned long long avail = kb[0] * 1024, total = kb[1] * 1024;
    if (!avail) avail = total;
    if (read_number("/sys/fs/cgroup/memory.max", &limit) && limit < total) {
        total = limit;
        if (!read_number("/sys/fs/cgroup/memory.current", &used)) used = 0;
        unsigned long long left = used < limit ? limit - used : 0;
        if (left < avail) avail = left;
    }
    *free_bytes = (size_t)avail;
    *total_bytes = (size_t)total;
    return 0;
}

static int cpu_mem_info(mx_backend *be, size_t *free_bytes, size_t *total_bytes) {
    (void)be;
    return cpu_host_memory(free_bytes, total_bytes);
}

static const mx_backend_ops cpu_ops = {
    .name = "cpu",
    .destroy = cpu_destroy,
    .alloc = cpu_alloc,
    .release = cpu_release,
    .upload = cpu_copy,
    .download = cpu_copy,
    .copy_runs = cpu_copy_runs,
    .upload_matrix = cpu_upload_matrix,
    .release_matrix = cpu_release_matrix,
    .supports = cpu_supports,
    .sync = cpu_sync,
    .run_plan = cpu_run_plan,
    .plan_release = NULL,
    .mem_info = cpu_mem_info,
    .weights_mapped = true,
};

mx_backend *mx_cpu_backend_create(int threads, mx_error *err) {
    mx_backend *be = calloc(1, sizeof *be);
    cpu_ctx *c = calloc(1, sizeof *c);
    if (!be || !c) {
        free(be);
        free(c);
        mx_fail(err, "out of memory");
        return NULL;
    }
    be->ops = &cpu_ops;
    be->ctx = c;
    c->pool = mx_pool_create(threads);
    c->n_threads = c->pool ? mx_pool_threads(c->pool) : 0;
    c->scratch = c->pool ? calloc(c->n_threads, sizeof *c->scratch) : NULL;
    c->moe_rows = malloc(2 * CPU_MOE_ROWS * sizeof *c->moe_rows);
    if (!c->scratch || !c->moe_rows) {
        cpu_destroy(be);
        mx_fail(err, "out of memory");
        return NULL;
    }
    // KV cache: int16 with a scale per 16 elements (44% fewer bytes for decode to read per position
    // than float32; logits within 4e-4 of the parity fixtures), or float32 with MLXCEL_CPU_KV=f32, or
    // float16 with MLXCEL_CPU_KV=f16 (the GPU's cache element: its rounding measured on the CPU), or
    // int8 with a scale per 16 elements with MLXCEL_CPU_KV=i8 (as --kv-bits 8 does: 1.25 bytes per
    // element instead of 2.25, outside the fixtures' 1e-3, see test_model_parity), or 4-bit codes
    // with a scale per 32 elements with MLXCEL_CPU_KV=i4 (as --kv-bits 4 does: 0.625 bytes per element).
    const char *kvt = getenv("MLXCEL_CPU_KV");
    if (kvt && strcmp(kvt, "f32") != 0 && strcmp(kvt, "f16") != 0 && strcmp(kvt, "i16") != 0 && strcmp(kvt, "i8") != 0 &&
        strcmp(kvt, "i4") != 0) {
        cpu_destroy(be);
        mx_fail(err, "MLXCEL_CPU_KV='%s': the CPU KV cache type must be i16 (the default), i8, i4, f32 or f16", kvt);
        return NULL;
    }
    const char *attn_i8 = getenv("MLXCEL_CPU_ATTN_I8");
    if (!cpu_kernels_attn_i8_valid(attn_i8)) {
        cpu_destroy(be);
        mx_fail(err, "MLXCEL_CPU_ATTN_I8='%s': must be int, pv, int,pv or float (unset: int,pv on the avx512vnni kernels, int on the avx2 kernels' 4-bit cache, else float)", attn_i8);
        return NULL;
    }
    if (cpu_kernels_env_check(err) != 0 || !(c->weights = cpu_weight_arena_create(err))) {
        cpu_destroy(be);
        return NULL;
    }
    be->kv_dtype = !kvt || !strcmp(kvt, "i16") ? MX_DTYPE_I16
                   : !strcmp(kvt, "i8")        ? MX_DTYPE_I8
                   : !strcmp(kvt, "i4")        ? MX_DTYPE_I4
                   : !strcmp(kvt, "f32")       ? MX_DTYPE_F32
                                               : MX_DTYPE_F16;
    snprintf(be->device_name, sizeof be->device_name, "CPU (%d threads)", c->n_threads);
    c->profile = cpu_profile_create();
    if (cpu_reserve_scratch(c, 1 << 16) != 0) {
        cpu_destroy(be);
        mx_fail(err, "out of memory");
        return NULL;
    }
    return be;
}

int mx_cpu_backend_set_kv_bits(mx_backend *be, int bits, mx_error *err) {
    if (bits != 4 && bits != 8 && bits != 16)
        return mx_fail(err, "--kv-bits %d: the cpu backend's KV cache holds 4-bit, 8-bit or 16-bit codes (4, 8 or 16)",
                       bits);
    be->kv_dtype = bits == 4 ? MX_DTYPE_I4 : bits == 8 ? MX_DTYPE_I8 : MX_DTYPE_I16;
    return 0;
}
