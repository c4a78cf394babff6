// SPDX-License-Identifier: MIT
// The GPU backend as the engine sees it (backend.h): device selection and the architecture check,
// memory, and the plan runner (records to kernel launchers, kernels.h; a plan that runs again is
// recorded as a graph on its second run and replayed from then on; each run counted by how it ran,
// backend.h mx_plan_runs, and with MLXCEL_GPU_PLAN_TIMES=1 timed by events). C11; the vendor runtime
// is reached only through gpu_rt.h, so this file is the same for CUDA and ROCm.
//
// Start-up refuses, with a message saying what to do, when there is no GPU, when the device index
// is out of range, or when the device's architecture is not among those compiled in (the list
// cmake resolved, MXG_ARCH_LIST). On CUDA a device of a newer minor revision or one that can JIT the
// embedded PTX is accepted after a probe launch proves a kernel image loads.
//
// Owns: one stream, a split-attention workspace, and the device copies made by upload_matrix. The
// KV cache (kv_dtype) is int16 with one scale per 16 values, the CPU backend's format and rounding,
// or f16 with MLXCEL_GPU_KV=f16; laid out as kernels.h says.
#include "backends/gpu/gpu_backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/gpu/gpu_plan.h"
#include "backends/gpu/gpu_rt.h"
#include "backends/gpu/kernels.h"
#include "backends/gpu/kernels_fused.h"
#include "backends/gpu/kernels_sample.h"
#include "backends/gpu_entry.h"
#include "core/env_switch.h"
#include "mlxcel_gpu_config.h"

// What the backend keeps per plan id: how often it ran, and its recorded graph once it has one
// (NULL with `no_graph` when recording failed: the plan then always runs directly).
typedef struct gpu_graph {
    uint64_t plan_id;
    int runs;
    bool no_graph;
    void *exec;
} gpu_graph;

typedef struct gpu_ctx {
    int device;
    mxg_device_info info;
    mxg_launch launch;  // stream, warp width, workspace: what every kernel launch needs
    gpu_graph *graphs;  // per plan id (backend.h plan_release forgets one)
    int n_graphs, cap_graphs;
    bool use_graphs;    // MLXCEL_GPU_NO_GRAPHS=1 or mx_gpu_use_graphs turn recording off
    bool fuse;          // MLXCEL_GPU_NO_FUSION=1 runs every record with its own kernel
    // MLXCEL_GPU_PLAN_TIMES=1: events around the plan runs between two syncs (start: before the
    // first, stop: after the last), their time added to plan_runs.device_seconds at the sync.
    void *ev_start, *ev_stop;
    bool timing;        // a plan ran since the last sync: the pair is recorded
} gpu_ctx;

static gpu_ctx *ctx_of(mx_backend *be) { return (gpu_ctx *)be->ctx; }

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
    (void)be;
    if (ptr) mxg_rt_free(ptr);
}

// At a sync (the stream is idle): the device time of the plan runs since the last one (timing on).
static void add_plan_time(mx_backend *be) {
    gpu_ctx *c = ctx_of(be);
    float ms = 0.0f;
    mx_error ignored;
    if (!c->timing) return;
    c->timing = false;
    if (mxg_rt_event_elapsed_ms(c->ev_start, c->ev_stop, &ms, &ignored) == 0) be->plan_runs.device_seconds += ms * 1e-3;
}

static int gpu_upload(mx_backend *be, void *dst, const void *src, size_t bytes, mx_error *err) {
    return mxg_rt_upload(dst, src, bytes, ctx_of(be)->launch.stream, err);
}

static int gpu_download(mx_backend *be, void *dst, const void *src, size_t bytes, mx_error *err) {
    int rc = mxg_rt_download(dst, src, bytes, ctx_of(be)->launch.stream, err);  // synchronizes
    add_plan_time(be);
    return rc;
}

static int gpu_copy_runs(mx_backend *be, void *dst, const void *src, size_t bytes, size_t count, size_t stride,
                         mx_error *err) {
    return mxg_rt_copy_runs(dst, src, bytes, count, stride, ctx_of(be)->launch.stream, err);
}

