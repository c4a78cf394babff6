// SPDX-License-Identifier: MIT
// Fused MoE expert products for decode steps (the plan runner, gpu_plan.c, finds the record
// patterns; MLXCEL_GPU_MOE_FUSED=1, L->moe_fused): two launches instead of five records (=2: and
// the routing record folded into the first: six records, two launches).
// - gate/up + SwiGLU: moe_matmul gate, moe_matmul up (same ids, input and shape), swiglu of their
//   outputs. Each warp takes moe_rows() rows of one (token, expert) slot's gate matrix and the same
//   rows of its up matrix; its block stages the slot's input row once (swizzled, pre-scaled for
//   the scaled 4/8-bit dot, as in kernels/matvec_stream.cuh). The epilogue writes gate, up and
//   silu(gate) * up (the swiglu record's output may be the gate buffer). Level 2 also folds the
//   moe_route record before them: every block routes its token (kernels/moe_route.cuh on its first
//   warp, the routing kernel's arithmetic: the same bits) after staging the input row, the first block
//   of each token writes the record's ids and weights, and the weight loads start after the
//   routing instead of before the staging.
// - down + combine: moe_matmul down (x_div 1) and moe_combine of its output into the residual
//   stream. Each warp takes one output row of one token for all k of the token's experts (up to
//   kMoeMaxK rows, each with its own staged input row: the token's k SwiGLU rows); the epilogue
//   writes the k products (the moe_matmul record's buffer) and adds their weighted sum to the
//   output in the combine kernel's order (kernels/moe.cu), so the output's values are those of
//   the records given the same products. At level 3 (MLXCEL_GPU_MOE_FUSED=3, whose routing is
//   kernels/moe_router.cu's launch) the combine's weights and the output's old values are read
//   right after the grid wait instead of after the products: the same bits, one round trip less.
// Under MLXCEL_GPU_PDL=3 (L->pdl_rest) both launches release the next one right after their grid
// wait (else at their end), and the full-lane down launch asks L2 for its expert rows before it.
// The record path runs a grid row per (token, expert) row on kernels/matvec.cuh with one or two
// chunks per lane per launch; here every block's weight loads (the whole task's first chunk of
// every row, before the activation staging) are in flight at once and the ~2,000 warps of a
// 30B-A3B layer cover the H200 in one wave. Each warp owns one task (no persistent loop: the
// tasks fit the device). Formats: affine 4/8-bit (scaled dot) and mxfp4; the dot products are
// those of the other matrix-vector kernels, so results differ from the records' only in float32
// summation order. Anything else (other formats, more than kMoeMaxK experts per token, more than
// kMoeMaxTokens tokens, rows that do not fit the staging) runs record by record.
#include "backends/gpu/kernels/moe_common.cuh"
#include "backends/gpu/kernels_fused.h"

