// SPDX-License-Identifier: MIT
// The streaming kernel's early one-token form (kernels/matvec_stream_early.cuh, MLXCEL_GPU_STREAM_EARLY=1)
// on the host emulation (emu.h), through the fused one-token launches of kernels/matvec_fused.cu
// (plain, RMSNorm + q/k/v, RMSNorm + gate/up + SwiGLU, down + residual; the one-record products of
// kernels/matvec_stream.cu take the same stream_launch). Each case runs the lean form (the default;
// the early form off) and then the knob on, on the same inputs, and requires:
// - where the early form fits (one task per warp, 4096 columns, its shared memory within the cap):
//   that it ran (the launch's dynamic shared memory is the early form's: the row plus each warp's
//   slots), every output bit for bit the lean form's (the form's claim) and every buffer the launch
//   writes (outputs, the norm's row, SwiGLU's act, the residual stream) byte for byte the lean
//   form's; every output within the float32 bound of the double-precision reference
//   (tests/gpu/gpu_ref.c); and, run again as a dependent launch under emu.h's emulated order
//   (emu_pdl_guard: each block sees x and the residual stream as 0xFF bytes until its grid wait),
//   the same outputs: nothing before the wait reads what the previous kernel writes;
// - where it does not fit (more tasks than warps, 8-bit four-row slots over the cap), that the lean
//   form ran unchanged (its shared memory, its outputs).
// Shapes: Qwen3-8B's (RMSNorm + q/k/v 6,144 x 4096 and o + residual 4096 x 4096 on 132
// multiprocessors: 192 and 128 blocks), partial last tasks (515, 517, 1001 rows), affine 4-bit g64
// bf16, 4-bit g32 f16, 8-bit g64 bf16 (two-row tasks: two 16-byte pieces a slot), 8-bit g128 f16
// gate/up. run.sh also builds it against copies of the kernel with planted faults (a slot read from
// the neighbouring chunk's place; the RMSNorm's mean over one column too many), which must fail.
// Exits 1 on any failure.
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
#include "backends/gpu/kernels/matvec_stream.cuh"
#include "emu_fail.h"
#include "fused_case.h"

// An H100's cap (gpu_backend.c: half the 227 KB opt-in less 1 KB).
static const size_t kCap = (232448 - 1024) / 2;

// One launch of the pattern with the early form on or off (`guard`: as a dependent launch under
// emu_pdl_guard's order, x and the residual stream hidden until each block's grid wait).
static void launch(Run &u, bool early, bool guard, Pattern pat, int count, mx_matrix *w, const int64_t *rws,
                   const std::vector<float> *bs, bool bias, std::vector<float> &x, const std::vector<float> &nw,
                   const std::vector<float> &res0, int sms, int stream_rows) {
    mxg_launch L;
    memset(&L, 0, sizeof L);
    L.warp = 32, L.sm_count = sms, L.cc = 90, L.matvec_stream = true, L.stream_min_cols = 0, L.stream_rows = stream_rows;
    L.matvec_rows = 4, L.stream_lean = true, L.stream_early = early ? kCap : 0;
    L.dependent_launch = L.pdl_early = guard;
    mxg_fused_matvec f = fused_case_args(u, pat, count, w, rws, bs, bias, x, nw, res0);
    emu_grids.clear();
    emu_smem_sizes.clear();
    emu_pdl_guard.clear();
    emu_pdl_unwaited = 0;
    if (guard) {
        emu_pdl_guard.push_back({x.data(), x.size() * sizeof(float)});
        if (pat == DOWN_RESIDUAL) emu_pdl_guard.push_back({u.res.data(), u.res.size() * sizeof(float)});
    }
    mxg_run_fused_matvec(&L, &f);
    emu_pdl_guard.clear();
    u.smem = emu_smem_sizes.empty() ? 0 : emu_smem_sizes.back();
}

static bool same_run(const Run &a, const Run &b, int count) {
    bool ok = same(a.h, b.h) && same(a.act, b.act) && same(a.res, b.res);
    for (int k = 0; k < count; k++) ok = ok && same(a.out[k], b.out[k]);
    return ok;
}

