// SPDX-License-Identifier: MIT
// The GPU plan runner. Records run in order; where a run of adjacent records matches a pattern with
// a fused kernel (kernels_fused.h), that kernel replaces them. The patterns, tried at each record:
// - RMSNorm of one row followed by 1-3 matrix-vector products of its output (q/k/v; gate/up):
//   one launch that normalizes while staging the row;
// - the same products without the norm (matmuls sharing one input row);
// - gate and up products followed by the SwiGLU of their outputs: the SwiGLU in the epilogue;
// - a matrix-vector product followed by the residual add of its output: the add in the epilogue;
// - q/k RMSNorms and the RoPE of q and k (or the two RoPEs alone), and the KV-cache store of the
//   rotated k and of v that follows them: one launch; with L->attn_rope (MLXCEL_GPU_ATTN_ROPE=1),
//   a one-token step's decode attention that follows too (kernels/attn_decode.cu);
// - a product of several tokens on the tensor-core decode product followed by the residual add of
//   its output: the add in the product's final writer, where that product takes it (kernels.h).
// - unless MLXCEL_GPU_GROUPED=0, 2-3 products of several tokens sharing their input on the
//   tensor-core decode product (q/k/v; gate/up, with the SwiGLU that follows): one grouped launch.
// - MoE decode (L->moe_fused): the gate and up expert products followed by the SwiGLU of their
//   outputs (at level 2 with the routing before them), one launch; the down expert product
//   followed by the combine of its output, one launch (kernels/moe_stream.cu); at level 3 also the
//   RMSNorm, router product and routing records before them, one launch (kernels/moe_router.cu).
// A fused kernel writes every buffer the records write, with the same values up to float32
// summation order, so a plan's results do not depend on which patterns matched; the conformance
// test (tests/gpu/test_gpu_conformance.c) runs each pattern against the CPU backend. Anything that
// does not match (other formats, batches of several tokens outside these patterns, aliasing
// buffers) runs record by record.
#include "backends/gpu/gpu_plan.h"

#include <string.h>

#include "backends/gpu/kernels_fused.h"
#include "backends/gpu/kernels_sample.h"

