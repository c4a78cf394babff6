// SPDX-License-Identifier: MIT
// The persistent decode layer (kernels/layer_persist.cu, MLXCEL_GPU_MEGA=1) under the host emulation
// (emu.h), against the CPU backend running the layer's records one by one (rmsnorm, q/k/v, q/k norms,
// RoPE, KV store, attention, o, residual add, rmsnorm, gate/up, SwiGLU, down, residual add) on small
// Qwen3-like layers (affine 4- and 8-bit weights, grouped-query heads, a cache of earlier rows, paged
// or not, several positions, one split of a head's positions or several). The kernel runs phased
// (one launch per phase: the emulation runs blocks one after another, so a grid barrier could never
// open), which keeps the barriers' order: every block finishes a phase before any starts the next.
// Every buffer the records write is checked (the residual stream, the norms' shared output, v, the
// raw q and k, which the kernel leaves unrotated by contract, attention, o/down's shared output,
// up, gate/act), and the cache: its int16 codes within 1 (the rotated k's float32 rounding may move
// a code), its scales within float32 rounding. run.sh also builds it against planted faults (a
// block's share of rows one short; every phase in one launch without barriers), which must fail.
// Exits 1 on any failure.
#include "emu.h"
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
extern "C" {
#include "backends/backend.h"
#include "backends/plan.h"
#include "gpu_ref.h"
}
#include "backends/gpu/kernels_fused.h"

static mx_error err;
static int fails = 0;
static void run(mx_backend *be, mx_op op) {
    if (mx_run_op(be, op, &err)) {
        printf("cpu op: %s\n", err.msg);
        exit(1);
    }
}
static double rel(const float *a, const float *b, size_t n) {
    double d = 0, r = 0;
    for (size_t i = 0; i < n; i++) {
        if (std::isnan(a[i])) return INFINITY;
        const double e = (double)a[i] - b[i];
        d += e * e, r += (double)b[i] * b[i];
    }
    return r > 0 ? sqrt(d / r) : sqrt(d);
}

// The layer's buffers (one copy per side).
struct Bufs {
    std::vector<float> x, h, q, k, v, att, tmp, gate, up;
    std::vector<unsigned char> cache;
};

