// SPDX-License-Identifier: MIT
// The one-launch MLP of a one-token layer (kernels/mlp_decode.cu, MLXCEL_GPU_MLP_ONE=1) on the host
// emulation (emu.h): the kernel's slicing (each block a slice of the intermediate, down's column
// slice) and its reduction (the blocks' partial sums of down in fixed-point integer adds, the last
// ticket converting them) run on the host, and each case requires:
// - the same bytes in every output (norm row, gate, up, act, down, the residual) whatever order the
//   blocks arrive in: in order, reversed, and a seeded shuffle (emu_block_order), and with
//   MLXCEL_GPU_PDL=2's prefetch and early release (the launch's form must not change the numbers);
// - the accumulators and the ticket left at zero after every launch (the next layer's launch starts
//   from them), and one launch of the expected grid (a case the launch declined fails);
// - every output against the double-precision reference (tests/gpu/gpu_ref.c): the norm row
//   against ref_rmsnorm, gate and up within the float32 bound of ref_matmul of that row, act equal
//   to silu(gate) * up, down within the bound of ref_matmul of act (plus the fixed point's 2^-33 per
//   block), the residual equal to its start plus down.
// Shapes: Qwen3-0.6B's (1024 -> 3072, 4-bit g64 bf16: 96 blocks of one chunk on 132
// multiprocessors, the short-row form), a long-row one (4096 wide: the two-row task form, three
// chunks per block, two down row groups), odd ones (800 x 1120: hidden not a multiple of the block's
// rows, a short last block; 8-bit g128 f16 with biases; 64-lane warps); a case of huge activations
// (partials of 2^20 and more: the split integer/fraction form) and one with a NaN in the norm's
// weights (every down row NaN, through the float form). run.sh builds it also against two planted
// faults that must fail: every partial added as a float (the sums then depend on the order of
// arrival), and the act slice staged one element off. Exits 1 on any failure.
#include "emu.h"
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
extern "C" {
#include "backends/backend.h"
#include "core/quant.h"
#include "gpu_ref.h"
}
#include "backends/gpu/kernels.h"
#include "backends/gpu/kernels_fused.h"
#include "emu_fail.h"

struct Outs {
    std::vector<float> res, xn, gate, up, act, down;
    bool clean = false;  // accumulators and ticket zero after the launch
    bool launched = false;
    unsigned blocks = 0;
};

struct Case {
    const char *name;
    mx_quant q;
    mx_dtype st;
    int hidden, inter, warp, sms;
    bool bias;
    float norm_scale;  // the norm weights' size (huge activations)
    bool nan;          // a NaN among the norm weights
};

static std::vector<unsigned char> acc_buf(MXG_MLP_ACC_BYTES + 16);

static bool all_zero(const unsigned char *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (p[i]) return false;
    return true;
}

// 0: in order, 1: reversed, 2: shuffled (seeded by `seed`), each with pdl off; 3: in order with
// MLXCEL_GPU_PDL=2's prefetch and early release.
static Outs run(const Case &c, mx_matrix *w, const std::vector<float> *bs, const std::vector<float> &x,
                const std::vector<float> &nw, int order, uint64_t seed) {
    Outs o;
    unsigned char *acc = (unsigned char *)(((uintptr_t)acc_buf.data() + 15) & ~(uintptr_t)15);
    memset(acc, 0, MXG_MLP_ACC_BYTES);
    mxg_launch L;
    memset(&L, 0, sizeof L);
    L.warp = c.warp, L.sm_count = c.sms, L.matvec_stream = true, L.stream_min_cols = 0, L.stream_rows = 4;
    L.matvec_rows = 4, L.mlp_one = true, L.mlp_acc = acc;
    if (order == 3) L.dependent_launch = L.pdl_early = true, L.pdl_prefetch = mxg_pdl_prefetch_cap(MXG_PDL_L2_FALLBACK);
    o.res = x, o.xn.assign(c.hidden, 3.0f), o.gate.assign(c.inter, 9.0f), o.up.assign(c.inter, 9.0f);
    o.act.assign(c.inter, 4.0f), o.down.assign(c.hidden, 5.0f);
    mxg_mlp f = {o.res.data(), nw.data(), 1e-6f, o.xn.data(), &w[0], &w[1], &w[2], o.gate.data(), o.up.data(),
                 o.act.data(), o.down.data(), c.bias ? bs[0].data() : NULL, c.bias ? bs[1].data() : NULL,
                 c.bias ? bs[2].data() : NULL};
    if (!mxg_mlp_decode_ok(&L, &f)) return o;
    const unsigned cs = (unsigned)((c.inter / 32 + c.sms - 1) / c.sms), blocks = (unsigned)(c.inter / 32 + cs - 1) / cs;
    emu_block_order.clear();
    if (order == 1 || order == 2) {
        for (unsigned i = 0; i < blocks; i++) emu_block_order.push_back(order == 1 ? blocks - 1 - i : i);
        if (order == 2) {
            ref_rng r = {seed};
            for (unsigned i = blocks - 1; i > 0; i--) std::swap(emu_block_order[i], emu_block_order[ref_next(&r) % (i + 1)]);
        }
    }
    emu_grids.clear();
    mxg_mlp_decode(&L, &f);
    emu_block_order.clear();
    o.launched = emu_grids.size() == 1;
    o.blocks = o.launched ? emu_grids[0].x : 0;
    o.launched = o.launched && o.blocks == blocks;
    o.clean = all_zero(acc, MXG_MLP_ACC_BYTES);
    return o;
}