static void gpu_release_matrix(mx_backend *be, mx_matrix *m) {
    (void)be;
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

static bool gpu_supports(mx_backend *be, mx_op_kind kind, const mx_matrix *w) {
    (void)be;
    switch (kind) {
    case MX_OP_EMBED:
    case MX_OP_MATMUL:
    case MX_OP_MOE_MATMUL: return w && mxg_matrix_supported(w);
    default: return kind >= 0 && kind < MX_OP_KIND_COUNT;
    }
}

// ---- plans -------------------------------------------------------------------------------------

static gpu_graph *graph_find(gpu_ctx *c, uint64_t id) {
    for (int i = 0; i < c->n_graphs; i++)
        if (c->graphs[i].plan_id == id) return &c->graphs[i];
    return NULL;
}

static gpu_graph *graph_add(gpu_ctx *c, uint64_t id) {
    if (c->n_graphs == c->cap_graphs) {
        int cap = c->cap_graphs ? 2 * c->cap_graphs : 16;
        gpu_graph *ng = realloc(c->graphs, sizeof *ng * (size_t)cap);
        if (!ng) return NULL;
        c->graphs = ng, c->cap_graphs = cap;
    }
    gpu_graph *g = &c->graphs[c->n_graphs++];
    *g = (gpu_graph){.plan_id = id};
    return g;
}

// First run: direct. Second run: recorded, then replayed (a plan that runs twice is a step shape in
// use, worth the recording). Later runs: replayed. Recording failures fall back to direct runs.
// Each run is counted by its outcome (be->plan_runs).
static int run_plan_counted(mx_backend *be, const mx_plan *plan, mx_error *err) {
    gpu_ctx *c = ctx_of(be);
    gpu_graph *g = c->use_graphs ? graph_find(c, plan->id) : NULL;
    if (c->use_graphs && !g) g = graph_add(c, plan->id);  // NULL (out of memory): run directly
    if (g && g->exec) {
        be->plan_runs.replayed++;
        return mxg_rt_graph_launch(g->exec, c->launch.stream, err);
    }
    if (!g || g->no_graph || g->runs++ == 0) {
        be->plan_runs.direct++;
        mxg_enqueue_plan(&c->launch, plan, c->fuse);
        return 0;
    }
    mx_error why;
    void *exec = NULL;
    if (mxg_rt_graph_begin(c->launch.stream, &why) == 0) {
        mxg_enqueue_plan(&c->launch, plan, c->fuse);
        if (mxg_rt_graph_end(c->launch.stream, &exec, &why) != 0) exec = NULL;
    }
    if (!exec) {
        g->no_graph = true;
        be->plan_runs.direct++;
        mxg_enqueue_plan(&c->launch, plan, c->fuse);
        return 0;
    }
    g->exec = exec;
    be->plan_runs.recorded++;
    return mxg_rt_graph_launch(g->exec, c->launch.stream, err);
}

static int gpu_run_plan(mx_backend *be, const mx_plan *plan, mx_error *err) {
    gpu_ctx *c = ctx_of(be);
    for (int i = 0; i < plan->n_ops; i++)
        if ((unsigned)plan->ops[i].kind >= MX_OP_KIND_COUNT)
            return mx_fail(err, "the %s backend has no op of kind %d (record %d)", MXG_RUNTIME_NAME,
                           (int)plan->ops[i].kind, i);
    if (c->ev_start && !c->timing && mxg_rt_event_record(c->ev_start, c->launch.stream, err) != 0) return -1;
    int rc = run_plan_counted(be, plan, err);
    if (rc == 0 && c->ev_start) {
        if (mxg_rt_event_record(c->ev_stop, c->launch.stream, err) != 0) return -1;
        c->timing = true;
    }
    return rc;
}

static void gpu_plan_release(mx_backend *be, uint64_t id) {
    gpu_ctx *c = ctx_of(be);
    gpu_graph *g = graph_find(c, id);
    if (!g) return;
    if (g->exec) {
        mx_error ignored;
        mxg_rt_sync(c->launch.stream, &ignored);  // a replay in flight still reads the graph
        mxg_rt_graph_destroy(g->exec);
    }
    *g = c->graphs[--c->n_graphs];
}

static int gpu_sync(mx_backend *be, mx_error *err) {
    int rc = mxg_rt_sync(ctx_of(be)->launch.stream, err);
    add_plan_time(be);
    return rc;
}

static void gpu_destroy(mx_backend *be) {
    if (!be) return;
    gpu_ctx *c = ctx_of(be);
    if (c) {
        mx_error ignored;
        mxg_rt_sync(c->launch.stream, &ignored);
        graphs_drop(c);
        free(c->graphs);
        mxg_rt_event_destroy(c->ev_start);
        mxg_rt_event_destroy(c->ev_stop);
        mxg_rt_free(c->launch.scratch);
        mxg_rt_free(c->launch.small_scratch);
        mxg_rt_free(c->launch.sample_scratch);
        mxg_rt_free(c->launch.moe_tickets);
        mxg_rt_stream_destroy(c->launch.stream);
        free(c);
    }
    free(be);
}

static int gpu_mem_info(mx_backend *be, size_t *free_bytes, size_t *total_bytes) {
    (void)be;
    return mxg_rt_mem_info(free_bytes, total_bytes);
}

static const mx_backend_ops gpu_ops = {
    .name = MXG_RUNTIME_NAME,
    .destroy = gpu_destroy,
    .alloc = gpu_alloc,
    .release = gpu_release,
    .upload = gpu_upload,
    .download = gpu_download,
    .copy_runs = gpu_copy_runs,
    .upload_matrix = gpu_upload_matrix,
    .release_matrix = gpu_release_matrix,
    .supports = gpu_supports,
    .sync = gpu_sync,
    .run_plan = gpu_run_plan,
    .plan_release = gpu_plan_release,
    .mem_info = gpu_mem_info,
};

// ---- entry points ------------------------------------------------------------------------------

const char *mx_gpu_backend_name(void) { return MXG_RUNTIME_NAME; }


static const char *vendor_word(void) { return strcmp(MXG_RUNTIME_NAME, "cuda") == 0 ? "NVIDIA" : "AMD"; }

// A numeric environment knob (MLXCEL_GPU_*): unset or empty gives `def`; otherwise the whole value
// must be a decimal integer in [lo, hi] (no sign but '-', no spaces, no suffix), else the error
// names the variable, what it held and the accepted range. 0: *out set; -1: err set.
static int env_int(const char *name, int def, int lo, int hi, int *out, mx_error *err) {
    const char *v = getenv(name);
    *out = def;
    if (!v || !*v) return 0;
    const char *p = v + (*v == '-');
    bool digits = *p != 0;
    long long x = 0;
    for (; *p && digits; p++) {
        digits = *p >= '0' && *p <= '9';
        if (x <= 1000000000000LL) x = x * 10 + (*p - '0');
    }
    if (*v == '-') x = -x;
    if (!digits || x < lo || x > hi)
        return mx_fail(err, "%s='%s': must be a whole number from %d to %d (unset: %d)", name, v, lo, hi, def);
    *out = (int)x;
    return 0;
}

// The numeric knobs, read before any device is looked for (so a bad value is refused by name also
// on a machine without a GPU).
typedef struct gpu_knobs {
    int matvec_rows, matvec_max_tokens, stream_min_cols, stream_rows, sample_blocks, tc_decode_tokens, attn_decode,
        attn_short, attn_rope;
    int prefill_kernel, moe_fused, moe_down, attn_mma, sample_fast, grouped, stream_lean, pdl;
    int stream_res_early;  // MLXCEL_GPU_STREAM_RES_EARLY
    int stream_min_rows;   // MLXCEL_GPU_STREAM_MIN_ROWS
    int moe_route_rank;    // MLXCEL_GPU_MOE_ROUTE_RANK
    bool prefill_asked;  // MLXCEL_GPU_PREFILL_KERNEL was set
} gpu_knobs;

static int read_knobs(gpu_knobs *k, mx_error *err) {
    // MLXCEL_GPU_MATVEC_ROWS: most rows per warp of the matrix-vector kernels (1, 2 or 4; benches).
    // Batches of 2..63 tokens (server decode steps) run the matrix-vector kernels in 8-token tiles:
    // the tiled kernel's 64 x 64 blocks leave most multiprocessors idle on such batches.
    // MLXCEL_GPU_MATVEC_TOKENS=N moves the crossover (8: the tiled kernel from 9 tokens on, as before).
    // The streaming matrix-vector kernel only on rows of at least 4096 weights: on the H200 it
    // streamed the 8B's products faster (tg128 288 against 236 tok/s) but made the 0.6B's
    // 1024-3072-wide ones slower (650 against 732; bench/RESULTS.md, run 12).
    // MLXCEL_GPU_STREAM_MIN_COLS=N moves that bound (the GPU tests use 0). MLXCEL_GPU_STREAM_MIN_ROWS=N
    // (unset: 4096): one-token launches over shorter rows take the streaming kernel where their
    // matrices have at least N rows together (the 0.6B's norm + q/k/v, 4,096 rows, norm + gate/up,
    // 6,144, and lm_head: 3.17, 3.57 and 34.6 us against 4.41, 5.43 and 51.9 on the other kernels on
    // an H100, where its 1,024-row o and down and lone 2,048-3,072-row products were slower;
    // bench/RESULTS.md run 49); a number past every launch's rows (1073741824) turns it off.
    // MLXCEL_GPU_STREAM_ROWS:
    // its task shape over long rows for one token; unset or 0: per launch (two rows a task, 4 chunks
    // per lane per step at 4 bits, where those tasks fit one wave of the grid's warps, else four rows
    // and 2 chunks; bench/RESULTS.md run 47: 8B tg128 +8.4% on an H100 against four everywhere);
    // 2 or 4: that shape for every launch, for A/B. MLXCEL_GPU_STREAM_LEAN
    // (unset: 1): its one-token affine 4/8-bit products in the lean form (kernels/matvec_stream_lean.cuh:
    // each chunk's sum of x once per block, the rows' addresses once per task; bit for bit the same
    // outputs; H100, bench/RESULTS.md run 36: 8B tg128 +3.6%); 0: the previous form, for A/B.
    // MLXCEL_GPU_STREAM_RES_EARLY (unset: 1): the one-token residual products (o, down; the streaming
    // kernel's and kernels/matvec_fused.cu's) read each task's residual and bias rows into its lanes
    // right after the grid wait (or a task ahead) instead of after the warp sums, and write a row per
    // lane (kernels/matvec_res_early.cuh; the same outputs bit for bit; run 49 on an H100: 8B tg128
    // +2.0%, 0.6B +2.8%); 0: the epilogue after the sums, for A/B.
    // MLXCEL_GPU_SAMPLE_BLOCKS=N: at most N blocks share one row of the sample record
    // (kernels/sample_split.cu; 1: one block per row; unset: MXG_SAMPLE_DEFAULT_BLOCKS).
    // MLXCEL_GPU_SAMPLE_FAST (unset: 1): the split form's threshold from a short list of keys (those
    // near each row's best, or one value bin where top-p's weight is reached) where that settles it,
    // the radix passes elsewhere (same tokens; kernels/sample_fast.cu); 0: the radix passes alone
    // (bench/RESULTS.md run 26: the fast form +2.5% sampled tok/s at 32 and 64 rows).
    // MLXCEL_GPU_TC_DECODE=N (2..64; 1 counts as 2): batches of N to 64 tokens on the tensor-core decode
    // product (vendor/cuda/matvec_mma.cu: affine 4/8-bit weights, bf16 hi/mid/lo activations; other
    // formats keep the float32 kernels); unset: MXG_TC_DECODE_DEFAULT_TOKENS (4: on the H200 it is
    // slower than the float32 kernels at 2 tokens, about even at 4 and faster from 8; bench/RESULTS.md);
    // 0: off, the float32 kernels (also off with MLXCEL_GPU_NO_MMA=1).
    // MLXCEL_GPU_GROUPED (unset: 1, on): in batches that take the tensor-core decode product, the
    // products of one input (q/k/v; gate/up, with the SwiGLU that follows) in one grouped launch and
    // one sum launch (gpu_plan.c, vendor/cuda/matvec_mma.cu) instead of a launch pair per product
    // and a SwiGLU launch (H200, run 33: `--batch 64` +19%, 32 +22%); 0: the launch pairs, the A/B form.
    // MLXCEL_GPU_MOE_FUSED: 1 (unset: the default) MoE decode's expert products in two fused launches
    // (gate/up + SwiGLU, down + combine; kernels/moe_stream.cu) instead of five records; 2: the
    // routing record in the first of them too; 0: the records. On the H200 the 30B-A3B shape decoded
    // 254.9 / 305.1 / 309.3 tok/s at 0 / 1 / 2 and prefilled 32 tokens at 956 / 1,391 / 1,065
    // (bench/RESULTS.md, run 21). 3: level 1, and the norm, router product and routing records in
    // one launch (kernels/moe_router.cu), the down launch reading the combine's inputs early
    // (bench/RESULTS.md, "MoE decode: routing and down+combine").
    // MLXCEL_GPU_MOE_DOWN (unset: 1): the down + combine launch with every lane streaming: each
    // warp's (expert, chunk) items of its output row dealt over its lanes; 0: a warp per output row
    // over the chunks. Run 42: the 30B-A3B's tg64 +1.5% at 1 (bench/RESULTS.md, "MoE decode on
    // full lanes").
    // MLXCEL_GPU_MOE_ROUTE_RANK (unset: 1): the routing launch (kernels/moe.cu) by a block of 128
    // threads whose k picks come by rank in one pass (kernels/moe_route.cuh, moe_route_rank; the same
    // ids and weight bits); 0: one warp's k argmax passes. Run 54: the 30B-A3B's tg64 +7% at 1
    // (bench/RESULTS.md, "MoE routing by rank").
    // MLXCEL_GPU_ATTN_MMA=0: prefill attention on the SIMT kernel (kernels/attention.cu) instead of
    // the tensor-core one (vendor/cuda/attn_mma.cu; unset: 1; run 20: the 8B's pp8192 1,672 against
    // 5,069 tok/s).
    // MLXCEL_GPU_ATTN_DECODE=0: decode attention on the general kernel (kernels/attention.cu, head
    // rows) instead of the flash-decoding one (kernels/attn_decode.cu), for A/B benches (unset: 1).
    // MLXCEL_GPU_ATTN_SHORT (unset: 1): where every sequence's cache holds few positions
    // (kernels/attn_decode.cu, kDecodeShortCtx), the flash-decoding kernel in its short form, a block
    // per query head and one split (no combine launch), instead of a block per KV head's group (run 39:
    // the 30B-A3B's tg64 +13%); 0 gives the group form everywhere, for A/B.
    // MLXCEL_GPU_ATTN_ROPE (unset: 1): one-token decode steps fold the q/k norm + RoPE + KV store
    // launch into the flash-decoding one (gpu_plan.c, kernels/attn_decode.cu), the same outputs and
    // cache bytes in one launch a layer fewer (run 42: 0.6B tg128 +3.4%, 8B +1.5%); 0: the two launches.
    if (env_int("MLXCEL_GPU_MATVEC_ROWS", 4, 1, 4, &k->matvec_rows, err) ||
        env_int("MLXCEL_GPU_ATTN_DECODE", 1, 0, 1, &k->attn_decode, err) ||
        env_int("MLXCEL_GPU_ATTN_SHORT", 1, 0, 1, &k->attn_short, err) ||
        env_int("MLXCEL_GPU_ATTN_ROPE", 1, 0, 1, &k->attn_rope, err) ||
        env_int("MLXCEL_GPU_MATVEC_TOKENS", 63, 1, 1 << 20, &k->matvec_max_tokens, err) ||
        env_int("MLXCEL_GPU_STREAM_MIN_COLS", 4096, 0, 1 << 30, &k->stream_min_cols, err) ||
        env_int("MLXCEL_GPU_STREAM_ROWS", 0, 0, 4, &k->stream_rows, err) ||
        env_int("MLXCEL_GPU_STREAM_LEAN", 1, 0, 1, &k->stream_lean, err) ||
        env_int("MLXCEL_GPU_STREAM_MIN_ROWS", 4096, 0, 1 << 30, &k->stream_min_rows, err) ||
        env_int("MLXCEL_GPU_STREAM_RES_EARLY", 1, 0, 1, &k->stream_res_early, err) ||
        env_int("MLXCEL_GPU_SAMPLE_BLOCKS", MXG_SAMPLE_DEFAULT_BLOCKS, 1, MXG_SAMPLE_MAX_BLOCKS, &k->sample_blocks, err) ||
        env_int("MLXCEL_GPU_SAMPLE_FAST", 1, 0, 1, &k->sample_fast, err) ||
        env_int("MLXCEL_GPU_TC_DECODE", MXG_TC_DECODE_DEFAULT_TOKENS, 0, 64, &k->tc_decode_tokens, err) ||
        env_int("MLXCEL_GPU_MOE_FUSED", 1, 0, 3, &k->moe_fused, err) ||
        env_int("MLXCEL_GPU_MOE_DOWN", 1, 0, 1, &k->moe_down, err) ||
        env_int("MLXCEL_GPU_MOE_ROUTE_RANK", 1, 0, 1, &k->moe_route_rank, err) ||
        env_int("MLXCEL_GPU_ATTN_MMA", 1, 0, 1, &k->attn_mma, err) ||
        env_int("MLXCEL_GPU_GROUPED", 1, 0, 1, &k->grouped, err) ||
        env_int("MLXCEL_GPU_PDL", 3, 0, 3, &k->pdl, err))
        return -1;
    static const char *const prefill_names[] = {"wmma", "wmma128", "pipe", "wgmma"};  // MXG_PREFILL_* order
    const char *pk = getenv("MLXCEL_GPU_PREFILL_KERNEL");
    // Unset: wgmma, which the backend turns into pipe, silently, where the GPU or the build has no
    // sm_90a code (prefill_asked: the user named the kernel, and hears when it cannot run).
    k->prefill_kernel = MXG_PREFILL_WGMMA;
    k->prefill_asked = pk && *pk;
    if (pk && *pk) {
        int i = 0, names = (int)(sizeof prefill_names / sizeof prefill_names[0]);
        while (i < names && strcmp(pk, prefill_names[i]) != 0) i++;
        if (i == names) {  // the message lists prefill_names, so a new kernel's name needs no second edit
            char list[96] = "";
            for (int j = 0; j < names; j++)
                snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", prefill_names[j],
                         j == names - 2 ? " or " : j < names - 2 ? ", " : "");
            return mx_fail(err, "MLXCEL_GPU_PREFILL_KERNEL='%s': must be %s (unset: wgmma, else pipe)", pk, list);
        }
        k->prefill_kernel = i;
    }
    if (k->matvec_rows == 3)
        return mx_fail(err, "MLXCEL_GPU_MATVEC_ROWS='%s': must be 1, 2 or 4 (unset: 4)", getenv("MLXCEL_GPU_MATVEC_ROWS"));
    if (k->stream_rows == 1 || k->stream_rows == 3)
        return mx_fail(err, "MLXCEL_GPU_STREAM_ROWS='%s': must be 2 or 4 (unset or 0: chosen per launch)",
                       getenv("MLXCEL_GPU_STREAM_ROWS"));
    return 0;
}

