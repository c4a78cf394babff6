// SPDX-License-Identifier: MIT
// GPU speed check without a model file: builds random affine 4-bit (group 64, bf16 scales) weights
// of a Qwen3 shape on the device (tests/gpu/bench_decode_model.c) and times the backend ops of one
// decode token (captured in a graph and replayed, and launched directly) at a given context, and of
// a prefill batch. It issues the same op sequence as a Qwen3 forward pass (the engine's model code,
// src/models/forward.c, is the reference for that), so its tok/s is the GPU backend's share of
// `mlxcel bench`. With a batch B > 0, last: a batched decode step of B sequences (token i the
// position `context` of slot i, the attention's decode hint on, as the engine's server steps),
// timed as a graph, and its per-op times.
// The MoE shape (qwen3-30b-a3b) also times the MoE MLP's records and its three pieces as the plan
// runner fuses them (norm + router + routing; expert gate/up + SwiGLU; expert down + combine), and,
// since direct launches of layer 0 over and over find its ~30 MB in the L2 cache, each half and
// piece as one graph over every layer ("graph ..." lines: device time a layer, each layer reading
// its own weights, as in the step). Its prefill defaults to 32 tokens and is at most
// MXG_MOE_MAX_TOKENS: longer MoE batches run per-row expert products that would take minutes.
// Usage: bench_gpu_decode [qwen3-0.6b|qwen3-8b|qwen3-30b-a3b] [context=512] [prefill=512, MoE 32] [replays=200]
//        [batch=0]
#include <stdio.h>
#include <stdlib.h>

#include "backends/gpu/gpu_backend.h"
#include "backends/gpu/gpu_rt.h"
#include "backends/gpu/kernels_fused.h"
#include "backends/gpu_entry.h"
#include "backends/plan.h"
#include "bench_decode_model.h"

static void run_plan(mx_backend *be, const mx_plan *p) {
    if (mx_plan_run(be, p, &bench_err) != 0) bench_die("run_plan");
}

static void run_op(mx_backend *be, mx_op op) {
    if (mx_run_op(be, op, &bench_err) != 0) bench_die(mx_op_kind_name(op.kind));
}

static mx_plan *new_plan(void) {
    mx_plan *p = mx_plan_create(&bench_err);
    if (!p) bench_die("plan");
    return p;
}

static float time_ms(void *e0, void *e1) {
    float ms = 0;
    if (mxg_rt_event_elapsed_ms(e0, e1, &ms, &bench_err) != 0) bench_die("timing");
    return ms;
}

// Average device time of one run of plan p over `reps` runs after `warm` untimed ones, in ms.
static float plan_ms(mx_backend *be, const mx_plan *p, int warm, int reps, void *e0, void *e1, void *stream) {
    for (int i = 0; i < warm; i++) run_plan(be, p);
    mxg_rt_event_record(e0, stream, &bench_err);
    for (int i = 0; i < reps; i++) run_plan(be, p);
    mxg_rt_event_record(e1, stream, &bench_err);
    return time_ms(e0, e1) / reps;
}

// Average device time of `stmt` over `reps` launches, in microseconds.
#define TIME_OP(label, n_tok, reps, stmt)                                          \
    do {                                                                            \
        for (int w_ = 0; w_ < 2; w_++) stmt;                                       \
        mxg_rt_event_record(e0, stream, &bench_err);                                \
        for (int r_ = 0; r_ < (reps); r_++) stmt;                                  \
        mxg_rt_event_record(e1, stream, &bench_err);                                \
        printf("  %-22s n=%-4d %9.2f us\n", label, n_tok, 1e3 * time_ms(e0, e1) / (reps)); \
    } while (0)

#define OP(KIND, field, ...) run_op(be, (mx_op){.kind = KIND, .field = {__VA_ARGS__}})

// Times a plan of records that `add` appends for layer 0 (n tokens), direct launches.
#define TIME_PLAN(label, n, reps, add)     \
    do {                                    \
        mx_plan *tp_ = new_plan();          \
        add;                                \
        TIME_OP(label, n, reps, run_plan(be, tp_)); \
        mx_plan_free(be, tp_);              \
    } while (0)

