// SPDX-License-Identifier: MIT
// The GPU backend as the engine sees it (backend.h): device selection and the architecture check,
// memory, and one thin wrapper per op around the kernel launchers (kernels.h). C11; the vendor
// runtime is reached only through gpu_rt.h, so this file is the same for CUDA and ROCm.
//
// Start-up refuses, with a message saying what to do, when there is no GPU, when the device index
// is out of range, or when the device's architecture is not among those compiled in (the list
// cmake resolved, MXG_ARCH_LIST). On CUDA a device of a newer minor revision or one that can JIT the
// embedded PTX is accepted after a probe launch proves a kernel image loads.
//
// Owns: one stream, a split-attention workspace, and the device copies made by upload_matrix. The
// KV cache is f16 (kv_dtype), laid out as kernels.h says.
#include "backends/gpu/gpu_backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/gpu/gpu_rt.h"
#include "backends/gpu/kernels.h"
#include "backends/gpu/kernels_sample.h"
#include "backends/gpu_entry.h"
#include "mlxcel_gpu_config.h"

typedef struct gpu_graph {
    int key;
    void *exec;
} gpu_graph;

typedef struct gpu_ctx {
    int device;
    mxg_device_info info;
    mxg_launch launch;  // stream, warp width, workspace: what every kernel launch needs
    gpu_graph *graphs;  // recorded decode steps, by the engine's key
    int n_graphs, cap_graphs;
} gpu_ctx;

static gpu_ctx *ctx_of(mx_backend *be) { return (gpu_ctx *)be->ctx; }
static const mxg_launch *L_of(mx_backend *be) { return &ctx_of(be)->launch; }

// ---- architecture list (MXG_ARCH_LIST, comma separated) ----------------------------------------

// The numeric part of a CUDA entry ("90a-real" -> 90) and whether it embeds PTX.
static int cuda_entry(const char *e, size_t len, bool *ptx) {
    int v = 0;
    size_t i = 0;
    while (i < len && e[i] >= '0' && e[i] <= '9') v = v * 10 + (e[i++] - '0');
    *ptx = !(len >= 5 && strncmp(e + len - 5, "-real", 5) == 0);
    return v;
}

// 1: the list names the architecture exactly; 0: it does not.
static int arch_listed(const char *arch) {
    const char *p = MXG_ARCH_LIST;
    size_t alen = strlen(arch);
    while (*p) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (strcmp(MXG_RUNTIME_NAME, "cuda") == 0) {
            bool ptx;
            if (cuda_entry(p, len, &ptx) == atoi(arch)) return 1;
        } else {
            size_t n = 0;
            while (n < len && p[n] != ':') n++;
            if (n == alen && strncmp(p, arch, n) == 0) return 1;
        }
        p += len + (e ? 1 : 0);
    }
    return 0;
}

static int diagnose_arch(int dev, const mxg_device_info *info, mx_error *err) {
    return mx_fail(err,
                   "GPU %d (%s) has architecture %s, but this mlxcel was built for %s only; rebuild with "
                   "-D%s=%s (add it to the list to keep the others)",
                   dev, info->name, info->arch, MXG_ARCH_LIST, MXG_ARCH_VARIABLE, info->arch);
}

// Recorded graphs hold raw device pointers. Any release may free a buffer a graph reads (the engine
// frees a whole context, then builds another on the same backend), so every release drops them
// all; they are re-recorded on the next decode step.
static void graphs_drop(gpu_ctx *c) {
    for (int i = 0; i < c->n_graphs; i++) mxg_rt_graph_destroy(c->graphs[i].exec);
    c->n_graphs = 0;
}

// ---- memory ------------------------------------------------------------------------------------

static void *gpu_alloc(mx_backend *be, size_t bytes, mx_error *err) {
    void *p = NULL;
    if (mxg_rt_malloc(&p, bytes, ctx_of(be)->launch.stream, err) != 0) return NULL;
    return p;
}