// `fits`: whether the early form should take the launch.
static void run_case(const char *name, Pattern pat, mx_quant q, mx_dtype st, int rows, bool bias, int sms,
                     int stream_rows, bool fits) {
    const int cols = 4096;
    ref_rng rng = {0x5eed0e1du ^ (uint64_t)(rows * 131 + pat * 3 + sms + q.bits + st + stream_rows)};
    const int count = pat == NORM_QKV ? 3 : pat == NORM_GATE_UP ? 2 : 1;
    const int64_t rws[3] = {rows, pat == NORM_QKV ? rows / 4 : rows, pat == NORM_QKV ? rows / 4 : rows};
    mx_matrix w[3];
    std::vector<float> bs[3];
    for (int k = 0; k < count; k++) {
        w[k] = ref_matrix_random(&rng, q, MX_DTYPE_U32, st, 1, rws[k], cols);
        bs[k].resize(rws[k]);
        ref_fill(&rng, bs[k].data(), rws[k], -0.5f, 0.5f);
    }
    std::vector<float> x(cols), nw(cols), res0(pat == DOWN_RESIDUAL ? rows : 1);
    ref_fill(&rng, x.data(), cols, -2.0f, 2.0f);
    for (int i = 0; i < cols; i += 97) x[i] *= 40.0f;  // outliers: chunks of very different sums
    for (int i = 64; i < 96; i++) x[i] = 0.0f;          // one chunk all zero
    ref_fill(&rng, nw.data(), cols, 0.5f, 1.5f);
    ref_fill(&rng, res0.data(), (int64_t)res0.size(), -1.0f, 1.0f);
    Run lean, early, guarded;
    launch(lean, false, false, pat, count, w, rws, bs, bias, x, nw, res0, sms, stream_rows);
    launch(early, true, false, pat, count, w, rws, bs, bias, x, nw, res0, sms, stream_rows);
    const bool norm = pat == NORM_QKV || pat == NORM_GATE_UP;
    const std::vector<float> &act_in = norm ? lean.h : x;
    bool within = true;
    double worst = 0.0;
    for (int k = 0; k < count; k++) {
        std::vector<float> ref(rws[k]);
        std::vector<ref_scale> sc(rws[k]);
        ref_matmul(ref.data(), sc.data(), act_in.data(), &w[k], bias ? bs[k].data() : NULL, 1, false);
        for (int64_t r = 0; r < rws[k]; r++) {
            const double bound = (double)(cols + 16) / 16777216.0 * sc[r].eval;
            const double err = fabs((double)early.out[k][r] - ref[r]);
            worst = std::max(worst, err / bound);
            within = within && err <= bound;
        }
    }
    const bool equal = same_run(lean, early, count);
    const size_t lean_smem = (size_t)cols * 4 + (size_t)(cols / 32) * 4;
    const int rr = (pat == NORM_GATE_UP ? 1 : 2) * (stream_rows == 4 ? 2 : 1) * (pat == NORM_GATE_UP ? 2 : 1);
    const size_t early_smem = (size_t)cols * 4 + (size_t)8 * rr * 128 * (q.bits == 8 ? 32 : 16);
    const size_t want = fits ? early_smem : lean_smem;
    char ml[64];
    printf("stream early %-14s %s %dx%d%s sms %d rows/task %d: %s, bit-equal %s, worst err/bound %.2e, smem %zu/%zu "
           "(grid %u)\n",
           name, ref_matrix_label(&w[0], ml, sizeof ml), rows, cols, bias ? " bias" : "", sms, rr,
           fits ? "early" : "declined", equal ? "yes" : "NO", worst, lean.smem, early.smem,
           emu_grids.empty() ? 0u : emu_grids.back().x);
    if (lean.smem != lean_smem) FAIL("%s: the lean form did not run with the knob off (smem %zu)", name, lean.smem);
    if (early.smem != want)
        FAIL("%s: with the knob on the %s form did not run (smem %zu, expected %zu)", name, fits ? "early" : "lean",
             early.smem, want);
    if (!equal) FAIL("%s: the outputs with the knob on are not the lean form's", name);
    if (!within) FAIL("%s: an output outside its float32 bound of the reference (worst %.2e of it)", name, worst);
    if (fits) {
        launch(guarded, true, true, pat, count, w, rws, bs, bias, x, nw, res0, sms, stream_rows);
        const bool g_equal = same_run(lean, guarded, count);
        printf("stream early %-14s dependent launch, x%s hidden until the wait: outputs %s, blocks without their wait "
               "%ld\n",
               name, pat == DOWN_RESIDUAL ? " and the residual" : "", g_equal ? "equal" : "DIFFER", emu_pdl_unwaited);
        if (!g_equal || emu_pdl_unwaited != 0 || guarded.smem != early_smem)
            FAIL("%s: the early form read before its grid wait what the previous kernel writes", name);
    }
    for (int k = 0; k < count; k++) ref_matrix_free(&w[k]);
}

int main(int argc, char **argv) {
    const bool quick = argc > 1 && !strcmp(argv[1], "quick");
    const mx_quant q4 = {MX_QUANT_AFFINE, 4, 64}, q4g32 = {MX_QUANT_AFFINE, 4, 32}, q8 = {MX_QUANT_AFFINE, 8, 64};
    const mx_quant q8g128 = {MX_QUANT_AFFINE, 8, 128}, q4g128 = {MX_QUANT_AFFINE, 4, 128};
    // Qwen3-8B's RMSNorm + q/k/v (6,144 rows: 192 blocks) and o + residual (128 blocks) on an H100.
    run_case("norm+qkv", NORM_QKV, q4, MX_DTYPE_BF16, 4096, false, 132, 4, true);
    run_case("o+residual", DOWN_RESIDUAL, q4, MX_DTYPE_BF16, 4096, false, 132, 4, true);
    // Partial last tasks, other formats, two-row tasks, gate/up.
    run_case("plain", PLAIN, q4g32, MX_DTYPE_F16, 515, true, 9, 4, true);
    run_case("plain", PLAIN, q8, MX_DTYPE_BF16, 1001, true, 32, 2, true);
    run_case("norm+gate/up", NORM_GATE_UP, q8g128, MX_DTYPE_F16, 517, true, 33, 2, true);
    run_case("norm+gate/up", NORM_GATE_UP, q4, MX_DTYPE_BF16, 517, true, 33, 4, true);
    run_case("norm+qkv", NORM_QKV, q4g128, MX_DTYPE_BF16, 1028, true, 25, 4, true);
    // Declined: more tasks than warps (the lean form's persistent walk), 8-bit four-row slots over the cap.
    run_case("plain", PLAIN, q4, MX_DTYPE_BF16, 1029, true, 8, 4, false);
    run_case("o+residual", DOWN_RESIDUAL, q8, MX_DTYPE_BF16, 1024, true, 132, 4, false);
    if (!quick) {
        run_case("norm+qkv", NORM_QKV, q8, MX_DTYPE_BF16, 2048, true, 132, 2, true);
        run_case("o+residual", DOWN_RESIDUAL, q4g32, MX_DTYPE_F16, 2052, true, 66, 4, true);
    }
    printf("%d failures\n", fails);
    return fails != 0;
}