namespace {

using namespace mxg;

// Block sizes: gate/up in blocks of 4 warps (384 per token on the 30B-A3B, 4 resident per
// multiprocessor at <= 128 registers: the wave spreads evenly), down in blocks of 8 (each block
// stages its token's k input rows, 24 KB there: fewer, larger blocks stage less).
constexpr int kGateUpThreads = 128;
constexpr int kDownThreads = 256;
// Gate rows (and as many up rows) per warp: 4 at 4 bits, 2 at 8 (the same registers).
template <class F>
constexpr int moe_rows() {
    return F::bits == 8 ? 2 : 4;
}
constexpr int kMoeMaxK = 8;  // experts per token held in registers by the down kernel

struct GateUpArgs {
    MatView g, u;
    float *gate, *up, *act;
    const float *x;
    const int32_t *ids;
    int x_div;
    int blocks_per_slot;
    // ROUTE: the moe_route record folded in: ids and weights [tokens, x_div] written from logits
    // [tokens, n_experts] (by the first block of each token; every block routes its token).
    int32_t *route_ids;
    float *route_weights;
    const float *logits;
    int n_experts;
    bool norm_topk;
    bool release_early;  // MLXCEL_GPU_PDL=3 (L->pdl_rest): release the next launch right after the grid wait
};

struct DownArgs {
    MatView w;
    float *y, *out;
    const float *x, *weights;
    const int32_t *ids;
    int k;
    int blocks_per_token;
    int n_experts;        // experts in w's stack
    unsigned prefetch;    // MLXCEL_GPU_PDL=3, full-lane form: L2 prefetch bytes per (warp, expert) (0: none)
    bool release_early;  // MLXCEL_GPU_PDL=3 (L->pdl_rest): release the next launch right after the grid wait
};

// Copies `rows` consecutive rows of n4 float4s from x into shared memory, each row swizzled by chunk
// (slot q of chunk c at c * 8 + (q ^ (c & 7))) and pre-scaled for the scaled dot; D (4) loads per
// thread issued before their stores.
template <class F, int T, int D = 4>
__device__ __forceinline__ void moe_stage(float4 *xs4, const float *x, int rows, int n4) {
    const float4 *src = (const float4 *)x;
    const int total = rows * n4;
    for (int i0 = 0; i0 < total; i0 += D * T) {
        float4 v[D];
#pragma unroll
        for (int k = 0; k < D; k++) {
            const int i = i0 + k * T + (int)threadIdx.x;
            if (i < total) v[k] = src[i];
        }
#pragma unroll
        for (int k = 0; k < D; k++) {
            const int i = i0 + k * T + (int)threadIdx.x;
            if (i >= total) continue;
            const int row = i / n4, j = i - row * n4, c = j >> 3, q = j & 7;
            float4 u = v[k];
            if constexpr (Scaled<F>::on) u = scaled_slot<F::bits>(u, q);
            xs4[row * n4 + c * 8 + (q ^ (c & 7))] = u;
        }
    }
}

template <int W, class F, bool ROUTE>
__global__ void __launch_bounds__(kGateUpThreads, 4) moe_gate_up_kernel(GateUpArgs a) {
    MXG_WARP_ONLY(W) {
    constexpr int warps = kGateUpThreads / W, R = moe_rows<F>(), RR = 2 * R;
    extern __shared__ float4 xs4[];  // [nchunks * 8]: the slot's input row; ROUTE: then the routing's
                                     // probabilities [n_experts], ids [k] and weights [k]
    const int lane = (int)threadIdx.x % W;
    const int nchunks = a.g.cols >> 5, n4 = nchunks * 8, steps = (nchunks + W - 1) / W;
    const int slot = (int)blockIdx.x / a.blocks_per_slot, t = slot / a.x_div;
    const int64_t r0 = ((int64_t)((int)blockIdx.x % a.blocks_per_slot) * warps + (int)threadIdx.x / W) * R;
    const bool active = r0 < a.g.rows;
    mxg_grid_wait_release(a.release_early);  // the ids (or the router's logits) come from the previous record
    int expert;
    if constexpr (ROUTE) {
        // The token's routing (the record's arithmetic and block size), the input row staged first.
        float *probs = (float *)(xs4 + n4);
        int32_t *ids = (int32_t *)(probs + a.n_experts);
        float *w = (float *)(ids + a.x_div);
        moe_stage<F, kGateUpThreads>(xs4, a.x + (int64_t)t * a.g.cols, 1, n4);
        moe_route_row<W>(ids, w, a.logits + (int64_t)t * a.n_experts, a.n_experts, a.x_div, a.norm_topk, probs);
        if ((int)blockIdx.x % (a.blocks_per_slot * a.x_div) == 0 && (int)threadIdx.x < a.x_div) {
            a.route_ids[(int64_t)t * a.x_div + threadIdx.x] = ids[threadIdx.x];
            a.route_weights[(int64_t)t * a.x_div + threadIdx.x] = w[threadIdx.x];
        }
        expert = ids[slot - t * a.x_div];
    } else {
        expert = a.ids[slot];
    }
    // Rows across experts (32-bit: moe_fits bounds them), clamped past the matrix (not written).
    const int base = expert * (int)a.g.rows;
    int rows[R];
#pragma unroll
    for (int j = 0; j < R; j++) rows[j] = base + (int)min(r0 + j, a.g.rows - 1);
    typename F::Raw b[RR];
    if (active && lane < nchunks) {
#pragma unroll
        for (int j = 0; j < RR; j++) F::load_raw(j < R ? a.g : a.u, rows[j % R], lane, b[j]);
    }
    if constexpr (!ROUTE) {
        moe_stage<F, kGateUpThreads>(xs4, a.x + (int64_t)t * a.g.cols, 1, n4);
        __syncthreads();  // the only barrier
    }
    if (!active) return;
    float acc[RR];
#pragma unroll
    for (int j = 0; j < RR; j++) acc[j] = 0.0f;
    for (int s = 0; s < steps; s++) {
        const int c = s * W + lane;
        if (c >= nchunks) break;
        float xv[32];
        const float xs = moe_chunk<F>(xs4, c, xv);
#pragma unroll
        for (int j = 0; j < RR; j++) {
            acc[j] += moe_dot<F>(b[j], xv, xs);
            if (c + W < nchunks) F::load_raw(j < R ? a.g : a.u, rows[j % R], c + W, b[j]);
        }
    }
    mxg_grid_release();
#pragma unroll
    for (int j = 0; j < RR; j++) acc[j] = warp_sum<W>(acc[j]);
    if (lane != 0) return;
#pragma unroll
    for (int j = 0; j < R; j++) {
        const int64_t r = r0 + j;
        if (r >= a.g.rows) continue;
        const int64_t o = (int64_t)slot * a.g.rows + r;
        const float g = acc[j], u = acc[R + j];
        a.gate[o] = g;
        a.up[o] = u;
        a.act[o] = silu_mul(g, u);
    }
    }
}

// EARLY (level 3): the combine's weights and the output's old values are read with the ids, right
// after the grid wait, so the epilogue waits on no load (level 1 reads them after the products);
// lane 0 parks them in shared memory after the staging, so they hold no registers in the products.
template <int W, class F, bool EARLY>
__global__ void __launch_bounds__(kDownThreads, 2) moe_down_combine_kernel(DownArgs a) {
    MXG_WARP_ONLY(W) {
    constexpr int warps = kDownThreads / W;
    extern __shared__ float4 xs4[];  // [k][nchunks * 8]: the token's k input rows
    __shared__ float early[kDownThreads / 32][kMoeMaxK + 1];  // EARLY: each warp's weights, then out's value
    const int lane = (int)threadIdx.x % W, warp = (int)threadIdx.x / W;
    const int nchunks = a.w.cols >> 5, n4 = nchunks * 8, steps = (nchunks + W - 1) / W;
    const int t = (int)blockIdx.x / a.blocks_per_token, k = a.k;
    const int64_t r = (int64_t)((int)blockIdx.x % a.blocks_per_token) * warps + warp;
    const bool active = r < a.w.rows;
    mxg_grid_wait_release(a.release_early);  // the ids, weights and input rows come from the previous records
    int rows[kMoeMaxK];  // across experts (32-bit: moe_fits bounds them), clamped past the matrix
#pragma unroll
    for (int j = 0; j < kMoeMaxK; j++) rows[j] = j < k ? a.ids[t * k + j] * (int)a.w.rows + (int)min(r, a.w.rows - 1) : 0;
    typename F::Raw b[kMoeMaxK];
    if (active && lane < nchunks) {
#pragma unroll
        for (int j = 0; j < kMoeMaxK; j++)
            if (j < k) F::load_raw(a.w, rows[j], lane, b[j]);
    }
    float wts[kMoeMaxK] = {}, old = 0.0f;  // EARLY: the combine's weights and out's value, by lane 0
    if (EARLY && active && lane == 0) {
#pragma unroll
        for (int j = 0; j < kMoeMaxK; j++) wts[j] = j < k ? a.weights[(int64_t)t * k + j] : 0.0f;
        old = a.out[(int64_t)t * a.w.rows + r];
    }
    moe_stage<F, kDownThreads>(xs4, a.x + (int64_t)t * k * a.w.cols, k, n4);
    if (EARLY && active && lane == 0) {  // read back by the same thread
#pragma unroll
        for (int j = 0; j < kMoeMaxK; j++) early[warp][j] = wts[j];
        early[warp][kMoeMaxK] = old;
    }
    __syncthreads();  // the only barrier
    if (!active) return;
    float acc[kMoeMaxK];
#pragma unroll
    for (int j = 0; j < kMoeMaxK; j++) acc[j] = 0.0f;
    for (int s = 0; s < steps; s++) {
        const int c = s * W + lane;
        if (c >= nchunks) break;
#pragma unroll
        for (int j = 0; j < kMoeMaxK; j++) {
            if (j >= k) continue;
            float xv[32];
            const float xs = moe_chunk<F>(xs4 + j * n4, c, xv);
            acc[j] += moe_dot<F>(b[j], xv, xs);
            if (c + W < nchunks) F::load_raw(a.w, rows[j], c + W, b[j]);
        }
    }
    mxg_grid_release();
#pragma unroll
    for (int j = 0; j < kMoeMaxK; j++)
        if (j < k) acc[j] = warp_sum<W>(acc[j]);
    if (lane != 0) return;
    float sum = 0.0f;  // kernels/moe.cu's combine: in expert order, then added to the output
#pragma unroll
    for (int j = 0; j < kMoeMaxK; j++) {
        if (j >= k) continue;
        const int64_t s = (int64_t)t * k + j;
        a.y[s * a.w.rows + r] = acc[j];
        sum = fmaf(EARLY ? early[warp][j] : a.weights[s], acc[j], sum);
    }
    if constexpr (EARLY) a.out[(int64_t)t * a.w.rows + r] = early[warp][kMoeMaxK] + sum;
    else a.out[(int64_t)t * a.w.rows + r] += sum;
    }
}

// The down + combine launch on full lanes (MLXCEL_GPU_MOE_DOWN=1, the default; L->moe_down): each
// warp takes one output row of one token for all k experts, and deals the row's k * nchunks
// (expert, chunk) items over its lanes, item f = i * W + lane for the lane's i-th, expert-major. On
// the 30B-A3B (k 8, 24 chunks) that is 192 items per row: 6 per lane on all 32 lanes, where the
// warp-per-row form keeps 8 loads on 24 lanes and 8 idle. Each lane adds its items into acc[expert]
// in item order, the warp then sums each across lanes; the combine is the record's (expert order,
// fmaf, weights and out read right after the grid wait, as level 3's form); the staging issues 8
// loads per thread at a time. Items go in groups of G per lane, the group's weight loads all issued
// before its products: 6 at 4 bits (the 30B-A3B's row in one group), 4 at 8 (wider raw chunks),
// where the launch bound leaves 128 registers (ptxas, sm_90a: 4-bit and mxfp4 no spill, 8-bit 16
// bytes, where the warp-per-row form spills ~150; 8 items spilled 16 and 500 bytes).
template <class F>
constexpr int down_flat_group() {
    return F::bits == 8 ? 4 : 6;
}

template <int W, class F>
__global__ void __launch_bounds__(kDownThreads, 2) moe_down_flat_kernel(DownArgs a) {
    MXG_WARP_ONLY(W) {
    constexpr int warps = kDownThreads / W, G = down_flat_group<F>();
    extern __shared__ float4 xs4[];  // [k][nchunks * 8]: the token's k input rows
    __shared__ float early[kDownThreads / 32][kMoeMaxK + 1];  // each warp's weights, then out's value
    const int lane = (int)threadIdx.x % W, warp = (int)threadIdx.x / W;
    const int nchunks = a.w.cols >> 5, n4 = nchunks * 8, k = a.k;
    const int t = (int)blockIdx.x / a.blocks_per_token, items = k * nchunks;
    const int rows_m = (int)a.w.rows;  // 32-bit: moe_fits bounds rows across experts
    const int r = ((int)blockIdx.x % a.blocks_per_token) * warps + warp;
    const bool active = r < rows_m;
    const int groups = (items + G * W - 1) / (G * W);  // the same for every warp of the launch
    // MLXCEL_GPU_PDL=3: before the grid wait, lane j < k asks L2 for its expert's row. The ids come
    // from the routing two launches back (the gate/up launch between them released this one only
    // after its own wait, which the routing's completion ends), so they are final here; and were
    // one stale, the prefetch is a hint: an id outside the stack asks nothing, one inside only
    // wastes its bytes. The products read the ids again after the wait.
    if (a.prefetch && active && lane < k) {
        const int e = a.ids[t * k + lane];
        if (e >= 0 && e < a.n_experts) {
            MatView stack = a.w;  // the stack as one matrix, for prefetch_rows' bounds
            stack.rows = a.w.rows * a.n_experts;
            unsigned budget = a.prefetch;
            prefetch_rows<F>(stack, (int64_t)e * rows_m + r, 1, budget);
        }
    }
    mxg_grid_wait_release(a.release_early);  // the ids, weights and input rows come from the previous records
    // The token's experts, lane j holding ids[j] (read by shuffle: no load between an item and its
    // weights' address).
    const int eid = lane < k ? a.ids[t * k + lane] : 0;
    float acc[kMoeMaxK];
#pragma unroll
    for (int q = 0; q < kMoeMaxK; q++) acc[q] = 0.0f;
    for (int g = 0; g < groups; g++) {
        // The lane's items of the group: the first one's (expert, chunk) by division, then each W
        // items further by carrying chunks into experts.
        int item[G];  // expert << 16 | chunk; -1 past the row's items
        typename F::Raw b[G];
        {
            const int f0 = g * G * W + lane;
            int j = f0 / nchunks, c = f0 - j * nchunks;
#pragma unroll
            for (int i = 0; i < G; i++) {
                item[i] = j < k ? j << 16 | c : -1;
                const int e = (int)__float_as_uint(mxg_shfl<W>(__uint_as_float((unsigned)eid), j < k ? j : 0));  // whole warp
                if (active && j < k) F::load_raw(a.w, e * rows_m + min(r, rows_m - 1), c, b[i]);
                c += W;
                while (c >= nchunks) c -= nchunks, j++;
            }
        }
        if (g == 0) {  // the combine's inputs (lane 0, parked after the staging), then the staging
            float wts[kMoeMaxK] = {}, old = 0.0f;
            if (active && lane == 0) {
#pragma unroll
                for (int j = 0; j < kMoeMaxK; j++)
                    if (j < k) wts[j] = a.weights[(int64_t)t * k + j];
                old = a.out[(int64_t)t * rows_m + r];
            }
            moe_stage<F, kDownThreads, 8>(xs4, a.x + (int64_t)t * k * a.w.cols, k, n4);
            if (active && lane == 0) {
#pragma unroll
                for (int j = 0; j < kMoeMaxK; j++) early[warp][j] = wts[j];
                early[warp][kMoeMaxK] = old;
            }
            __syncthreads();  // the only barrier (groups is the same for every thread)
        }
#pragma unroll
        for (int i = 0; i < G; i++) {
            if (!active || item[i] < 0) continue;
            const int slot = item[i] >> 16;
            float xv[32];
            const float xs = moe_chunk<F>(xs4 + slot * n4, item[i] & 0xffff, xv);
            const float d = moe_dot<F>(b[i], xv, xs);
#pragma unroll
            for (int q = 0; q < kMoeMaxK; q++)
                if (q == slot) acc[q] += d;
        }
    }
    mxg_grid_release();
#pragma unroll
    for (int q = 0; q < kMoeMaxK; q++)
        if (q < k) acc[q] = warp_sum<W>(acc[q]);
    if (!active || lane != 0) return;
    float sum = 0.0f;  // kernels/moe.cu's combine: in expert order, then added to the output
#pragma unroll
    for (int j = 0; j < kMoeMaxK; j++) {
        if (j >= k) continue;
        const int64_t s = (int64_t)t * k + j;
        a.y[s * rows_m + r] = acc[j];
        sum = fmaf(early[warp][j], acc[j], sum);
    }
    a.out[(int64_t)t * rows_m + r] = early[warp][kMoeMaxK] + sum;
    }
}

bool same_shape(const mx_matrix *a, const mx_matrix *b) {
    return a->q.mode == b->q.mode && a->q.bits == b->q.bits && a->q.group_size == b->q.group_size &&
           a->dtype == b->dtype && a->scale_dtype == b->scale_dtype && a->rows == b->rows && a->cols == b->cols &&
           a->n_experts == b->n_experts;
}

}  // namespace