static void gpu_release(mx_backend *be, void *ptr) {
    if (!ptr) return;
    graphs_drop(ctx_of(be));
    mxg_rt_free(ptr);
}

static int gpu_upload(mx_backend *be, void *dst, const void *src, size_t bytes, mx_error *err) {
    return mxg_rt_upload(dst, src, bytes, ctx_of(be)->launch.stream, err);
}

static int gpu_download(mx_backend *be, void *dst, const void *src, size_t bytes, mx_error *err) {
    return mxg_rt_download(dst, src, bytes, ctx_of(be)->launch.stream, err);
}

static void gpu_release_matrix(mx_backend *be, mx_matrix *m) {
    graphs_drop(ctx_of(be));
    mxg_rt_free((void *)m->data);
    mxg_rt_free((void *)m->scales);
    mxg_rt_free((void *)m->biases);
    m->data = m->scales = m->biases = NULL;
}

static int copy_part(mx_backend *be, const void *host, int64_t bytes, const void **out, mx_error *err) {
    *out = NULL;
    if (!host || bytes <= 0) return 0;
    void *d = gpu_alloc(be, (size_t)bytes, err);
    if (!d) return -1;
    *out = d;
    return gpu_upload(be, d, host, (size_t)bytes, err);
}

static int gpu_upload_matrix(mx_backend *be, const mx_matrix *host, mx_matrix *out, mx_error *err) {
    if (!mxg_matrix_supported(host))
        return mx_fail(err, "the %s backend has no kernel for a %s %d-bit group-%d matrix of %lld x %lld (%s)",
                       MXG_RUNTIME_NAME, mx_quant_mode_name(host->q.mode), host->q.bits, host->q.group_size,
                       (long long)host->rows, (long long)host->cols, mx_dtype_name(host->dtype));
    *out = *host;
    out->data = out->scales = out->biases = NULL;
    int64_t sbytes = mx_matrix_scale_bytes(host);
    if (copy_part(be, host->data, mx_matrix_data_bytes(host), &out->data, err) != 0 ||
        copy_part(be, host->scales, sbytes, &out->scales, err) != 0 ||
        (host->q.mode == MX_QUANT_AFFINE && copy_part(be, host->biases, sbytes, &out->biases, err) != 0)) {
        gpu_release_matrix(be, out);
        return mx_fail_prefix(err, "uploading a weight matrix: ");
    }
    return 0;
}

static bool gpu_supports(mx_backend *be, mx_backend_op op, const mx_matrix *w) {
    (void)be;
    switch (op) {
    case MX_OP_MATMUL:
    case MX_OP_MOE_MATMUL: return w && mxg_matrix_supported(w);
    }
    return false;
}

// ---- ops -------------------------------------------------------------------------------------

static void gpu_embed(mx_backend *be, float *out, const mx_matrix *w, const int32_t *ids, int n) {
    mxg_embed(L_of(be), out, w, ids, n);
}

static void gpu_matmul(mx_backend *be, float *out, const float *x, const mx_matrix *w, const float *bias, int n) {
    mxg_matmul(L_of(be), out, x, w, bias, n);
}

static void gpu_rmsnorm(mx_backend *be, float *out, const float *x, const float *w, int n, int dim, float eps) {
    mxg_rmsnorm(L_of(be), out, x, w, n, dim, eps);
}

static void gpu_rope(mx_backend *be, float *x, const int32_t *pos, int n, int n_heads, const mx_rope *rope) {
    mxg_rope(L_of(be), x, pos, n, n_heads, rope);
}

static void gpu_kv_store(mx_backend *be, void *kv, const mx_kv_layout *lay, int layer, const float *k,
                         const float *v, const int32_t *slot, const int32_t *pos, int n) {
    mxg_kv_store(L_of(be), kv, lay, layer, k, v, slot, pos, n);
}

