// SPDX-License-Identifier: MIT
// NVIDIA tensor-core matrix product for prefill (sm_80+), compiled only in CUDA builds; used from
// 64 tokens on (kernels/matvec.cu). Block tile BM tokens x BN output rows, k step 64, WM x WN warps
// each owning (BM / WM) x (BN / WN) outputs as WMMA 16x16x16 bf16 fragments with f32 accumulation.
// Tiles: 128 x 128 with 8 warps (64 x 32 per warp) where that fills the device (at least one block
// per multiprocessor), else 64 x 128 with 8 warps (32 x 32), else 64 x 64 with 4 warps (32 x 32):
// a 0.6B-sized product (1024-2048 rows) at 256-512 tokens gives only 16-64 tiles of 128 x 128
// for 132 multiprocessors (MLXCEL_GPU_PREFILL_KERNEL=wmma128 keeps 128 x 128 for A/B runs).
// Registers (ptxas, sm_90): 252-254 at 128 x 128 (one block per multiprocessor), 128 at 64 x 128
// (two), 166-215 at 64 x 64 (two blocks of 4 warps; a cap for three spills).
// Loads are coalesced: 8 consecutive threads read one token's (or weight row's) 64 k values.
// The next tile is loaded into registers while the current one is multiplied from shared memory,
// then dequantized, rounded to bf16 and stored (two barriers per k step). Activations and
// dequantized weights are rounded to bf16 (relative error ~2e-3, as MLX's own bf16 path); the sum
// order per output does not depend on the tile. MLXCEL_GPU_NO_MMA=1 selects the float32 kernel;
// MLXCEL_GPU_PREFILL_KERNEL=pipe the cp.async kernel of matmul_pipe.cu (affine 4-bit; what it
// declines stays here), =wgmma (the default) matmul_wgmma.cu's, which declines to pipe.
#include <cuda_bf16.h>
#include <mma.h>

#include "backends/gpu/dequant.cuh"
#include "backends/gpu/kernels.h"

namespace {

constexpr int BK = 64, LDS = BK + 8;

__device__ __forceinline__ uint32_t pack_bf16(float a, float b) {
    __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
    return *(uint32_t *)&h;
}

// One tile shape: BM tokens x BN rows, WM x WN warps, at least MB blocks per multiprocessor (the
// register cap: ptxas gives the 128 x 128 tile ~252 registers, one block of 8 warps).
template <int BM_, int BN_, int WM_, int WN_, int MB_>
struct Tile {
    static constexpr int BM = BM_, BN = BN_, WM = WM_, WN = WN_, MB = MB_;
    static constexpr int kThreads = 32 * WM * WN;
    static constexpr int kRowsPerPass = kThreads / 8;  // 8 threads of 8 k values per row
    static constexpr int kXPasses = BM / kRowsPerPass, kWPasses = BN / kRowsPerPass;
    static constexpr int FM = BM / WM / 16, FN = BN / WN / 16;  // fragments per warp
    static_assert(BM % kRowsPerPass == 0 && BN % kRowsPerPass == 0 && FM >= 1 && FN >= 1, "tile shape");
    static_assert(WM * WN * 256 * 4 <= BM * LDS * 2, "the epilogue's staging fits in the x tile");
};
using TileBig = Tile<128, 128, 2, 4, 1>;
using TileMid = Tile<64, 128, 2, 4, 2>;
using TileSmall = Tile<64, 64, 2, 2, 2>;

template <class F, class T>
__global__ void __launch_bounds__(T::kThreads, T::MB) mma_kernel(float *__restrict__ out, const float *__restrict__ x,
                                                          MatView m, const float *__restrict__ bias, int n) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    using namespace nvcuda;
    constexpr int BM = T::BM, BN = T::BN, FM = T::FM, FN = T::FN, RP = T::kRowsPerPass;
    __shared__ __align__(32) __nv_bfloat16 xs[BM][LDS];  // A: tokens x k, row-major
    __shared__ __align__(32) __nv_bfloat16 ws[BN][LDS];  // B: k x rows, column-major (= W rows)
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int wm = warp / T::WN, wn = warp % T::WN;  // warp tile: tokens wm*FM*16.., rows wn*FN*16..
    const int t0 = blockIdx.y * BM;
    const int64_t r0 = (int64_t)blockIdx.x * BN;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[FM][FN];
#pragma unroll
    for (int i = 0; i < FM; i++)
#pragma unroll
        for (int j = 0; j < FN; j++) wmma::fill_fragment(acc[i][j], 0.0f);

