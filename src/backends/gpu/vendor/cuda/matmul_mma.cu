// SPDX-License-Identifier: MIT
// NVIDIA tensor-core matrix product for prefill (sm_80+), compiled only in CUDA builds; used from
// 64 tokens on (kernels/matvec.cu). Block tile 128 tokens x 128 output rows, k step 32, 8 warps
// each owning 64 x 32 outputs as 4 x 2 WMMA 16x16x16 bf16 fragments with f32 accumulation. Shared
// memory holds two stages and registers two more tiles: while the warps multiply one stage, the
// tile after next is being loaded and the next one is dequantized, rounded to bf16 and stored into
// the other stage (one barrier per k step). Activations and dequantized weights are rounded to bf16
// (relative error ~2e-3, as MLX's own bf16 path); MLXCEL_GPU_NO_MMA=1 selects the float32 kernel.
#include <cuda_bf16.h>
#include <mma.h>

#include "backends/gpu/dequant.cuh"
#include "backends/gpu/kernels.h"

namespace {

constexpr int BM = 128, BN = 128, BK = 32, LDS = BK + 8, kThreads = 256;

__device__ __forceinline__ uint32_t pack_bf16(float a, float b) {
    __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
    return *(uint32_t *)&h;
}

template <class F>
__global__ void __launch_bounds__(kThreads) mma_kernel(float *__restrict__ out, const float *__restrict__ x,
                                                       MatView m, const float *__restrict__ bias, int n) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    using namespace nvcuda;
    __shared__ __align__(32) __nv_bfloat16 xs[2][BM][LDS];  // A: tokens x k, row-major
    __shared__ __align__(32) __nv_bfloat16 ws[2][BN][LDS];  // B: k x rows, column-major (= W rows)
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int wm = warp / 4, wn = warp % 4;  // warp tile: tokens wm*64.., rows wn*32..
    const int t0 = blockIdx.y * BM;
    const int64_t r0 = (int64_t)blockIdx.x * BN;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[4][2];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 2; j++) wmma::fill_fragment(acc[i][j], 0.0f);

    // Loader roles: token / row lt, k offset lk (16 values each). Two register sets: the loads of
    // tile k+2 are issued while tile k is multiplied and tile k+1 is being stored.
    const int lt = tid / 2, lk = (tid % 2) * 16;
    const int t = t0 + lt;
    const int64_t r = r0 + lt;
    const bool xvec = (m.cols & 3) == 0;
    using Oct = typename F::Oct;
    auto load = [&](int k0, float (&xv)[16], Oct (&wo)[2]) {
        const int k = k0 + lk;
        if (t < n && xvec && k + 16 <= m.cols) {
            const float4 *p = (const float4 *)(x + (int64_t)t * m.cols + k);
#pragma unroll
            for (int i = 0; i < 4; i++) {
                float4 v = p[i];
                xv[4 * i] = v.x, xv[4 * i + 1] = v.y, xv[4 * i + 2] = v.z, xv[4 * i + 3] = v.w;
            }
        } else {
#pragma unroll
            for (int i = 0; i < 16; i++) xv[i] = (t < n && k + i < m.cols) ? x[(int64_t)t * m.cols + k + i] : 0.0f;
        }
#pragma unroll
        for (int h = 0; h < 2; h++) {
            if (r < m.rows) {
                F::oct_load(m, r, k + 8 * h, wo[h]);
            } else {
                wo[h].valid = false;
                wo[h].v = 0, wo[h].s = wo[h].b = 0.0f;
#pragma unroll
                for (int i = 0; i < 8; i++) wo[h].d[i] = 0.0f;
            }
        }
    };
    auto store = [&](int s, const float (&xv)[16], const Oct (&wo)[2]) {
        uint4 *xd = (uint4 *)&xs[s][lt][lk];
        xd[0] = make_uint4(pack_bf16(xv[0], xv[1]), pack_bf16(xv[2], xv[3]), pack_bf16(xv[4], xv[5]), pack_bf16(xv[6], xv[7]));
        xd[1] = make_uint4(pack_bf16(xv[8], xv[9]), pack_bf16(xv[10], xv[11]), pack_bf16(xv[12], xv[13]),
                           pack_bf16(xv[14], xv[15]));
        uint4 *wd = (uint4 *)&ws[s][lt][lk];
#pragma unroll
        for (int h = 0; h < 2; h++) {
            float w[8];
            F::oct_decode(wo[h], w);
            wd[h] = make_uint4(pack_bf16(w[0], w[1]), pack_bf16(w[2], w[3]), pack_bf16(w[4], w[5]), pack_bf16(w[6], w[7]));
        }
    };
    auto compute = [&](int s) {
#pragma unroll
        for (int kk = 0; kk < BK; kk += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a[4];
            wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> b[2];
#pragma unroll
            for (int i = 0; i < 4; i++) wmma::load_matrix_sync(a[i], &xs[s][wm * 64 + i * 16][kk], LDS);
#pragma unroll
            for (int j = 0; j < 2; j++) wmma::load_matrix_sync(b[j], &ws[s][wn * 32 + j * 16][kk], LDS);
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 2; j++) wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
        }
    };

    float xv0[16], xv1[16];
    Oct wo0[2], wo1[2];
    const int nk = (m.cols + BK - 1) / BK;
    load(0, xv0, wo0);
    if (nk > 1) load(BK, xv1, wo1);
    store(0, xv0, wo0);
    __syncthreads();
    for (int kt = 0; kt < nk; kt += 2) {
        // Stage 0 holds tile kt; set 1 holds tile kt + 1; set 0 is free.
        if (kt + 2 < nk) load((kt + 2) * BK, xv0, wo0);
        compute(0);
        if (kt + 1 < nk) store(1, xv1, wo1);
        __syncthreads();
        if (kt + 1 >= nk) break;
        // Stage 1 holds tile kt + 1; set 0 holds tile kt + 2; set 1 is free.
        if (kt + 3 < nk) load((kt + 3) * BK, xv1, wo1);
        compute(1);
        if (kt + 2 < nk) store(0, xv0, wo0);
        __syncthreads();
    }

    // Epilogue: each warp stages one 16x16 fragment at a time (reusing the x tiles) to add the bias
    // and write only the in-range elements.
    float *stage = (float *)&xs[0][0][0] + warp * 256;
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
