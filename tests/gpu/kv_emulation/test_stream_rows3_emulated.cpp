// SPDX-License-Identifier: MIT
// The streaming kernel's three-row task shape (kernels/matvec_stream.cuh, stream_shape_rows:
// MLXCEL_GPU_STREAM_ROWS=3 forces it, MLXCEL_GPU_STREAM_ROWS3=1 puts it in the launch's rule) on the
// host emulation (emu.h), through the fused one-token launches of kernels/matvec_fused.cu (plain,
// RMSNorm + q/k/v, RMSNorm + gate/up + SwiGLU, down + residual, and the residual with its reads
// ahead; the one-record products of kernels/matvec_stream.cu take the same stream_launch). Each case
// runs the four-row shape forced (today's shape of these launches) and the case's shape on the same
// inputs, and requires of the latter:
// - every output and every buffer the launch writes (the norm's row, SwiGLU's act, the residual
//   stream) bit for bit the four-row run's: each lane takes the same chunks of each row in the same
//   order in every shape (chunk lane, lane + 32, ... whatever the step), so the sums are the same
//   floats; a row of a task past its matrix's end, a lane past the row's last chunk in a partial
//   step, or a slot not reloaded for a warp's next task shows as other bits or an unwritten fill;
// - every output within the float32 bound of the double-precision reference (tests/gpu/gpu_ref.c);
// - the shape the launch took: its grid, ceil(tasks / 8 warps) blocks capped at two per
//   multiprocessor, with the tasks counted here at the expected rows a task (forced 3: three, gate/up
//   and the residual reads ahead four; the rule: the fewest of 2, 3, 4 whose tasks fit sms x 2 x 8
//   warps, 3 never for those two).
// Shapes: Qwen3-8B's q/k/v (4096, 1024, 1024 rows over 4096 columns: partial last tasks at each
// matrix's end, a partial second step of 32 chunks at 3 chunks a step) under the rule at an H100's
// 132 multiprocessors (three rows: 2,050 tasks on 2,112 warps) and forced with several tasks a warp
// (8 multiprocessors: each warp reloads its slots for its next task in the partial step); 333 rows
// under the rule at 11, 8 and 6 multiprocessors (two, three and four rows); gate/up forced and by the
// rule (four); 8-bit (one chunk a step), 4-bit g32 f16, mxfp4 on stream_body, the lean form off,
// 64-lane warps over 8256 columns, down + residual at the 8B's 12288 columns, and with the reads
// ahead (four rows there: stream_has_three).
// run.sh builds it against planted faults that must fail: each matrix's tasks counted rounding
// down, the steps per task rounding down, the slots past the row's last chunk in a partial step not
// reloaded for the next task, and the rule testing three rows with the four-row count. Exits 1 on
// any failure.
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

// How a case's shape is asked for: forced by MLXCEL_GPU_STREAM_ROWS (2, 3, 4), or by the rule with
// MLXCEL_GPU_STREAM_ROWS3=1 (RULE).
enum { RULE = 0 };

struct Opts {
    int warp = 32, sms = 8;
    bool lean = true, res_early = false;
};

// One launch of the pattern; its grid in `grid`.
static void launch(Run &u, Pattern pat, int count, mx_matrix *w, const int64_t *rws, const std::vector<float> *bs,
                   bool bias, const std::vector<float> &x, const std::vector<float> &nw,
                   const std::vector<float> &res0, const Opts &o, int shape, unsigned &grid) {
    mxg_launch L;
    memset(&L, 0, sizeof L);
    L.warp = o.warp, L.sm_count = o.sms, L.matvec_stream = true, L.stream_min_cols = 0, L.matvec_rows = 4;
    L.stream_lean = o.lean, L.stream_res_early = o.res_early;
    L.stream_rows = shape, L.stream_rows3 = shape == RULE;
    mxg_fused_matvec f = fused_case_args(u, pat, count, w, rws, bs, bias, x, nw, res0);
    emu_grids.clear();
    mxg_run_fused_matvec(&L, &f);
    grid = emu_grids.empty() ? 0 : emu_grids.back().x;
}