static void layer_case(mx_backend *cpu, mx_quant qt, int H, int D, int nh, int nkv, int I, int cap, int paged,
                       int pos, bool qk_norms, int warp, int sms) {
    ref_rng rng = {0x5eed1a7eu ^ (uint64_t)(H * 7 + D * 3 + nh + I + pos * 131 + qt.bits + paged + warp)};
    const int tl = (cap + MX_KV_BLOCK - 1) / MX_KV_BLOCK;
    const mx_kv_layout lay = {2, 2, cap, nkv, D, paged ? 2 * tl + 3 : 0};
    std::vector<int32_t> table(2 * tl);
    for (int i = 0; i < 2 * tl; i++) table[i] = (int32_t)((2 * tl + 2 - i) % (2 * tl + 3));
    const size_t bytes = mx_kv_bytes(&lay, cpu->kv_dtype);
    mx_matrix wq = ref_matrix_random(&rng, qt, MX_DTYPE_U32, MX_DTYPE_BF16, 1, (int64_t)nh * D, H);
    mx_matrix wk = ref_matrix_random(&rng, qt, MX_DTYPE_U32, MX_DTYPE_BF16, 1, (int64_t)nkv * D, H);
    mx_matrix wv = ref_matrix_random(&rng, qt, MX_DTYPE_U32, MX_DTYPE_BF16, 1, (int64_t)nkv * D, H);
    mx_matrix wo = ref_matrix_random(&rng, qt, MX_DTYPE_U32, MX_DTYPE_BF16, 1, H, (int64_t)nh * D);
    mx_matrix wg = ref_matrix_random(&rng, qt, MX_DTYPE_U32, MX_DTYPE_BF16, 1, I, H);
    mx_matrix wu = ref_matrix_random(&rng, qt, MX_DTYPE_U32, MX_DTYPE_BF16, 1, I, H);
    mx_matrix wd = ref_matrix_random(&rng, qt, MX_DTYPE_U32, MX_DTYPE_BF16, 1, H, I);
    std::vector<float> n1(H), n2(H), qw(D), kw(D), inv(D / 2), bq((size_t)nh * D);
    ref_fill(&rng, n1.data(), H, 0.5f, 1.5f), ref_fill(&rng, n2.data(), H, 0.5f, 1.5f);
    ref_fill(&rng, qw.data(), D, 0.5f, 1.5f), ref_fill(&rng, kw.data(), D, 0.5f, 1.5f);
    ref_fill(&rng, bq.data(), (int64_t)bq.size(), -0.5f, 0.5f);
    for (int j = 0; j < D / 2; j++) inv[j] = 1.0f / powf(1e6f, 2.0f * j / D);
    const mx_rope rope = {inv.data(), D, 1.0f, 0, NULL, 0};
    const float scale = 1.0f / sqrtf((float)D), eps = 1e-6f;
    Bufs c;
    c.x.resize(H), c.h.resize(H), c.q.resize((size_t)nh * D), c.k.resize((size_t)nkv * D), c.v.resize(c.k.size());
    c.att.resize(c.q.size()), c.tmp.resize(H), c.gate.resize(I), c.up.resize(I), c.cache.assign(bytes, 0);
    ref_fill(&rng, c.x.data(), H, -2.0f, 2.0f);
    {  // slot 1's earlier positions (and some beyond: a reused slot's old rows)
        const int rows = cap, per = nkv * D;
        std::vector<float> k((size_t)rows * per), v((size_t)rows * per);
        ref_fill(&rng, k.data(), (int64_t)k.size(), -1.0f, 1.0f), ref_fill(&rng, v.data(), (int64_t)v.size(), -1.0f, 1.0f);
        std::vector<int32_t> sl(rows, 1), ps(rows);
        for (int i = 0; i < rows; i++) ps[i] = i;
        for (int layer = 0; layer < 2; layer++) {
            mx_kv_ref r = {c.cache.data(), lay, layer, sl.data(), ps.data(), paged ? table.data() : NULL};
            run(cpu, (mx_op){.kind = MX_OP_KV_STORE, .kv_store = {r, k.data(), v.data(), rows}});
        }
    }
    Bufs g = c;  // the emulated device's copy: outputs start as NaN, so a buffer left unwritten fails
    for (auto *b : {&g.h, &g.q, &g.k, &g.v, &g.att, &g.tmp, &g.gate, &g.up}) b->assign(b->size(), NAN);
    const std::vector<float> q_raw_marker = g.q;
    int32_t slot = 1, p = pos;
    // The records on the CPU backend.
    {
        const mx_kv_ref r = {c.cache.data(), lay, 1, &slot, &p, paged ? table.data() : NULL};
        run(cpu, (mx_op){.kind = MX_OP_RMSNORM, .rmsnorm = {c.h.data(), c.x.data(), n1.data(), 1, H, eps}});
        run(cpu, (mx_op){.kind = MX_OP_MATMUL, .matmul = {c.q.data(), c.h.data(), &wq, bq.data(), 1}});
        run(cpu, (mx_op){.kind = MX_OP_MATMUL, .matmul = {c.k.data(), c.h.data(), &wk, NULL, 1}});
        run(cpu, (mx_op){.kind = MX_OP_MATMUL, .matmul = {c.v.data(), c.h.data(), &wv, NULL, 1}});
        const std::vector<float> k_raw = c.k, q_raw = c.q;
        if (qk_norms) {
            run(cpu, (mx_op){.kind = MX_OP_RMSNORM, .rmsnorm = {c.q.data(), c.q.data(), qw.data(), nh, D, eps}});
            run(cpu, (mx_op){.kind = MX_OP_RMSNORM, .rmsnorm = {c.k.data(), c.k.data(), kw.data(), nkv, D, eps}});
        }
        run(cpu, (mx_op){.kind = MX_OP_ROPE, .rope = {c.q.data(), &p, 1, nh, rope}});
        run(cpu, (mx_op){.kind = MX_OP_ROPE, .rope = {c.k.data(), &p, 1, nkv, rope}});
        run(cpu, (mx_op){.kind = MX_OP_KV_STORE, .kv_store = {r, c.k.data(), c.v.data(), 1}});
        run(cpu, (mx_op){.kind = MX_OP_ATTENTION,
                         .attention = {c.att.data(), c.q.data(), r, 1, nh, scale, 0, NULL, true}});
        c.q = q_raw, c.k = k_raw;  // the kernel leaves them raw (the plan checks nothing reads them rotated)
        run(cpu, (mx_op){.kind = MX_OP_MATMUL, .matmul = {c.tmp.data(), c.att.data(), &wo, NULL, 1}});
        run(cpu, (mx_op){.kind = MX_OP_ADD, .add = {c.x.data(), c.tmp.data(), H}});
        run(cpu, (mx_op){.kind = MX_OP_RMSNORM, .rmsnorm = {c.h.data(), c.x.data(), n2.data(), 1, H, eps}});
        run(cpu, (mx_op){.kind = MX_OP_MATMUL, .matmul = {c.gate.data(), c.h.data(), &wg, NULL, 1}});
        run(cpu, (mx_op){.kind = MX_OP_MATMUL, .matmul = {c.up.data(), c.h.data(), &wu, NULL, 1}});
        run(cpu, (mx_op){.kind = MX_OP_SWIGLU, .swiglu = {c.gate.data(), c.gate.data(), c.up.data(), I}});
        run(cpu, (mx_op){.kind = MX_OP_MATMUL, .matmul = {c.tmp.data(), c.gate.data(), &wd, NULL, 1}});
        run(cpu, (mx_op){.kind = MX_OP_ADD, .add = {c.x.data(), c.tmp.data(), H}});
    }
    // The persistent layer, phased, on the same inputs. Its q/k/v come from its own products: the
    // raw q/k it leaves are compared with the CPU's raw ones.
    mxg_launch L;
    memset(&L, 0, sizeof L);
    L.warp = warp, L.sm_count = sms, L.kv_i16 = cpu->kv_dtype == MX_DTYPE_I16, L.mega = true, L.pdl_prefetch = 1 << 16;
    unsigned bar[2] = {0, 0};
    L.mega_barrier = bar;
    std::vector<float> scratch((size_t)nh * 64 * (D + 2));  // room for 64 splits a head
    L.scratch = scratch.data(), L.scratch_bytes = scratch.size() * sizeof(float);
    const mx_kv_ref rg = {g.cache.data(), lay, 1, &slot, &p, paged ? table.data() : NULL};
    const mxg_layer f = {
        .h = g.x.data(), .norm1_w = n1.data(), .norm2_w = n2.data(), .eps1 = eps, .eps2 = eps, .xn1 = g.h.data(),
        .xn2 = g.h.data(), .w = {&wq, &wk, &wv}, .q = g.q.data(), .k = g.k.data(), .v = g.v.data(),
        .bias = {bq.data(), NULL, NULL}, .q_norm = qk_norms ? qw.data() : NULL, .k_norm = qk_norms ? kw.data() : NULL,
        .qk_eps = eps, .rope_pos = &p, .rope = &rope, .kv = &rg, .n_heads = nh, .n_kv_heads = nkv, .scale = scale,
        .window = 0, .sinks = NULL, .attn = g.att.data(), .wo = &wo, .o = g.tmp.data(), .o_bias = NULL, .wg = &wg,
        .wu = &wu, .gate = g.gate.data(), .up = g.up.data(), .act = g.gate.data(), .g_bias = NULL, .u_bias = NULL,
        .wd = &wd, .down = g.tmp.data(), .d_bias = NULL};
    L.mega = false;
    if (mxg_layer_persist_ok(&L, &f)) printf("   taken with the knob off  <-- FAIL\n"), fails++;
    L.mega = true;
    if (!mxg_layer_persist_ok(&L, &f)) {
        printf("layer H=%d D=%d: not taken  <-- FAIL\n", H, D);
        fails++;
        return;
    }
    emu_grids.clear();
    mxg_layer_persist(&L, &f, true);
    const size_t launches = emu_grids.size();
    // The cache: codes within 1, everything else (scales, other rows) as the records leave it.
    size_t code_off = 0, other_diff = 0;
    const size_t code_bytes = bytes - (cpu->kv_dtype == MX_DTYPE_I16
                                           ? (size_t)lay.n_layers * mx_kv_blocks(&lay) * 2 * nkv * MX_KV_BLOCK *
                                                 ((D + MX_KV_SCALE_BLOCK - 1) / MX_KV_SCALE_BLOCK) * sizeof(float)
                                           : 0);
    double scale_err = 0.0;
    if (cpu->kv_dtype == MX_DTYPE_I16) {
        const int16_t *a = (const int16_t *)g.cache.data(), *b = (const int16_t *)c.cache.data();
        for (size_t i = 0; i < code_bytes / 2; i++) code_off += abs(a[i] - b[i]) > 1;
        const size_t ns = (bytes - code_bytes) / sizeof(float);
        scale_err = rel((const float *)(g.cache.data() + code_bytes), (const float *)(c.cache.data() + code_bytes), ns);
    } else {
        for (size_t i = 0; i < bytes; i++) other_diff += g.cache[i] != c.cache[i];
    }
    struct { const char *name; const std::vector<float> &a, &b; } outs[] = {
        {"residual", g.x, c.x}, {"norm out", g.h, c.h}, {"q raw", g.q, c.q}, {"k raw", g.k, c.k}, {"v", g.v, c.v},
        {"attention", g.att, c.att}, {"down", g.tmp, c.tmp}, {"act", g.gate, c.gate}, {"up", g.up, c.up}};
    double worst = 0.0;
    const char *worst_name = "";
    for (const auto &o : outs) {
        const double e = rel(o.a.data(), o.b.data(), o.a.size());
        if (!(e <= worst)) worst = e, worst_name = o.name;
    }
    const bool ok = worst <= 2e-5 && code_off == 0 && other_diff == 0 && scale_err <= 1e-5 && launches == 6;
    printf("layer %d-bit H=%d D=%d nh=%d nkv=%d I=%d cache %d paged=%d pos %d%s warp %d sms %d: worst rel err %.2e (%s), "
           "codes off by >1: %zu, scales %.2e, %zu launches%s\n",
           qt.bits, H, D, nh, nkv, I, cap, paged, pos, qk_norms ? " norms" : "", warp, sms, worst, worst_name, code_off,
           scale_err, launches, ok ? "" : "  <-- FAIL");
    if (!ok) fails++;
    for (mx_matrix *m : {&wq, &wk, &wv, &wo, &wg, &wu, &wd}) ref_matrix_free(m);
}

