// SPDX-License-Identifier: MIT
// The persistent MLP-half kernel (kernels/persist_mlp.cu, MLXCEL_GPU_PERSIST=1) and its grid-wide
// barrier (kernels/grid_barrier.cuh) on the host emulation (emu.h: the co-resident launch runs every
// block of the grid together, so the barrier's own atomics and spin run as written). Each case runs
// the records' unfused fused launches (kernels/matvec_fused.cu on the streaming kernel:
// o-proj + residual, RMSNorm + gate/up + SwiGLU, down + residual) and the one persistent launch on
// the same inputs, with the model's buffer aliasing (forward.c: the residual x read by the norm and
// added to twice, act in the gate buffer, the o-proj's and the down's outputs in one tmp buffer),
// and requires:
// - every buffer bit for bit equal to the unfused launches' (same task shapes and arithmetic);
// - the products within 1e-5 (relative L2) of the double-precision reference of the records
//   (tests/gpu/gpu_ref.c, its own dequantizer), so a fault shared by both launches still fails;
// - the barrier's words back to count 0 with the generation advanced by the barriers run (1 or 2);
// - the launch declined (-1) where it must: mixed formats, mxfp4 and dense weights, phases of
//   different task shapes, unaligned norm weights, no barrier words.
// Shapes: Qwen3-0.6B's layer (hidden 1024, MLP 3072, attention 2048 wide: rows shorter than a step)
// and Qwen3-8B's (4096, 12288, 4096), small ones with more tasks than warps, in affine 4-bit g64 bf16,
// 4-bit g32 f16 and 8-bit g128 bf16, with and without the o-projection phase and biases, warps of 32
// and 64, grids of 2-16 blocks. run.sh also builds this test against a copy of the kernel whose
// barrier does not wait, which must fail. Exits 1 on any failure.
#include "emu.h"
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
extern "C" {
#include "backends/backend.h"
#include "gpu_ref.h"
}
#include "backends/gpu/kernels.h"
#include "backends/gpu/kernels_fused.h"

static int fails = 0;

struct Shape {
    int H, I, A;  // hidden, MLP width, attention output width (0: no o-projection phase)
};

