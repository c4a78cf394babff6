// SPDX-License-Identifier: MIT
// Matrix-vector products for small batches (2..L->matvec_max_tokens tokens: server decode steps,
// short prompts): the kernel of kernels/matvec.cuh with the tokens in registers, so each weight chunk
// is loaded once for all, in tiles of 8 tokens along the grid's y dimension beyond 8.
#include "backends/gpu/kernels/matvec.cuh"

namespace mxg {

// Rows per warp: one for 2-4 tokens (their activation loads are already amortized over the tokens,
// and more rows per warp would multiply the instantiated code). For 8-token tiles of quantized
// weights, four rows per warp where the grid still gives every multiprocessor a block: each lane
// reads 32 staged activations per token and chunk, and those shared-memory reads, not the weights,
// bound the 8-token kernel; four rows divide them by four.
template <int NT>
static void batch_nt(const mxg_launch *L, float *out, const float *x, const mx_matrix *w, const float *bias, int n) {
    const unsigned ny = (unsigned)((n + NT - 1) / NT);
    const bool four = NT == 8 && w->q.mode != MX_QUANT_NONE && (L->matvec_rows <= 0 || L->matvec_rows >= 4) &&
                      w->rows * (int64_t)ny / (kMatvecThreads / L->warp * 4) >= L->sm_count;
    if constexpr (NT == 8) {
        if (four) {
            MXG_WARP_DISPATCH(L->warp, matvec_launch<W, NT, 4, false>(L, out, x, w, bias, n, nullptr, 1, 0, ny));
            return;
        }
    }
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
