// SPDX-License-Identifier: MIT
// The residual epilogue with its reads ahead (EPI_RESIDUAL_EARLY, kernels/matvec_res_early.cuh;
// MLXCEL_GPU_STREAM_RES_EARLY=1) on the host emulation (emu.h), through the fused one-token launch
// of kernels/matvec_fused.cu (matmul + residual add): the streaming kernel's lean form (the launch's
// task shape, and four and two rows a task forced), its other body (stream_body: the lean form off,
// the eight-row shape of rows shorter than a step, mxfp4 and dense bf16) and the fused kernel (the
// rows the streaming kernel declines: four rows a warp, and one row with split-K). Each case runs
// the knob off (today's lane-0 epilogue) and on, on the same inputs, and requires of the knob's run:
// - the output and the residual stream bit for bit today's (the same two float additions on the
//   same operands: only who reads and writes them changes), and every res[r] the float32 sum of the
//   original res[r] and out[r], computed here;
// - every output within the float32 bound of the double-precision reference (tests/gpu/gpu_ref.c);
// - as a dependent launch with the residual stream guarded (emu.h, emu_pdl_guard: each block sees it
//   overwritten with NaN until its grid wait), the same bits and no block without its wait: a lane
//   that reads its held residual before the wait computes from NaN.
// Shapes: Qwen3-8B's o (4096 x 4096) and down (4096 x 12288) with one task per warp (132
// multiprocessors: the H100's grid) and with several (8: the walk's next-task reads), odd ones
// (333 rows: a partial last task; with bias), 64-lane warps, the 0.6B's o and down shapes (1024 x
// 2048, 1024 x 3072) on the fused kernel. run.sh also builds it against two planted faults that
// must fail: each lane picking its neighbour's row sum (lane ^ 1), and the lean form's first held
// residual read before the grid wait (only the guarded check can see that one). Exits 1 on any failure.
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

// Which kernel takes the product.
enum Body { LEAN, BODY, FUSED };
static const char *const body_names[] = {"lean", "stream_body", "fused kernel"};

// One down + residual launch with the knob `early` on or off; `guard`: as a dependent launch with
// the residual stream guarded (emu_pdl_guard).
static void launch(Run &u, bool early, bool guard, Body body, mx_matrix *w, int64_t rows, const std::vector<float> *bs,
                   bool bias, const std::vector<float> &x, const std::vector<float> &res0, int warp, int sms,
                   int stream_rows) {
    mxg_launch L;
    memset(&L, 0, sizeof L);
    L.warp = warp, L.sm_count = sms, L.stream_rows = stream_rows, L.matvec_rows = 4;
    L.matvec_stream = body != FUSED, L.stream_min_cols = 0, L.stream_lean = body == LEAN;
    L.stream_res_early = early;
    L.dependent_launch = L.pdl_early = guard;
    const std::vector<float> nw;
    mxg_fused_matvec f = fused_case_args(u, DOWN_RESIDUAL, 1, w, &rows, bs, bias, x, nw, res0);
    emu_smem_sizes.clear();
    emu_pdl_unwaited = 0;
    if (guard) emu_pdl_guard = {{u.res.data(), u.res.size() * sizeof(float)}};
    mxg_run_fused_matvec(&L, &f);
    emu_pdl_guard.clear();
    u.smem = emu_smem_sizes.empty() ? 0 : emu_smem_sizes.back();
}

