// SPDX-License-Identifier: MIT
// Per-expert matrix-vector products of MoE layers: output row i of the batch uses expert ids[i] and
// input row x[i / x_div] (kernels/matvec.cuh with MOE = true, one grid row per output row).
// Prefill runs the same kernel over all token x expert rows; grouping rows by expert into tiled
// products is the next step for long MoE prompts.
#include "backends/gpu/kernels/matvec.cuh"

extern "C" void mxg_moe_matmul(const mxg_launch *L, float *out, const float *x, const mx_matrix *w,
                               const int32_t *ids, int m_rows, int x_div) {
    MX_ASSERT(mxg_matrix_supported(w) && m_rows > 0 && x_div > 0);
    for (int y0 = 0; y0 < m_rows; y0 += 65535) {  // grid.y is limited to 65535
        unsigned ny = (unsigned)(m_rows - y0 < 65535 ? m_rows - y0 : 65535);
        MXG_WARP_DISPATCH(L->warp, mxg::matvec_launch<W, 1, 1, true>(L, out, x, w, nullptr, m_rows, ids, x_div, y0, ny));
    }
}
