// SPDX-License-Identifier: MIT
// Mixture-of-experts routing and combination. Routing: per token, softmax over the expert logits
// (float32), the k largest probabilities (first index wins ties), optionally renormalized to sum 1,
// one warp per token.
// Combination: out[t] += sum_j weights[t, j] * y[t * k + j]. The per-expert matmuls themselves are
// mxg_moe_matmul (kernels/moe_matvec.cu). The routing of one token is moe_route_warp
// (kernels/moe_route.cuh), which the fused MoE decode launch (kernels/moe_stream.cu) also runs;
// By default (L->moe_route_rank; MLXCEL_GPU_MOE_ROUTE_RANK=0 turns it off) the routing launch runs
// a block of kMoeRouteThreads per token instead, its picks by rank (moe_route_rank: the same bits).
#include "backends/gpu/common.cuh"
#include "backends/gpu/kernels.h"
#include "backends/gpu/kernels/moe_route.cuh"

namespace {

// One warp per token. early (MLXCEL_GPU_PDL=3, L->pdl_rest): launched as a dependent launch, it
// waits for the router product's grid, then releases the next kernel (the expert products, whose
// blocks then become resident while the routing runs). It prefetches nothing: its only input is the
// logits the previous kernel writes.
template <int W>
__global__ void moe_route_kernel(int32_t *ids, float *weights, const float *__restrict__ logits, int n_experts,
                                 int k, bool norm_topk, bool early) {
    extern __shared__ float probs[];  // [n_experts]
    mxg_grid_wait_release(early);
    mxg::moe_route_warp<W>(ids + (int64_t)blockIdx.x * k, weights + (int64_t)blockIdx.x * k,
                           logits + (int64_t)blockIdx.x * n_experts, n_experts, k, norm_topk, probs);
}

// The same by a block of kMoeRouteThreads per token (moe_route_rank; the default).
template <int W>
__global__ void moe_route_rank_kernel(int32_t *ids, float *weights, const float *__restrict__ logits, int n_experts,
                                      int k, bool norm_topk, bool early) {
    extern __shared__ float sm[];  // moe_route_rank_smem
    mxg_grid_wait_release(early);
    mxg::moe_route_rank<W>(ids + (int64_t)blockIdx.x * k, weights + (int64_t)blockIdx.x * k,
                           logits + (int64_t)blockIdx.x * n_experts, n_experts, k, norm_topk, sm);
}

// DeepSeek-V3's grouped top-k (backend.h, moe_route_grouped): the sigmoid scores in parallel, the
// group and expert choices by thread 0 in the order the CPU backend makes them (first index wins).
__global__ void moe_route_grouped_kernel(int32_t *ids, float *weights, const float *__restrict__ logits,
                                         const float *__restrict__ bias, int n_experts, int k, int n_group,
                                         int topk_group, bool norm_topk, float scaling) {
    extern __shared__ float sm[];  // s [n_experts], choice [n_experts], group score [n_group], kept [n_group]
    float *s = sm, *choice = sm + n_experts, *group = choice + n_experts, *kept = group + n_group;
    const float *l = logits + (int64_t)blockIdx.x * n_experts;
    for (int e = threadIdx.x; e < n_experts; e += blockDim.x) {
        s[e] = 1.0f / (1.0f + expf(-l[e]));
        choice[e] = s[e] + bias[e];
    }
    __syncthreads();
    if (threadIdx.x != 0) return;
    const int per = n_experts / n_group;
    for (int g = 0; g < n_group; g++) {
        float a = -INFINITY, b = -INFINITY;
        for (int e = g * per; e < (g + 1) * per; e++) {
            if (choice[e] > a) b = a, a = choice[e];
            else if (choice[e] > b) b = choice[e];
        }
        group[g] = a + b;
        kept[g] = 0.0f;
    }
    for (int j = 0; j < topk_group; j++) {
        int best = -1;
        for (int g = 0; g < n_group; g++)
            if (kept[g] == 0.0f && (best < 0 || group[g] > group[best])) best = g;
        kept[best] = 1.0f;
    }
    for (int e = 0; e < n_experts; e++)
        if (kept[e / per] == 0.0f) choice[e] = 0.0f;
    int32_t *id = ids + (int64_t)blockIdx.x * k;
    float *w = weights + (int64_t)blockIdx.x * k, sum = 0.0f;
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int e = 0; e < n_experts; e++)
            if (choice[e] != -INFINITY && (best < 0 || choice[e] > choice[best])) best = e;
        id[j] = best;
        w[j] = s[best];
        sum += s[best];
        choice[best] = -INFINITY;  // taken
    }
    for (int j = 0; j < k; j++) w[j] = (norm_topk ? w[j] / (sum + 1e-20f) : w[j]) * scaling;
}

