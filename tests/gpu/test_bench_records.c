// SPDX-License-Identifier: MIT
// bench_gpu_decode must issue the op records the engine issues, or its times say nothing about the
// engine's: this test holds bench_decode_model.c's plans against src/models/forward.c's, record by
// record. For a small Qwen3 MoE and a small dense Qwen3 shape it writes the random model that
// `mlxcel bench --config` would (app/bench_model.c), loads it with the normal loader on the CPU
// backend, runs a prefill of PREFILL tokens and a one-token decode step through the engine, and
// records the plans the backend is handed (a CPU backend whose run_plan notes the records). The
// bench's prefill and decode plans of the same shape must match them: the same kinds in the same
// order, the same sizes and flags, and the same buffer aliasing, with every pointer named by where
// it first appears in its plan (so x, h, the router logits, the expert ids... must play the same
// roles in both) and every weight also by its shape. Usage: test_bench_records FOLDER (scratch).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backend.h"
#include "backends/plan.h"
#include "bench_decode_model.h"
#include "bench_model.h"
#include "models/model.h"

enum { PREFILL = 16, MAX_OPS = 512, LINE = 200 };

// ---- A plan as text: pointers named by first appearance --------------------------------------

typedef struct canon {
    const void *seen[4 * MAX_OPS];
    int n_seen;
    char (*lines)[LINE];
    int n;
} canon;

static const char *ptr(canon *c, const void *p, char *buf) {
    if (!p) return "NULL";
    int i = 0;
    while (i < c->n_seen && c->seen[i] != p) i++;
    if (i == c->n_seen && c->n_seen < 4 * MAX_OPS) c->seen[c->n_seen++] = p;
    snprintf(buf, 16, "b%d", i);
    return buf;
}

// A weight: its first-appearance name and its shape and format.
static const char *mat(canon *c, const mx_matrix *w, char *buf) {
    char b[16];
    snprintf(buf, 64, "%s[%lldx%lldx%lld q%d/%d]", ptr(c, w->data, b), (long long)w->n_experts, (long long)w->rows,
             (long long)w->cols, w->q.bits, w->q.group_size);
    return buf;
}

static void kv_text(canon *c, const mx_kv_ref *r, char *out, size_t n) {
    char a[16], b[16], t[16], k[16];
    snprintf(out, n, "kv(%s L%d slot=%s pos=%s table=%s heads%d D%d)", ptr(c, r->kv, k), r->layer, ptr(c, r->slot, a),
             ptr(c, r->pos, b), ptr(c, r->table, t), r->lay.n_kv_heads, r->lay.head_dim);
}

