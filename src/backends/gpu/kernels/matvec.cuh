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
// Affine 4/8-bit weights with staged activations take the scaled-activation dot (SCALED,
// kernels/matvec_scaled.cuh: the staged values are pre-multiplied by powers of two so each code is
// used in place); MLXCEL_GPU_OLD_MATVEC=1 (L->matvec_old) keeps Fmt::dot_raw and no split-K.
// Split-K (ksplit 2 or 4, new path only): the warps of a block share R rows, warp part p takes chunks
// p*W + lane, p*W + lane + ksplit*W, ..., and the first warp of the group adds the others' sums
// from shared memory (placed after the staged activations).
// Staging by slices (new path, scaled formats): when NT rows of activations exceed the 48 KB
// (server batches of 3-8 on 4096-wide models, or one token over rows longer than 12288), they are
// staged `slice` chunks at a time (a multiple of W, so each lane's chunk order and the weight
// prefetch carry on across slices), with a barrier before and after each slice.
// The MoE variant gives every output row of the grid's y dimension its own expert and input row.
#ifndef MXG_MATVEC_CUH
#define MXG_MATVEC_CUH

#include "backends/gpu/dequant.cuh"
#include "backends/gpu/kernels.h"
#include "backends/gpu/kernels/matvec_scaled.cuh"

