// SPDX-License-Identifier: MIT
// The streaming kernel's integer form (kernels/matvec_stream_int.cuh, MLXCEL_GPU_STREAM_FORM=1) on
// the host emulation (emu.h), through the fused one-token launches (kernels/matvec_fused.cu: plain,
// RMSNorm + q/k/v, RMSNorm + gate/up + SwiGLU, down + residual; the one-record products of
// kernels/matvec_stream.cu take the same stream_launch). Each case runs the float32 form (0) and the
// integer form (1) on the same inputs and requires of form 1:
// - every output within its stated bound of the double-precision reference (tests/gpu/gpu_ref.c):
//   sum over the row's chunks k of 0.508 s_k sum |w_e| (s_k = the chunk's largest |x| / 32639,
//   the activations' rounding), plus 1e-5 of sum |w_e x_e| for float32 summation;
// - the outputs not bit for bit the float32 form's (so form 1 ran) and within 1e-4 relative L2 of
//   them; the residual stream = its start + the output, SwiGLU's act = silu(gate) * up, the norm's
//   output equal to the float32 form's.
// Shapes: Qwen3-8B's (4096 -> 4096, 1024, 12288; 12288 -> 4096), odd ones (333 x 4160: a partial last
// step; 515 x 2048), rows shorter than a step (3072 x 1024: the R x U rows-per-task shape), the
// 4-row task shape (stream_rows 4), affine 4-bit g64 bf16, 4-bit g32 f16, 8-bit g64 bf16 and 8-bit
// g128 f16, warps of 32 and 64. run.sh also builds it against a copy of the kernel with a planted
// fault (the high plane taken as q >> 8, without rounding), which must fail. Exits 1 on any failure.
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

static int fails = 0;

enum Pattern { PLAIN, NORM_QKV, NORM_GATE_UP, DOWN_RESIDUAL };

// The stated bound of one output: sum_k 0.508 s_k sum_{e in k} |w_e| over row r of w for activations x.
static double stated_bound(const mx_matrix *w, int64_t r, const float *x, std::vector<float> &row) {
    mx_matrix_dequant_row(w, r, row.data());
    double b = 0.0;
    for (int64_t k = 0; k < w->cols / 32; k++) {
        double amax = 0.0, wsum = 0.0;
        for (int e = 0; e < 32; e++) {
            amax = std::max(amax, (double)fabsf(x[32 * k + e]));
            wsum += fabs((double)row[32 * k + e]);
        }
        b += (amax / 32639.0) * 0.508 * wsum;
    }
    return b;
}

struct Check {
    double worst_ratio = 0.0, worst_l2 = 0.0;
    bool ok = true, differs = false;
};

// Output y of form 1 (and y0 of form 0) of matrix w on activations x against the reference.
static void check_out(Check &c, const mx_matrix *w, const float *x, const float *bias, const std::vector<float> &y,
                      const std::vector<float> &y0) {
    const int64_t rows = w->rows;
    std::vector<float> ref(rows), row(w->cols);
    std::vector<ref_scale> sc(rows);
    ref_matmul(ref.data(), sc.data(), x, w, bias, 1, false);
    for (int64_t r = 0; r < rows; r++) {
        const double bound = stated_bound(w, r, x, row) + 1e-5 * sc[r].abs;
        const double err = fabs((double)y[r] - ref[r]);
        c.worst_ratio = std::max(c.worst_ratio, err / bound);
        if (!(err <= bound)) c.ok = false;
    }
    c.worst_l2 = std::max(c.worst_l2, ref_rel_err(y.data(), y0.data(), rows));
    c.differs = c.differs || memcmp(y.data(), y0.data(), rows * sizeof(float)) != 0;
}

