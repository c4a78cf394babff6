// SPDX-License-Identifier: MIT
// The o projection and residual add folded into the decode attention (MLXCEL_GPU_ATTN_O=1,
// mxg_attention_decode_o; kernels/attn_o.cuh, kernels/attn_decode.cu) under the host emulation
// (emu.h), head size 128, affine 4-bit wo (groups of 32, 64 and 128; bf16, f16 and f32 scales; with
// and without the product's bias), one slot's cache of earlier rows (paged or not), one token:
// - against the CPU backend's records (attention, matmul, add): the attention's output, the
//   product's output t and the residual within 2e-5 (relative L2; float32 summation order only);
//   in the RoPE form (q/k norms + RoPE + KV store folded in too) the attention's output and cache
//   bytes bit for bit mxg_attention_decode_rope's, and t and the residual against the CPU's records
//   on that output;
// - the launch shape: one launch (the row tiles on the grid's z) where the attention has one split
//   (short caches), two (the attention, then the combine folding the o slices in) where it splits;
// - the reduction across heads does not depend on which block arrives last: the same step with the
//   blocks run in reverse order (emu_reverse_blocks) gives the same bits, and the tickets are zero
//   after each launch;
// - shapes it must decline (-1, nothing launched): 8-bit wo, columns that are not n_heads x 128,
//   head size 64, the knob off.
// run.sh builds it against three planted faults, each of which must fail: a head's slice read from
// its neighbour's columns, the tile's sum taken one ticket early, and the heads summed from an
// arrival-dependent start (bits that depend on the order). Exits 1 on any failure.
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
static bool same_bits(const std::vector<float> &a, const std::vector<float> &b) {
    return a.size() == b.size() && memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}
static void check(bool ok, const char *what) {
    printf("   %s%s\n", what, ok ? "" : "  <-- FAIL");
    if (!ok) fails++;
}

struct OCase {
    int nkv, nh, cap, pos, hidden, gs;
    mx_dtype sdt;
    bool paged, rope, sinks, bias, short_form;
    int launches;  // expected: 1 (one split) or 2 (split: attention, combine + o)
};