static void run_record(const mxg_launch *L, const mx_op *op) {
    switch (op->kind) {
    case MX_OP_EMBED: mxg_embed(L, op->embed.out, op->embed.w, op->embed.ids, op->embed.n); break;
    case MX_OP_MATMUL: mxg_matmul(L, op->matmul.out, op->matmul.x, op->matmul.w, op->matmul.bias, op->matmul.n); break;
    case MX_OP_RMSNORM:
        mxg_rmsnorm(L, op->rmsnorm.out, op->rmsnorm.x, op->rmsnorm.w, op->rmsnorm.n, op->rmsnorm.dim, op->rmsnorm.eps);
        break;
    case MX_OP_ROPE: mxg_rope(L, op->rope.x, op->rope.pos, op->rope.n, op->rope.n_heads, &op->rope.rope); break;
    case MX_OP_KV_STORE: mxg_kv_store(L, &op->kv_store.kv, op->kv_store.k, op->kv_store.v, op->kv_store.n); break;
    case MX_OP_ATTENTION:
        mxg_attention(L, op->attention.out, op->attention.q, &op->attention.kv, op->attention.n, op->attention.n_heads,
                      op->attention.scale, op->attention.window, op->attention.sinks, op->attention.decode);
        break;
    case MX_OP_SWIGLU: mxg_swiglu(L, op->swiglu.out, op->swiglu.gate, op->swiglu.up, op->swiglu.count); break;
    case MX_OP_ADD: mxg_add(L, op->add.x, op->add.y, op->add.count); break;
    case MX_OP_MOE_ROUTE:
        mxg_moe_route(L, op->moe_route.ids, op->moe_route.weights, op->moe_route.logits, op->moe_route.n,
                      op->moe_route.n_experts, op->moe_route.k, op->moe_route.norm_topk);
        break;
    case MX_OP_MOE_MATMUL:
        mxg_moe_matmul(L, op->moe_matmul.out, op->moe_matmul.x, op->moe_matmul.w, op->moe_matmul.ids,
                       op->moe_matmul.m, op->moe_matmul.x_div);
        break;
    case MX_OP_MOE_COMBINE:
        mxg_moe_combine(L, op->moe_combine.out, op->moe_combine.y, op->moe_combine.weights, op->moe_combine.n,
                        op->moe_combine.k, op->moe_combine.dim);
        break;
    case MX_OP_GATHER_ROWS:
        mxg_gather_rows(L, op->gather_rows.out, op->gather_rows.x, op->gather_rows.rows, op->gather_rows.n,
                        op->gather_rows.dim);
        break;
    case MX_OP_ARGMAX: mxg_argmax(L, op->argmax.ids, op->argmax.logits, op->argmax.n, op->argmax.vocab); break;
    case MX_OP_SAMPLE:
        mxg_sample(L, op->sample.out, op->sample.logits, op->sample.n, op->sample.vocab, op->sample.rows,
                   op->sample.mods);
        break;
    case MX_OP_GEGLU: mxg_geglu(L, op->geglu.out, op->geglu.gate, op->geglu.up, op->geglu.count); break;
    case MX_OP_SCALE: mxg_scale(L, op->scale.x, op->scale.count, op->scale.scale); break;
    case MX_OP_LATENT_STORE:
        mxg_latent_store(L, &op->latent_store.kv, op->latent_store.c_kv, op->latent_store.k_pe, op->latent_store.n,
                         op->latent_store.kv_lora, op->latent_store.rope);
        break;
    case MX_OP_LATENT_ATTENTION:
        mxg_latent_attention(L, op->latent_attention.out, op->latent_attention.q_lat, op->latent_attention.q_pe,
                             &op->latent_attention.kv, op->latent_attention.n, op->latent_attention.n_heads,
                             op->latent_attention.kv_lora, op->latent_attention.rope, op->latent_attention.scale);
        break;
    case MX_OP_MOE_ROUTE_GROUPED:
        mxg_moe_route_grouped(L, op->moe_route_grouped.ids, op->moe_route_grouped.weights,
                              op->moe_route_grouped.logits, op->moe_route_grouped.bias, op->moe_route_grouped.n,
                              op->moe_route_grouped.n_experts, op->moe_route_grouped.k, op->moe_route_grouped.n_group,
                              op->moe_route_grouped.topk_group, op->moe_route_grouped.norm_topk,
                              op->moe_route_grouped.scaling);
        break;
    case MX_OP_SWIGLU_CLAMPED:
        mxg_swiglu_clamped(L, op->swiglu_clamped.out, op->swiglu_clamped.gate, op->swiglu_clamped.up,
                           op->swiglu_clamped.count, op->swiglu_clamped.limit, op->swiglu_clamped.alpha);
        break;
    case MX_OP_EXPERT_BIAS:
        mxg_expert_bias(L, op->expert_bias.x, op->expert_bias.bias, op->expert_bias.ids, op->expert_bias.m,
                        op->expert_bias.dim);
        break;
    case MX_OP_KIND_COUNT: break;
    }
}

enum { kMaxNormFusedRows = 65536 };

static bool is_matmul_of(const mx_op *op, int n) { return op->kind == MX_OP_MATMUL && op->matmul.n == n; }
static bool is_matvec(const mx_op *op) { return is_matmul_of(op, 1); }

// Matmul records of n tokens i.. reading x (at most 3, outputs distinct from x and from each other).
static int shared_input_run(const mx_plan *p, int i, const float *x, const float *avoid, int n) {
    int k = 0;
    while (k < 3 && i + k < p->n_ops && is_matmul_of(&p->ops[i + k], n) && p->ops[i + k].matmul.x == x) {
        const float *o = p->ops[i + k].matmul.out;
        if (o == x || o == avoid) break;
        bool clash = false;
        for (int j = 0; j < k; j++) clash |= p->ops[i + j].matmul.out == o;
        if (clash) break;
        k++;
    }
    return k;
}

