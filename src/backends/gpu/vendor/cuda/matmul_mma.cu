// SPDX-License-Identifier: MIT
// NVIDIA tensor-core matrix product for prefill (sm_80+), compiled only in CUDA builds; used from
// 64 tokens on (kernels/matvec.cu). Block tile 128 tokens x 128 output rows, k step 64, 8 warps
// each owning 64 x 32 outputs as 4 x 2 WMMA 16x16x16 bf16 fragments with f32 accumulation.
// Loads are coalesced: 8 consecutive threads read one token's (or weight row's) 64 k values, so a
// warp touches 4 rows per load. The next tile is loaded into registers while the current one is
// multiplied from shared memory, then dequantized, rounded to bf16 and stored (two barriers per k
// step). Activations and dequantized weights are rounded to bf16 (relative error ~2e-3, as MLX's own
// bf16 path); MLXCEL_GPU_NO_MMA=1 selects the float32 kernel, MLXCEL_GPU_MMA_SYNC=1 the mma.sync
// kernel of matmul_mma_sync.cu.
#include <cuda_bf16.h>
#include <mma.h>

#include "backends/gpu/dequant.cuh"
#include "backends/gpu/kernels.h"

namespace {

constexpr int BM = 128, BN = 128, BK = 64, LDS = BK + 8, kThreads = 256;
constexpr int kPasses = BM / (kThreads / 8);  // 4 rows per thread, 8 threads per row

__device__ __forceinline__ uint32_t pack_bf16(float a, float b) {
    __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
    return *(uint32_t *)&h;
}

template <class F>
__global__ void __launch_bounds__(kThreads) mma_kernel(float *__restrict__ out, const float *__restrict__ x,
                                                       MatView m, const float *__restrict__ bias, int n) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    using namespace nvcuda;
    __shared__ __align__(32) __nv_bfloat16 xs[BM][LDS];  // A: tokens x k, row-major
    __shared__ __align__(32) __nv_bfloat16 ws[BN][LDS];  // B: k x rows, column-major (= W rows)
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int wm = warp / 4, wn = warp % 4;  // warp tile: tokens wm*64.., rows wn*32..
    const int t0 = blockIdx.y * BM;
    const int64_t r0 = (int64_t)blockIdx.x * BN;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[4][2];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 2; j++) wmma::fill_fragment(acc[i][j], 0.0f);

    // Loader roles: row (token or weight row) p * 32 + tid / 8 for pass p, k offset (tid % 8) * 8.
    const int lr = tid / 8, lk = (tid % 8) * 8;
    const bool xvec = (m.cols & 3) == 0;
    using Oct = typename F::Oct;
    float xv[kPasses][8];
    Oct wo[kPasses];
    auto load = [&](int k0) {
        const int k = k0 + lk;
#pragma unroll
        for (int p = 0; p < kPasses; p++) {
            const int t = t0 + p * 32 + lr;
            if (t < n && xvec && k + 8 <= m.cols) {
                const float4 *q = (const float4 *)(x + (int64_t)t * m.cols + k);
                const float4 a = q[0], b = q[1];
                xv[p][0] = a.x, xv[p][1] = a.y, xv[p][2] = a.z, xv[p][3] = a.w;
                xv[p][4] = b.x, xv[p][5] = b.y, xv[p][6] = b.z, xv[p][7] = b.w;
            } else {
#pragma unroll
                for (int i = 0; i < 8; i++) xv[p][i] = (t < n && k + i < m.cols) ? x[(int64_t)t * m.cols + k + i] : 0.0f;
            }
            const int64_t r = r0 + p * 32 + lr;
            if (r < m.rows) {
                F::oct_load(m, r, k, wo[p]);
            } else {
                wo[p].valid = false;
                wo[p].v = 0, wo[p].s = wo[p].b = 0.0f;
                if constexpr (F::kind == KIND_DENSE) {
#pragma unroll
                    for (int i = 0; i < 8; i++) wo[p].d[i] = 0.0f;
                }
            }
        }
    };
    auto store = [&]() {
#pragma unroll
        for (int p = 0; p < kPasses; p++) {
            *(uint4 *)&xs[p * 32 + lr][lk] = make_uint4(pack_bf16(xv[p][0], xv[p][1]), pack_bf16(xv[p][2], xv[p][3]),
                                                         pack_bf16(xv[p][4], xv[p][5]), pack_bf16(xv[p][6], xv[p][7]));
            float w[8];
            F::oct_decode(wo[p], w);
            *(uint4 *)&ws[p * 32 + lr][lk] = make_uint4(pack_bf16(w[0], w[1]), pack_bf16(w[2], w[3]),
                                                         pack_bf16(w[4], w[5]), pack_bf16(w[6], w[7]));
        }
    };

    const int nk = (m.cols + BK - 1) / BK;
    load(0);
    for (int kt = 0; kt < nk; kt++) {
        store();
        __syncthreads();
        if (kt + 1 < nk) load((kt + 1) * BK);  // in flight during the products below
#pragma unroll
        for (int kk = 0; kk < BK; kk += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a[4];
            wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> b[2];
#pragma unroll
            for (int i = 0; i < 4; i++) wmma::load_matrix_sync(a[i], &xs[wm * 64 + i * 16][kk], LDS);
#pragma unroll
            for (int j = 0; j < 2; j++) wmma::load_matrix_sync(b[j], &ws[wn * 32 + j * 16][kk], LDS);
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 2; j++) wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
        }
        __syncthreads();
    }

    // Epilogue: each warp stages one 16x16 fragment at a time (reusing the x tile) to add the bias
    // and write only the in-range elements.
    float *stage = (float *)&xs[0][0] + warp * 256;
#pragma unroll
    for (int i = 0; i < 4; i++) {
#pragma unroll
        for (int j = 0; j < 2; j++) {
            wmma::store_matrix_sync(stage, acc[i][j], 16, wmma::mem_row_major);
            __syncwarp();
#pragma unroll
            for (int e = lane; e < 256; e += 32) {
                const int tt = t0 + wm * 64 + i * 16 + e / 16;
                const int64_t rr = r0 + wn * 32 + j * 16 + e % 16;
                if (tt < n && rr < m.rows) out[(int64_t)tt * m.rows + rr] = stage[e] + (bias ? bias[rr] : 0.0f);
            }
            __syncwarp();
        }
    }
#endif
}

}  // namespace

int mxg_matmul_mma_sync(const mxg_launch *L, float *out, const float *x, const mx_matrix *w, const float *bias, int n);

extern "C" int mxg_matmul_mma(const mxg_launch *L, float *out, const float *x, const mx_matrix *w,
                              const float *bias, int n) {
    if (L->cc < 80 || L->warp != 32) return -1;
    if (L->mma_sync) return mxg_matmul_mma_sync(L, out, x, w, bias, n);
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