// The MoE MLP's records one by one (the gate record stands for up: the same shape), and its three
// pieces as the plan runner fuses them (by default norm + router one launch and the routing one;
// gate/up + SwiGLU one; down + combine one; MLXCEL_GPU_MOE_FUSED changes which).
static void moe_op_times(mx_backend *be, bench_model *m, int n, int reps, void *e0, void *e1, void *stream) {
    const bench_shape *s = &m->s;
    const bench_layer *L = &m->L[0];
    const int K = s->top_k;
    TIME_OP("router product", n, reps, OP(MX_OP_MATMUL, matmul, m->router, m->h, &L->router, NULL, n));
    TIME_OP("moe route", n, reps,
            OP(MX_OP_MOE_ROUTE, moe_route, m->moe_ids, m->moe_w, m->router, n, s->experts, K, true));
    TIME_PLAN("moe router plan", n, reps, bench_add_moe_router(tp_, m, L, n));
    TIME_OP("moe matmul gate", n, reps,
            OP(MX_OP_MOE_MATMUL, moe_matmul, m->g, m->h, &L->gate, m->moe_ids, n * K, K));
    TIME_OP("swiglu", n, reps, OP(MX_OP_SWIGLU, swiglu, m->g, m->g, m->u, (int64_t)n * K * s->inter));
    TIME_OP("moe matmul down", n, reps,
            OP(MX_OP_MOE_MATMUL, moe_matmul, m->moe_y, m->g, &L->down, m->moe_ids, n * K, 1));
    TIME_OP("moe combine", n, reps, OP(MX_OP_MOE_COMBINE, moe_combine, m->x, m->moe_y, m->moe_w, n, K, s->hidden));
    TIME_PLAN("moe gate/up plan", n, reps, bench_add_moe_gate_up(tp_, m, L, n));
    TIME_PLAN("moe down/combine plan", n, reps, bench_add_moe_down(tp_, m, L, n));
}