// Tries the matrix-vector patterns at record i; returns the records consumed (0: no match).
static int try_matvec(const mxg_launch *L, const mx_plan *p, int i) {
    const mx_op *op = &p->ops[i];
    mxg_fused_matvec f = {0};
    int used = 0;
    if (op->kind == MX_OP_RMSNORM && op->rmsnorm.n == 1 && op->rmsnorm.out != op->rmsnorm.x) {
        f.norm_w = op->rmsnorm.w, f.norm_eps = op->rmsnorm.eps, f.norm_out = op->rmsnorm.out;
        f.x = op->rmsnorm.x;
        used = 1;
        f.count = shared_input_run(p, i + 1, op->rmsnorm.out, op->rmsnorm.x, 1);
        if (f.count == 0 || op->rmsnorm.dim != p->ops[i + 1].matmul.w->cols) return 0;
    } else if (is_matvec(op)) {
        f.x = op->matmul.x;
        f.count = shared_input_run(p, i, op->matmul.x, NULL, 1);
        if (f.count == 0) return 0;
    } else {
        return 0;
    }
    int64_t rows = 0;
    for (int k = 0; k < f.count; k++) {
        const mx_op *m = &p->ops[i + used + k];
        f.w[k] = m->matmul.w, f.out[k] = m->matmul.out, f.bias[k] = m->matmul.bias;
        rows += m->matmul.w->rows;
    }
    // Every block of a fused launch re-reads the input row (and the norm weights): worth it for the
    // layer's projections, not for the output head's vocabulary-sized one.
    if (f.norm_w && rows > kMaxNormFusedRows) return 0;
    const mx_op *next = i + used + f.count < p->n_ops ? &p->ops[i + used + f.count] : NULL;
    // gate, up, swiglu(out, gate, up)
    if (f.count == 2 && next && next->kind == MX_OP_SWIGLU && next->swiglu.gate == f.out[0] &&
        next->swiglu.up == f.out[1] && next->swiglu.count == f.w[0]->rows && next->swiglu.out != f.out[1] &&
        next->swiglu.out != f.x && next->swiglu.out != f.norm_out) {
        f.act = next->swiglu.out;
        if (mxg_fused_matvec_ok(&f)) {
            mxg_run_fused_matvec(L, &f);
            return used + 3;
        }
        f.act = NULL;
    }
    // matmul(out), add(res, out)
    if (f.count == 1 && next && next->kind == MX_OP_ADD && next->add.y == f.out[0] &&
        next->add.count == f.w[0]->rows && next->add.x != f.out[0] && next->add.x != f.x &&
        next->add.x != f.norm_out) {
        f.res = next->add.x;
        if (mxg_fused_matvec_ok(&f)) {
            mxg_run_fused_matvec(L, &f);
            return used + 2;
        }
        f.res = NULL;
    }
    if (f.count == 1 && !f.norm_w) return 0;  // a single plain product: the one-record kernel
    // Three products into q/k/v (or two): fewer when the full run has no kernel.
    if (mxg_fused_matvec_ok(&f)) {
        mxg_run_fused_matvec(L, &f);
        return used + f.count;
    }
    return 0;
}