static bool same(const std::vector<float> &a, const std::vector<float> &b) {
    return a.size() == b.size() && memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}
static bool same_outs(const Outs &a, const Outs &b) {
    return same(a.res, b.res) && same(a.xn, b.xn) && same(a.gate, b.gate) && same(a.up, b.up) && same(a.act, b.act) &&
           same(a.down, b.down);
}

// Every element of `got` within (cols + 16) float32 roundings of its evaluation scale (+ extra) of
// ref_matmul(in, w, bias); returns the worst error over its bound.
static double check_matmul(const std::vector<float> &got, const std::vector<float> &in, const mx_matrix *w,
                           const float *bias, double extra, bool *ok) {
    std::vector<float> ref(w->rows);
    std::vector<ref_scale> sc(w->rows);
    ref_matmul(ref.data(), sc.data(), in.data(), w, bias, 1, false);
    double worst = 0.0;
    for (int64_t r = 0; r < w->rows; r++) {
        const double bound = (double)(w->cols + 16) / 16777216.0 * sc[r].eval + extra;
        const double err = fabs((double)got[r] - ref[r]);
        worst = std::max(worst, err / bound);
        if (!(err <= bound)) *ok = false;
    }
    return worst;
}

static void run_case(const Case &c) {
    ref_rng rng = {0x3c6ef372fe94f82bull ^ (uint64_t)(c.hidden * 131 + c.inter * 7 + c.warp + c.q.bits + c.st)};
    mx_matrix w[3];
    std::vector<float> bs[3];
    const int64_t rows[3] = {c.inter, c.inter, c.hidden}, cols[3] = {c.hidden, c.hidden, c.inter};
    for (int k = 0; k < 3; k++) {
        w[k] = ref_matrix_random(&rng, c.q, MX_DTYPE_U32, c.st, 1, rows[k], cols[k]);
        bs[k].resize(rows[k]);
        ref_fill(&rng, bs[k].data(), rows[k], -0.5f, 0.5f);
    }
    std::vector<float> x(c.hidden), nw(c.hidden);
    ref_fill(&rng, x.data(), c.hidden, -2.0f, 2.0f);
    for (int i = 0; i < c.hidden; i += 97) x[i] *= 40.0f;
    ref_fill(&rng, nw.data(), c.hidden, 0.5f * c.norm_scale, 1.5f * c.norm_scale);
    if (c.nan) nw[c.hidden / 3] = NAN;
    Outs base = run(c, w, bs, x, nw, 0, 0);
    char ml[64];
    printf("mlp one %-14s %s %d -> %d%s warp %d sms %d: ", c.name, ref_matrix_label(&w[0], ml, sizeof ml), c.hidden,
           c.inter, c.bias ? " bias" : "", c.warp, c.sms);
    if (!base.launched) {
        printf("no launch\n");
        FAIL("%s: the launch declined the case or ran another grid (%u blocks)", c.name, base.blocks);
        for (int k = 0; k < 3; k++) ref_matrix_free(&w[k]);
        return;
    }
    // The same bytes in every order of arrival, and with MLXCEL_GPU_PDL=2's form.
    bool orders = true, clean = base.clean;
    const int ords[3] = {1, 2, 2};
    for (int k = 0; k < 3; k++) {
        const Outs other = run(c, w, bs, x, nw, ords[k], 0x9e37u + (uint64_t)k * 7919u);
        orders = orders && other.launched && same_outs(base, other);
        clean = clean && other.clean;
    }
    {
        const Outs pdl = run(c, w, bs, x, nw, 3, 0);
        orders = orders && pdl.launched && same_outs(base, pdl);
        clean = clean && pdl.clean;
    }
    // Against the reference.
    bool ok_norm = true, ok_gu = true, ok_act = true, ok_down = true, ok_res = true;
    std::vector<float> xn_ref(c.hidden);
    ref_rmsnorm(xn_ref.data(), x.data(), nw.data(), 1, c.hidden, 1e-6f);
    for (int i = 0; i < c.hidden; i++) {
        const double err = fabs((double)base.xn[i] - xn_ref[i]);
        if (c.nan ? std::isnan(xn_ref[i]) != std::isnan(base.xn[i]) : !(err <= 4e-6 * fabs((double)xn_ref[i]) + 1e-30))
            ok_norm = false;
    }
    double worst_gu = 0.0, worst_down = 0.0;
    bool all_nan = true;
    if (!c.nan) {
        worst_gu = std::max(check_matmul(base.gate, base.xn, &w[0], c.bias ? bs[0].data() : NULL, 0.0, &ok_gu),
                            check_matmul(base.up, base.xn, &w[1], c.bias ? bs[1].data() : NULL, 0.0, &ok_gu));
        worst_down = check_matmul(base.down, base.act, &w[2], c.bias ? bs[2].data() : NULL,
                                  (double)base.blocks / 8589934592.0, &ok_down);
    }
    for (int i = 0; i < c.inter; i++) {
        const float g = base.gate[i], u = base.up[i], h = g / (1.0f + expf(-g)) * u;
        if (memcmp(&h, &base.act[i], 4) != 0 && !(c.nan && std::isnan(h) && std::isnan(base.act[i]))) ok_act = false;
    }
    float most = 0.0f;
    for (int r = 0; r < c.hidden; r++) {
        const float want = x[r] + base.down[r];
        if (memcmp(&want, &base.res[r], 4) != 0 && !(std::isnan(want) && std::isnan(base.res[r]))) ok_res = false;
        all_nan = all_nan && std::isnan(base.down[r]) && std::isnan(base.res[r]);
        most = std::max(most, fabsf(base.down[r]));
    }
    if (c.nan) ok_down = all_nan;
    printf("%u blocks, orders %s, scratch %s, norm %s, gate/up %s (%.2e), act %s, down %s (%.2e, max |down| %.3g), "
           "residual %s\n",
           base.blocks, orders ? "same" : "DIFFER", clean ? "zero" : "LEFT", ok_norm ? "ok" : "BAD", ok_gu ? "ok" : "BAD",
           worst_gu, ok_act ? "ok" : "BAD", ok_down ? "ok" : "BAD", worst_down, most, ok_res ? "ok" : "BAD");
    if (!orders) FAIL("%s: the outputs depend on the order the blocks arrive in", c.name);
    if (!clean) FAIL("%s: accumulators or ticket left non-zero", c.name);
    if (!ok_norm || !ok_gu || !ok_act) FAIL("%s: norm, gate/up or act off the reference", c.name);
    if (!ok_down) FAIL("%s: down off the reference", c.name);
    if (!ok_res) FAIL("%s: the residual is not its start plus down", c.name);
    for (int k = 0; k < 3; k++) ref_matrix_free(&w[k]);
}