    // Loader roles: row (token or weight row) p * RP + tid / 8 for pass p, k offset (tid % 8) * 8.
    const int lr = tid / 8, lk = (tid % 8) * 8;
    const bool xvec = (m.cols & 3) == 0;
    using Oct = typename F::Oct;
    float xv[T::kXPasses][8];
    Oct wo[T::kWPasses];
    auto load = [&](int k0) {
        const int k = k0 + lk;
#pragma unroll
        for (int p = 0; p < T::kXPasses; p++) {
            const int t = t0 + p * RP + lr;
            if (t < n && xvec && k + 8 <= m.cols) {
                const float4 *q = (const float4 *)(x + (int64_t)t * m.cols + k);
                const float4 a = q[0], b = q[1];
                xv[p][0] = a.x, xv[p][1] = a.y, xv[p][2] = a.z, xv[p][3] = a.w;
                xv[p][4] = b.x, xv[p][5] = b.y, xv[p][6] = b.z, xv[p][7] = b.w;
            } else {
#pragma unroll
                for (int i = 0; i < 8; i++) xv[p][i] = (t < n && k + i < m.cols) ? x[(int64_t)t * m.cols + k + i] : 0.0f;
            }
        }
#pragma unroll
        for (int p = 0; p < T::kWPasses; p++) {
            const int64_t r = r0 + p * RP + lr;
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
        for (int p = 0; p < T::kXPasses; p++)
            *(uint4 *)&xs[p * RP + lr][lk] = make_uint4(pack_bf16(xv[p][0], xv[p][1]), pack_bf16(xv[p][2], xv[p][3]),
                                                         pack_bf16(xv[p][4], xv[p][5]), pack_bf16(xv[p][6], xv[p][7]));
#pragma unroll
        for (int p = 0; p < T::kWPasses; p++) {
            float w[8];
            F::oct_decode(wo[p], w);
            *(uint4 *)&ws[p * RP + lr][lk] = make_uint4(pack_bf16(w[0], w[1]), pack_bf16(w[2], w[3]),
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
            wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a[FM];
            wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> b[FN];
#pragma unroll
            for (int i = 0; i < FM; i++) wmma::load_matrix_sync(a[i], &xs[(wm * FM + i) * 16][kk], LDS);
#pragma unroll
            for (int j = 0; j < FN; j++) wmma::load_matrix_sync(b[j], &ws[(wn * FN + j) * 16][kk], LDS);
#pragma unroll
            for (int i = 0; i < FM; i++)
#pragma unroll
                for (int j = 0; j < FN; j++) wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
        }
        __syncthreads();
    }

    // Epilogue: each warp stages one 16x16 fragment at a time (reusing the x tile) to add the bias
    // and write only the in-range elements.
    float *stage = (float *)&xs[0][0] + warp * 256;
#pragma unroll
    for (int i = 0; i < FM; i++) {
#pragma unroll
        for (int j = 0; j < FN; j++) {
            wmma::store_matrix_sync(stage, acc[i][j], 16, wmma::mem_row_major);
            __syncwarp();
#pragma unroll
            for (int e = lane; e < 256; e += 32) {
                const int tt = t0 + (wm * FM + i) * 16 + e / 16;
                const int64_t rr = r0 + (wn * FN + j) * 16 + e % 16;
                if (tt < n && rr < m.rows) out[(int64_t)tt * m.rows + rr] = stage[e] + (bias ? bias[rr] : 0.0f);
            }
            __syncwarp();
        }
    }
#endif
}

}  // namespace

int mxg_matmul_pipe(const mxg_launch *L, float *out, const float *x, const mx_matrix *w, const float *bias, int n);
int mxg_matmul_wgmma(const mxg_launch *L, float *out, const float *x, const mx_matrix *w, const float *bias, int n);

namespace {

template <class T>
void launch(const mxg_launch *L, float *out, const float *x, const mx_matrix *w, const float *bias, int n) {
    MatView m = mat_view(w);
    for (int t0 = 0; t0 < n; t0 += 65535 * T::BM) {
        int nt = n - t0 < 65535 * T::BM ? n - t0 : 65535 * T::BM;
        dim3 grid((unsigned)((m.rows + T::BN - 1) / T::BN), (unsigned)((nt + T::BM - 1) / T::BM));
        dispatch_format(w, [&](auto fmt) {
            mma_kernel<decltype(fmt), T><<<grid, T::kThreads, 0, (cudaStream_t)L->stream>>>(
                out + (int64_t)t0 * m.rows, x + (int64_t)t0 * m.cols, m, bias, nt);
        });
    }
}

int64_t tiles(int64_t rows, int n, int bm, int bn) { return ((rows + bn - 1) / bn) * (((int64_t)n + bm - 1) / bm); }

}  // namespace

extern "C" int mxg_matmul_mma(const mxg_launch *L, float *out, const float *x, const mx_matrix *w,
                              const float *bias, int n) {
    if (L->cc < 80 || L->warp != 32) return -1;
    if (L->prefill_kernel == MXG_PREFILL_WGMMA && mxg_matmul_wgmma(L, out, x, w, bias, n) == 0) return 0;
    if ((L->prefill_kernel == MXG_PREFILL_PIPE || L->prefill_kernel == MXG_PREFILL_WGMMA) &&
        mxg_matmul_pipe(L, out, x, w, bias, n) == 0)
        return 0;
    // The largest tile that still gives every multiprocessor a block.
    const int64_t fill = L->sm_count > 0 ? L->sm_count : 1;
    if (L->prefill_kernel == MXG_PREFILL_WMMA128 || tiles(w->rows, n, 128, 128) >= fill)
        launch<TileBig>(L, out, x, w, bias, n);
    else if (tiles(w->rows, n, 64, 128) >= fill)
        launch<TileMid>(L, out, x, w, bias, n);
    else
        launch<TileSmall>(L, out, x, w, bias, n);
    return 0;
}