// With L->tc_grouped (on unless MLXCEL_GPU_GROUPED=0): 2-3 matmuls of n tokens sharing their input (q/k/v;
// gate/up), on the tensor-core decode product's batches (the tokens mxg_matmul sends to it), as
// one grouped launch (mxg_matvec_mma_group: one product launch over every matrix's rows, one sum
// launch), and gate, up, swiglu(act, gate, up) with the SwiGLU in that sum launch (the one-token
// pattern's checks: act takes the whole output and is neither up nor the input). 0: no match, or
// the product declined (then the records run, each on its own kernel).
static int try_tc_group(const mxg_launch *L, const mx_plan *p, int i) {
    const mx_op *op = &p->ops[i];
    if (!L->tc_grouped || !L->use_mma || L->tc_decode_tokens <= 0) return 0;
    if (op->kind != MX_OP_MATMUL || op->matmul.n < 2 || op->matmul.n < L->tc_decode_tokens) return 0;
    const int n = op->matmul.n;
    mxg_fused_matvec f = {0};
    f.x = op->matmul.x;
    f.count = shared_input_run(p, i, f.x, NULL, n);
    if (f.count < 2) return 0;
    for (int k = 0; k < f.count; k++) {
        const mx_op *m = &p->ops[i + k];
        f.w[k] = m->matmul.w, f.out[k] = m->matmul.out, f.bias[k] = m->matmul.bias;
    }
    const mx_op *next = i + f.count < p->n_ops ? &p->ops[i + f.count] : NULL;
    if (f.count == 2 && next && next->kind == MX_OP_SWIGLU && next->swiglu.gate == f.out[0] &&
        next->swiglu.up == f.out[1] && next->swiglu.count == (int64_t)n * f.w[0]->rows &&
        f.w[1]->rows == f.w[0]->rows && next->swiglu.out != f.out[1] && next->swiglu.out != f.x) {
        f.act = next->swiglu.out;
        if (mxg_matvec_mma_group(L, &f, n) == 0) return 3;
        f.act = NULL;
    }
    return mxg_matvec_mma_group(L, &f, n) == 0 ? f.count : 0;
}

// matmul(out) of n tokens on the tensor-core decode product, add(res, out): the add done by the
// product's final writer (mxg_matvec_mma_add: its store, or the kernel adding its column splits),
// with the one-token pattern's checks (the add takes the whole output; res is neither the output
// nor the input). 0: no match, or the product declined.
static int try_tc_residual(const mxg_launch *L, const mx_plan *p, int i) {
    const mx_op *op = &p->ops[i];
    if (!L->use_mma || L->tc_decode_tokens <= 0 || i + 1 >= p->n_ops) return 0;
    if (op->kind != MX_OP_MATMUL || op->matmul.n < 2 || op->matmul.n < L->tc_decode_tokens) return 0;
    const mx_op *next = &p->ops[i + 1];
    if (next->kind != MX_OP_ADD || next->add.y != op->matmul.out ||
        next->add.count != (int64_t)op->matmul.n * op->matmul.w->rows || next->add.x == op->matmul.out ||
        next->add.x == op->matmul.x)
        return 0;
    return mxg_matvec_mma_add(L, op->matmul.out, op->matmul.x, op->matmul.w, op->matmul.bias, op->matmul.n,
                              next->add.x) == 0
               ? 2
               : 0;
}

// [moe_route,] moe_matmul gate, moe_matmul up (same input, ids, rows and shapes), swiglu(act, gate,
// up): one launch (the routing only at L->moe_fused 2, its ids those of the products, k their
// x_div); or moe_matmul down (x_div 1), moe_combine(out, y = its output): one launch. No output may
// be a buffer the launch reads (x; the router's logits; the combine's weights).
static int try_moe_gate_up(const mxg_launch *L, const mx_plan *p, int i) {
    const mx_op *r = p->ops[i].kind == MX_OP_MOE_ROUTE ? &p->ops[i] : NULL;
    const int g = r ? i + 1 : i;
    if (g + 2 >= p->n_ops || p->ops[g].kind != MX_OP_MOE_MATMUL || p->ops[g + 1].kind != MX_OP_MOE_MATMUL ||
        p->ops[g + 2].kind != MX_OP_SWIGLU)
        return 0;
    const mx_op *a = &p->ops[g], *b = &p->ops[g + 1], *sw = &p->ops[g + 2];
    const float *x = a->moe_matmul.x;
    if (b->moe_matmul.x != x || b->moe_matmul.ids != a->moe_matmul.ids || b->moe_matmul.m != a->moe_matmul.m ||
        b->moe_matmul.x_div != a->moe_matmul.x_div || a->moe_matmul.out == x || b->moe_matmul.out == x ||
        a->moe_matmul.out == b->moe_matmul.out || sw->swiglu.gate != a->moe_matmul.out ||
        sw->swiglu.up != b->moe_matmul.out || sw->swiglu.out == b->moe_matmul.out || sw->swiglu.out == x ||
        sw->swiglu.count != (int64_t)a->moe_matmul.m * a->moe_matmul.w->rows)
        return 0;
    mxg_moe_route_fold fold = {0};
    if (r) {
        const float *outs[4] = {a->moe_matmul.out, b->moe_matmul.out, sw->swiglu.out, r->moe_route.weights};
        if (r->moe_route.ids != a->moe_matmul.ids || r->moe_route.k != a->moe_matmul.x_div ||
            (int64_t)r->moe_route.n * r->moe_route.k != a->moe_matmul.m || r->moe_route.weights == x)
            return 0;
        for (int k = 0; k < 4; k++)
            if (outs[k] == r->moe_route.logits || (k < 3 && outs[k] == r->moe_route.weights)) return 0;
        fold = (mxg_moe_route_fold){r->moe_route.ids, r->moe_route.weights, r->moe_route.logits,
                                    r->moe_route.n_experts, r->moe_route.norm_topk};
    }
    if (!mxg_moe_gate_up_ok(L, a->moe_matmul.w, b->moe_matmul.w, x, a->moe_matmul.m, a->moe_matmul.x_div,
                            fold.n_experts))
        return 0;
    mxg_moe_gate_up(L, a->moe_matmul.out, b->moe_matmul.out, sw->swiglu.out, x, a->moe_matmul.w, b->moe_matmul.w,
                    a->moe_matmul.ids, a->moe_matmul.m, a->moe_matmul.x_div, r ? &fold : NULL);
    return r ? 4 : 3;
}