int main(int argc, char **argv) {
    const bool quick = argc > 1 && !strcmp(argv[1], "quick");
    const mx_quant q4 = {MX_QUANT_AFFINE, 4, 64}, q8g128 = {MX_QUANT_AFFINE, 8, 128}, q4g32 = {MX_QUANT_AFFINE, 4, 32};
    // Qwen3-0.6B's MLP on an H100's 132 multiprocessors: 96 blocks of one chunk.
    run_case({"qwen3-0.6b", q4, MX_DTYPE_BF16, 1024, 3072, 32, 132, false, 1.0f, false});
    // Long rows (the two-row task form), three chunks per block, two groups of down rows.
    run_case({"long rows", q4, MX_DTYPE_BF16, 4096, 1536, 32, 16, false, 1.0f, false});
    // Odd shapes: 800 hidden rows (not a multiple of 256), a short last block (35 chunks over 4).
    run_case({"odd", q8g128, MX_DTYPE_F16, 800, 1120, 32, 4, true, 1.0f, false});
    run_case({"odd warp 64", q4g32, MX_DTYPE_F16, 800, 1120, 64, 5, true, 1.0f, false});
    // Huge activations: partials past 2^20 (the split form); a NaN norm weight (the float form).
    run_case({"huge", q4, MX_DTYPE_BF16, 1024, 3072, 32, 40, true, 3000.0f, false});
    run_case({"nan", q4, MX_DTYPE_BF16, 512, 1024, 32, 8, false, 1.0f, true});
    if (!quick) run_case({"8-bit long", {MX_QUANT_AFFINE, 8, 64}, MX_DTYPE_BF16, 4096, 2048, 64, 7, true, 1.0f, false});
    printf("%d failures\n", fails);
    return fails != 0;
}