extern "C" bool mxg_moe_gate_up_ok(const mxg_launch *L, const mx_matrix *wg, const mx_matrix *wu, const float *x,
                                   int m, int x_div, int n_experts) {
    // Routing folded in: its k within the block's threads, its scratch after the staged row.
    const size_t route_bytes = (size_t)(n_experts + 2 * x_div) * sizeof(float);
    if (n_experts > 0 && (L->moe_fused != 2 || x_div > kMoeRouteThreads || n_experts < x_div ||
                          (size_t)wg->cols * sizeof(float) + route_bytes > kMatvecStageBytes))
        return false;
    return m > 0 && x_div > 0 && m % x_div == 0 && m / x_div <= kMoeMaxTokens && same_shape(wg, wu) &&
           moe_fits(L, wg, x, 1) && moe_fits(L, wu, x, 1);
}

extern "C" void mxg_moe_gate_up(const mxg_launch *L, float *gate, float *up, float *act, const float *x,
                                const mx_matrix *wg, const mx_matrix *wu, const int32_t *ids, int m, int x_div,
                                const mxg_moe_route_fold *route) {
    MX_ASSERT(mxg_moe_gate_up_ok(L, wg, wu, x, m, x_div, route ? route->n_experts : 0));
    GateUpArgs a = {};
    a.g = mat_view(wg);
    a.u = mat_view(wu);
    a.gate = gate, a.up = up, a.act = act;
    a.x = x;
    a.ids = ids;
    a.x_div = x_div;
    a.release_early = L->pdl_rest;
    size_t smem = (size_t)wg->cols * sizeof(float);
    if (route) {
        a.route_ids = route->ids;
        a.route_weights = route->weights;
        a.logits = route->logits;
        a.n_experts = route->n_experts;
        a.norm_topk = route->norm_topk;
        smem += (size_t)(route->n_experts + 2 * x_div) * sizeof(float);
    }
    dispatch_moe_format(wg, [&](auto fmt) {
        using F = decltype(fmt);
        const int64_t rows_per_block = (int64_t)(kGateUpThreads / L->warp) * moe_rows<F>();
        a.blocks_per_slot = (int)((wg->rows + rows_per_block - 1) / rows_per_block);
        const unsigned blocks = (unsigned)((int64_t)a.blocks_per_slot * m);
        MXG_WARP_DISPATCH(L->warp, moe_launch(L, route ? moe_gate_up_kernel<W, F, true>
                                                       : moe_gate_up_kernel<W, F, false>,
                                              blocks, kGateUpThreads, smem, a));
    });
}

