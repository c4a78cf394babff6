// SPDX-License-Identifier: MIT
// The matrix-vector kernel shared by kernels/matvec*.cu (split so the many format instantiations
// compile in parallel).
//
// Each warp owns R consecutive output rows. Lane l walks chunks l, l + W, ... (32 weights each); for
// every chunk it loads the R rows' packed words once, with the widest aligned loads the format
// allows (consecutive lanes read consecutive bytes, each weight byte is read once per launch), then
// for each of the NT token rows loads the 32 matching activations and dequantizes inside the dot
// product (affine: s * sum(q x) + b * sum(x)). Keeping R rows per warp divides the activation
// traffic by R; a warp reduction finishes each row. `fast` is false only for odd shapes (cols not a
// multiple of 32, or unaligned rows), which take the simple per-element path.
// Activations: a lane's 32 values are 128 contiguous bytes and the warp's lanes are 128 bytes apart,
// so reading them from global memory touches 32 cache lines per instruction. When they fit
// (stage_x), the block first copies its token rows into shared memory with coalesced loads, in a
// layout whose 16-byte slots are XOR-swizzled by chunk (slot q of chunk c at c*8 + (q ^ (c & 7))),
// so that each lane's reads are conflict-free.
// The MoE variant gives every output row of the grid's y dimension its own expert and input row.
#ifndef MXG_MATVEC_CUH
#define MXG_MATVEC_CUH

#include "backends/gpu/dequant.cuh"
#include "backends/gpu/kernels.h"