// The rows a task the launch should take (2, 3, 4), its tasks at that many (gate/up: half of them
// from each matrix) and its grid.
static int expected_rows(Pattern pat, int count, const int64_t *rws, const Opts &o, int shape) {
    const bool gu = pat == NORM_GATE_UP, no3 = gu || (pat == DOWN_RESIDUAL && o.res_early);
    auto tasks = [&](int r) {
        int64_t t = 0;
        for (int k = 0; k < (gu ? 1 : count); k++) t += (rws[k] + (gu ? r / 2 : r) - 1) / (gu ? r / 2 : r);
        return t;
    };
    if (shape != RULE) return shape == 3 && no3 ? 4 : shape;
    const int64_t resident = (int64_t)o.sms * 2 * (256 / o.warp);
    if (tasks(2) <= resident) return 2;
    if (!no3 && tasks(3) <= resident) return 3;
    return 4;
}
static unsigned expected_grid(Pattern pat, int count, const int64_t *rws, const Opts &o, int rows) {
    const bool gu = pat == NORM_GATE_UP;
    const int per = gu ? rows / 2 : rows, warps = 256 / o.warp;
    int64_t t = 0;
    for (int k = 0; k < (gu ? 1 : count); k++) t += (rws[k] + per - 1) / per;
    const int64_t want = (t + warps - 1) / warps, cap = (int64_t)o.sms * 2;
    return (unsigned)(want < cap ? want : cap);
}

static void run_case(const char *name, Pattern pat, mx_quant q, mx_dtype st, const int64_t (&rws)[3], int cols,
                     bool bias, const Opts &o, int shape) {
    ref_rng rng = {0x3a0ee5u ^ (uint64_t)(rws[0] * 131 + cols * 7 + pat * 3 + o.warp + q.bits + st + o.sms)};
    const int count = pat == NORM_QKV ? 3 : pat == NORM_GATE_UP ? 2 : 1;
    mx_matrix w[3];
    std::vector<float> bs[3];
    for (int k = 0; k < count; k++) {
        w[k] = ref_matrix_random(&rng, q, MX_DTYPE_U32, st, 1, rws[k], cols);
        bs[k].resize(rws[k]);
        ref_fill(&rng, bs[k].data(), rws[k], -0.5f, 0.5f);
    }
    std::vector<float> x(cols), nw(cols), res0(pat == DOWN_RESIDUAL ? rws[0] : 1);
    ref_fill(&rng, x.data(), cols, -2.0f, 2.0f);
    for (int i = 0; i < cols; i += 97) x[i] *= 40.0f;
    ref_fill(&rng, nw.data(), cols, 0.5f, 1.5f);
    ref_fill(&rng, res0.data(), (int64_t)res0.size(), -1.0f, 1.0f);
    Run four, got;
    unsigned grid4 = 0, grid = 0;
    launch(four, pat, count, w, rws, bs, bias, x, nw, res0, o, 4, grid4);
    launch(got, pat, count, w, rws, bs, bias, x, nw, res0, o, shape, grid);
    const int rows = expected_rows(pat, count, rws, o, shape);
    const unsigned want = expected_grid(pat, count, rws, o, rows);
    const bool norm = pat == NORM_QKV || pat == NORM_GATE_UP;
    const std::vector<float> &act_in = norm ? four.h : x;
    bool equal = true;
    for (int k = 0; k < count; k++) equal = equal && same(four.out[k], got.out[k]);
    const RefCheck rc = fused_case_ref_check(got.out, count, w, rws, bs, bias, act_in.data(), cols);
    const bool side = same(four.h, got.h) && same(four.act, got.act) && same(four.res, got.res);
    char ml[64], sh[16];
    snprintf(sh, sizeof sh, shape == RULE ? "rule" : "forced %d", shape);
    printf("rows3 %-13s %s %lldx%d%s warp %d sms %d %s%s%s: %d rows/task, grid %u (want %u; four rows %u), "
           "bit-equal to four rows %s, side buffers %s, worst err/bound %.2e\n",
           name, ref_matrix_label(&w[0], ml, sizeof ml), (long long)rws[0], cols, bias ? " bias" : "", o.warp, o.sms,
           sh, o.lean ? "" : " lean off", o.res_early ? " res early" : "", rows, grid, want, grid4,
           equal ? "yes" : "NO", side ? "equal" : "DIFFER", rc.worst);
    if (!equal || !side) FAIL("%s (%s): outputs are not the four-row shape's", name, sh);
    if (!rc.within) FAIL("%s (%s): an output outside its float32 bound (worst %.2e of it)", name, sh, rc.worst);
    if (grid != want) FAIL("%s (%s): shape: grid %u, want %u (%d rows a task)", name, sh, grid, want, rows);
    for (int k = 0; k < count; k++) ref_matrix_free(&w[k]);
}