static int try_moe(const mxg_launch *L, const mx_plan *p, int i) {
    if (!L->moe_fused || i + 1 >= p->n_ops) return 0;
    if (p->ops[i].kind == MX_OP_MOE_ROUTE && L->moe_fused == 2) {
        const int used = try_moe_gate_up(L, p, i);
        if (used) return used;
    }
    if (p->ops[i].kind != MX_OP_MOE_MATMUL) return 0;
    const mx_op *a = &p->ops[i], *b = &p->ops[i + 1];
    if (b->kind == MX_OP_MOE_MATMUL) return try_moe_gate_up(L, p, i);
    if (b->kind == MX_OP_MOE_COMBINE) {
        float *y = a->moe_matmul.out, *out = b->moe_combine.out;
        const float *x = a->moe_matmul.x, *wts = b->moe_combine.weights;
        const int n = b->moe_combine.n, k = b->moe_combine.k;
        if (a->moe_matmul.x_div != 1 || b->moe_combine.y != y || (int64_t)n * k != a->moe_matmul.m ||
            b->moe_combine.dim != a->moe_matmul.w->rows || y == x || out == y || out == x || wts == y || wts == out ||
            !mxg_moe_down_combine_ok(L, a->moe_matmul.w, x, n, k))
            return 0;
        mxg_moe_down_combine(L, y, out, x, a->moe_matmul.w, a->moe_matmul.ids, wts, n, k);
        return 2;
    }
    return 0;
}