// Per-op device times of layer 0 (and the output projection) for a batch of n tokens (decode: a
// batched decode step, the attention's hint on), of the q/k norm + RoPE + KV store records as the
// plan runner fuses them into one launch, and of the layer's halves and the whole layer as plans.
static void op_times(mx_backend *be, bench_model *m, int n, bool decode, void *e0, void *e1, void *stream) {
    const bench_shape *s = &m->s;
    const bench_layer *L = &m->L[0];
    mx_rope rope = {.inv_freq = m->inv_freq, .head_dim = s->head_dim, .attn_factor = 1.0f, .rot_dim = s->head_dim};
    mx_kv_ref kv = bench_kv_ref(m, 0);
    const bool moe = s->experts > 0;
    int reps = n == 1 ? 200 : 10;
    printf("per-op times, %d token%s%s:\n", n, n == 1 ? "" : "s", decode ? " (batched decode)" : "");
    TIME_OP("rmsnorm", n, reps, OP(MX_OP_RMSNORM, rmsnorm, m->h, m->x, L->in_norm, n, s->hidden, 1e-6f));
    TIME_OP("matmul q", n, reps, OP(MX_OP_MATMUL, matmul, m->q, m->h, &L->q, NULL, n));
    TIME_OP("matmul k", n, reps, OP(MX_OP_MATMUL, matmul, m->k, m->h, &L->k, NULL, n));
    TIME_OP("q/k norm", n, reps, OP(MX_OP_RMSNORM, rmsnorm, m->q, m->q, L->q_norm, n * s->heads, s->head_dim, 1e-6f));
    TIME_OP("rope q", n, reps, OP(MX_OP_ROPE, rope, m->q, m->pos, n, s->heads, rope));
    TIME_OP("kv_store", n, reps, OP(MX_OP_KV_STORE, kv_store, kv, m->k, m->v, n));
    TIME_OP("attention", n, reps, OP(MX_OP_ATTENTION, attention, m->att, m->q, kv, n, s->heads, 0.0883883f, 0, NULL, decode));
    TIME_PLAN("q/k norm+rope+kv fused", n, reps, bench_add_qk_rope_kv(tp_, m, L, kv, n));
    TIME_OP("matmul o", n, reps, OP(MX_OP_MATMUL, matmul, m->tmp, m->att, &L->o, NULL, n));
    TIME_OP("add", n, reps, OP(MX_OP_ADD, add, m->x, m->tmp, (int64_t)n * s->hidden));
    if (moe) {
        moe_op_times(be, m, n, reps, e0, e1, stream);
    } else {
        TIME_OP("matmul gate", n, reps, OP(MX_OP_MATMUL, matmul, m->g, m->h, &L->gate, NULL, n));
        TIME_OP("swiglu", n, reps, OP(MX_OP_SWIGLU, swiglu, m->g, m->g, m->u, (int64_t)n * s->inter));
        TIME_OP("matmul down", n, reps, OP(MX_OP_MATMUL, matmul, m->tmp, m->g, &L->down, NULL, n));
    }
    // The layer's second half as plans, as the plan runner fuses them: o-proj + add, RMSNorm,
    // gate/up, SwiGLU, down + add (three launches), and from the RMSNorm on (two); MoE: o-proj +
    // add, then the three pieces above.
    for (int o = 1; o >= 0; o--) {
        const char *label = moe ? (o ? "o-proj + moe half plan" : "moe half plan")
                                : (o ? "o-proj + mlp half plan" : "mlp half plan");
        TIME_PLAN(label, n, reps, bench_add_mlp_half(tp_, m, L, n, o));
    }
    // The layer's first half as a plan (RMSNorm + q/k/v, the attention with the q/k norm + RoPE + KV
    // store folded in: two or three launches), and the whole layer; with the second half's times
    // above, what the launch boundaries around the attention cost.
    TIME_PLAN("attention half plan", n, reps, bench_add_attn_half(tp_, m, L, kv, n, decode));
    TIME_PLAN("layer plan", n, reps, (bench_add_attn_half(tp_, m, L, kv, n, decode), bench_add_mlp_half(tp_, m, L, n, true)));
    if (n == 1) {
        TIME_OP("lm_head", 1, reps, OP(MX_OP_MATMUL, matmul, m->logits, m->last, &m->lm_head, NULL, 1));
        TIME_OP("argmax", 1, reps, OP(MX_OP_ARGMAX, argmax, m->next_id, m->logits, 1, s->vocab));
    }
}

// The pieces of a layer that graph_times times, each as the records of every layer in turn.
typedef enum piece { PIECE_ATTN, PIECE_MLP_O, PIECE_MLP, PIECE_ROUTER, PIECE_GATE_UP, PIECE_DOWN, PIECE_LAYER } piece;

static void add_piece(mx_plan *p, const bench_model *m, int l, piece what) {
    const bench_layer *L = &m->L[l];
    if (what == PIECE_ATTN || what == PIECE_LAYER) bench_add_attn_half(p, m, L, bench_kv_ref(m, l), 1, true);
    if (what == PIECE_MLP_O || what == PIECE_MLP || what == PIECE_LAYER)
        bench_add_mlp_half(p, m, L, 1, what != PIECE_MLP);
    if (what == PIECE_ROUTER) bench_add_moe_router(p, m, L, 1);
    if (what == PIECE_GATE_UP) bench_add_moe_gate_up(p, m, L, 1);
    if (what == PIECE_DOWN) bench_add_moe_down(p, m, L, 1);
}