namespace mxg {

// Small blocks: more of them per matrix, so the last wave of a launch is less empty.
constexpr int kMatvecThreads = 128;
// Shared memory for staged activations: within every vendor's default per-block limit (48 KB).
constexpr size_t kMatvecStageBytes = 48 * 1024;

// MLXCEL_GPU_PDL=2 (L->pdl_early): before its grid wait each warp's lane 0 asks L2 for its first
// rows' weights (codes, then scales, then biases: prefetch_rows, by common.cuh's prefetch_span), at
// most `budget` bytes, a multiple of 16 (pdl_warp_budget: the launch's cap, L->pdl_prefetch, over
// its warps' first tasks).
template <class F>
__device__ __forceinline__ void prefetch_rows(const MatView &m, int64_t r0, int nrows, unsigned &budget) {
    if (r0 >= m.rows) return;
    const int64_t rows = min((int64_t)nrows, m.rows - r0);
    prefetch_span(m.data + r0 * m.row_bytes, rows * m.row_bytes, budget);
    if constexpr (F::kind != KIND_DENSE) {
        // Scale (and bias) bytes per row: affine f16/bf16/f32 elements per group, one byte per group
        // (mxfp4/mxfp8) or per entry of m.groups (nvfp4), as F::load_raw reads them.
        constexpr int64_t sb = F::kind == KIND_AFFINE ? (F::st == ST_F32 ? 4 : 2) : 1;
        const int64_t g = (int64_t)m.groups * sb;
        prefetch_span((const uint8_t *)m.scales + r0 * g, rows * g, budget);
        if constexpr (F::kind == KIND_AFFINE) prefetch_span((const uint8_t *)m.biases + r0 * g, rows * g, budget);
    }
}
// Each matrix's share of a warp's budget where its task spans NM matrices (gate and up: half each,
// a multiple of 16).
__device__ __forceinline__ unsigned prefetch_share(unsigned budget, int nm) { return nm == 2 ? budget / 32 * 16 : budget; }
// The budget of each of `first_tasks` warps (or warp groups) whose first task prefetches.
static inline unsigned pdl_warp_budget(const mxg_launch *L, int64_t first_tasks) {
    if (!L->pdl_early || !L->pdl_prefetch || first_tasks <= 0) return 0;
    const size_t b = L->pdl_prefetch / (size_t)first_tasks;
    return (unsigned)((b < (1u << 30) ? b : (1u << 30)) & ~(size_t)15);
}

// prefetch: MLXCEL_GPU_PDL=2's budget per warp (0: none); early: release the next dependent kernel
// right after the grid wait.
template <int W, class F, int NT, int R, bool MOE, bool SCALED>
__global__ void __launch_bounds__(kMatvecThreads)
    matvec_kernel(float *__restrict__ out, const float *__restrict__ x, MatView m, const float *__restrict__ bias,
                  int n, const int32_t *__restrict__ ids, int x_div, int y0, bool fast, bool stage_x, int ksplit,
                  int slice, unsigned prefetch, bool early) {
    MXG_WARP_ONLY(W) {
    extern __shared__ float4 xs4[];  // [NT][nchunks * 8] when stage_x, then the split-K partials; or
                                     // [NT][slice * 8] when staged by slices
    constexpr int warps = kMatvecThreads / W;
    const int warp = threadIdx.x / W, lane = threadIdx.x % W;
    const int kpart = warp % ksplit;  // this warp's share of the chunks (split-K), 0 when ksplit == 1
    const int64_t r0 = ((int64_t)blockIdx.x * (warps / ksplit) + warp / ksplit) * R;
    const int yi = (int)blockIdx.y + y0;  // token tile (plain) or output row (MoE)
    const int t0 = MOE ? 0 : yi * NT;
    const float *xr[NT];
#pragma unroll
    for (int t = 0; t < NT; t++) xr[t] = x + (int64_t)(MOE ? yi / x_div : min(t0 + t, n - 1)) * m.cols;
    const int nchunks = (m.cols + 31) >> 5, n4 = nchunks * 8;
    const int cstep = ksplit * W, cfirst = kpart * W + lane;
    // Launched as a dependent kernel (mxg_launch_dep): the weights of the first chunk are loaded
    // before waiting for the previous kernel (they do not depend on it; MoE rows do, via ids).
    if (MOE) mxg_grid_wait();
    const int64_t wbase = MOE ? (int64_t)ids[yi] * m.rows : 0;
    const bool active = r0 < m.rows;
    int64_t rows[R];
#pragma unroll
    for (int rr = 0; rr < R; rr++) rows[rr] = wbase + min(r0 + rr, m.rows - 1);  // clamped: no divergence
    typename F::Raw cur[R], nxt[R];
    if (fast && active && cfirst < nchunks) {
#pragma unroll
        for (int rr = 0; rr < R; rr++) F::load_raw(m, rows[rr], cfirst, cur[rr]);
    }
    if (!MOE && prefetch && lane == 0 && kpart == 0) {
        unsigned budget = prefetch;
        prefetch_rows<F>(m, r0, R, budget);
    }
    if (!MOE) mxg_grid_wait();
    if (early) mxg_grid_release();
    float acc[R][NT];
#pragma unroll
    for (int rr = 0; rr < R; rr++)
#pragma unroll
        for (int t = 0; t < NT; t++) acc[rr][t] = 0.0f;
    if (SCALED && slice > 0) {
        // Rows too long to stage whole: `slice` chunks (a multiple of W) at a time, so each lane's
        // chunks lane, lane + W, ... keep their order across slices and the weight prefetch runs
        // on across them. Every warp passes every barrier (inactive ones skip only the products).
        if constexpr (SCALED) {
            const int sn4 = slice * 8;
            for (int s0 = 0; s0 < nchunks; s0 += slice) {
                const int s1 = min(s0 + slice, nchunks);
                if (s0 > 0) __syncthreads();  // every warp is done with the previous slice
#pragma unroll
                for (int t = 0; t < NT; t++)
                    for (int i = threadIdx.x; i < (s1 - s0) * 8; i += blockDim.x) {
                        const int c = i >> 3, q = i & 7;
                        const float4 v = ((const float4 *)xr[t])[s0 * 8 + i];
                        xs4[t * sn4 + c * 8 + (q ^ (c & 7))] = scaled_slot<F::bits>(v, q);
                    }
                __syncthreads();
                if (!active) continue;
                for (int c = s0 + lane; c < s1; c += W) {
                    if (c + W < nchunks) {
#pragma unroll
                        for (int rr = 0; rr < R; rr++) F::load_raw(m, rows[rr], c + W, nxt[rr]);
                    }
                    const int cl = c - s0;
#pragma unroll
                    for (int t = 0; t < NT; t++) {
                        float xv[32];
#pragma unroll
                        for (int i = 0; i < 8; i++) {
                            const float4 v = xs4[t * sn4 + cl * 8 + (i ^ (cl & 7))];
                            xv[4 * i] = v.x, xv[4 * i + 1] = v.y, xv[4 * i + 2] = v.z, xv[4 * i + 3] = v.w;
                        }
                        const float xs = scaled_sum<F::bits>(xv);
#pragma unroll
                        for (int rr = 0; rr < R; rr++) acc[rr][t] += scaled_dot<F>(cur[rr], xv, xs);
                    }
#pragma unroll
                    for (int rr = 0; rr < R; rr++) cur[rr] = nxt[rr];
                }
            }
        }
    } else {
    if (stage_x) {
#pragma unroll
        for (int t = 0; t < NT; t++)
            for (int i = threadIdx.x; i < n4; i += blockDim.x) {
                const int c = i >> 3, q = i & 7;
                float4 v = ((const float4 *)xr[t])[i];
                if constexpr (SCALED) v = scaled_slot<F::bits>(v, q);
                xs4[t * n4 + c * 8 + (q ^ (c & 7))] = v;
            }
        __syncthreads();
    }
    if (!active && ksplit == 1) return;  // whole warps leave together; no barrier follows
    if (fast && active) {
        // Software pipeline: the packed words of the lane's next chunk are in flight while the
        // current one is multiplied (the first chunk's were loaded above).
        for (int c = cfirst; c < nchunks; c += cstep) {
            if (c + cstep < nchunks) {
#pragma unroll
                for (int rr = 0; rr < R; rr++) F::load_raw(m, rows[rr], c + cstep, nxt[rr]);
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
                    if constexpr (!SCALED) xs += (v.x + v.y) + (v.z + v.w);
                }
                if constexpr (SCALED) {  // stage_x is always true here (matvec_launch)
                    xs = scaled_sum<F::bits>(xv);
#pragma unroll
                    for (int rr = 0; rr < R; rr++) acc[rr][t] += scaled_dot<F>(cur[rr], xv, xs);
                } else {
#pragma unroll
                    for (int rr = 0; rr < R; rr++) acc[rr][t] += F::dot_raw(cur[rr], xv, xs);
                }
            }
#pragma unroll
            for (int rr = 0; rr < R; rr++) cur[rr] = nxt[rr];
        }
    } else if (active) {
        for (int c = cfirst; c < nchunks; c += cstep) {
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
    }  // not staged by slices
    mxg_grid_release();  // the next dependent kernel may start loading its weights
#pragma unroll
    for (int rr = 0; rr < R; rr++)
#pragma unroll
        for (int t = 0; t < NT; t++) acc[rr][t] = warp_sum<W>(acc[rr][t]);
    if (ksplit > 1) {  // the first warp of each row group adds the other warps' partial sums
        float *part = (float *)(xs4 + (stage_x ? NT * n4 : 0));  // [warps][R][NT]
        if (lane == 0) {
#pragma unroll
            for (int rr = 0; rr < R; rr++)
#pragma unroll
                for (int t = 0; t < NT; t++) part[(warp * R + rr) * NT + t] = acc[rr][t];
        }
        __syncthreads();
        if (kpart != 0 || !active) return;
        for (int j = 1; j < ksplit; j++)
#pragma unroll
            for (int rr = 0; rr < R; rr++)
#pragma unroll
                for (int t = 0; t < NT; t++) acc[rr][t] += part[((warp + j) * R + rr) * NT + t];
    }
#pragma unroll
    for (int rr = 0; rr < R; rr++) {
        const int64_t r = r0 + rr;
        const float b = (!MOE && bias && r < m.rows) ? bias[r] : 0.0f;
#pragma unroll
        for (int t = 0; t < NT; t++) {
            if (lane == 0 && r < m.rows) {
                if (MOE)
                    out[(int64_t)yi * m.rows + r] = acc[rr][t];
                else if (t0 + t < n)
                    out[(int64_t)(t0 + t) * m.rows + r] = acc[rr][t] + b;
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

// Split-K (new path only): the warps of a block that share its rows, each summing every ksplit-th
// run of chunks, then adding up in shared memory. Used when the grid would leave multiprocessors
// with fewer than two blocks (few rows), while every lane still gets a chunk, and only when the
// partial sums fit next to the staged activations (smem_base bytes) in the default shared memory.
static inline int matvec_ksplit(const mxg_launch *L, int64_t blocks, int nchunks, size_t smem_base, size_t part_bytes) {
    const int warps = kMatvecThreads / L->warp;
    int ks = 1;
    if (L->matvec_old || smem_base + part_bytes > kMatvecStageBytes) return 1;
    while (ks * 2 <= warps && blocks * ks < 2 * (int64_t)L->sm_count && nchunks >= ks * 2 * L->warp) ks *= 2;
    return ks;
}

template <int W, int NT, int R, bool MOE>
void matvec_launch(const mxg_launch *L, float *out, const float *x, const mx_matrix *w, const float *bias, int n,
                   const int32_t *ids, int x_div, int y0, unsigned ny) {
    MatView m = mat_view(w);
    const bool fast = matvec_fast(w, x);
    const int nchunks = (m.cols + 31) / 32;
    const size_t xbytes = (size_t)NT * nchunks * 128;
    const bool stage_x = fast && xbytes <= kMatvecStageBytes;
    // Too long to stage whole (new path, scaled formats): staged by slices of this many chunks.
    const int slice = fast && !stage_x && !L->matvec_old ? (int)(kMatvecStageBytes / ((size_t)NT * 128)) / W * W : 0;
    constexpr int warps = kMatvecThreads / W;
    const int64_t blocks1 = (m.rows + (int64_t)warps * R - 1) / ((int64_t)warps * R);
    const size_t part_bytes = sizeof(float) * warps * R * NT;
    const int ks = stage_x ? matvec_ksplit(L, blocks1 * ny, nchunks, xbytes, part_bytes) : 1;
    const int64_t rows_per_block = (int64_t)(warps / ks) * R;
    dim3 grid((unsigned)((m.rows + rows_per_block - 1) / rows_per_block), ny);
    const size_t smem = (stage_x ? xbytes : 0) + (ks > 1 ? part_bytes : 0);
    const bool scaled = stage_x && !L->matvec_old;
    // MoE rows come from ids the previous kernel writes: nothing to prefetch before the wait.
    const unsigned prefetch = MOE || !fast ? 0 : pdl_warp_budget(L, (int64_t)grid.x * grid.y * (warps / ks));
    const bool early = L->pdl_early;
    dispatch_format(w, [&](auto fmt) {
        using F = decltype(fmt);
        if constexpr (Scaled<F>::on) {
            if (scaled || slice >= W) {  // ks == 1 when staged by slices (stage_x is false then)
                mxg_launch_dep(matvec_kernel<W, F, NT, R, MOE, true>, grid, dim3(kMatvecThreads),
                               scaled ? smem : (size_t)NT * slice * 128, (gpuStream_t)L->stream, L->dependent_launch,
                               out, x, m, bias, n, ids, x_div, y0, fast, stage_x, ks, scaled ? 0 : slice, prefetch,
                               early);
                return;
            }
        }
        mxg_launch_dep(matvec_kernel<W, F, NT, R, MOE, false>, grid, dim3(kMatvecThreads), smem, (gpuStream_t)L->stream,
                       L->dependent_launch, out, x, m, bias, n, ids, x_div, y0, fast, stage_x, ks, 0, prefetch, early);
    });
}

// kernels/matvec_batch.cu: 2 <= n <= 8 tokens.
void matvec_batch(const mxg_launch *L, float *out, const float *x, const mx_matrix *w, const float *bias, int n);

}  // namespace mxg

#endif
