// SPDX-License-Identifier: MIT
// The matmul entry (picks a kernel family by batch size) and the one-token matrix-vector product of
// decode. Batches of 4..64 tokens (MLXCEL_GPU_TC_DECODE=N: N..64; 0: none) first try the tensor-core
// decode product (vendor/cuda/matvec_mma.cu; not with MLXCEL_GPU_NO_MMA=1). Up to 8 tokens: the streaming kernel (kernels/matvec_stream.cuh) where it applies; else
// the kernel of kernels/matvec.cuh (one token here; batches of 2..L->matvec_max_tokens tokens, server
// decode steps and short prompts, in matvec_batch.cu, in tiles of 8 tokens); more: the tiled kernels
// (vendor matrix units from kMinMmaTokens tokens on).
#include "backends/gpu/kernels/matvec_stream.cuh"

namespace {

// Below this many tokens the float32 tiled kernel is used even where matrix units exist: short
// prompts keep float32 accuracy, and the matrix units only pay off on long ones.
constexpr int kMinMmaTokens = 64;

void matvec_one(const mxg_launch *L, float *out, const float *x, const mx_matrix *w, const float *bias) {
    // Dense rows are 16-32 words per chunk: fewer rows per warp keep them in registers.
    const int max_r = w->q.mode != MX_QUANT_NONE ? 4 : w->dtype == MX_DTYPE_F32 ? 1 : 2;
    const int r = mxg::matvec_rows_per_warp(L, w->rows, max_r);
    MXG_WARP_DISPATCH(L->warp, {
        if (r == 4)
            mxg::matvec_launch<W, 1, 4, false>(L, out, x, w, bias, 1, nullptr, 1, 0, 1);
        else if (r == 2)
            mxg::matvec_launch<W, 1, 2, false>(L, out, x, w, bias, 1, nullptr, 1, 0, 1);
        else
            mxg::matvec_launch<W, 1, 1, false>(L, out, x, w, bias, 1, nullptr, 1, 0, 1);
    });
}

}  // namespace

extern "C" bool mxg_matrix_supported(const mx_matrix *w) {
    if (w->n_experts < 1 || w->rows < 1 || w->cols < 1 || w->cols > (1 << 30)) return false;
    if (w->q.mode != MX_QUANT_NONE && w->cols % w->q.group_size != 0) return false;
    if (w->q.mode != MX_QUANT_NONE && w->q.mode != MX_QUANT_NVFP4 && w->cols % 32 != 0) return false;
    return dispatch_format(w, [](auto) {});
}

extern "C" void mxg_matmul(const mxg_launch *L, float *out, const float *x, const mx_matrix *w, const float *bias, int n) {
    MX_ASSERT(mxg_matrix_supported(w) && n > 0);
    if (L->use_mma && L->tc_decode_tokens > 0 && n >= L->tc_decode_tokens && n >= 2 && mxg_matvec_mma(L, out, x, w, bias, n) == 0)
        return;  // declines past 64 tokens and on formats it has no kernel for
    if (mxg::matvec_stream(L, out, x, w, bias, n))  // declines more than 8 tokens
        return;
    if (n == 1)
        matvec_one(L, out, x, w, bias);
    else if (n <= L->matvec_max_tokens)
        mxg::matvec_batch(L, out, x, w, bias, n);
    else if (n < kMinMmaTokens || !L->use_mma || mxg_matmul_mma(L, out, x, w, bias, n) != 0)
        mxg_matmul_tiled(L, out, x, w, bias, n);
}
