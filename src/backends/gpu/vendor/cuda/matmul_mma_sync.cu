// SPDX-License-Identifier: MIT
// NVIDIA tensor-core product for prefill with mma.sync m16n8k16 and ldmatrix (sm_80+), compiled only
// in CUDA builds; selected by MLXCEL_GPU_MMA_SYNC=1 (matmul_mma.cu dispatches; the WMMA kernel there
// stays the default until this one is measured). Block tile 128 tokens x 128 output rows, k step 32,
// 8 warps each owning 64 tokens x 32 rows (4 x 4 mma tiles, f32 accumulators in registers).
// The shared-memory tiles (bf16 activations [token][k], bf16 dequantized weights [row][k], rows
// padded to 80 bytes so ldmatrix's eight 16-byte rows hit distinct banks) are double-buffered: while
// the warps multiply out of one buffer, each thread's registers already hold the next k step's
// activations and packed weights (loaded before the products), which are then rounded / dequantized
// into the other buffer, so one barrier per k step suffices and each weight is dequantized once per
// block tile. Precision is that of the WMMA kernel (bf16 inputs, f32 accumulation).
#include <cuda_bf16.h>

#include "backends/gpu/dequant.cuh"
#include "backends/gpu/kernels.h"

namespace {

constexpr int BM = 128, BN = 128, BK = 32, LDS = BK + 8, kThreads = 256;
constexpr int kPasses = BM / (kThreads / 4);  // 2 rows per thread, 4 threads of 8 k values per row

__device__ __forceinline__ uint32_t pack_bf16(float a, float b) {
    __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
    return *(uint32_t *)&h;
}

__device__ __forceinline__ uint32_t smem_addr(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void *p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
#endif
}

// d += a (16x16, row-major: tokens x k) * b (16x8, col: k x rows), bf16 inputs, f32 accumulators.
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

template <class F>
__global__ void __launch_bounds__(kThreads, 2) mma_sync_kernel(float *__restrict__ out, const float *__restrict__ x,
                                                            MatView m, const float *__restrict__ bias, int n) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    __shared__ __align__(16) __nv_bfloat16 xs[2][BM][LDS];  // A: tokens x k
    __shared__ __align__(16) __nv_bfloat16 ws[2][BN][LDS];  // B: output rows x k (W rows)
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int wm = warp / 4, wn = warp % 4;  // warp tile: tokens wm*64.., rows wn*32..
    const int t0 = blockIdx.y * BM;
    const int64_t r0 = (int64_t)blockIdx.x * BN;
    float acc[4][4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[i][j][e] = 0.0f;

    // Loader roles: row p * 64 + tid / 4 of pass p, k offset (tid % 4) * 8.
    const int lr = tid / 4, lk = (tid % 4) * 8;
    const bool xvec = (m.cols & 3) == 0;
    using Oct = typename F::Oct;
    float xv[kPasses][8];
    Oct wo[kPasses];
    auto load = [&](int k0) {
        const int k = k0 + lk;
#pragma unroll
        for (int p = 0; p < kPasses; p++) {
            const int t = t0 + p * 64 + lr;
            if (t < n && xvec && k + 8 <= m.cols) {
                const float4 *q = (const float4 *)(x + (int64_t)t * m.cols + k);
                const float4 a = q[0], b = q[1];
                xv[p][0] = a.x, xv[p][1] = a.y, xv[p][2] = a.z, xv[p][3] = a.w;
                xv[p][4] = b.x, xv[p][5] = b.y, xv[p][6] = b.z, xv[p][7] = b.w;
            } else {
#pragma unroll
                for (int i = 0; i < 8; i++) xv[p][i] = (t < n && k + i < m.cols) ? x[(int64_t)t * m.cols + k + i] : 0.0f;
            }
            const int64_t r = r0 + p * 64 + lr;
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
    auto store = [&](int buf) {
#pragma unroll
        for (int p = 0; p < kPasses; p++) {
            *(uint4 *)&xs[buf][p * 64 + lr][lk] = make_uint4(pack_bf16(xv[p][0], xv[p][1]), pack_bf16(xv[p][2], xv[p][3]),
                                                              pack_bf16(xv[p][4], xv[p][5]), pack_bf16(xv[p][6], xv[p][7]));
            float w[8];
            F::oct_decode(wo[p], w);
            *(uint4 *)&ws[buf][p * 64 + lr][lk] = make_uint4(pack_bf16(w[0], w[1]), pack_bf16(w[2], w[3]),
                                                              pack_bf16(w[4], w[5]), pack_bf16(w[6], w[7]));
        }
    };

    // ldmatrix row addresses of this lane. A (x4): lanes 0-15 rows 0-15 at k 0, lanes 16-31 rows
    // 0-15 at k 8 -> the a0..a3 registers of m16n8k16. B (x4, two n8 tiles): lanes 0-7 rows 0-7 at
    // k 0, 8-15 rows 0-7 at k 8, 16-23 rows 8-15 at k 0, 24-31 rows 8-15 at k 8 -> b0, b1 of the
    // first tile, b0, b1 of the second.
    const int a_row = lane % 16, a_k = (lane / 16) * 8;
    const int b_row = (lane & 7) + ((lane >> 4) << 3), b_k = ((lane >> 3) & 1) * 8;

    const int nk = (m.cols + BK - 1) / BK;
    load(0);
    store(0);
    __syncthreads();
    for (int kt = 0; kt < nk; kt++) {
        const int buf = kt & 1;
        if (kt + 1 < nk) load((kt + 1) * BK);  // in flight during the products below
#pragma unroll
        for (int kk = 0; kk < BK; kk += 16) {
            uint32_t a[4][4], b[2][4];
#pragma unroll
            for (int i = 0; i < 4; i++) ldmatrix_x4(a[i], &xs[buf][wm * 64 + i * 16 + a_row][kk + a_k]);
#pragma unroll
            for (int jj = 0; jj < 2; jj++) ldmatrix_x4(b[jj], &ws[buf][wn * 32 + jj * 16 + b_row][kk + b_k]);
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++) mma_bf16(acc[i][j], a[i], b[j / 2][(j % 2) * 2], b[j / 2][(j % 2) * 2 + 1]);
        }
        // The other buffer was last read in step kt - 1, which every thread finished before the
        // barrier that ended it.
        if (kt + 1 < nk) store(buf ^ 1);
        __syncthreads();
    }

    // Epilogue: accumulator e of tile (i, j) is token g (+8 for e >= 2), row 2 * (lane % 4) + (e & 1).
    const int g = lane / 4, c2 = (lane % 4) * 2;
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int tt = t0 + wm * 64 + i * 16 + g + (e >= 2 ? 8 : 0);
                const int64_t rr = r0 + wn * 32 + j * 8 + c2 + (e & 1);
                if (tt < n && rr < m.rows) out[(int64_t)tt * m.rows + rr] = acc[i][j][e] + (bias ? bias[rr] : 0.0f);
            }
#endif
}

}  // namespace

// Called by mxg_matmul_mma (matmul_mma.cu) when L->mma_sync; same contract.
int mxg_matmul_mma_sync(const mxg_launch *L, float *out, const float *x, const mx_matrix *w, const float *bias, int n) {
    if (L->cc < 80 || L->warp != 32) return -1;
    MatView m = mat_view(w);
    for (int t0 = 0; t0 < n; t0 += 65535 * BM) {
        int nt = n - t0 < 65535 * BM ? n - t0 : 65535 * BM;
        dim3 grid((unsigned)((m.rows + BN - 1) / BN), (unsigned)((nt + BM - 1) / BM));
        dispatch_format(w, [&](auto fmt) {
            mma_sync_kernel<decltype(fmt)><<<grid, kThreads, 0, (cudaStream_t)L->stream>>>(
                out + (int64_t)t0 * m.rows, x + (int64_t)t0 * m.cols, m, bias, nt);
        });
    }
    return 0;
}