__global__ void moe_combine_kernel(float *out, const float *__restrict__ y, const float *__restrict__ weights,
                                   int k, int dim) {
    const int t = blockIdx.x;
    for (int d = threadIdx.x; d < dim; d += blockDim.x) {
        float acc = 0.0f;
        for (int j = 0; j < k; j++) acc = fmaf(weights[(int64_t)t * k + j], y[((int64_t)t * k + j) * dim + d], acc);
        out[(int64_t)t * dim + d] += acc;
    }
}

}  // namespace

extern "C" void mxg_moe_route(const mxg_launch *L, int32_t *ids, float *weights, const float *logits, int n,
                              int n_experts, int k, bool norm_topk) {
    MX_ASSERT(k >= 1 && k <= n_experts && n_experts <= 16384 && k <= mxg::kMoeRouteThreads);
    if (n == 0) return;
    if (L->moe_route_rank && n_experts <= mxg::kMoeRankMaxExperts) {
        MXG_WARP_DISPATCH(L->warp, {
            const size_t smem = mxg::moe_route_rank_smem(n_experts, k, W);
            mxg_launch_dep(moe_route_rank_kernel<W>, dim3((unsigned)n), dim3(mxg::kMoeRouteThreads), smem,
                           (gpuStream_t)L->stream, L->pdl_rest, ids, weights, logits, n_experts, k, norm_topk,
                           L->pdl_rest);
        });
        return;
    }
    const size_t smem = (size_t)n_experts * sizeof(float);
    MXG_WARP_DISPATCH(L->warp, {
        if (L->pdl_rest)
            mxg_launch_dep(moe_route_kernel<W>, dim3((unsigned)n), dim3(W), smem, (gpuStream_t)L->stream, true, ids,
                           weights, logits, n_experts, k, norm_topk, true);
        else
            moe_route_kernel<W><<<(unsigned)n, W, smem, (gpuStream_t)L->stream>>>(ids, weights, logits, n_experts, k,
                                                                                 norm_topk, false);
    });
}

extern "C" void mxg_moe_route_grouped(const mxg_launch *L, int32_t *ids, float *weights, const float *logits,
                                      const float *bias, int n, int n_experts, int k, int n_group, int topk_group,
                                      bool norm_topk, float scaling) {
    MX_ASSERT(n_group >= 1 && n_experts % n_group == 0 && n_experts / n_group >= 2 && topk_group <= n_group);
    MX_ASSERT(k >= 1 && k <= n_experts && n_experts <= 16384);
    if (n == 0) return;
    const size_t shared = sizeof(float) * (size_t)(2 * n_experts + 2 * n_group);
    moe_route_grouped_kernel<<<(unsigned)n, 128, shared, (gpuStream_t)L->stream>>>(ids, weights, logits, bias, n_experts,
                                                                                  k, n_group, topk_group, norm_topk,
                                                                                  scaling);
}

extern "C" void mxg_moe_combine(const mxg_launch *L, float *out, const float *y, const float *weights, int n, int k,
                                int dim) {
    if (n == 0) return;
    int threads = dim > 256 ? 256 : (dim + 31) / 32 * 32;
    moe_combine_kernel<<<(unsigned)n, threads, 0, (gpuStream_t)L->stream>>>(out, y, weights, k, dim);
}
