// SPDX-License-Identifier: MIT
// Matrix-vector products for small batches (2..8 tokens: server decode steps): the kernel of
// kernels/matvec.cuh with the tokens in registers, so each weight chunk is loaded once for all.
#include "backends/gpu/kernels/matvec.cuh"

namespace mxg {

// One row per warp: the NT tokens already amortize each activation chunk load over NT dot products,
// and more rows per warp would multiply the instantiated code (compile time) for little gain.
template <int NT>
static void batch_nt(const mxg_launch *L, float *out, const float *x, const mx_matrix *w, const float *bias, int n) {
    const unsigned ny = (unsigned)((n + NT - 1) / NT);
    MXG_WARP_DISPATCH(L->warp, matvec_launch<W, NT, 1, false>(L, out, x, w, bias, n, nullptr, 1, 0, ny));
}

void matvec_batch(const mxg_launch *L, float *out, const float *x, const mx_matrix *w, const float *bias, int n) {
    if (n == 2)
        batch_nt<2>(L, out, x, w, bias, n);
    else if (n <= 4)
        batch_nt<4>(L, out, x, w, bias, n);
    else
        batch_nt<8>(L, out, x, w, bias, n);
}

}  // namespace mxg
