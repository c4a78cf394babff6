// SPDX-License-Identifier: MIT
// Matrix-vector products for decode, and the matmul entry that picks a kernel by batch size.
//
// One warp per output row: lane l dequantizes chunks l, l + W, ... (32 weights each, read with the
// widest aligned loads the format allows, so consecutive lanes read consecutive bytes and each
// weight byte is read once per launch) and multiplies them with up to NT token rows of x held in
// registers; a warp reduction finishes the row. Tokens beyond NT_MAX use the tiled kernels, which
// reuse each weight tile across many tokens.
// The MoE variant gives every output row its own expert (ids) and input row (x_div).
#include "backends/gpu/dequant.cuh"
#include "backends/gpu/kernels.h"

namespace {

constexpr int kThreads = 256;
constexpr int kMaxMatvecTokens = 8;
// Below this many tokens the float32 tiled kernel is used even where matrix units exist: short
// prompts keep float32 accuracy, and the matrix units only pay off on long ones.
constexpr int kMinMmaTokens = 64;

template <int W, class F, int NT, bool MOE>
__global__ void __launch_bounds__(kThreads) matvec_kernel(float *__restrict__ out, const float *__restrict__ x,
                                                          MatView m, const float *__restrict__ bias, int n,
                                                          const int32_t *__restrict__ ids, int x_div, int y0) {
    constexpr int warps = kThreads / W;
    const int warp = threadIdx.x / W, lane = threadIdx.x % W;
    const int64_t r = (int64_t)blockIdx.x * warps + warp;
    if (r >= m.rows) return;  // whole warps leave together; no block barrier follows
    const int yi = (int)blockIdx.y + y0;  // token tile (plain) or output row (MoE)
    int t0 = yi * NT;
    int64_t wrow = r;
    const float *xr[NT];
    if (MOE) {
        wrow = (int64_t)ids[yi] * m.rows + r;
        xr[0] = x + (int64_t)(yi / x_div) * m.cols;
    } else {
#pragma unroll
        for (int t = 0; t < NT; t++) xr[t] = x + (int64_t)min(t0 + t, n - 1) * m.cols;
    }
    const bool xvec = (m.cols & 3) == 0;
    float acc[NT];
#pragma unroll
    for (int t = 0; t < NT; t++) acc[t] = 0.0f;
    const int nchunks = (m.cols + 31) >> 5;
    for (int c = lane; c < nchunks; c += W) {
        float w[32];
        F::chunk(m, wrow, c, w);
        const int j0 = c * 32;
        if (xvec && j0 + 32 <= m.cols) {
#pragma unroll
            for (int t = 0; t < NT; t++) {
                const float4 *xp = (const float4 *)(xr[t] + j0);
                float a = 0.0f;
#pragma unroll
                for (int i = 0; i < 8; i++) {
                    float4 v = xp[i];
                    a = fmaf(w[4 * i], v.x, a);
                    a = fmaf(w[4 * i + 1], v.y, a);
                    a = fmaf(w[4 * i + 2], v.z, a);
                    a = fmaf(w[4 * i + 3], v.w, a);
                }
                acc[t] += a;
            }
        } else {
#pragma unroll
            for (int t = 0; t < NT; t++) {
                float a = 0.0f;
                for (int i = 0; i < 32 && j0 + i < m.cols; i++) a = fmaf(w[i], xr[t][j0 + i], a);
                acc[t] += a;
            }
        }
    }
    const float b = bias ? bias[r] : 0.0f;
#pragma unroll
    for (int t = 0; t < NT; t++) {
        float s = warp_sum<W>(acc[t]);
        if (lane == 0) {
            if (MOE)
                out[(int64_t)yi * m.rows + r] = s;
            else if (t0 + t < n)
                out[(int64_t)(t0 + t) * m.rows + r] = s + b;
        }
    }
}

template <int NT>
void launch_matvec(const mxg_launch *L, float *out, const float *x, const mx_matrix *w, const float *bias, int n) {
    MatView m = mat_view(w);
    MXG_WARP_DISPATCH(L->warp, {
        dim3 grid((unsigned)((m.rows + kThreads / W - 1) / (kThreads / W)), (unsigned)((n + NT - 1) / NT));
        dispatch_format(w, [&](auto fmt) {
            matvec_kernel<W, decltype(fmt), NT, false>
                <<<grid, kThreads, 0, (gpuStream_t)L->stream>>>(out, x, m, bias, n, nullptr, 1, 0);
        });
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
    if (n == 1)
        launch_matvec<1>(L, out, x, w, bias, n);
    else if (n == 2)
        launch_matvec<2>(L, out, x, w, bias, n);
    else if (n <= 4)
        launch_matvec<4>(L, out, x, w, bias, n);
    else if (n <= kMaxMatvecTokens)
        launch_matvec<8>(L, out, x, w, bias, n);
    else if (n < kMinMmaTokens || !L->use_mma || mxg_matmul_mma(L, out, x, w, bias, n) != 0)
        mxg_matmul_tiled(L, out, x, w, bias, n);
}

extern "C" void mxg_moe_matmul(const mxg_launch *L, float *out, const float *x, const mx_matrix *w,
                               const int32_t *ids, int m_rows, int x_div) {
    MX_ASSERT(mxg_matrix_supported(w) && m_rows > 0 && x_div > 0);
    MatView m = mat_view(w);
    for (int y0 = 0; y0 < m_rows; y0 += 65535) {  // grid.y is limited to 65535
        unsigned ny = (unsigned)(m_rows - y0 < 65535 ? m_rows - y0 : 65535);
        MXG_WARP_DISPATCH(L->warp, {
            dim3 grid((unsigned)((m.rows + kThreads / W - 1) / (kThreads / W)), ny);
            dispatch_format(w, [&](auto fmt) {
                matvec_kernel<W, decltype(fmt), 1, true>
                    <<<grid, kThreads, 0, (gpuStream_t)L->stream>>>(out, x, m, nullptr, m_rows, ids, x_div, y0);
            });
        });
    }
}