static void gpu_attention(mx_backend *be, float *out, const float *q, const void *kv, const mx_kv_layout *lay,
                          int layer, const int32_t *slot, const int32_t *pos, int n, int n_heads, float scale,
                          int window) {
    mxg_attention(L_of(be), out, q, kv, lay, layer, slot, pos, n, n_heads, scale, window);
}

static void gpu_swiglu(mx_backend *be, float *out, const float *gate, const float *up, int64_t count) {
    mxg_swiglu(L_of(be), out, gate, up, count);
}

static void gpu_add(mx_backend *be, float *x, const float *y, int64_t count) { mxg_add(L_of(be), x, y, count); }

static void gpu_moe_route(mx_backend *be, int32_t *ids, float *weights, const float *logits, int n, int n_experts,
                          int k, bool norm_topk) {
    mxg_moe_route(L_of(be), ids, weights, logits, n, n_experts, k, norm_topk);
}

static void gpu_moe_matmul(mx_backend *be, float *out, const float *x, const mx_matrix *w, const int32_t *ids, int m,
                           int x_div) {
    mxg_moe_matmul(L_of(be), out, x, w, ids, m, x_div);
}

static void gpu_moe_combine(mx_backend *be, float *out, const float *y, const float *weights, int n, int k, int dim) {
    mxg_moe_combine(L_of(be), out, y, weights, n, k, dim);
}

static void gpu_gather_rows(mx_backend *be, float *out, const float *x, const int32_t *rows_host, int n, int dim) {
    mxg_gather_rows(L_of(be), out, x, rows_host, n, dim);
}

static void gpu_argmax(mx_backend *be, int32_t *ids, const float *logits, int n, int vocab) {
    mxg_argmax(L_of(be), ids, logits, n, vocab);
}

static void gpu_sample(mx_backend *be, int32_t *ids, const float *logits, int n, int vocab,
                       const mx_sample_params *params, const int32_t *pos) {
    mxg_sample(L_of(be), ids, logits, n, vocab, params, pos);
}

static int gpu_sync(mx_backend *be, mx_error *err) { return mxg_rt_sync(ctx_of(be)->launch.stream, err); }

// ---- graphs (backend.h graph_begin / graph_end / graph_launch) --------------------------------

static gpu_graph *graph_find(gpu_ctx *c, int key) {
    for (int i = 0; i < c->n_graphs; i++)
        if (c->graphs[i].key == key) return &c->graphs[i];
    return NULL;
}

static int gpu_graph_begin(mx_backend *be, mx_error *err) { return mxg_rt_graph_begin(ctx_of(be)->launch.stream, err); }

static int gpu_graph_end(mx_backend *be, int key, mx_error *err) {
    gpu_ctx *c = ctx_of(be);
    void *exec = NULL;
    if (mxg_rt_graph_end(c->launch.stream, &exec, err) != 0) return -1;
    gpu_graph *g = graph_find(c, key);
    if (!g) {
        if (c->n_graphs == c->cap_graphs) {
            int cap = c->cap_graphs ? 2 * c->cap_graphs : 16;
            gpu_graph *ng = realloc(c->graphs, sizeof *ng * (size_t)cap);
            if (!ng) {
                mxg_rt_graph_destroy(exec);
                return mx_fail(err, "out of memory keeping a recorded graph");
            }
            c->graphs = ng, c->cap_graphs = cap;
        }
        g = &c->graphs[c->n_graphs++];
        g->key = key, g->exec = NULL;
    }
    mxg_rt_graph_destroy(g->exec);
    g->exec = exec;
    return 0;
}

static bool gpu_graph_launch(mx_backend *be, int key) {
    gpu_ctx *c = ctx_of(be);
    gpu_graph *g = graph_find(c, key);
    mx_error err;
    return g && mxg_rt_graph_launch(g->exec, c->launch.stream, &err) == 0;
}

