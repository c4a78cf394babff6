// SPDX-License-Identifier: MIT
// Multi-head latent attention (DeepSeek-V3; records in backend.h): the latent cache write and the
// attention in the absorbed form. A position's latent row [c_kv | k_pe] of W = kv_lora + rope values
// is one KV head of head_dim W / 2 in the paged f16 cache (layout in kernels.h, rows found through
// the block table by kv_block.cuh): its first half is the head's K row, its second half the V row.
// Attention: one block per (token, query head). Keys go in chunks of blockDim positions: each thread
// scores one position of the chunk against the query (held in shared memory), the block updates the
// running max and sum of the online softmax, then every thread accumulates its own output dimensions
// over the chunk's latent rows (reads across threads are contiguous). The output stays in registers
// (kv_lora / blockDim values per thread), so no scratch depends on the context length.
#include "backends/gpu/common.cuh"
#include "backends/gpu/kv_block.cuh"
#include "backends/gpu/kernels.h"

namespace {

constexpr int kThreads = 128;
constexpr int kMaxLatent = 4096;                          // kv_lora at most (hf_config.c checks it)
constexpr int kPerThread = kMaxLatent / kThreads;         // output dimensions per thread

// Element d (< W) of a latent row whose K half starts at k and V half at v.
__device__ __forceinline__ int64_t latent_index(int64_t k, int64_t v, int hd, int d) { return d < hd ? k + d : v + d - hd; }

__global__ void latent_store_kernel(__half *kv, const float *__restrict__ c_kv, const float *__restrict__ k_pe,
                                    const int32_t *__restrict__ slot, const int32_t *__restrict__ pos, KvPages pg,
                                    int kv_lora, int rope) {
    const int t = blockIdx.x, hd = pg.head_dim;
    const int64_t k = kv_row(pg, slot[t], pos[t], 0, 0), v = kv_row(pg, slot[t], pos[t], 1, 0);
    for (int d = threadIdx.x; d < kv_lora + rope; d += blockDim.x) {
        const float x = d < kv_lora ? c_kv[(int64_t)t * kv_lora + d] : k_pe[(int64_t)t * rope + d - kv_lora];
        kv[latent_index(k, v, hd, d)] = __float2half_rn(x);
    }
}

template <int W>
__global__ void __launch_bounds__(kThreads) latent_attention_kernel(
    float *out, const float *__restrict__ q_lat, const float *__restrict__ q_pe, const __half *__restrict__ kv,
    const int32_t *__restrict__ slot, const int32_t *__restrict__ pos, KvPages pg, int n_heads, int kv_lora, int rope,
    float scale) {
    extern __shared__ float q[];  // [kv_lora + rope]: q_lat then q_pe
    __shared__ float weight[kThreads];
    __shared__ float red[kThreads / 32 + 1];
    const int t = blockIdx.x / n_heads, h = blockIdx.x % n_heads, tid = threadIdx.x;
    const int hd = pg.head_dim, last = pos[t], sl = slot[t];
    const int64_t qi = (int64_t)t * n_heads + h;
    for (int d = tid; d < kv_lora + rope; d += kThreads)
        q[d] = d < kv_lora ? q_lat[qi * kv_lora + d] : q_pe[qi * rope + d - kv_lora];
    __syncthreads();
    float acc[kPerThread];
#pragma unroll
    for (int i = 0; i < kPerThread; i++) acc[i] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    for (int p0 = 0; p0 <= last; p0 += kThreads) {
        const int p = p0 + tid;
        float s = -INFINITY;
        if (p <= last) {
            const int64_t k = kv_row(pg, sl, p, 0, 0), v = kv_row(pg, sl, p, 1, 0);
            float dot = 0.0f;
            for (int d = 0; d < kv_lora + rope; d++) dot = fmaf(q[d], __half2float(kv[latent_index(k, v, hd, d)]), dot);
            s = dot * scale;
        }
        const float new_m = fmaxf(m, block_max<W>(s, red));
        const float corr = expf(m - new_m);  // 0 on the first chunk (m = -inf)
        const float e = p <= last ? expf(s - new_m) : 0.0f;
        weight[tid] = e;
        l = l * corr + block_sum<W>(e, red);  // block_sum's barriers also publish weight[]
        m = new_m;
        const int count = last - p0 + 1 < kThreads ? last - p0 + 1 : kThreads;
#pragma unroll
        for (int i = 0; i < kPerThread; i++) acc[i] *= corr;
        for (int j = 0; j < count; j++) {
            const int64_t k = kv_row(pg, sl, p0 + j, 0, 0), v = kv_row(pg, sl, p0 + j, 1, 0);
            const float w = weight[j];
#pragma unroll
            for (int i = 0; i < kPerThread; i++) {
                const int d = tid + i * kThreads;
                if (d >= kv_lora) break;
                acc[i] = fmaf(w, __half2float(kv[latent_index(k, v, hd, d)]), acc[i]);
            }
        }
        __syncthreads();  // weight[] is rewritten by the next chunk
    }
    const float inv = 1.0f / l;
#pragma unroll
    for (int i = 0; i < kPerThread; i++) {
        const int d = tid + i * kThreads;
        if (d >= kv_lora) break;
        out[qi * kv_lora + d] = acc[i] * inv;
    }
}

}  // namespace

extern "C" void mxg_latent_store(const mxg_launch *L, const mx_kv_ref *r, const float *c_kv, const float *k_pe, int n,
                                 int kv_lora, int rope) {
    MX_ASSERT(r->lay.n_kv_heads == 1 && 2 * r->lay.head_dim == kv_lora + rope && n >= 0);
    if (n == 0) return;
    latent_store_kernel<<<(unsigned)n, kThreads, 0, (gpuStream_t)L->stream>>>((__half *)r->kv, c_kv, k_pe, r->slot,
                                                                              r->pos, kv_pages(r), kv_lora, rope);
}

extern "C" void mxg_latent_attention(const mxg_launch *L, float *out, const float *q_lat, const float *q_pe,
                                     const mx_kv_ref *r, int n, int n_heads, int kv_lora, int rope, float scale) {
    MX_ASSERT(r->lay.n_kv_heads == 1 && 2 * r->lay.head_dim == kv_lora + rope && kv_lora <= kMaxLatent);
    if (n == 0) return;
    const size_t shared = sizeof(float) * (size_t)(kv_lora + rope);
    MXG_WARP_DISPATCH(L->warp, {
        latent_attention_kernel<W><<<(unsigned)(n * n_heads), kThreads, shared, (gpuStream_t)L->stream>>>(
            out, q_lat, q_pe, (const __half *)r->kv, r->slot, r->pos, kv_pages(r), n_heads, kv_lora, rope, scale);
    });
}
