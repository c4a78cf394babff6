// SPDX-License-Identifier: MIT
// The MoE router of decode steps in one launch (MLXCEL_GPU_MOE_FUSED=3, L->moe_fused; the plan
// runner, gpu_plan.c, finds the records): rmsnorm(h, x), matmul(logits, h, router[, bias]),
// moe_route(ids, weights, logits). Before, these were two launches, the norm and router product
// (kernels/matvec_fused.cu) and the routing (kernels/moe.cu, one warp per token), each a chain of
// dependent steps on a few hundred KB; the routing launch is a dependent launch only under
// MLXCEL_GPU_PDL=3 (which also has this launch release the next one right after its grid wait).
// Here each token's router rows are spread over blocks of 128 threads (2 rows per warp, 16 blocks
// for 128 experts); every block loads its rows' weights before the grid wait, normalizes the token's
// row while staging it (block 0 of the token writes h), writes its logits, and takes a ticket
// (L->moe_tickets, one counter per token); the block that takes the token's last ticket routes the
// token (kernels/moe_route.cuh on the logits, on the block's first warp, the routing record's
// arithmetic: the same ids and weights bits as the record given the same logits) and sets the counter back to 0
// for the next launch. The products are those of kernels/moe_stream.cu (scaled 4/8-bit and mxfp4
// dot on the staged row), so the logits differ from the record's only in float32 summation order.
// Anything else (other formats, more than kMoeMaxTokens tokens, rows that do not fit the staging,
// more than 128 experts chosen) runs as before.
#include "backends/gpu/kernels/moe_common.cuh"
#include "backends/gpu/kernels_fused.h"

namespace {

using namespace mxg;

constexpr int kRouterThreads = kMoeRouteThreads;  // 128: the last block routes as the record does
constexpr int kRouterRows = 2;                    // router rows per warp

struct RouterArgs {
    MatView w;
    const float *bias;  // the router's bias [rows] or NULL
    const float *x, *norm_w;
    float norm_eps;
    float *norm_out, *logits;
    int32_t *ids;
    float *weights;
    unsigned *tickets;  // [tokens]: the token's blocks done; 0 between launches
    int k;
    bool norm_topk;
    int blocks_per_token;
    bool release_early;  // MLXCEL_GPU_PDL=3 (L->pdl_rest): release the next launch right after the grid wait
};

template <int W, class F>
__global__ void __launch_bounds__(kRouterThreads) moe_router_kernel(RouterArgs a) {
    MXG_WARP_ONLY(W) {
    constexpr int warps = kRouterThreads / W, R = kRouterRows;
    extern __shared__ float4 xs4[];  // [nchunks * 8]: the normalized row; then logits [E], probabilities [E]
    __shared__ float sv[1024 / W];
    __shared__ bool last;
    const int lane = (int)threadIdx.x % W;
    const int cols = a.w.cols, nchunks = cols >> 5, n4 = nchunks * 8, steps = (nchunks + W - 1) / W;
    const int E = (int)a.w.rows, t = (int)blockIdx.x / a.blocks_per_token;
    const int part = (int)blockIdx.x % a.blocks_per_token;
    const int r0 = (part * warps + (int)threadIdx.x / W) * R;
    const bool active = r0 < E;
    int rows[R];  // clamped past the matrix (not written)
#pragma unroll
    for (int j = 0; j < R; j++) rows[j] = min(r0 + j, E - 1);
    typename F::Raw b[R];
    if (active && lane < nchunks) {  // the weights do not depend on the previous launch
#pragma unroll
        for (int j = 0; j < R; j++) F::load_raw(a.w, rows[j], lane, b[j]);
    }
    mxg_grid_wait_release(a.release_early);
    // The RMSNorm (the fused norm's arithmetic, kernels/matvec_fused.cu) while staging the row.
    const float *xt = a.x + (int64_t)t * cols;
    const float4 *x4 = (const float4 *)xt, *g4 = (const float4 *)a.norm_w;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < cols; i += blockDim.x) ss = fmaf(xt[i], xt[i], ss);
    ss = block_sum<W>(ss, sv);
    const float scale = 1.0f / sqrtf(ss / (float)cols + a.norm_eps);
    for (int i = threadIdx.x; i < n4; i += blockDim.x) {
        float4 v = x4[i];
        const float4 g = g4[i];
        v = make_float4(v.x * scale * g.x, v.y * scale * g.y, v.z * scale * g.z, v.w * scale * g.w);
        if (part == 0) ((float4 *)(a.norm_out + (int64_t)t * cols))[i] = v;
        const int c = i >> 3, q = i & 7;
        if constexpr (Scaled<F>::on) v = scaled_slot<F::bits>(v, q);
        xs4[c * 8 + (q ^ (c & 7))] = v;
    }
    __syncthreads();
    float acc[R];
#pragma unroll
    for (int j = 0; j < R; j++) acc[j] = 0.0f;
    for (int s = 0; active && s < steps; s++) {
        const int c = s * W + lane;
        if (c >= nchunks) break;
        float xv[32];
        const float xs = moe_chunk<F>(xs4, c, xv);
#pragma unroll
        for (int j = 0; j < R; j++) {
            acc[j] += moe_dot<F>(b[j], xv, xs);
            if (c + W < nchunks) F::load_raw(a.w, rows[j], c + W, b[j]);
        }
    }
    mxg_grid_release();
#pragma unroll
    for (int j = 0; j < R; j++) acc[j] = warp_sum<W>(acc[j]);
    if (active && lane == 0) {
#pragma unroll
        for (int j = 0; j < R; j++)
            if (r0 + j < E) a.logits[(int64_t)t * E + r0 + j] = acc[j] + (a.bias ? a.bias[r0 + j] : 0.0f);
        __threadfence();  // visible device-wide before the block's ticket below
    }
    // The ticket: the block that finishes the token's logits routes it.
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        last = atomicAdd(&a.tickets[t], 1u) == (unsigned)a.blocks_per_token - 1;
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    float *logits = (float *)(xs4 + n4), *probs = logits + E;
    const volatile float *lt = a.logits + (int64_t)t * E;  // written by the other blocks: not from L1
    for (int e = threadIdx.x; e < E; e += blockDim.x) logits[e] = lt[e];
    if (threadIdx.x == 0) a.tickets[t] = 0;  // every block of the token has taken its ticket
    __syncthreads();
    moe_route_row<W>(a.ids + (int64_t)t * a.k, a.weights + (int64_t)t * a.k, logits, E, a.k, a.norm_topk, probs);
    }
}