// One step of case c: the fused launch twice (blocks in order, then reversed) against the CPU's
// records, the RoPE form also against mxg_attention_decode_rope.
static void o_case(mx_backend *cpu, mxg_launch *L, const OCase &c) {
    const int D = 128, nh = c.nh, nkv = c.nkv, H = c.hidden, cap = c.cap;
    ref_rng rng = {0x0f01d5eedull ^ (uint64_t)(nh * 131 + nkv * 17 + cap * 7 + H + c.gs + c.rope + 2 * c.sinks)};
    const int tl = (cap + MX_KV_BLOCK - 1) / MX_KV_BLOCK;
    const mx_kv_layout lay = {1, 2, cap, nkv, D, c.paged ? 2 * tl + 3 : 0};
    std::vector<int32_t> table(2 * tl);
    for (int i = 0; i < 2 * tl; i++) table[i] = (int32_t)((2 * tl + 2 - i) % (2 * tl + 3));
    const int32_t *tab = c.paged ? table.data() : NULL;
    const size_t bytes = mx_kv_bytes(&lay, cpu->kv_dtype);
    std::vector<unsigned char> cache(bytes, 0);
    const int per = nkv * D;
    {  // slot 1's rows: the CPU's store (its bytes are the GPU's, test_kv_emulated.cpp)
        std::vector<float> k((size_t)cap * per), v((size_t)cap * per);
        ref_fill(&rng, k.data(), (int64_t)k.size(), -1, 1), ref_fill(&rng, v.data(), (int64_t)v.size(), -1, 1);
        std::vector<int32_t> sl(cap, 1), ps(cap);
        for (int i = 0; i < cap; i++) ps[i] = i;
        const mx_kv_ref r = {cache.data(), lay, 0, sl.data(), ps.data(), tab};
        run(cpu, (mx_op){.kind = MX_OP_KV_STORE, .kv_store = {r, k.data(), v.data(), cap}});
    }
    const mx_matrix wo = ref_matrix_random(&rng, (mx_quant){MX_QUANT_AFFINE, 4, c.gs}, MX_DTYPE_U32, c.sdt, 1, H,
                                           (int64_t)nh * D);
    std::vector<float> q((size_t)nh * D), k(per), v(per), qw(D), kw(D), inv(D / 2), snk(nh), bias(H), x(H);
    ref_fill(&rng, q.data(), (int64_t)q.size(), -2, 2), ref_fill(&rng, k.data(), per, -2, 2);
    ref_fill(&rng, v.data(), per, -1, 1), ref_fill(&rng, qw.data(), D, 0.5f, 1.5f), ref_fill(&rng, kw.data(), D, 0.5f, 1.5f);
    ref_fill(&rng, snk.data(), nh, -1, 3), ref_fill(&rng, bias.data(), H, -0.5f, 0.5f), ref_fill(&rng, x.data(), H, -2, 2);
    for (int j = 0; j < D / 2; j++) inv[j] = 1.0f / powf(1e6f, 2.0f * j / D);
    const mx_rope rope = {inv.data(), D, 0.9f, 0, NULL, 0};
    const float scale = 1.0f / sqrtf((float)D);
    const float *sinks = c.sinks ? snk.data() : NULL, *b = c.bias ? bias.data() : NULL;
    int32_t sl = 1, ps = c.pos;
    char ml[64];
    printf("attention + o: nkv=%d nh=%d cache %d pos %d hidden %d %s paged=%d%s%s%s%s warp %d %s\n", nkv, nh, cap,
           c.pos, H, ref_matrix_label(&wo, ml, sizeof ml), c.paged, c.rope ? " rope" : "", c.sinks ? " sinks" : "",
           c.bias ? " bias" : "", c.short_form ? " short" : "", L->warp, L->kv_i16 ? "i16" : "f16");
    L->attn_decode = true, L->attn_short = c.short_form, L->attn_o = true;
    // The reference: the attention's output (the CPU's record, or in the RoPE form the emulated
    // RoPE launch's bits), then the CPU's product and add on it.
    std::vector<float> oref((size_t)nh * D, NAN);
    std::vector<unsigned char> cache_ref = cache;
    const mx_kv_ref rr = {cache_ref.data(), lay, 0, &sl, &ps, tab};
    if (c.rope) {
        const mxg_attn_rope f = {oref.data(), q.data(), k.data(), v.data(), qw.data(), kw.data(), 1e-6f, &ps, &rope,
                                 &rr, 1, nh, nkv, scale, 0, sinks, false};
        if (mxg_attention_decode_rope(L, &f) != 0) check(false, "the RoPE launch declined");
    } else {
        run(cpu, (mx_op){.kind = MX_OP_ATTENTION, .attention = {oref.data(), q.data(), rr, 1, nh, scale, 0, sinks, false}});
    }
    std::vector<float> tref(H), xref = x;
    run(cpu, (mx_op){.kind = MX_OP_MATMUL, .matmul = {tref.data(), oref.data(), &wo, b, 1}});
    run(cpu, (mx_op){.kind = MX_OP_ADD, .add = {xref.data(), tref.data(), H}});
    std::vector<float> outs[2], ts[2], xs[2];
    std::vector<unsigned char> caches[2];
    for (int order = 0; order < 2; order++) {
        std::vector<float> o((size_t)nh * D, NAN), t(H, NAN), xg = x;
        std::vector<unsigned char> cg = cache;
        const mx_kv_ref rg = {cg.data(), lay, 0, &sl, &ps, tab};
        const mxg_attn_rope f = {o.data(), q.data(), c.rope ? k.data() : NULL, c.rope ? v.data() : NULL,
                                 c.rope ? qw.data() : NULL, c.rope ? kw.data() : NULL, 1e-6f, c.rope ? &ps : NULL,
                                 c.rope ? &rope : NULL, &rg, 1, nh, nkv, scale, 0, sinks, false};
        const mxg_attn_o fo = {&wo, b, t.data(), xg.data()};
        emu_grids.clear(), emu_dependent.clear(), emu_prefetches.clear();
        emu_reverse_blocks = order == 1;
        const int rc = mxg_attention_decode_o(L, &f, &fo);
        emu_reverse_blocks = false;
        // MLXCEL_GPU_PDL=3: dependent launches, and wo's prefetches inside its rows' bytes, 16-byte
        // units, within the cap (the RoPE form's cache rows are test_kv_emulated's); below: none.
        bool pdl_ok = true;
        size_t wo_bytes = 0;
        const uintptr_t w0 = (uintptr_t)wo.data, w1 = w0 + (uintptr_t)(H * mx_matrix_row_bytes(&wo));
        for (const emu_range &pr : emu_prefetches) {
            const uintptr_t a = (uintptr_t)pr.p;
            if (a >= (uintptr_t)cg.data() && a < (uintptr_t)cg.data() + cg.size()) continue;
            pdl_ok &= a >= w0 && a + pr.bytes <= w1 && a % 16 == 0 && pr.bytes % 16 == 0 && pr.bytes > 0;
            wo_bytes += pr.bytes;
        }
        for (bool d : emu_dependent) pdl_ok &= d == L->pdl_rest;
        pdl_ok &= L->pdl_rest ? wo_bytes > 0 && wo_bytes <= L->pdl_prefetch : emu_prefetches.empty();
        char pdl_why[96];
        snprintf(pdl_why, sizeof pdl_why, ", pdl=3: BAD (%zu prefetches, %zu bytes of wo)", emu_prefetches.size(), wo_bytes);
        bool zero = true;
        for (int i = 0; i < MXG_ATTN_O_MAX_TILES; i++) zero &= ((const unsigned *)L->attn_o_tickets)[i] == 0;
        const double eo = rel(o.data(), oref.data(), o.size()), et = rel(t.data(), tref.data(), H),
                     ex = rel(xg.data(), xref.data(), H);
        const bool bits_o = !c.rope || same_bits(o, oref), bits_c = !c.rope || cg == cache_ref;
        const bool ok = rc == 0 && (int)emu_grids.size() == c.launches && eo <= 2e-5 && et <= 2e-5 && ex <= 2e-5 &&
                        bits_o && bits_c && zero && pdl_ok;
        char line[320];
        snprintf(line, sizeof line, "%s%s order: %zu launches (z %u), out %.2e%s, t %.2e, residual %.2e%s%s",
                 L->pdl_rest ? "pdl=3, " : "", order ? "reversed" : "forward", emu_grids.size(), emu_grids.empty() ? 0u : emu_grids[0].z, eo,
                 c.rope ? (bits_o && bits_c ? " (RoPE launch's bits, cache equal)" : " (RoPE launch's bits DIFFER)") : "",
                 et, ex, zero ? "" : ", tickets left set", pdl_ok ? "" : pdl_why);
        check(ok, line);
        outs[order] = o, ts[order] = t, xs[order] = xg, caches[order] = cg;
    }
    check(same_bits(outs[0], outs[1]) && same_bits(ts[0], ts[1]) && same_bits(xs[0], xs[1]) && caches[0] == caches[1],
          same_bits(ts[0], ts[1]) && same_bits(xs[0], xs[1]) ? "the two arrival orders: the same bits"
                                                             : "the two arrival orders: bits differ");
    L->attn_o = false;
    ref_matrix_free((mx_matrix *)&wo);
}