static void gpu_destroy(mx_backend *be) {
    if (!be) return;
    gpu_ctx *c = ctx_of(be);
    if (c) {
        mx_error ignored;
        mxg_rt_sync(c->launch.stream, &ignored);
        graphs_drop(c);
        free(c->graphs);
        mxg_rt_free(c->launch.scratch);
        mxg_rt_free(c->launch.small_scratch);
        mxg_rt_stream_destroy(c->launch.stream);
        free(c);
    }
    free(be);
}

static const mx_backend_ops gpu_ops = {
    .name = MXG_RUNTIME_NAME,
    .destroy = gpu_destroy,
    .alloc = gpu_alloc,
    .release = gpu_release,
    .upload = gpu_upload,
    .download = gpu_download,
    .upload_matrix = gpu_upload_matrix,
    .release_matrix = gpu_release_matrix,
    .supports = gpu_supports,
    .embed = gpu_embed,
    .matmul = gpu_matmul,
    .rmsnorm = gpu_rmsnorm,
    .rope = gpu_rope,
    .kv_store = gpu_kv_store,
    .attention = gpu_attention,
    .swiglu = gpu_swiglu,
    .add = gpu_add,
    .moe_route = gpu_moe_route,
    .moe_matmul = gpu_moe_matmul,
    .moe_combine = gpu_moe_combine,
    .gather_rows = gpu_gather_rows,
    .argmax = gpu_argmax,
    .sync = gpu_sync,
    .graph_begin = gpu_graph_begin,
    .graph_end = gpu_graph_end,
    .graph_launch = gpu_graph_launch,
    .sample = gpu_sample,
};

// ---- entry points ------------------------------------------------------------------------------

const char *mx_gpu_backend_name(void) { return MXG_RUNTIME_NAME; }

bool mx_gpu_is_backend(const mx_backend *be) { return be && be->ops == &gpu_ops; }

static const char *vendor_word(void) { return strcmp(MXG_RUNTIME_NAME, "cuda") == 0 ? "NVIDIA" : "AMD"; }

mx_backend *mx_gpu_backend_create(const mx_backend_options *opt, mx_error *err) {
    int count = 0, dev = opt ? opt->device_index : 0;
    char why[256] = "";
    mxg_rt_device_count(&count, why, sizeof why);
    if (count == 0) {
        mx_fail(err, "no %s GPU found (%s runtime: %s)",
                vendor_word(), MXG_RUNTIME_NAME, why);
        return NULL;
    }
    if (dev < 0 || dev >= count) {
        mx_fail(err, "GPU index %d is out of range: %d %s GPU%s found", dev, count, vendor_word(), count == 1 ? "" : "s");
        return NULL;
    }
    gpu_ctx *c = calloc(1, sizeof *c);
    mx_backend *be = calloc(1, sizeof *be);
    if (!c || !be) {
        free(c);
        free(be);
        mx_fail(err, "out of memory creating the %s backend", MXG_RUNTIME_NAME);
        return NULL;
    }
    be->ops = &gpu_ops;
    be->ctx = c;
    be->kv_dtype = MX_DTYPE_F16;
    c->device = dev;
    if (mxg_rt_device_info(dev, &c->info, err) != 0) goto fail;
    if (!arch_listed(c->info.arch)) {
        // ROCm code objects are exact per architecture; CUDA may still run via a compatible image.
        if (strcmp(MXG_RUNTIME_NAME, "cuda") != 0) {
            diagnose_arch(dev, &c->info, err);
            goto fail;
        }
    }
    if (mxg_rt_set_device(dev, err) != 0) goto fail;
    if (mxg_rt_probe_kernels(err) != 0) {
        mx_error probe = *err;
        diagnose_arch(dev, &c->info, err);
        mx_fail_prefix(err, "%s; ", probe.msg);
        goto fail;
    }
    if (c->info.warp != 32 && c->info.warp != 64) {
        mx_fail(err, "GPU %d (%s) reports a warp width of %d; only 32 and 64 are supported", dev, c->info.name,
                c->info.warp);
        goto fail;
    }
    if (mxg_rt_stream_create(&c->launch.stream, err) != 0) goto fail;
    c->launch.warp = c->info.warp;
    c->launch.sm_count = c->info.sm_count;
    c->launch.cc = c->info.cc;
    const char *no_mma = getenv("MLXCEL_GPU_NO_MMA");
    c->launch.use_mma = !(no_mma && *no_mma && strcmp(no_mma, "0") != 0);
    const char *mv_rows = getenv("MLXCEL_GPU_MATVEC_ROWS");  // tuning knob for benches: 1, 2 or 4
    c->launch.matvec_rows = mv_rows ? atoi(mv_rows) : 4;
    c->launch.scratch_bytes = mxg_attention_scratch_bytes(c->info.sm_count, 256);
    if (mxg_rt_malloc(&c->launch.scratch, c->launch.scratch_bytes, c->launch.stream, err) != 0) goto fail;
    c->launch.small_scratch_bytes = 64 * 1024;
    if (mxg_rt_malloc(&c->launch.small_scratch, c->launch.small_scratch_bytes, c->launch.stream, err) != 0) goto fail;
    snprintf(be->device_name, sizeof be->device_name, "%s (%s)", c->info.name, c->info.arch);
    return be;
fail:
    mx_fail_prefix(err, "starting the %s backend: ", MXG_RUNTIME_NAME);
    gpu_destroy(be);
    return NULL;
}