mx_backend *mx_gpu_backend_create(const mx_backend_options *opt, mx_error *err) {
    int count = 0, dev = opt ? opt->device_index : 0;
    char why[256] = "";
    // The KV cache's element type: int16 with one float scale per 16 values (the CPU's default, so
    // both backends hold the same codes; the fixtures' 1e-3 parity), or f16 with MLXCEL_GPU_KV=f16
    // (2 bytes per element instead of 2.25, for A/B speed runs and as a fallback).
    const char *kvt = getenv("MLXCEL_GPU_KV");
    if (kvt && strcmp(kvt, "i16") != 0 && strcmp(kvt, "f16") != 0) {
        mx_fail(err, "MLXCEL_GPU_KV='%s': the GPU KV cache type must be i16 (the default) or f16", kvt);
        return NULL;
    }
    const bool kv_i16 = !kvt || !strcmp(kvt, "i16");  // the default (unset) is I16
    gpu_knobs knobs;
    if (read_knobs(&knobs, err) != 0) return NULL;
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
    be->kv_dtype = kv_i16 ? MX_DTYPE_I16 : MX_DTYPE_F16;
    c->launch.kv_i16 = kv_i16;
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
    c->launch.use_mma = !mx_env_switch("MLXCEL_GPU_NO_MMA");
    c->use_graphs = !mx_env_switch("MLXCEL_GPU_NO_GRAPHS");
    // MLXCEL_GPU_PDL (0 to 3; unset: 3): programmatic dependent launch (sm_90+). Level 1: the
    // matrix-vector kernels release the next at their end; measured at +1.5% (0.6B) and -1% (8B)
    // decode on the H200 (bench/RESULTS.md). Level 2: they release the next right after their grid
    // wait, and their warps first prefetch their first rows' weights into L2 (kernels/matvec.cuh,
    // mxg_pdl_prefetch_cap; docs/DESIGN.md, "Programmatic dependent launch"; run 42: 0.6B tg128
    // +8.7%, 8B +1.4%). Level 3, the default: level 2 plus the attention, q/k norm + RoPE, token
    // choice and MoE launches as dependent launches (run 44 against 2: 0.6B tg128 +5.6%, 8B +0.2%,
    // 30B-A3B tg64 +5.3%). 0: plain launches.
    c->launch.dependent_launch = c->info.cc >= 90 && knobs.pdl >= 1;
    c->launch.pdl_early = c->launch.dependent_launch && knobs.pdl >= 2;
    c->launch.pdl_rest = c->launch.dependent_launch && knobs.pdl >= 3;
    c->launch.pdl_prefetch = c->launch.pdl_early ? mxg_pdl_prefetch_cap(c->info.l2_bytes) : 0;
    c->fuse = !mx_env_switch("MLXCEL_GPU_NO_FUSION");
    // MLXCEL_GPU_PLAN_TIMES=1: the device time of the plan runs (mx_plan_runs.device_seconds; the
    // server's /metrics), two event records per step; off by default.
    if (mx_env_switch("MLXCEL_GPU_PLAN_TIMES") &&
        (mxg_rt_event_create(&c->ev_start, err) != 0 || mxg_rt_event_create(&c->ev_stop, err) != 0))
        goto fail;
    c->launch.moe_fused = knobs.moe_fused;
    c->launch.moe_down = knobs.moe_down == 1;
    c->launch.moe_route_rank = knobs.moe_route_rank == 1;
    c->launch.matvec_rows = knobs.matvec_rows;
    c->launch.matvec_max_tokens = knobs.matvec_max_tokens;
    // MLXCEL_GPU_OLD_MATVEC=1: the matrix-vector kernels of before the scaled-activation 4/8-bit
    // dot and split-K (kernels/matvec_scaled.cuh), kept for A/B benches and as a fallback.
    // MLXCEL_GPU_PREFILL_KERNEL (kernels.h, MXG_PREFILL_*): the tensor-core prefill product; wgmma by
    // default where the device and the build allow it, else pipe (run 20, pipe against wmma: pp512
    // 0.6B 31.6k -> 38.4k, 8B 5.6k -> 7.8k tok/s; run 36 on an H100, wgmma against pipe: 8B 9,900 ->
    // 19,200, 0.6B 70,000 -> 85,000).
    c->launch.prefill_kernel = knobs.prefill_kernel;
    // wgmma (vendor/cuda/matmul_wgmma.cu) needs a compute capability 9.0 device and sm_90a code in
    // this build (MLXCEL_CUDA_ARCHITECTURES=90a); without them the products run on pipe, said once here
    // when the user named wgmma.
    if (knobs.prefill_kernel == MXG_PREFILL_WGMMA) {
        c->launch.wgmma = c->info.cc == 90 && mxg_wgmma_probe(c->launch.stream) == 1;
        if (!c->launch.wgmma && knobs.prefill_asked)
            fprintf(stderr, "mlxcel: MLXCEL_GPU_PREFILL_KERNEL=wgmma: GPU %d (%s, architecture %s) or this build (%s) has "
                            "no sm_90a code; the prefill products run on pipe (build with "
                            "-DMLXCEL_CUDA_ARCHITECTURES=90a for an H100/H200)\n",
                    dev, c->info.name, c->info.arch, MXG_ARCH_LIST);
    }
    c->launch.matvec_old = mx_env_switch("MLXCEL_GPU_OLD_MATVEC");
    // MLXCEL_GPU_NO_STREAM_MATVEC=1: decode products on the kernels of kernels/matvec.cuh instead of
    // the streaming kernel (kernels/matvec_stream.cuh), for A/B benches and as a fallback.
    c->launch.matvec_stream = !mx_env_switch("MLXCEL_GPU_NO_STREAM_MATVEC");
    c->launch.stream_min_cols = knobs.stream_min_cols;
    c->launch.stream_min_rows = knobs.stream_min_rows;
    c->launch.stream_rows = knobs.stream_rows;
    c->launch.stream_lean = knobs.stream_lean != 0;
    c->launch.stream_res_early = knobs.stream_res_early == 1;
    c->launch.sample_blocks = knobs.sample_blocks;
    c->launch.sample_fast = knobs.sample_fast == 1;
    c->launch.attn_token_rows = mx_env_switch("MLXCEL_GPU_ATTN_TOKEN_ROWS");
    c->launch.tc_decode_tokens = knobs.tc_decode_tokens == 1 ? 2 : knobs.tc_decode_tokens;
    c->launch.tc_grouped = knobs.grouped == 1;
    c->launch.attn_decode = knobs.attn_decode == 1 && !c->launch.attn_token_rows;
    c->launch.attn_short = knobs.attn_short == 1;
    c->launch.attn_rope = knobs.attn_rope == 1;
    c->launch.attn_mma = knobs.attn_mma == 1;
    c->launch.scratch_bytes = mxg_attention_scratch_bytes(c->info.sm_count, 256);
    // The tensor-core decode product's split-column partial sums: 8 MB holds 32 splits of a 1024-row
    // product at 64 tokens (it uses fewer splits when they do not fit).
    if (c->launch.tc_decode_tokens > 0 && c->launch.scratch_bytes < ((size_t)8 << 20))
        c->launch.scratch_bytes = (size_t)8 << 20;
    // The pipelined prefill product's bf16 activations (CUDA only: 0 from the ROCm stub).
    const size_t pipe_bytes = mxg_matmul_pipe_scratch_bytes(c->launch.prefill_kernel);
    if (c->launch.scratch_bytes < pipe_bytes) c->launch.scratch_bytes = pipe_bytes;
    if (mxg_rt_malloc(&c->launch.scratch, c->launch.scratch_bytes, c->launch.stream, err) != 0) goto fail;
    c->launch.small_scratch_bytes = 64 * 1024;
    if (mxg_rt_malloc(&c->launch.small_scratch, c->launch.small_scratch_bytes, c->launch.stream, err) != 0) goto fail;
    // The split sample kernels' records: one per row of a batch that they take (at most one row per
    // multiprocessor, see mxg_sample_split_blocks); ~45 KB each, ~95 KB with the fast form.
    if (c->launch.sample_blocks > 1) {
        const size_t row_bytes = mxg_sample_split_row_bytes() + (c->launch.sample_fast ? mxg_sample_fast_row_bytes() : 0);
        c->launch.sample_scratch_bytes = row_bytes * (size_t)c->info.sm_count;
        if (mxg_rt_malloc(&c->launch.sample_scratch, c->launch.sample_scratch_bytes, c->launch.stream, err) != 0)
            goto fail;
    }
    // The fused MoE router's tickets (level 3): zeroed here, each launch leaves them zero.
    if (c->launch.moe_fused >= 3 &&
        mxg_rt_malloc(&c->launch.moe_tickets, MXG_MOE_MAX_TOKENS * sizeof(unsigned), c->launch.stream, err) != 0)
        goto fail;
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

// ---- tooling (gpu_backend.h) -------------------------------------------------------------------

void mx_gpu_use_graphs(mx_backend *be, bool on) { ctx_of(be)->use_graphs = on; }

void mx_gpu_use_fusion(mx_backend *be, bool on) { ctx_of(be)->fuse = on; }

int mx_gpu_graph_count(mx_backend *be) {
    int n = 0;
    for (int i = 0; i < ctx_of(be)->n_graphs; i++) n += ctx_of(be)->graphs[i].exec != NULL;
    return n;
}

void *mx_gpu_stream(mx_backend *be) { return ctx_of(be)->launch.stream; }

bool mx_gpu_sample_fast(mx_backend *be) { return mxg_sample_split_fast(&ctx_of(be)->launch); }