// Shapes the fold declines: nothing launched, -1.
static void declines(mx_backend *cpu, mxg_launch *L) {
    ref_rng rng = {77};
    const int nh = 8, nkv = 4, H = 256;
    const mx_kv_layout lay = {1, 2, 64, nkv, 128, 0};
    std::vector<unsigned char> cache(mx_kv_bytes(&lay, cpu->kv_dtype), 0);
    std::vector<float> q((size_t)nh * 128, 0.5f), o(q.size()), t(H), x(H);
    int32_t sl = 1, ps = 3;
    const mx_kv_ref r = {cache.data(), lay, 0, &sl, &ps, NULL};
    const mxg_attn_rope f = {o.data(), q.data(), NULL, NULL, NULL, NULL, 0, NULL, NULL, &r, 1, nh, nkv, 0.1f, 0, NULL, false};
    mx_matrix w8 = ref_matrix_random(&rng, (mx_quant){MX_QUANT_AFFINE, 8, 64}, MX_DTYPE_U32, MX_DTYPE_BF16, 1, H, nh * 128);
    mx_matrix wc = ref_matrix_random(&rng, (mx_quant){MX_QUANT_AFFINE, 4, 64}, MX_DTYPE_U32, MX_DTYPE_BF16, 1, H, nh * 64);
    mx_matrix w4 = ref_matrix_random(&rng, (mx_quant){MX_QUANT_AFFINE, 4, 64}, MX_DTYPE_U32, MX_DTYPE_BF16, 1, H, nh * 128);
    const mx_kv_layout lay64 = {1, 2, 64, nkv, 64, 0};
    const mx_kv_ref r64 = {cache.data(), lay64, 0, &sl, &ps, NULL};
    mxg_attn_rope f64 = f;
    f64.kv = &r64;
    struct { const char *what; const mxg_attn_rope *f; mx_matrix *w; bool on; } cases[] = {
        {"8-bit wo", &f, &w8, true}, {"wo of n_heads x 64 columns", &f, &wc, true}, {"head size 64", &f64, &wc, true},
        {"the knob off", &f, &w4, false}};
    L->attn_decode = true;
    for (auto &d : cases) {
        const mxg_attn_o fo = {d.w, NULL, t.data(), x.data()};
        L->attn_o = d.on;
        emu_grids.clear();
        char line[128];
        const int rc = mxg_attention_decode_o(L, d.f, &fo);
        snprintf(line, sizeof line, "declines %s: %d, %zu launches", d.what, rc, emu_grids.size());
        check(rc == -1 && emu_grids.empty(), line);
    }
    L->attn_o = false;
    ref_matrix_free(&w8), ref_matrix_free(&wc), ref_matrix_free(&w4);
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    const bool quick = argc > 1 && !strcmp(argv[1], "quick");  // the planted faults: fewer cases
    mx_backend_options opt = {"cpu", 2, 0};
    mx_backend *cpu = mx_backend_create(&opt, &err);
    if (!cpu) { printf("%s\n", err.msg); return 1; }
    mxg_launch L;
    memset(&L, 0, sizeof L);
    L.warp = 32, L.sm_count = 132, L.kv_i16 = true;
    L.scratch_bytes = (size_t)8 << 20;  // about what mxg_attention_scratch_bytes gives 132 multiprocessors
    L.scratch = malloc(L.scratch_bytes);
    L.attn_o_tickets = calloc(MXG_ATTN_O_MAX_TILES, sizeof(unsigned));
    const OCase cases[] = {
        // Qwen3-0.6B's heads (16 / 8) at a short cache (the short form: a block per head, one split),
        // then past the short bound (splits: the combine folds the slices in).
        {8, 16, 97, 60, 1024, 64, MX_DTYPE_BF16, true, false, false, false, true, 1},
        {8, 16, 640, 511, 1024, 64, MX_DTYPE_BF16, true, false, false, false, true, 2},
        // The same with RoPE folded in, sinks and a bias, f16 scales in groups of 32.
        {8, 16, 97, 96, 512, 32, MX_DTYPE_F16, true, true, true, true, true, 1},
        {8, 16, 300, 250, 512, 32, MX_DTYPE_F16, false, true, true, true, true, 2},
        // Qwen3-30B-A3B's heads (32 / 4, groups of 8) short; the 8B's (32 / 8) split; the group form at a
        // short cache (one split, blocks of 4 heads); f32 scales in groups of 128; rows not a multiple of 64.
        {4, 32, 96, 31, 640, 128, MX_DTYPE_F32, false, true, false, false, true, 1},
        {8, 32, 700, 650, 520, 64, MX_DTYPE_BF16, true, false, true, true, true, 2},
        {8, 32, 60, 59, 384, 64, MX_DTYPE_BF16, true, true, false, true, false, 1},
    };
    const int n = sizeof cases / sizeof *cases;
    for (int i = 0; i < n; i++) {
        if (quick && i >= 4) continue;  // short and split, plain and RoPE
        o_case(cpu, &L, cases[i]);
    }
    if (!quick) {
        L.warp = 64;  // AMD's wave of 64
        o_case(cpu, &L, cases[1]);
        o_case(cpu, &L, cases[4]);
        L.warp = 32;
        L.pdl_rest = true, L.pdl_prefetch = 1 << 20;  // MLXCEL_GPU_PDL=3: dependent launches, wo prefetched
        o_case(cpu, &L, cases[0]);
        o_case(cpu, &L, cases[3]);
        L.pdl_rest = false, L.pdl_prefetch = 0;
        declines(cpu, &L);
    }
    free(L.scratch), free(L.attn_o_tickets);
    mx_backend_free(cpu);
    printf("%d failures\n", fails);
    return fails != 0;
}