int main(int argc, char **argv) {
    const bool quick = argc > 1 && !strcmp(argv[1], "quick");
    const mx_quant q4 = {MX_QUANT_AFFINE, 4, 64}, q4g32 = {MX_QUANT_AFFINE, 4, 32}, q8 = {MX_QUANT_AFFINE, 8, 64};
    const mx_quant fp4 = {MX_QUANT_MXFP4, 4, 32};
    const mx_dtype BF16 = MX_DTYPE_BF16;
    const int64_t qkv8b[3] = {4096, 1024, 1024}, odd[3] = {333, 0, 0}, gu[3] = {517, 517, 0};
    const int64_t qkv_odd[3] = {1001, 259, 259}, down1k[3] = {1024, 0, 0}, qkv2k[3] = {2048, 512, 512};
    Opts h100, few, at11, at8, at6, w64;
    h100.sms = 132, few.sms = 8, at11.sms = 11, at8.sms = 8, at6.sms = 6;
    w64.warp = 64, w64.sms = 14;
    // Qwen3-8B's norm + q/k/v: by the rule on an H100's grid (three rows, one task a warp), forced with
    // several tasks a warp.
    run_case("norm+qkv 8B", NORM_QKV, q4, BF16, qkv8b, 4096, true, h100, RULE);
    run_case("norm+qkv 8B", NORM_QKV, q4, BF16, qkv8b, 4096, false, few, 3);
    // The rule's three answers on 333 rows (167, 111, 84 tasks at two, three, four rows).
    run_case("plain", PLAIN, q4, BF16, odd, 4096, true, at11, RULE);
    run_case("plain", PLAIN, q4, BF16, odd, 4096, true, at8, RULE);
    run_case("plain", PLAIN, q4, BF16, odd, 4096, true, at6, RULE);
    // Gate/up: no three-row shape (forced 3 takes four; the rule two or four).
    run_case("norm+gate/up", NORM_GATE_UP, q4, BF16, gu, 4096, true, few, 3);
    Opts gu_rule;
    gu_rule.sms = 20;  // 517 two-row tasks > 320 warps >= 259 four-row ones
    run_case("norm+gate/up", NORM_GATE_UP, q4, BF16, gu, 4096, false, gu_rule, RULE);
    // Other formats and bodies: 8-bit (one chunk a step) and mxfp4 on stream_body with several tasks
    // a warp (3 multiprocessors: 48 warps; the grid capped, so not the shape's own), 4-bit g32 f16 over
    // 4160 columns (130 chunks: a lane pair past 128; one task a warp), q/k/v with the lean form off
    // (stream_body; several tasks a warp).
    Opts three = few, body = few, body3 = few;
    three.sms = 3, body.lean = false, body3.lean = false, body3.sms = 3;
    run_case("plain", PLAIN, q8, BF16, odd, 4096, true, three, 3);
    run_case("plain", PLAIN, q4g32, MX_DTYPE_F16, odd, 4160, true, few, 3);
    run_case("plain", PLAIN, fp4, MX_DTYPE_U8, odd, 4096, true, body3, 3);
    run_case("norm+qkv", NORM_QKV, q4, BF16, qkv_odd, 4096, true, body, 3);
    // 64-lane warps (a step of 3 x 64 chunks over 258), by the rule (111 three-row tasks on 112 warps).
    run_case("plain", PLAIN, q4, BF16, odd, 8256, true, w64, RULE);
    // Down + residual over the 8B's 12288 columns (four full steps); with the reads ahead (no
    // three-row shape: forced 3 takes four, the rule two or four).
    Opts early = few;
    early.res_early = true;
    run_case("down+residual", DOWN_RESIDUAL, q4, BF16, odd, 12288, true, few, 3);
    run_case("down+residual", DOWN_RESIDUAL, q4, BF16, odd, 4096, true, early, 3);
    run_case("down+residual", DOWN_RESIDUAL, q4, BF16, odd, 4096, true, early, RULE);
    if (!quick) {
        Opts early_body = early;
        early_body.lean = false;
        run_case("down+residual", DOWN_RESIDUAL, q8, BF16, down1k, 4096, false, early_body, 3);
        run_case("norm+qkv", NORM_QKV, q8, MX_DTYPE_F16, qkv2k, 4096, false, w64, 3);
    }
    printf("%d failures\n", fails);
    return fails != 0;
}