static void run_case(const char *name, Pattern pat, mx_quant q, mx_dtype st, int rows, int cols, bool bias, int warp,
                     int sms, int stream_rows) {
    ref_rng rng = {0x51ed2701u ^ (uint64_t)(rows * 131 + cols * 7 + pat * 3 + warp + q.bits)};
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
    for (int i = 0; i < cols; i += 97) x[i] *= 40.0f;  // outliers: chunks of very different scales
    for (int i = 5; i < cols; i += 389) x[i] = 0.0f;
    for (int i = 64; i < 96 && i < cols; i++) x[i] = 0.0f;  // one chunk all zero
    ref_fill(&rng, nw.data(), cols, 0.5f, 1.5f);
    ref_fill(&rng, res0.data(), (int64_t)res0.size(), -1.0f, 1.0f);
    const bool norm = pat == NORM_QKV || pat == NORM_GATE_UP;
    struct Run {
        std::vector<float> out[3], h, act, res;
    } run[2];
    for (int form = 0; form < 2; form++) {
        mxg_launch L;
        memset(&L, 0, sizeof L);
        L.warp = warp, L.sm_count = sms, L.matvec_stream = true, L.stream_min_cols = 0, L.stream_rows = stream_rows;
        L.matvec_rows = 4, L.stream_form = form;
        Run &u = run[form];
        mxg_fused_matvec f = {};
        f.count = count;
        for (int k = 0; k < count; k++) {
            u.out[k].assign(rws[k], 9.0f);
            f.w[k] = &w[k], f.out[k] = u.out[k].data(), f.bias[k] = bias ? bs[k].data() : NULL;
        }
        f.x = x.data();
        u.h.assign(cols, 3.0f);
        if (norm) f.norm_w = nw.data(), f.norm_eps = 1e-6f, f.norm_out = u.h.data();
        if (pat == NORM_GATE_UP) u.act.assign(rows, 4.0f), f.act = u.act.data();
        if (pat == DOWN_RESIDUAL) u.res = res0, f.res = u.res.data();
        emu_grids.clear();
        mxg_run_fused_matvec(&L, &f);
    }
    // The reference's activations: the norm's output (the float32 form's, checked equal) or x.
    std::vector<float> act_in = norm ? run[0].h : x;
    Check c;
    for (int k = 0; k < count; k++) check_out(c, &w[k], act_in.data(), bias ? bs[k].data() : NULL, run[1].out[k], run[0].out[k]);
    bool side = !norm || memcmp(run[0].h.data(), run[1].h.data(), cols * sizeof(float)) == 0;
    if (pat == NORM_GATE_UP)
        for (int r = 0; r < rows; r++) {
            const float g = run[1].out[0][r], v = run[1].out[1][r];
            side = side && run[1].act[r] == g / (1.0f + expf(-g)) * v;
        }
    if (pat == DOWN_RESIDUAL)
        for (int r = 0; r < rows; r++) side = side && run[1].res[r] == res0[r] + run[1].out[0][r];
    char ml[64];
    const bool ok = c.ok && c.differs && c.worst_l2 <= 1e-4 && side;
    printf("stream form %-14s %s %dx%d%s warp %d rows/task %d: worst err/bound %.3f, rel L2 vs float32 form %.2e%s: %s\n",
           name, ref_matrix_label(&w[0], ml, sizeof ml), rows, cols, bias ? " bias" : "", warp, stream_rows,
           c.worst_ratio, c.worst_l2, side ? "" : " (side outputs differ)", ok ? "ok" : "FAIL");
    if (!c.differs) printf("  form 1's outputs are bit for bit form 0's: the integer form did not run\n");
    fails += !ok;
    for (int k = 0; k < count; k++) ref_matrix_free(&w[k]);
}

int main(int argc, char **argv) {
    const bool quick = argc > 1 && !strcmp(argv[1], "quick");
    const mx_quant q4 = {MX_QUANT_AFFINE, 4, 64}, q4g32 = {MX_QUANT_AFFINE, 4, 32}, q8 = {MX_QUANT_AFFINE, 8, 64};
    const mx_quant q8g128 = {MX_QUANT_AFFINE, 8, 128};
    // Qwen3-8B's products (affine 4-bit g64, bf16 scales).
    run_case("norm+qkv", NORM_QKV, q4, MX_DTYPE_BF16, 4096, 4096, true, 32, 8, 2);
    run_case("norm+gate/up", NORM_GATE_UP, q4, MX_DTYPE_BF16, 12288, 4096, false, 32, 8, 2);
    run_case("down+residual", DOWN_RESIDUAL, q4, MX_DTYPE_BF16, 4096, 12288, false, 32, 8, 2);
    // Odd shapes, short rows, the other task shape, other formats, 64-lane warps.
    run_case("plain", PLAIN, q4, MX_DTYPE_BF16, 333, 4160, true, 32, 3, 2);
    run_case("plain", PLAIN, q4, MX_DTYPE_BF16, 3072, 1024, false, 32, 4, 2);
    run_case("plain", PLAIN, q4g32, MX_DTYPE_F16, 515, 2048, true, 32, 2, 2);
    run_case("plain", PLAIN, q8, MX_DTYPE_BF16, 1001, 4096, true, 32, 5, 2);
    run_case("down+residual", DOWN_RESIDUAL, q4, MX_DTYPE_BF16, 333, 4160, true, 32, 3, 4);
    run_case("norm+gate/up", NORM_GATE_UP, q8g128, MX_DTYPE_F16, 517, 4096, true, 32, 3, 2);
    run_case("plain", PLAIN, q4, MX_DTYPE_BF16, 333, 4160, true, 64, 3, 2);
    if (!quick) {
        run_case("norm+qkv", NORM_QKV, q8, MX_DTYPE_BF16, 4096, 4096, false, 32, 8, 2);
        run_case("norm+gate/up", NORM_GATE_UP, q4, MX_DTYPE_BF16, 1537, 4160, true, 64, 4, 4);
        run_case("down+residual", DOWN_RESIDUAL, q8, MX_DTYPE_BF16, 1024, 3072, true, 64, 2, 2);
    }
    printf("%d failures\n", fails);
    return fails != 0;
}