// Level 3: rmsnorm(h, x), matmul(logits, h, router), moe_route(ids, weights, logits) of the same
// tokens: one launch. Tried before the norm + product pattern, which would take the first two. The
// launch reads x, the norm's weight and the router and writes h, the logits, ids and weights: no
// output may be an input, and the outputs must differ.
static int try_moe_router(const mxg_launch *L, const mx_plan *p, int i) {
    if (L->moe_fused < 3 || i + 2 >= p->n_ops) return 0;
    const mx_op *nm = &p->ops[i], *mm = &p->ops[i + 1], *rt = &p->ops[i + 2];
    if (nm->kind != MX_OP_RMSNORM || mm->kind != MX_OP_MATMUL || rt->kind != MX_OP_MOE_ROUTE) return 0;
    const mx_matrix *w = mm->matmul.w;
    const float *h = nm->rmsnorm.out, *x = nm->rmsnorm.x, *lg = mm->matmul.out;
    const int n = nm->rmsnorm.n;
    if (mm->matmul.x != h || mm->matmul.n != n || rt->moe_route.n != n || nm->rmsnorm.dim != w->cols ||
        rt->moe_route.logits != lg || rt->moe_route.n_experts != w->rows)
        return 0;
    const void *ins[4] = {x, nm->rmsnorm.w, mm->matmul.bias, w->data};
    const void *outs[4] = {h, lg, rt->moe_route.ids, rt->moe_route.weights};
    for (int a = 0; a < 4; a++) {
        for (int b = 0; b < 4; b++)
            if (outs[a] == ins[b]) return 0;
        for (int b = a + 1; b < 4; b++)
            if (outs[a] == outs[b]) return 0;
    }
    if (!mxg_moe_router_ok(L, w, x, nm->rmsnorm.w, h, n, rt->moe_route.k)) return 0;
    mxg_moe_router(L, nm->rmsnorm.out, mm->matmul.out, rt->moe_route.ids, rt->moe_route.weights, x, nm->rmsnorm.w,
                   nm->rmsnorm.eps, w, mm->matmul.bias, n, rt->moe_route.k, rt->moe_route.norm_topk);
    return 3;
}

// The fused kernel rotates whole heads with one frequency table.
static bool plain_rope(const mx_rope *r) {
    return (r->rot_dim == 0 || r->rot_dim == r->head_dim) && r->long_inv_freq == NULL;
}

static bool same_rope(const mx_rope *a, const mx_rope *b) {
    return plain_rope(a) && plain_rope(b) && a->inv_freq == b->inv_freq && a->head_dim == b->head_dim &&
           a->attn_factor == b->attn_factor;
}

// Whether record `s` stores the rotated k of the q/k pattern (rope record rk) with a v that the
// fused launch may read while it writes q (rope record rq) and k: the same tokens and head shape,
// v neither q nor k.
static bool stores_rotated_k(const mx_op *s, const mx_op *rq, const mx_op *rk) {
    return s->kind == MX_OP_KV_STORE && s->kv_store.k == rk->rope.x && s->kv_store.n == rk->rope.n &&
           s->kv_store.kv.lay.n_kv_heads == rk->rope.n_heads && s->kv_store.kv.lay.head_dim == rk->rope.rope.head_dim &&
           s->kv_store.v != NULL && s->kv_store.v != rk->rope.x && s->kv_store.v != rq->rope.x;
}

// Whether record o may read the floats [b, b + count): a buffer argument it reads starts there
// (the forward's buffers are separate allocations). Kinds not listed: yes.
static bool op_reads(const mx_op *o, const float *b, int64_t count) {
    const float *in[4] = {NULL, NULL, NULL, NULL};
    switch (o->kind) {
    case MX_OP_EMBED: return false;
    case MX_OP_ARGMAX: in[0] = o->argmax.logits; break;
    case MX_OP_SAMPLE: in[0] = o->sample.logits; break;
    case MX_OP_MATMUL: in[0] = o->matmul.x, in[1] = o->matmul.bias; break;
    case MX_OP_RMSNORM: in[0] = o->rmsnorm.x, in[1] = o->rmsnorm.w; break;
    case MX_OP_ROPE: in[0] = o->rope.x; break;
    case MX_OP_KV_STORE: in[0] = o->kv_store.k, in[1] = o->kv_store.v; break;
    case MX_OP_ATTENTION: in[0] = o->attention.q, in[1] = o->attention.sinks; break;
    case MX_OP_SWIGLU: in[0] = o->swiglu.gate, in[1] = o->swiglu.up; break;
    case MX_OP_ADD: in[0] = o->add.x, in[1] = o->add.y; break;
    case MX_OP_MOE_ROUTE: in[0] = o->moe_route.logits; break;
    case MX_OP_MOE_MATMUL: in[0] = o->moe_matmul.x; break;
    case MX_OP_MOE_COMBINE: in[0] = o->moe_combine.out, in[1] = o->moe_combine.y, in[2] = o->moe_combine.weights; break;
    case MX_OP_GATHER_ROWS: in[0] = o->gather_rows.x; break;
    case MX_OP_GEGLU: in[0] = o->geglu.gate, in[1] = o->geglu.up; break;
    case MX_OP_SWIGLU_CLAMPED: in[0] = o->swiglu_clamped.gate, in[1] = o->swiglu_clamped.up; break;
    case MX_OP_SCALE: in[0] = o->scale.x; break;
    case MX_OP_EXPERT_BIAS: in[0] = o->expert_bias.x, in[1] = o->expert_bias.bias; break;
    case MX_OP_MOE_ROUTE_GROUPED: in[0] = o->moe_route_grouped.logits, in[1] = o->moe_route_grouped.bias; break;
    default: return true;
    }
    for (int i = 0; i < 4; i++)
        if (in[i] && in[i] >= b && in[i] < b + count) return true;
    return false;
}