// One decode token's layer pieces (MoE shape) as the step runs them: a graph of the piece's
// records for every layer, replayed; its device time over the layers, in us a layer. Each layer's
// weights are its own, so the L2 cache holds what it holds in the step (the routing of every layer
// is the one the last routing record left in the ids, as it would be with the weights at random).
static void graph_times(mx_backend *be, bench_model *m, int reps, void *e0, void *e1, void *stream) {
    static const struct {
        piece what;
        const char *label;
    } pieces[] = {
        {PIECE_ATTN, "graph attention half"}, {PIECE_MLP_O, "graph o-proj + moe half"}, {PIECE_MLP, "graph moe half"},
        {PIECE_ROUTER, "graph moe router"},    {PIECE_GATE_UP, "graph moe gate/up"},      {PIECE_DOWN, "graph moe down/combine"},
        {PIECE_LAYER, "graph layer"},
    };
    printf("per-layer times, 1 token, each piece of all %d layers in one graph:\n", m->s.layers);
    mx_gpu_use_graphs(be, true);
    for (size_t i = 0; i < sizeof pieces / sizeof pieces[0]; i++) {
        mx_plan *p = new_plan();
        for (int l = 0; l < m->s.layers; l++) add_piece(p, m, l, pieces[i].what);
        const float ms = plan_ms(be, p, 3, reps, e0, e1, stream);  // recorded on the second run
        printf("  %-24s %9.2f us a layer\n", pieces[i].label, 1e3 * ms / m->s.layers);
        mx_plan_free(be, p);
    }
    mx_gpu_use_graphs(be, false);
}

// Argument i of argv as an integer in [lo, hi], or `def` when absent; exits 1 when malformed.
static int arg_int(int argc, char **argv, int i, const char *name, int def, int lo, int hi) {
    if (argc <= i) return def;
    char *end;
    long v = strtol(argv[i], &end, 10);
    if (end == argv[i] || *end || v < lo || v > hi) {
        fprintf(stderr, "bench_gpu_decode: %s '%s' must be an integer in %d..%d\n", name, argv[i], lo, hi);
        exit(1);
    }
    return (int)v;
}