namespace mxg {

// Small blocks: more of them per matrix, so the last wave of a launch is less empty.
constexpr int kMatvecThreads = 128;
// Shared memory for staged activations: within every vendor's default per-block limit (48 KB).
constexpr size_t kMatvecStageBytes = 48 * 1024;

template <int W, class F, int NT, int R, bool MOE>
__global__ void __launch_bounds__(kMatvecThreads)
    matvec_kernel(float *__restrict__ out, const float *__restrict__ x, MatView m, const float *__restrict__ bias,
                  int n, const int32_t *__restrict__ ids, int x_div, int y0, bool fast, bool stage_x) {
    MXG_WARP_ONLY(W) {
    extern __shared__ float4 xs4[];  // [NT][nchunks * 8] when stage_x
    constexpr int warps = kMatvecThreads / W;
    const int warp = threadIdx.x / W, lane = threadIdx.x % W;
    const int64_t r0 = ((int64_t)blockIdx.x * warps + warp) * R;
    const int yi = (int)blockIdx.y + y0;  // token tile (plain) or output row (MoE)
    const int t0 = MOE ? 0 : yi * NT;
    const float *xr[NT];
#pragma unroll
    for (int t = 0; t < NT; t++) xr[t] = x + (int64_t)(MOE ? yi / x_div : min(t0 + t, n - 1)) * m.cols;
    const int nchunks = (m.cols + 31) >> 5, n4 = nchunks * 8;
    // Launched as a dependent kernel (mxg_launch_dep): the weights of the first chunk are loaded
    // before waiting for the previous kernel (they do not depend on it; MoE rows do, via ids).
    if (MOE) mxg_grid_wait();
    const int64_t wbase = MOE ? (int64_t)ids[yi] * m.rows : 0;
    const bool active = r0 < m.rows;
    int64_t rows[R];
#pragma unroll
    for (int rr = 0; rr < R; rr++) rows[rr] = wbase + min(r0 + rr, m.rows - 1);  // clamped: no divergence
    typename F::Raw cur[R], nxt[R];
    if (fast && active && lane < nchunks) {
#pragma unroll
        for (int rr = 0; rr < R; rr++) F::load_raw(m, rows[rr], lane, cur[rr]);
    }
    if (!MOE) mxg_grid_wait();
    if (stage_x) {
#pragma unroll
        for (int t = 0; t < NT; t++)
            for (int i = threadIdx.x; i < n4; i += blockDim.x) {
                const int c = i >> 3, q = i & 7;
                xs4[t * n4 + c * 8 + (q ^ (c & 7))] = ((const float4 *)xr[t])[i];
            }
        __syncthreads();
    }
    if (!active) return;  // whole warps leave together; no barrier follows
    float acc[R][NT];
#pragma unroll
    for (int rr = 0; rr < R; rr++)
#pragma unroll
        for (int t = 0; t < NT; t++) acc[rr][t] = 0.0f;
    if (fast) {
        // Software pipeline: the packed words of the lane's next chunk are in flight while the
        // current one is multiplied (the first chunk's were loaded above).
        for (int c = lane; c < nchunks; c += W) {
            if (c + W < nchunks) {
#pragma unroll
                for (int rr = 0; rr < R; rr++) F::load_raw(m, rows[rr], c + W, nxt[rr]);
            }
#pragma unroll
            for (int t = 0; t < NT; t++) {
                const float4 *xp = (const float4 *)(xr[t] + c * 32);
                float xv[32];
                float xs = 0.0f;
#pragma unroll
                for (int i = 0; i < 8; i++) {
                    float4 v = stage_x ? xs4[t * n4 + c * 8 + (i ^ (c & 7))] : xp[i];
                    xv[4 * i] = v.x, xv[4 * i + 1] = v.y, xv[4 * i + 2] = v.z, xv[4 * i + 3] = v.w;
                    xs += (v.x + v.y) + (v.z + v.w);
                }
#pragma unroll
                for (int rr = 0; rr < R; rr++) acc[rr][t] += F::dot_raw(cur[rr], xv, xs);
            }
#pragma unroll
            for (int rr = 0; rr < R; rr++) cur[rr] = nxt[rr];
        }
    } else {
        for (int c = lane; c < nchunks; c += W) {
            const int j0 = c * 32;
#pragma unroll
            for (int rr = 0; rr < R; rr++) {
                float w[32];
                F::chunk(m, rows[rr], c, w);
#pragma unroll
                for (int t = 0; t < NT; t++) {
                    float a = 0.0f;
                    for (int i = 0; i < 32 && j0 + i < m.cols; i++) a = fmaf(w[i], xr[t][j0 + i], a);
                    acc[rr][t] += a;
                }
            }
        }
    }
    mxg_grid_release();  // the next dependent kernel may start loading its weights
#pragma unroll
    for (int rr = 0; rr < R; rr++) {
        const int64_t r = r0 + rr;
        const float b = (!MOE && bias && r < m.rows) ? bias[r] : 0.0f;
#pragma unroll
        for (int t = 0; t < NT; t++) {
            float s = warp_sum<W>(acc[rr][t]);
            if (lane == 0 && r < m.rows) {
                if (MOE)
                    out[(int64_t)yi * m.rows + r] = s;
                else if (t0 + t < n)
                    out[(int64_t)(t0 + t) * m.rows + r] = s + b;
            }
        }
    }
    }
}

// Whether the per-chunk vector path applies (see above).
static inline bool matvec_fast(const mx_matrix *w, const float *x) {
    return w->cols % 32 == 0 && ((uintptr_t)w->data & 15) == 0 && ((uintptr_t)x & 15) == 0;
}

// Rows per warp: as many as keep at least one block per multiprocessor.
static inline int matvec_rows_per_warp(const mxg_launch *L, int64_t rows, int max_r) {
    const int64_t warps = kMatvecThreads / L->warp;
    if (L->matvec_rows > 0 && L->matvec_rows < max_r) max_r = L->matvec_rows;
    for (int r = max_r; r > 1; r /= 2)
        if (rows / (warps * r) >= L->sm_count) return r;
    return 1;
}

template <int W, int NT, int R, bool MOE>
void matvec_launch(const mxg_launch *L, float *out, const float *x, const mx_matrix *w, const float *bias, int n,
                   const int32_t *ids, int x_div, int y0, unsigned ny) {
    MatView m = mat_view(w);
    const bool fast = matvec_fast(w, x);
    const size_t xbytes = (size_t)NT * ((m.cols + 31) / 32) * 128;
    const bool stage_x = fast && xbytes <= kMatvecStageBytes;
    const int64_t rows_per_block = (int64_t)(kMatvecThreads / W) * R;
    dim3 grid((unsigned)((m.rows + rows_per_block - 1) / rows_per_block), ny);
    dispatch_format(w, [&](auto fmt) {
        mxg_launch_dep(matvec_kernel<W, decltype(fmt), NT, R, MOE>, grid, dim3(kMatvecThreads), stage_x ? xbytes : 0,
                       (gpuStream_t)L->stream, L->dependent_launch, out, x, m, bias, n, ids, x_div, y0, fast, stage_x);
    });
}

// kernels/matvec_batch.cu: 2 <= n <= 8 tokens.
void matvec_batch(const mxg_launch *L, float *out, const float *x, const mx_matrix *w, const float *bias, int n);

}  // namespace mxg

#endif
