// SPDX-License-Identifier: MIT
// The output check of the emulated tensor-core prefill products (test_matmul_pipe_emulated.cpp,
// test_matmul_wgmma_emulated.cpp): every output of out[n, rows] = x @ w^T (+ bias) against two
// references. (1) Exact bf16 inputs: each weight bf16(s q + b) (bf16 scales: in double; f16/f32
// scales: one float fma, as the kernels dequantize them), each activation bf16(x), summed in
// double; bound: float32 accumulation over cols + 16 terms of the magnitudes. (2) The float32
// product of the reference dequantization (mx_matrix_dequant_row); bound: the tensor-core path's
// two bf16 roundings per term plus the float32 sums. Prints at most three failures of each kind.
#pragma once
#include <cmath>
#include <cstdio>
#include <vector>

#include "emu_affine.h"
#include "emu_scales.h"

// The worst error seen, as a fraction of each bound (NaN counts as 1e9).
struct emu_tc_worst {
    double exact = 0.0, tc = 0.0;
};

static inline double emu_bf16_of(double v) { return emu_bf16_val(emu_bf16_rn(v), 0); }

static inline void emu_tc_worst_note(double *worst, double e) {
    if (e != e) e = 1e9;
    if (e > *worst) *worst = e;
}

// Checks out (n x rows) against both references; what names the case in failure lines. Returns
// the number of failing outputs.
static inline int emu_check_tc_product(const emu_affine &m, const float *xa, int n, const float *bias, const float *out,
                                       const char *what, emu_tc_worst *worst) {
    const mx_matrix &w = m.w;
    const int rows = (int)w.rows, cols = (int)w.cols, gs = w.q.group_size;
    const mx_dtype st = w.scale_dtype;
    const int64_t rb = mx_matrix_row_bytes(&w), groups = cols / gs;
    std::vector<float> wrow(cols);
    std::vector<double> wb(cols);
    int bad_exact = 0, bad_tc = 0;
    for (int r = 0; r < rows; r++) {
        mx_matrix_dequant_row(&w, r, wrow.data());
        const uint8_t *rp = m.data.data() + rb * r;
        for (int k = 0; k < cols; k++) {
            const size_t gi = (size_t)r * groups + k / gs;
            const double s = get_scale(m.sc, st, gi), b = get_scale(m.bi, st, gi), q = mx_quant_code(rp, 4, k);
            wb[k] = st == MX_DTYPE_BF16 ? emu_bf16_of(s * q + b) : emu_bf16_of(fmaf((float)s, (float)q, (float)b));
        }
        for (int tk = 0; tk < n; tk++) {
            const float *xr = xa + (size_t)tk * cols;
            double ex = bias ? bias[r] : 0.0, exm = bias ? fabs(bias[r]) : 0.0;
            double rf = ex, rfm = exm;
            for (int k = 0; k < cols; k++) {
                const double xb = emu_bf16_of(xr[k]);
                ex += wb[k] * xb, exm += fabs(wb[k] * xb);
                rf += (double)wrow[k] * xr[k], rfm += fabs((double)wrow[k] * xr[k]);
            }
            const double got = out[(size_t)tk * rows + r];
            const double f32 = (cols + 16) * (1.0 / 16777216.0);
            const double e1 = fabs(got - ex) / (f32 * exm), e2 = fabs(got - rf) / ((1.0 / 128.0) * (1.0 + 1.0 / 512.0) * rfm + 1.01 * f32 * rfm);
            if (!(e1 <= 1.0) && bad_exact++ < 3)
                printf("FAIL: vs exact inputs: %s: row %d token %d: %.9g, reference %.9g (%.3g of bound)\n", what, r, tk, got, ex, e1);
            if (!(e2 <= 1.0) && bad_tc++ < 3)
                printf("FAIL: vs float32: %s: row %d token %d: %.9g, reference %.9g (%.3g of bound)\n", what, r, tk, got, rf, e2);
            emu_tc_worst_note(&worst->exact, e1);
            emu_tc_worst_note(&worst->tc, e2);
        }
    }
    return bad_exact + bad_tc;
}