int main(int argc, char **argv) {
    if (argc > 6) {
        fprintf(stderr, "usage: bench_gpu_decode [%s] [context=512] [prefill=512, MoE 32] [replays=200] [batch=0]\n",
                bench_shape_names());
        return 1;
    }
    const char *name = argc > 1 ? argv[1] : "qwen3-0.6b";
    const bench_shape *s = bench_shape_find(name);
    if (!s) {
        fprintf(stderr, "bench_gpu_decode: unknown shape '%s' (shapes: %s)\n", name, bench_shape_names());
        return 1;
    }
    const bool moe = s->experts > 0;
    int ctx = arg_int(argc, argv, 2, "context", 512, 0, 1 << 20);
    int prefill = arg_int(argc, argv, 3, "prefill", moe ? 32 : 512, 1, moe ? MXG_MOE_MAX_TOKENS : 1 << 16);
    int replays = arg_int(argc, argv, 4, "replays", 200, 4, 1 << 20);
    int batch = arg_int(argc, argv, 5, "batch", 0, 0, 4096);
    mx_backend_options opt = {.name = mx_gpu_backend_name()};
    mx_backend *be = mx_gpu_backend_create(&opt, &bench_err);
    if (!be) {
        printf("skipped: %s\n", bench_err.msg);
        return 77;
    }
    bench_model m;
    int cap = prefill > batch ? prefill : batch;
    int max_ctx = (ctx > prefill ? ctx : prefill) + 8;
    bench_model_init(be, &m, s, cap, max_ctx, batch > 1 ? batch : 1, prefill - 1);

    void *e0, *e1, *stream = mx_gpu_stream(be);
    if (mxg_rt_event_create(&e0, &bench_err) || mxg_rt_event_create(&e1, &bench_err)) bench_die("events");
    printf("%s: %d layers, weights %.1f MB (layers %.1f MB), device %s\n", s->name, s->layers, m.weight_bytes / 1e6,
           m.layers_bytes / 1e6, be->device_name);
    if (moe)
        printf("moe: %d experts of %d, %d a token; a decode token reads %.1f MB of weights (%.1f MB a layer)\n",
               s->experts, s->inter, s->top_k, m.read_bytes / 1e6,
               (m.read_bytes - (m.weight_bytes - m.layers_bytes)) / s->layers / 1e6);

    // Prefill: n tokens at positions 0..n-1 (fills the cache), direct launches, best of 3.
    mx_gpu_use_graphs(be, false);
    // (the attention's decode hint as the engine sets it: at most MX_DECODE_SLOT_TOKENS in the slot)
    mx_plan *prefill_plan = bench_forward_plan(&m, prefill, m.last_row, prefill <= MX_DECODE_SLOT_TOKENS);
    float best = 1e30f;
    for (int rep = 0; rep < 3; rep++) {
        float ms = plan_ms(be, prefill_plan, 0, 1, e0, e1, stream);
        best = ms < best ? ms : best;
    }
    if (be->ops->sync(be, &bench_err) != 0) bench_die("prefill");
    printf("prefill %d tokens: %.2f ms, %.0f tok/s\n", prefill, best, prefill / (best / 1e3));

    // Decode: one token at position ctx.
    int32_t p = ctx;
    be->ops->upload(be, m.pos, &p, 4, &bench_err);
    mx_plan *decode_plan = bench_forward_plan(&m, 1, NULL, true);  // the engine's one-token step
    float direct = plan_ms(be, decode_plan, 3, replays / 4, e0, e1, stream);
    mx_gpu_use_graphs(be, true);
    float graphed = plan_ms(be, decode_plan, 5, replays, e0, e1, stream);  // recorded on the second run
    if (be->ops->sync(be, &bench_err) != 0) bench_die("decode");
    double kvb = 2.0 * s->layers * s->kv_heads * s->head_dim * 2.0 * ctx;
    printf("decode at context %d: %.3f ms/token graph (%.0f tok/s, %.0f GB/s of weights+KV), %.3f ms direct (%.0f tok/s)\n",
           ctx, graphed, 1e3 / graphed, (m.read_bytes + kvb) / (graphed / 1e3) / 1e9, direct, 1e3 / direct);
    mx_plan_free(be, decode_plan);
    mx_plan_free(be, prefill_plan);
    mx_gpu_use_graphs(be, false);  // op_times' fused q/k plan: direct launches, as its single records
    op_times(be, &m, 1, false, e0, e1, stream);
    if (moe) graph_times(be, &m, replays / 4, e0, e1, stream);
    int32_t *mid = malloc(sizeof(int32_t) * (size_t)prefill);
    if (!mid) bench_die("positions");
    for (int i = 0; i < prefill; i++) mid[i] = i;
    be->ops->upload(be, m.pos, mid, sizeof(int32_t) * (size_t)prefill, &bench_err);
    free(mid);
    op_times(be, &m, prefill, false, e0, e1, stream);
    if (be->ops->sync(be, &bench_err) != 0) bench_die("op times");
    if (batch > 0) {  // token i at position ctx of slot i (the cache holds what the runs above left)
        int32_t *bpos = malloc(sizeof(int32_t) * (size_t)batch), *bslot = malloc(sizeof(int32_t) * (size_t)batch);
        if (!bpos || !bslot) bench_die("batch");
        for (int i = 0; i < batch; i++) bpos[i] = ctx, bslot[i] = i;
        be->ops->upload(be, m.pos, bpos, sizeof(int32_t) * (size_t)batch, &bench_err);
        be->ops->upload(be, m.slot, bslot, sizeof(int32_t) * (size_t)batch, &bench_err);
        free(bpos), free(bslot);
        mx_plan *step = bench_forward_plan(&m, batch, m.last_row + 1, true);
        mx_gpu_use_graphs(be, true);
        const float ms = plan_ms(be, step, 5, replays / 4, e0, e1, stream);  // recorded on the second run
        printf("batched decode step of %d sequences at context %d: %.3f ms graph (%.0f tok/s)\n", batch, ctx, ms,
               batch * 1e3 / ms);
        mx_plan_free(be, step);
        mx_gpu_use_graphs(be, false);
        op_times(be, &m, batch, true, e0, e1, stream);
        if (be->ops->sync(be, &bench_err) != 0) bench_die("batched decode");
    }
    mxg_rt_event_destroy(e0), mxg_rt_event_destroy(e1);
    bench_model_free(be, &m);
    mx_backend_free(be);
    return 0;
}
