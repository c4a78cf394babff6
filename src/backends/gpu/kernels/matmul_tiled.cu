// SPDX-License-Identifier: MIT
// Portable tiled matrix product for prefill (any vendor, no matrix units): out[n, rows] =
// x[n, cols] @ W^T with W dequantized tile by tile into shared memory, so each weight is read from
// memory once per 64 tokens. Block tile 64 tokens x 64 rows, k step 32; 256 threads, each owning a
// 4 x 4 block of outputs strided by 16 (conflict-free shared reads). float32 throughout, so it is
// also the accuracy reference for the vendor matrix-unit path.
#include "backends/gpu/dequant.cuh"
#include "backends/gpu/kernels.h"

namespace {

constexpr int BM = 64, BN = 64, BK = 32, kThreads = 256;

template <class F>
__global__ void __launch_bounds__(kThreads) tiled_kernel(float *__restrict__ out, const float *__restrict__ x,
                                                         MatView m, const float *__restrict__ bias, int n) {
    __shared__ float xs[BK][BM + 4];  // [k][token]
    __shared__ float ws[BK][BN + 4];  // [k][row]
    const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
    const int t0 = blockIdx.y * BM;
    const int64_t r0 = (int64_t)blockIdx.x * BN;
    float acc[4][4] = {};
    const int lt = tid / 4, lp = (tid % 4) * 8;  // loader: token/row lt, k offset lp
    const bool xvec = (m.cols & 3) == 0;
    for (int k0 = 0; k0 < m.cols; k0 += BK) {
        {
            float xv[8];
            const int t = t0 + lt, k = k0 + lp;
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
            for (int i = 0; i < 8; i++) xs[lp + i][lt] = xv[i];
            float wv[8];
            const int64_t r = r0 + lt;
            if (r < m.rows) {
                F::oct(m, r, k, wv);
            } else {
#pragma unroll
                for (int i = 0; i < 8; i++) wv[i] = 0.0f;
            }
#pragma unroll
            for (int i = 0; i < 8; i++) ws[lp + i][lt] = wv[i];
        }
        __syncthreads();
#pragma unroll 8
        for (int k = 0; k < BK; k++) {
            float a[4], b[4];
#pragma unroll
            for (int i = 0; i < 4; i++) a[i] = xs[k][ty + 16 * i];
#pragma unroll
            for (int j = 0; j < 4; j++) b[j] = ws[k][tx + 16 * j];
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int t = t0 + ty + 16 * i;
        if (t >= n) continue;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int64_t r = r0 + tx + 16 * j;
            if (r < m.rows) out[(int64_t)t * m.rows + r] = acc[i][j] + (bias ? bias[r] : 0.0f);
        }
    }
}

}  // namespace

extern "C" void mxg_matmul_tiled(const mxg_launch *L, float *out, const float *x, const mx_matrix *w,
                                 const float *bias, int n) {
    MatView m = mat_view(w);
    for (int t0 = 0; t0 < n; t0 += 65535 * BM) {  // grid.y limit
        int nt = n - t0 < 65535 * BM ? n - t0 : 65535 * BM;
        dim3 grid((unsigned)((m.rows + BN - 1) / BN), (unsigned)((nt + BM - 1) / BM));
        dispatch_format(w, [&](auto fmt) {
            tiled_kernel<decltype(fmt)><<<grid, kThreads, 0, (gpuStream_t)L->stream>>>(
                out + (int64_t)t0 * m.rows, x + (int64_t)t0 * m.cols, m, bias, nt);
        });
    }
}