// Shared memory of a launch: the staged row, then the routing's logits and probabilities.
size_t router_smem(const mx_matrix *w) {
    return (size_t)w->cols * sizeof(float) + 2 * (size_t)w->rows * sizeof(float);
}

}  // namespace

extern "C" bool mxg_moe_router_ok(const mxg_launch *L, const mx_matrix *w, const float *x, const float *norm_w,
                                  const float *norm_out, int n, int k) {
    return L->moe_fused >= 3 && L->moe_tickets && n > 0 && n <= kMoeMaxTokens && w->n_experts == 1 &&
           k >= 1 && k <= w->rows && k <= kRouterThreads && ((uintptr_t)norm_w & 15) == 0 &&
           ((uintptr_t)norm_out & 15) == 0 && moe_fits(L, w, x, 1) && router_smem(w) <= kMatvecStageBytes;
}

extern "C" void mxg_moe_router(const mxg_launch *L, float *norm_out, float *logits, int32_t *ids, float *weights,
                               const float *x, const float *norm_w, float norm_eps, const mx_matrix *w,
                               const float *bias, int n, int k, bool norm_topk) {
    MX_ASSERT(mxg_moe_router_ok(L, w, x, norm_w, norm_out, n, k));
    RouterArgs a = {};
    a.w = mat_view(w);
    a.bias = bias;
    a.x = x, a.norm_w = norm_w, a.norm_eps = norm_eps;
    a.norm_out = norm_out, a.logits = logits;
    a.ids = ids, a.weights = weights;
    a.tickets = (unsigned *)L->moe_tickets;
    a.k = k, a.norm_topk = norm_topk;
    a.release_early = L->pdl_rest;
    const int rows_per_block = kRouterThreads / L->warp * kRouterRows;
    a.blocks_per_token = (int)((w->rows + rows_per_block - 1) / rows_per_block);
    const unsigned blocks = (unsigned)(a.blocks_per_token * n);
    dispatch_moe_format(w, [&](auto fmt) {
        using F = decltype(fmt);
        MXG_WARP_DISPATCH(L->warp, moe_launch(L, moe_router_kernel<W, F>, blocks, kRouterThreads, router_smem(w), a));
    });
}