static void op_text(canon *c, const mx_op *o, char *s) {
    char a[16], b[16], d[16], e[16], w[64], kv[96];
    switch (o->kind) {
    case MX_OP_EMBED:
        snprintf(s, LINE, "embed %s %s %s n%d", ptr(c, o->embed.out, a), mat(c, o->embed.w, w), ptr(c, o->embed.ids, b),
                 o->embed.n);
        break;
    case MX_OP_MATMUL:
        snprintf(s, LINE, "matmul %s %s %s %s n%d", ptr(c, o->matmul.out, a), ptr(c, o->matmul.x, b),
                 mat(c, o->matmul.w, w), ptr(c, o->matmul.bias, d), o->matmul.n);
        break;
    case MX_OP_RMSNORM:
        snprintf(s, LINE, "rmsnorm %s %s %s n%d dim%d eps%g", ptr(c, o->rmsnorm.out, a), ptr(c, o->rmsnorm.x, b),
                 ptr(c, o->rmsnorm.w, d), o->rmsnorm.n, o->rmsnorm.dim, o->rmsnorm.eps);
        break;
    case MX_OP_ROPE:
        snprintf(s, LINE, "rope %s %s n%d heads%d freq=%s D%d factor%g rot%d long=%s", ptr(c, o->rope.x, a),
                 ptr(c, o->rope.pos, b), o->rope.n, o->rope.n_heads, ptr(c, o->rope.rope.inv_freq, d),
                 o->rope.rope.head_dim, o->rope.rope.attn_factor, o->rope.rope.rot_dim,
                 ptr(c, o->rope.rope.long_inv_freq, e));
        break;
    case MX_OP_KV_STORE:
        kv_text(c, &o->kv_store.kv, kv, sizeof kv);
        snprintf(s, LINE, "kv_store %s %s %s n%d", kv, ptr(c, o->kv_store.k, a), ptr(c, o->kv_store.v, b), o->kv_store.n);
        break;
    case MX_OP_ATTENTION:
        kv_text(c, &o->attention.kv, kv, sizeof kv);
        snprintf(s, LINE, "attention %s %s %s n%d heads%d scale%g window%d sinks=%s decode%d", ptr(c, o->attention.out, a),
                 ptr(c, o->attention.q, b), kv, o->attention.n, o->attention.n_heads, o->attention.scale,
                 o->attention.window, ptr(c, o->attention.sinks, d), o->attention.decode);
        break;
    case MX_OP_SWIGLU:
        snprintf(s, LINE, "swiglu %s %s %s count%lld", ptr(c, o->swiglu.out, a), ptr(c, o->swiglu.gate, b),
                 ptr(c, o->swiglu.up, d), (long long)o->swiglu.count);
        break;
    case MX_OP_ADD:
        snprintf(s, LINE, "add %s %s count%lld", ptr(c, o->add.x, a), ptr(c, o->add.y, b), (long long)o->add.count);
        break;
    case MX_OP_MOE_ROUTE:
        snprintf(s, LINE, "moe_route %s %s %s n%d experts%d k%d norm_topk%d", ptr(c, o->moe_route.ids, a),
                 ptr(c, o->moe_route.weights, b), ptr(c, o->moe_route.logits, d), o->moe_route.n,
                 o->moe_route.n_experts, o->moe_route.k, o->moe_route.norm_topk);
        break;
    case MX_OP_MOE_MATMUL:
        snprintf(s, LINE, "moe_matmul %s %s %s %s m%d x_div%d", ptr(c, o->moe_matmul.out, a), ptr(c, o->moe_matmul.x, b),
                 mat(c, o->moe_matmul.w, w), ptr(c, o->moe_matmul.ids, d), o->moe_matmul.m, o->moe_matmul.x_div);
        break;
    case MX_OP_MOE_COMBINE:
        snprintf(s, LINE, "moe_combine %s %s %s n%d k%d dim%d", ptr(c, o->moe_combine.out, a),
                 ptr(c, o->moe_combine.y, b), ptr(c, o->moe_combine.weights, d), o->moe_combine.n, o->moe_combine.k,
                 o->moe_combine.dim);
        break;
    case MX_OP_GATHER_ROWS:
        snprintf(s, LINE, "gather_rows %s %s %s n%d dim%d", ptr(c, o->gather_rows.out, a), ptr(c, o->gather_rows.x, b),
                 ptr(c, o->gather_rows.rows, d), o->gather_rows.n, o->gather_rows.dim);
        break;
    case MX_OP_ARGMAX:
        snprintf(s, LINE, "argmax %s %s n%d vocab%d", ptr(c, o->argmax.ids, a), ptr(c, o->argmax.logits, b),
                 o->argmax.n, o->argmax.vocab);
        break;
    default: snprintf(s, LINE, "%s (not compared)", mx_op_kind_name(o->kind)); break;
    }
}

static canon *canon_of(const mx_op *ops, int n) {
    canon *c = calloc(1, sizeof *c);
    if (!c || !(c->lines = calloc((size_t)n + 1, LINE))) exit(2);
    c->n = n;
    for (int i = 0; i < n; i++) op_text(c, &ops[i], c->lines[i]);
    return c;
}

static void canon_free(canon *c) {
    free(c->lines);
    free(c);
}

// ---- The CPU backend, noting the records of the plans it runs --------------------------------

static const mx_backend_ops *cpu_ops;
static mx_op noted[2][MAX_OPS];  // the engine's plans of more than one token, of one token
static int n_noted[2];

static int noting_run_plan(mx_backend *be, const mx_plan *p, mx_error *err) {
    int one = 0;  // a plan whose embedding (its first record) reads one token
    if (p->n_ops > 0 && p->ops[0].kind == MX_OP_EMBED) one = p->ops[0].embed.n == 1;
    if (p->n_ops <= MAX_OPS) {
        memcpy(noted[one], p->ops, sizeof(mx_op) * (size_t)p->n_ops);
        n_noted[one] = p->n_ops;
    }
    return cpu_ops->run_plan(be, p, err);
}

// ---- One shape --------------------------------------------------------------------------------

// 0 when the bench's plan (ops, n) reads like the engine's (the noted plan `which`), else 1.
static int compare(const char *what, const mx_op *bench, int n, int which) {
    canon *e = canon_of(noted[which], n_noted[which]), *b = canon_of(bench, n);
    int bad = 0;
    for (int i = 0; i < e->n || i < b->n; i++) {
        const char *el = i < e->n ? e->lines[i] : "(none)", *bl = i < b->n ? b->lines[i] : "(none)";
        if (strcmp(el, bl) == 0) continue;
        if (bad++ < 5) printf("%s record %d:\n  engine: %s\n  bench:  %s\n", what, i, el, bl);
    }
    printf("%s: %d records, %d differ\n", what, e->n, bad);
    canon_free(e), canon_free(b);
    return bad > 0;
}