size_t mx_gpu_describe(char *buf, size_t cap) {
    size_t used = 0;
#define PUT(...)                                                                     \
    do {                                                                             \
        if (used < cap) {                                                            \
            int k_ = snprintf(buf + used, cap - used, __VA_ARGS__);                  \
            if (k_ > 0) used += (size_t)k_ < cap - used ? (size_t)k_ : cap - used - 1; \
        }                                                                            \
    } while (0)
    char ver[128];
    mxg_rt_versions(ver, sizeof ver);
    PUT("%s backend: built with %s for architectures %s (%s); %s\n", MXG_RUNTIME_NAME, MXG_TOOLKIT, MXG_ARCH_LIST,
        MXG_ARCH_VARIABLE, ver);
    int count = 0;
    char why[256] = "";
    mxg_rt_device_count(&count, why, sizeof why);
    if (count == 0) PUT("  no %s GPU found (%s)\n", vendor_word(), why);
    for (int d = 0; d < count; d++) {
        mxg_device_info info;
        mx_error err;
        if (mxg_rt_device_info(d, &info, &err) != 0) {
            PUT("  GPU %d: %s\n", d, err.msg);
            continue;
        }
        PUT("  GPU %d: %s, architecture %s, %d %s, %.1f GiB, warp %d: %s\n", d, info.name, info.arch, info.sm_count,
            strcmp(MXG_RUNTIME_NAME, "cuda") == 0 ? "SMs" : "CUs", (double)info.total_mem / (1024.0 * 1024.0 * 1024.0),
            info.warp, arch_listed(info.arch) ? "supported" : "NOT in the built list (rebuild to use it)");
    }
#undef PUT
    return used;
}

// ---- graphs and tooling (gpu_backend.h) ---------------------------------------------------------

int mx_gpu_graph_begin(mx_backend *be, mx_error *err) { return mxg_rt_graph_begin(ctx_of(be)->launch.stream, err); }

int mx_gpu_graph_end(mx_backend *be, void **graph, mx_error *err) {
    return mxg_rt_graph_end(ctx_of(be)->launch.stream, graph, err);
}

int mx_gpu_graph_launch(mx_backend *be, void *graph, mx_error *err) {
    return mxg_rt_graph_launch(graph, ctx_of(be)->launch.stream, err);
}

void mx_gpu_graph_free(mx_backend *be, void *graph) {
    (void)be;
    mxg_rt_graph_destroy(graph);
}

void *mx_gpu_stream(mx_backend *be) { return ctx_of(be)->launch.stream; }