static void run_case(const char *name, Body body, mx_quant q, mx_dtype dt, mx_dtype st, int rows, int cols, bool bias,
                     int warp, int sms, int stream_rows) {
    ref_rng rng = {0x7e5ea11u ^ (uint64_t)(rows * 131 + cols * 7 + body * 3 + warp + q.bits + st + sms)};
    mx_matrix w = ref_matrix_random(&rng, q, dt, st, 1, rows, cols);
    std::vector<float> bs(rows), x(cols), res0(rows);
    ref_fill(&rng, bs.data(), rows, -0.5f, 0.5f);
    ref_fill(&rng, x.data(), cols, -2.0f, 2.0f);
    for (int i = 0; i < cols; i += 97) x[i] *= 40.0f;
    ref_fill(&rng, res0.data(), rows, -1.0f, 1.0f);
    for (int r = 0; r < rows; r += 7) res0[r] *= 1e4f;  // residuals far from the products: an addend swapped shows
    Run today, early, guarded;
    launch(today, false, false, body, &w, rows, &bs, bias, x, res0, warp, sms, stream_rows);
    launch(early, true, false, body, &w, rows, &bs, bias, x, res0, warp, sms, stream_rows);
    launch(guarded, true, true, body, &w, rows, &bs, bias, x, res0, warp, sms, stream_rows);
    const long unwaited = emu_pdl_unwaited;
    const int64_t rows64 = rows;
    const RefCheck rc = fused_case_ref_check(early.out, 1, &w, &rows64, &bs, bias, x.data(), cols);
    bool sum = true;
    for (int r = 0; r < rows; r++) {
        const float expect = res0[r] + early.out[0][r];
        sum = sum && memcmp(&expect, &early.res[r], 4) == 0;
    }
    const bool equal = same(today.out[0], early.out[0]) && same(today.res, early.res);
    const bool pdl = same(guarded.out[0], early.out[0]) && same(guarded.res, early.res) && unwaited == 0;
    // The streaming body that ran, by its dynamic shared memory (the lean form's has one float per
    // chunk after the row); the fused kernel runs by construction (L.matvec_stream off).
    const size_t want = body == LEAN ? (size_t)cols * 4 + (size_t)(cols / 32) * 4 : (size_t)cols * 4;
    const bool ran = body == FUSED || early.smem == want;
    char ml[64];
    printf("res early %-10s %-12s %s %dx%d%s warp %d sms %d rows/task %d: bit-equal %s, res = res0 + out %s, "
           "guarded %s (%ld unwaited), worst err/bound %.2e, smem %zu\n",
           name, body_names[body], ref_matrix_label(&w, ml, sizeof ml), rows, cols, bias ? " bias" : "", warp, sms,
           stream_rows, equal ? "yes" : "NO", sum ? "yes" : "NO", pdl ? "same" : "DIFFER", unwaited, rc.worst, early.smem);
    if (!equal) FAIL("%s (%s): the knob's outputs or residual stream are not today's", name, body_names[body]);
    if (!sum) FAIL("%s (%s): a res[r] is not res0[r] + out[r]", name, body_names[body]);
    if (!pdl) FAIL("%s (%s): as a dependent launch with the residual guarded: outputs DIFFER", name, body_names[body]);
    if (!rc.within) FAIL("%s (%s): an output outside its float32 bound (worst %.2e of it)", name, body_names[body], rc.worst);
    if (!ran) FAIL("%s: not the %s (shared memory %zu)", name, body_names[body], early.smem);
    ref_matrix_free(&w);
}

int main(int argc, char **argv) {
    const bool quick = argc > 1 && !strcmp(argv[1], "quick");
    const mx_quant q4 = {MX_QUANT_AFFINE, 4, 64}, q8 = {MX_QUANT_AFFINE, 8, 64}, fp4 = {MX_QUANT_MXFP4, 4, 32};
    const mx_quant dense = {MX_QUANT_NONE, 0, 0};
    const mx_dtype U32 = MX_DTYPE_U32, BF16 = MX_DTYPE_BF16;
    // Qwen3-8B's o and down in the lean form: one task per warp (the H100's 132 multiprocessors;
    // rows/task 0: the launch's rule, two rows there), then four and two rows forced with several
    // tasks a warp (8 multiprocessors: the next task's values read a task ahead).
    run_case("o", LEAN, q4, U32, BF16, 4096, 4096, false, 32, 132, 0);
    run_case("down", LEAN, q4, U32, BF16, 4096, 12288, false, 32, 132, 2);
    run_case("down", LEAN, q4, U32, BF16, 4096, 12288, false, 32, 8, 4);
    run_case("o", LEAN, q4, U32, BF16, 4096, 4096, true, 32, 8, 2);
    // Partial last task with bias, 64-lane warps, 8-bit.
    run_case("odd", LEAN, q4, U32, BF16, 333, 4160, true, 32, 3, 4);
    run_case("odd", LEAN, q8, U32, MX_DTYPE_F16, 333, 4096, true, 64, 2, 2);
    // stream_body: the lean form off; rows shorter than a step (eight rows a task); mxfp4; dense bf16.
    run_case("o", BODY, q4, U32, BF16, 1001, 4096, true, 32, 5, 4);
    run_case("short", BODY, q4, U32, BF16, 517, 1024, true, 32, 3, 4);
    run_case("mxfp4", BODY, fp4, U32, MX_DTYPE_U8, 333, 4096, true, 32, 3, 4);
    run_case("dense", BODY, dense, BF16, BF16, 259, 2048, false, 32, 2, 4);
    // The fused kernel (the 0.6B's o and down): four rows a warp, then one row with split-K (132
    // multiprocessors), with bias, and 64-lane warps.
    run_case("0.6B down", FUSED, q4, U32, BF16, 1024, 3072, false, 32, 4, 4);
    run_case("0.6B o", FUSED, q4, U32, BF16, 1024, 2048, true, 32, 132, 4);
    run_case("odd", FUSED, q8, U32, BF16, 333, 2048, true, 64, 3, 4);
    if (!quick) {
        run_case("down", LEAN, q4, U32, BF16, 1024, 8192, true, 64, 2, 4);
        run_case("short", BODY, q8, U32, BF16, 1029, 1024, false, 64, 2, 4);
        run_case("0.6B down", FUSED, q8, U32, BF16, 1024, 3072, false, 32, 132, 4);
    }
    printf("%d failures\n", fails);
    return fails != 0;
}