extern "C" bool mxg_moe_down_combine_ok(const mxg_launch *L, const mx_matrix *w, const float *x, int n, int k) {
    return n > 0 && n <= kMoeMaxTokens && k >= 1 && k <= kMoeMaxK && moe_fits(L, w, x, k);
}

extern "C" void mxg_moe_down_combine(const mxg_launch *L, float *y, float *out, const float *x, const mx_matrix *w,
                                     const int32_t *ids, const float *weights, int n, int k) {
    MX_ASSERT(mxg_moe_down_combine_ok(L, w, x, n, k));
    DownArgs a = {};
    a.w = mat_view(w);
    a.y = y, a.out = out;
    a.x = x, a.weights = weights;
    a.ids = ids;
    a.k = k;
    a.n_experts = (int)w->n_experts;
    a.release_early = L->pdl_rest;
    const int rows_per_block = kDownThreads / L->warp;
    a.blocks_per_token = (int)((w->rows + rows_per_block - 1) / rows_per_block);
    const unsigned blocks = (unsigned)((int64_t)a.blocks_per_token * n);
    // The prefetch before the wait (MLXCEL_GPU_PDL=3, the full-lane form) where the ids come from a
    // routing launch two back: not at level 2, whose gate/up launch (the previous one) writes them.
    if (L->pdl_rest && L->moe_down && L->moe_fused != 2)
        a.prefetch = pdl_warp_budget(L, (int64_t)blocks * rows_per_block * k);
    const size_t smem = (size_t)k * w->cols * sizeof(float);
    dispatch_moe_format(w, [&](auto fmt) {
        using F = decltype(fmt);
        MXG_WARP_DISPATCH(L->warp, {
            if (L->moe_down) moe_launch(L, moe_down_flat_kernel<W, F>, blocks, kDownThreads, smem, a);
            else
                moe_launch(L, L->moe_fused >= 3 ? moe_down_combine_kernel<W, F, true> : moe_down_combine_kernel<W, F, false>,
                           blocks, kDownThreads, smem, a);
        });
    });
}