int main(int argc, char **argv) {
    const bool quick = argc > 1 && !strcmp(argv[1], "quick");
    mx_backend_options o = {"cpu", 2, 0};
    mx_backend *cpu = mx_backend_create(&o, &err);
    if (!cpu) {
        printf("cpu backend: %s\n", err.msg);
        return 1;
    }
    const mx_quant q4 = {MX_QUANT_AFFINE, 4, 64}, q8 = {MX_QUANT_AFFINE, 8, 32};
    // A Qwen3-like layer (q/k norms, 2 query heads per KV head) at the cache's first position, inside
    // the first block, across a block boundary and at its end; blocks fewer than heads and rows.
    layer_case(cpu, q4, 256, 64, 4, 2, 512, 48, 1, 0, true, 32, 3);
    layer_case(cpu, q4, 256, 64, 4, 2, 512, 48, 1, 17, true, 32, 3);
    layer_case(cpu, q4, 256, 128, 4, 2, 384, 48, 0, 47, true, 32, 2);
    layer_case(cpu, q8, 256, 64, 8, 2, 512, 48, 0, 33, false, 32, 5);
    layer_case(cpu, q4, 256, 64, 4, 1, 256, 64, 1, 61, true, 32, 16);  // 8 splits of a head's positions
    if (!quick) {
        layer_case(cpu, q4, 512, 128, 8, 4, 1024, 64, 1, 63, true, 64, 3);
        layer_case(cpu, q8, 256, 256, 2, 1, 512, 32, 1, 20, true, 32, 7);
    }
    mx_backend_free(cpu);
    printf("%s\n", fails ? "persistent layer emulation: FAIL" : "persistent layer emulation: ok");
    return fails ? 1 : 0;
}