// Whether a record after `from` reads [b, b + count) before a matrix product overwrites it whole.
static bool read_later(const mx_plan *p, int from, const float *b, int64_t count) {
    for (int i = from; i < p->n_ops; i++) {
        const mx_op *o = &p->ops[i];
        if (op_reads(o, b, count)) return true;
        if (o->kind == MX_OP_MATMUL && o->matmul.out == b && (int64_t)o->matmul.n * o->matmul.w->rows >= count)
            return false;
    }
    return false;
}

// Whether the records from i (the q/k pattern with its KV store, norms 0 or 2) are followed by the
// decode attention of the rotated q over the same cache, slots and positions, with an output that
// is none of q, k and v, and no later record reading the rotated q or k (a launch that folds the
// RoPE in leaves them unrotated).
static bool attn_follows_rope(const mx_plan *p, int i, int norms) {
    const mx_op *o = &p->ops[i], *rq = &o[norms], *rk = &o[norms + 1], *st = &o[norms + 2], *at = &o[norms + 3];
    if (i + norms + 3 >= p->n_ops || at->kind != MX_OP_ATTENTION) return false;
    const mx_kv_ref *a = &at->attention.kv, *b = &st->kv_store.kv;
    const int n = rq->rope.n, D = rq->rope.rope.head_dim;
    const float *q = rq->rope.x, *k = rk->rope.x, *v = st->kv_store.v;
    float *out = at->attention.out;
    const int64_t qn = (int64_t)n * rq->rope.n_heads * D, kn = (int64_t)n * rk->rope.n_heads * D;
    return at->attention.q == q && at->attention.n == n && at->attention.n_heads == rq->rope.n_heads &&
           a->kv == b->kv && a->layer == b->layer && a->slot == b->slot && a->pos == b->pos && a->table == b->table &&
           memcmp(&a->lay, &b->lay, sizeof a->lay) == 0 && out != q && out != k && out != v &&
           !read_later(p, i + norms + 4, q, qn) && !read_later(p, i + norms + 4, k, kn);
}

// The q/k pattern with its KV store (records nq..st, norms 0 or 2) followed by the decode attention
// of the rotated q over the same cache, slots and positions (L->attn_rope): one launch
// (mxg_attention_decode_rope), which leaves q and k unrotated, so only where no later record reads
// them. Returns the records used (0: not taken; the caller runs the q/k launch).
static int try_attn_rope(const mxg_launch *L, const mx_plan *p, int i, int norms) {
    if (!L->attn_rope || !attn_follows_rope(p, i, norms)) return 0;
    const mx_op *o = &p->ops[i], *rq = &o[norms], *rk = &o[norms + 1], *st = &o[norms + 2], *at = &o[norms + 3];
    const mx_kv_ref *a = &at->attention.kv;
    const float *q = rq->rope.x, *k = rk->rope.x, *v = st->kv_store.v;
    float *out = at->attention.out;
    const int n = rq->rope.n;
    const mxg_attn_rope f = {out, q, k, v, norms ? o[0].rmsnorm.w : NULL, norms ? o[1].rmsnorm.w : NULL,
                             norms ? o[0].rmsnorm.eps : 0.0f, rq->rope.pos, &rq->rope.rope, a, n,
                             rq->rope.n_heads, rk->rope.n_heads, at->attention.scale, at->attention.window,
                             at->attention.sinks, at->attention.decode};
    return mxg_attention_decode_rope(L, &f) == 0 ? norms + 4 : 0;
}

