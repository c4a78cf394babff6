// SPDX-License-Identifier: MIT
// NVIDIA tensor-core matrix product for prefill (sm_80+), compiled only in CUDA builds. Same tiling
// idea as kernels/matmul_tiled.cu, but the tiles are stored as bf16 and multiplied with WMMA
// (16x16x16 bf16 -> f32 accumulate). Block tile 64 tokens x 128 rows, k step 32, 8 warps each owning
// 32 x 32 outputs. Activations and dequantized weights are rounded to bf16 (relative error about
// 4e-3 per product, as MLX's own bf16 path); set MLXCEL_GPU_NO_MMA=1 to use the float32 tiled path.
#include <cuda_bf16.h>
#include <mma.h>

#include "backends/gpu/dequant.cuh"
#include "backends/gpu/kernels.h"

namespace {

constexpr int BM = 64, BN = 128, BK = 32, LDS = BK + 8, kThreads = 256;

template <class F>
__global__ void __launch_bounds__(kThreads) mma_kernel(float *__restrict__ out, const float *__restrict__ x,
                                                       MatView m, const float *__restrict__ bias, int n) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    using namespace nvcuda;
    __shared__ __align__(32) __nv_bfloat16 xs[BM][LDS];  // A: tokens x k, row-major
    __shared__ __align__(32) __nv_bfloat16 ws[BN][LDS];  // B: k x rows, column-major (= W rows)
    __shared__ __align__(32) float stage[kThreads / 32][16 * 16];
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int wm = warp / 4, wn = warp % 4;
    const int t0 = blockIdx.y * BM;
    const int64_t r0 = (int64_t)blockIdx.x * BN;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 2; j++) wmma::fill_fragment(acc[i][j], 0.0f);
    const bool xvec = (m.cols & 3) == 0;
    const int xt = tid / 4, xk = (tid % 4) * 8;   // x loader: token, k offset
    const int wr = tid / 2, wk = (tid % 2) * 16;  // w loader: row, k offset
    for (int k0 = 0; k0 < m.cols; k0 += BK) {
        {
            float xv[8];
            const int t = t0 + xt, k = k0 + xk;
            if (t < n && xvec && k + 8 <= m.cols) {
                const float4 *p = (const float4 *)(x + (int64_t)t * m.cols + k);
                float4 a = p[0], b = p[1];
                xv[0] = a.x, xv[1] = a.y, xv[2] = a.z, xv[3] = a.w;
                xv[4] = b.x, xv[5] = b.y, xv[6] = b.z, xv[7] = b.w;
            } else {
#pragma unroll
                for (int i = 0; i < 8; i++) xv[i] = (t < n && k + i < m.cols) ? x[(int64_t)t * m.cols + k + i] : 0.0f;
            }
#pragma unroll
            for (int i = 0; i < 8; i++) xs[xt][xk + i] = __float2bfloat16_rn(xv[i]);
            const int64_t r = r0 + wr;
#pragma unroll
            for (int h = 0; h < 2; h++) {
                float wv[8];
                if (r < m.rows) {
                    F::oct(m, r, k0 + wk + 8 * h, wv);
                } else {
#pragma unroll
                    for (int i = 0; i < 8; i++) wv[i] = 0.0f;
                }
#pragma unroll
                for (int i = 0; i < 8; i++) ws[wr][wk + 8 * h + i] = __float2bfloat16_rn(wv[i]);
            }
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < BK; kk += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a[2];
            wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> b[2];
#pragma unroll
            for (int i = 0; i < 2; i++) wmma::load_matrix_sync(a[i], &xs[wm * 32 + i * 16][kk], LDS);
#pragma unroll
            for (int j = 0; j < 2; j++) wmma::load_matrix_sync(b[j], &ws[wn * 32 + j * 16][kk], LDS);
#pragma unroll
            for (int i = 0; i < 2; i++)
#pragma unroll
                for (int j = 0; j < 2; j++) wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 2; i++) {
#pragma unroll
        for (int j = 0; j < 2; j++) {
            wmma::store_matrix_sync(stage[warp], acc[i][j], 16, wmma::mem_row_major);
            __syncwarp();
#pragma unroll
            for (int e = lane; e < 256; e += 32) {
                const int t = t0 + wm * 32 + i * 16 + e / 16;
                const int64_t r = r0 + wn * 32 + j * 16 + e % 16;
                if (t < n && r < m.rows) out[(int64_t)t * m.rows + r] = stage[warp][e] + (bias ? bias[r] : 0.0f);
            }
            __syncwarp();
        }
    }
#endif
}

}  // namespace

extern "C" int mxg_matmul_mma(const mxg_launch *L, float *out, const float *x, const mx_matrix *w,
                              const float *bias, int n) {
    if (L->cc < 80 || L->warp != 32) return -1;
    MatView m = mat_view(w);
    for (int t0 = 0; t0 < n; t0 += 65535 * BM) {
        int nt = n - t0 < 65535 * BM ? n - t0 : 65535 * BM;
        dim3 grid((unsigned)((m.rows + BN - 1) / BN), (unsigned)((nt + BM - 1) / BM));
        dispatch_format(w, [&](auto fmt) {
            mma_kernel<decltype(fmt)><<<grid, kThreads, 0, (cudaStream_t)L->stream>>>(
                out + (int64_t)t0 * m.rows, x + (int64_t)t0 * m.cols, m, bias, nt);
        });
    }
    return 0;
}