static int check_shape(const char *folder, const char *config, const bench_shape *s) {
    mx_error err;
    char *text = bench_config_with_quant(config, 4, 64, "affine");
    if (!text || bench_random_model(folder, text) != 0) return 1;
    free(text);
    mx_backend_options opt = {.name = "cpu", .threads = 2};
    mx_backend *be = mx_backend_create(&opt, &err);
    if (!be) return printf("cpu backend: %s\n", err.msg), 1;
    static mx_backend_ops noting;
    cpu_ops = be->ops;
    noting = *be->ops;
    noting.run_plan = noting_run_plan;
    be->ops = &noting;
    mx_model *m = mx_model_load(folder, be, &err);
    mx_ctx *ctx = m ? mx_ctx_create(m, 1, 64, PREFILL, &err) : NULL;
    if (!ctx) return printf("%s: %s\n", folder, err.msg), 1;
    // The engine: a prefill whose last row gives the next token, then that token at PREFILL.
    int32_t tok[PREFILL], pos[PREFILL], slot[PREFILL] = {0}, last = PREFILL - 1, row0 = 0, id;
    for (int i = 0; i < PREFILL; i++) tok[i] = 3 + i, pos[i] = i;
    int32_t next_pos = PREFILL;
    mx_batch pre = {PREFILL, tok, pos, slot, 1, &last}, step = {1, tok, &next_pos, slot, 1, &row0};
    n_noted[0] = n_noted[1] = 0;
    if (mx_ctx_forward(ctx, &pre, NULL, &id, &err) || mx_ctx_forward(ctx, &step, NULL, &id, &err))
        return printf("forward: %s\n", err.msg), 1;
    // The bench, on the same backend and shape.
    bench_model bm;
    bench_model_init(be, &bm, s, PREFILL, 64, 1, PREFILL - 1);
    mx_plan *bp = bench_forward_plan(&bm, PREFILL, bm.last_row, false), *bd = bench_forward_plan(&bm, 1, NULL, true);
    char what[96];
    snprintf(what, sizeof what, "%s prefill", s->name);
    int bad = n_noted[0] == 0 || compare(what, bp->ops, bp->n_ops, 0);
    snprintf(what, sizeof what, "%s decode", s->name);
    bad |= n_noted[1] == 0 || compare(what, bd->ops, bd->n_ops, 1);
    mx_plan_free(be, bp), mx_plan_free(be, bd);
    bench_model_free(be, &bm);
    mx_ctx_free(ctx);
    mx_model_free(m);
    be->ops = cpu_ops;
    mx_backend_free(be);
    return bad;
}

#define QWEN3_TAIL                                                                                     \
    "  \"num_hidden_layers\": 2,\n  \"num_attention_heads\": 4,\n  \"num_key_value_heads\": 2,\n"     \
    "  \"head_dim\": 128,\n  \"max_position_embeddings\": 4096,\n  \"rms_norm_eps\": 1e-06,\n"        \
    "  \"rope_theta\": 1000000,\n  \"attention_bias\": false,\n  \"bos_token_id\": 1,\n"              \
    "  \"eos_token_id\": 2,\n  \"torch_dtype\": \"bfloat16\",\n  \"vocab_size\": 1000,\n"

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: test_bench_records SCRATCH_FOLDER\n");
        return 2;
    }
    // The MoE shape of bench_gpu_decode's qwen3-30b-a3b, small: experts stacked, k of them a token.
    static const char moe_config[] =
        "{\n  \"architectures\": [\"Qwen3MoeForCausalLM\"],\n  \"model_type\": \"qwen3_moe\",\n" QWEN3_TAIL
        "  \"hidden_size\": 256,\n  \"intermediate_size\": 512,\n  \"moe_intermediate_size\": 128,\n"
        "  \"num_experts\": 16,\n  \"num_experts_per_tok\": 4,\n  \"norm_topk_prob\": true,\n"
        "  \"decoder_sparse_step\": 1,\n  \"mlp_only_layers\": [],\n  \"tie_word_embeddings\": false\n}\n";
    static const char dense_config[] =
        "{\n  \"architectures\": [\"Qwen3ForCausalLM\"],\n  \"model_type\": \"qwen3\",\n" QWEN3_TAIL
        "  \"hidden_size\": 256,\n  \"intermediate_size\": 512,\n  \"tie_word_embeddings\": true\n}\n";
    const bench_shape moe = {"small-moe", 256, 2, 4, 2, 128, 128, 1000, false, 16, 4};
    const bench_shape dense = {"small-dense", 256, 2, 4, 2, 128, 512, 1000, true, 0, 0};
    char folder[1024];
    snprintf(folder, sizeof folder, "%s/moe", argv[1]);
    int bad = check_shape(folder, moe_config, &moe);
    snprintf(folder, sizeof folder, "%s/dense", argv[1]);
    bad |= check_shape(folder, dense_config, &dense);
    printf(bad ? "FAIL: bench_gpu_decode's records differ from the engine's\n" : "ok\n");
    return bad;
}