static bool same_bits(const std::vector<float> &a, const std::vector<float> &b) {
    return a.size() == b.size() && memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

static void mlp_case(const mx_quant q, mx_dtype st, Shape s, bool bias, int warp, int sms) {
    ref_rng r = {0x9e3779b97f4a7c15ull ^ (uint64_t)(s.H * 31 + s.I * 7 + s.A + warp + sms * 1000 + bias)};
    const int H = s.H, I = s.I, A = s.A;
    mx_matrix wg = ref_matrix_random(&r, q, MX_DTYPE_U32, st, 1, I, H), wu = ref_matrix_random(&r, q, MX_DTYPE_U32, st, 1, I, H);
    mx_matrix wd = ref_matrix_random(&r, q, MX_DTYPE_U32, st, 1, H, I);
    mx_matrix wo = A ? ref_matrix_random(&r, q, MX_DTYPE_U32, st, 1, H, A) : mx_matrix{};
    std::vector<float> x0(H), att(A ? A : 1), nw(H), bg(I), bu(I), bd(H), bo(H);
    ref_fill(&r, x0.data(), H, -2, 2);
    ref_fill(&r, att.data(), (int64_t)att.size(), -1, 1);
    ref_fill(&r, nw.data(), H, 0.5f, 1.5f);
    ref_fill(&r, bg.data(), I, -0.5f, 0.5f);
    ref_fill(&r, bu.data(), I, -0.5f, 0.5f);
    ref_fill(&r, bd.data(), H, -0.5f, 0.5f);
    ref_fill(&r, bo.data(), H, -0.5f, 0.5f);
    mxg_launch L;
    memset(&L, 0, sizeof L);
    L.warp = warp, L.sm_count = sms, L.matvec_stream = true, L.stream_min_cols = 0, L.stream_rows = 2;
    L.matvec_rows = 4, L.persist = 2;
    unsigned bar[4] = {0, 7, 0, 0};  // a generation left by earlier launches
    L.persist_bar = bar;
    // Buffers as forward.c lays them out: x (residual), h (norm out), gate (= act), up, tmp.
    struct Bufs { std::vector<float> x, h, gate, up, tmp; };
    auto fresh = [&] { return Bufs{x0, std::vector<float>(H, 3.0f), std::vector<float>(I, 5.0f), std::vector<float>(I, 6.0f),
                                   std::vector<float>(H, 7.0f)}; };
    const float *b_g = bias ? bg.data() : NULL, *b_u = bias ? bu.data() : NULL, *b_d = bias ? bd.data() : NULL;
    const float *b_o = bias ? bo.data() : NULL;
    // The unfused launches.
    Bufs u = fresh();
    std::vector<float> o_after(H);  // tmp after the o-projection (overwritten by the down product)
    if (A) {
        mxg_fused_matvec f = {};
        f.count = 1, f.w[0] = &wo, f.out[0] = u.tmp.data(), f.bias[0] = b_o, f.x = att.data(), f.res = u.x.data();
        mxg_run_fused_matvec(&L, &f);
        o_after = u.tmp;
    }
    std::vector<float> x_mid = u.x;  // the residual the norm reads
    {
        mxg_fused_matvec f = {};
        f.count = 2, f.w[0] = &wg, f.w[1] = &wu, f.out[0] = u.gate.data(), f.out[1] = u.up.data();
        f.bias[0] = b_g, f.bias[1] = b_u, f.x = u.x.data(), f.norm_w = nw.data(), f.norm_eps = 1e-6f;
        f.norm_out = u.h.data(), f.act = u.gate.data();
        mxg_run_fused_matvec(&L, &f);
    }
    {
        mxg_fused_matvec f = {};
        f.count = 1, f.w[0] = &wd, f.out[0] = u.tmp.data(), f.bias[0] = b_d, f.x = u.gate.data(), f.res = u.x.data();
        mxg_run_fused_matvec(&L, &f);
    }
    // The persistent launch.
    Bufs p = fresh();
    mxg_persist_mlp m = {};
    if (A) m.w_o = &wo, m.b_o = b_o, m.attn = att.data(), m.o_out = p.tmp.data(), m.o_res = p.x.data();
    m.x = p.x.data(), m.norm_w = nw.data(), m.norm_eps = 1e-6f, m.norm_out = p.h.data();
    m.w_gate = &wg, m.w_up = &wu, m.b_gate = b_g, m.b_up = b_u, m.gate = p.gate.data(), m.up = p.up.data();
    m.act = p.gate.data(), m.w_down = &wd, m.b_down = b_d, m.down_out = p.tmp.data(), m.res = p.x.data();
    emu_grids.clear();
    const int rc = mxg_persist_mlp_run(&L, &m);
    char label[128], ml[64];
    snprintf(label, sizeof label, "%s H=%d I=%d A=%d%s warp %d, %d SMs", ref_matrix_label(&wg, ml, sizeof ml), H, I, A,
             bias ? " bias" : "", warp, sms);
    if (rc != 0 || emu_grids.size() != 1) {
        printf("persist %s: FAIL (declined or %zu launches)\n", label, emu_grids.size());
        fails++;
        return;
    }
    bool ok = same_bits(p.x, u.x) && same_bits(p.h, u.h) && same_bits(p.gate, u.gate) && same_bits(p.up, u.up) &&
              same_bits(p.tmp, u.tmp);
    const unsigned want_gen = 7u + (A ? 2u : 1u);
    const bool bar_ok = bar[0] == 0 && bar[1] == want_gen;
    // The double-precision reference of the records, from the unfused launches' inputs.
    std::vector<float> rh(H), rg(I), ru(I), ract(I), rd(H), ro(H), rx = x0;
    if (A) {
        ref_matmul(ro.data(), NULL, att.data(), &wo, b_o, 1, false);
        for (int k = 0; k < H; k++) rx[k] += ro[k];
    }
    ref_rmsnorm(rh.data(), rx.data(), nw.data(), 1, H, 1e-6f);
    ref_matmul(rg.data(), NULL, rh.data(), &wg, b_g, 1, false);
    ref_matmul(ru.data(), NULL, rh.data(), &wu, b_u, 1, false);
    for (int k = 0; k < I; k++) ract[k] = (float)((double)rg[k] / (1.0 + exp(-(double)rg[k])) * ru[k]);
    ref_matmul(rd.data(), NULL, ract.data(), &wd, b_d, 1, false);
    std::vector<float> rxe = rx;
    for (int k = 0; k < H; k++) rxe[k] += rd[k];
    std::vector<float> up_ref(p.up);
    const double e_h = ref_rel_err(p.h.data(), rh.data(), H), e_u = ref_rel_err(p.up.data(), ru.data(), I);
    const double e_act = ref_rel_err(p.gate.data(), ract.data(), I), e_d = ref_rel_err(p.tmp.data(), rd.data(), H);
    const double e_x = ref_rel_err(p.x.data(), rxe.data(), H);
    const double e_o = A ? ref_rel_err(o_after.data(), ro.data(), H) : 0.0;
    const double worst = std::max(std::max(std::max(e_h, e_u), std::max(e_act, e_d)), std::max(e_x, e_o));
    ok = ok && bar_ok && worst <= 1e-5;
    printf("persist %s: %u blocks, worst rel err %.2e, barrier words %u/%u: %s\n", label, emu_grids[0].x, worst, bar[0],
           bar[1], ok ? "ok" : "FAIL");
    if (!ok)
        printf("  bits x %d h %d gate %d up %d tmp %d; errs h %.2e up %.2e act %.2e down %.2e x %.2e o %.2e\n",
               same_bits(p.x, u.x), same_bits(p.h, u.h), same_bits(p.gate, u.gate), same_bits(p.up, u.up),
               same_bits(p.tmp, u.tmp), e_h, e_u, e_act, e_d, e_x, e_o);
    fails += !ok;
    ref_matrix_free(&wg);
    ref_matrix_free(&wu);
    ref_matrix_free(&wd);
    if (A) ref_matrix_free(&wo);
}

// What the launcher must decline.
static void decline_cases() {
    ref_rng r = {42};
    const mx_quant q4 = {MX_QUANT_AFFINE, 4, 64}, q8 = {MX_QUANT_AFFINE, 8, 64}, fp4 = {MX_QUANT_MXFP4, 4, 32};
    const mx_quant none = {MX_QUANT_NONE, 0, 0};
    mx_matrix g4 = ref_matrix_random(&r, q4, MX_DTYPE_U32, MX_DTYPE_BF16, 1, 1024, 1024);
    mx_matrix d4 = ref_matrix_random(&r, q4, MX_DTYPE_U32, MX_DTYPE_BF16, 1, 1024, 1024);
    mx_matrix d8 = ref_matrix_random(&r, q8, MX_DTYPE_U32, MX_DTYPE_BF16, 1, 1024, 1024);
    mx_matrix gf = ref_matrix_random(&r, fp4, MX_DTYPE_U32, MX_DTYPE_U8, 1, 1024, 1024);
    mx_matrix gb = ref_matrix_random(&r, none, MX_DTYPE_BF16, MX_DTYPE_BF16, 1, 1024, 1024);
    mx_matrix o_long = ref_matrix_random(&r, q4, MX_DTYPE_U32, MX_DTYPE_BF16, 1, 1024, 4096);
    std::vector<float> x(4096 + 4), nw(1024 + 4), h(1024), g(1024), up(1024), res(1024), tmp(1024);
    unsigned bar[2] = {0, 0};
    mxg_launch L;
    memset(&L, 0, sizeof L);
    L.warp = 32, L.sm_count = 4, L.persist = 2, L.persist_bar = bar, L.matvec_stream = true;
    auto try_run = [&](const mx_matrix *wg, const mx_matrix *wd, const mx_matrix *wo, const float *norm_w, bool with_bar) {
        mxg_persist_mlp m = {};
        m.w_o = wo, m.attn = x.data(), m.o_out = tmp.data(), m.o_res = res.data();
        m.x = res.data(), m.norm_w = norm_w, m.norm_eps = 1e-6f, m.norm_out = h.data();
        m.w_gate = wg, m.w_up = wg, m.gate = g.data(), m.up = up.data(), m.act = g.data();
        m.w_down = wd, m.down_out = tmp.data(), m.res = res.data();
        L.persist_bar = with_bar ? bar : NULL;
        emu_grids.clear();
        const int rc = mxg_persist_mlp_run(&L, &m);
        return rc == -1 && emu_grids.empty();
    };
    const bool ok = try_run(&g4, &d8, NULL, nw.data(), true) && try_run(&gf, &gf, NULL, nw.data(), true) &&
                    try_run(&gb, &gb, NULL, nw.data(), true) && try_run(&g4, &d4, &o_long, nw.data(), true) &&
                    try_run(&g4, &d4, NULL, nw.data() + 1, true) && try_run(&g4, &d4, NULL, nw.data(), false);
    // ... and takes the same matrices once the fault is gone (so the declines above are the faults').
    const bool takes = !try_run(&g4, &d4, NULL, nw.data(), true);
    printf("persist declines (mixed formats, mxfp4, bf16, mixed task shapes, unaligned norm, no barrier): %s\n",
           ok && takes ? "ok" : "FAIL");
    fails += !(ok && takes);
    for (mx_matrix *w : {&g4, &d4, &d8, &gf, &gb, &o_long}) ref_matrix_free(w);
}

int main(int argc, char **argv) {
    const bool quick = argc > 1 && !strcmp(argv[1], "quick");
    const mx_quant q4g64 = {MX_QUANT_AFFINE, 4, 64}, q4g32 = {MX_QUANT_AFFINE, 4, 32}, q8 = {MX_QUANT_AFFINE, 8, 128};
    // Small shapes: several tasks per warp, uneven (the first warps one more), both task shapes.
    for (int warp = 32; warp <= 64; warp *= 2) {
        mlp_case(q4g64, MX_DTYPE_BF16, {warp == 64 ? 2048 : 1024, warp == 64 ? 2560 : 1536, 2048}, true, warp, 3);
        mlp_case(q4g32, MX_DTYPE_F16, {2048, 2048, 0}, false, warp, 2);
        mlp_case(q8, MX_DTYPE_BF16, {2048, 2560, 2048}, warp == 32, warp, 3);
        mlp_case(q4g64, MX_DTYPE_BF16, {4096, 4096, 4096}, false, warp, 5);
    }
    // Qwen3-0.6B's layer (rows shorter than a step) and Qwen3-8B's.
    mlp_case(q4g64, MX_DTYPE_BF16, {1024, 3072, 2048}, false, 32, 8);
    mlp_case(q4g64, MX_DTYPE_BF16, {1024, 3072, 0}, true, 32, 4);
    mlp_case(q4g64, MX_DTYPE_BF16, {4096, 12288, 4096}, false, 32, 8);
    if (!quick) {
        mlp_case(q8, MX_DTYPE_BF16, {2048, 6144, 0}, false, 32, 8);
        mlp_case(q4g32, MX_DTYPE_F16, {4096, 12288, 0}, true, 32, 6);
    }
    decline_cases();
    printf("%d failures\n", fails);
    return fails != 0;
}