// The records of the q/k pattern (try_qk_norm_rope) at i: -1 when they do not match, else the norms (0 or 2); *store:
// whether the KV store record follows.
static int qk_rope_records(const mx_plan *p, int i, bool *store) {
    const mx_op *o = &p->ops[i];
    int norms = 0;
    if (i + 3 < p->n_ops && o[0].kind == MX_OP_RMSNORM && o[1].kind == MX_OP_RMSNORM && o[2].kind == MX_OP_ROPE)
        norms = 2;
    if (i + norms + 1 >= p->n_ops) return -1;
    const mx_op *rq = &o[norms], *rk = &o[norms + 1];
    if (rq->kind != MX_OP_ROPE || rk->kind != MX_OP_ROPE || rq->rope.pos != rk->rope.pos ||
        rq->rope.n != rk->rope.n || rq->rope.x == rk->rope.x || !same_rope(&rq->rope.rope, &rk->rope.rope))
        return -1;
    const int n = rq->rope.n, D = rq->rope.rope.head_dim;
    if (D % 2 != 0 || D > 2048) return -1;
    if (norms) {
        const mx_op *nq = &o[0], *nk = &o[1];
        if (nq->rmsnorm.out != rq->rope.x || nq->rmsnorm.x != rq->rope.x || nk->rmsnorm.out != rk->rope.x ||
            nk->rmsnorm.x != rk->rope.x || nq->rmsnorm.dim != D || nk->rmsnorm.dim != D ||
            nq->rmsnorm.n != n * rq->rope.n_heads || nk->rmsnorm.n != n * rk->rope.n_heads ||
            nq->rmsnorm.eps != nk->rmsnorm.eps)
            return -1;
    }
    const mx_op *st = i + norms + 2 < p->n_ops ? &o[norms + 2] : NULL;
    *store = st && stores_rotated_k(st, rq, rk);
    return norms;
}

// [RMSNorm q, RMSNorm k,] RoPE q, RoPE k (in place, per head, same positions)[, KV store of k and v]:
// one launch; with the decode attention that follows, where try_attn_rope takes it, one launch.
static int try_qk_norm_rope(const mxg_launch *L, const mx_plan *p, int i) {
    bool store = false;
    const int norms = qk_rope_records(p, i, &store);
    if (norms < 0) return 0;
    const mx_op *o = &p->ops[i], *rq = &o[norms], *rk = &o[norms + 1], *st = &o[norms + 2];
    const int n = rq->rope.n;
    if (store) {
        const int used = try_attn_rope(L, p, i, norms);
        if (used) return used;
    }
    mxg_qk_norm_rope(L, rq->rope.x, rk->rope.x, norms ? o[0].rmsnorm.w : NULL, norms ? o[1].rmsnorm.w : NULL,
                     rq->rope.pos, n, rq->rope.n_heads, rk->rope.n_heads, norms ? o[0].rmsnorm.eps : 0.0f,
                     &rq->rope.rope, store ? &st->kv_store.kv : NULL, store ? st->kv_store.v : NULL);
    return norms + 2 + (store ? 1 : 0);
}

void mxg_enqueue_plan(const mxg_launch *L, const mx_plan *plan, bool fuse) {
    for (int i = 0; i < plan->n_ops;) {
        int used = 0;
        if (fuse) used = try_moe_router(L, plan, i);
        if (fuse && !used) used = try_matvec(L, plan, i);
        if (fuse && !used) used = try_qk_norm_rope(L, plan, i);
        if (fuse && !used) used = try_tc_group(L, plan, i);
        if (fuse && !used) used = try_tc_residual(L, plan, i);
        if (fuse && !used) used = try_moe(L, plan, i);
        if (!used) run_record(L, &plan->ops[i]), used = 1;
        i += used;
    }
}
