// SPDX-License-Identifier: MIT
// Multi-head latent attention (DeepSeek-V3; records in backend.h): the latent cache write and the
// attention in the absorbed form. A position's latent row [c_kv | k_pe] of W = kv_lora + rope values
// is one KV head of head_dim W / 2 in the paged cache (layout in kernels.h, rows found through the
// block table by kv_block.cuh): its first half is the head's K row, its second half the V row. Each
// half is a cache row of its own, so in the I16 cache (default) it has its own scales, one per 16
// values of the half, and the store quantizes it as the CPU does (cpu_latent.c).
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

// Element d (< W = 2 hd) of the latent row whose K half is cache row k and V half row v.
template <bool I16>
__device__ __forceinline__ float latent_value(const KvPages &pg, const uint16_t *__restrict__ kv, int64_t k, int64_t v,
                                              int d) {
    const int hd = pg.head_dim;
    return d < hd ? kv_value<I16>(pg, kv, k, d) : kv_value<I16>(pg, kv, v, d - hd);
}

// Value d (< kv_lora + rope) of token t's latent row [c_kv | k_pe].
__device__ __forceinline__ float latent_input(const float *__restrict__ c_kv, const float *__restrict__ k_pe, int t,
                                              int kv_lora, int rope, int d) {
    return d < kv_lora ? c_kv[(int64_t)t * kv_lora + d] : k_pe[(int64_t)t * rope + d - kv_lora];
}

__global__ void latent_store_f16_kernel(__half *kv, const float *__restrict__ c_kv, const float *__restrict__ k_pe,
                                        const int32_t *__restrict__ slot, const int32_t *__restrict__ pos, KvPages pg,
                                        int kv_lora, int rope) {
    const int t = blockIdx.x, hd = pg.head_dim;
    const int64_t k = kv_row_index(pg, slot[t], pos[t], 0, 0), v = kv_row_index(pg, slot[t], pos[t], 1, 0);
    for (int d = threadIdx.x; d < kv_lora + rope; d += blockDim.x)
        kv[(d < hd ? k * hd + d : v * hd + d - hd)] = __float2half_rn(latent_input(c_kv, k_pe, t, kv_lora, rope, d));
}

// I16: one thread per chunk of MX_KV_SCALE_BLOCK values of a half row (kv_put_chunk).
__global__ void latent_store_i16_kernel(int16_t *kv, const float *__restrict__ c_kv, const float *__restrict__ k_pe,
                                        const int32_t *__restrict__ slot, const int32_t *__restrict__ pos, KvPages pg,
                                        int kv_lora, int rope) {
    const int t = blockIdx.x, hd = pg.head_dim, nsc = pg.n_scales;
    for (int i = threadIdx.x; i < 2 * nsc; i += blockDim.x) {
        const int which = i / nsc, c = i % nsc;
        const int d0 = c * MX_KV_SCALE_BLOCK, len = min(MX_KV_SCALE_BLOCK, hd - d0);
        float x[MX_KV_SCALE_BLOCK];
#pragma unroll
        for (int j = 0; j < MX_KV_SCALE_BLOCK; j++)
            x[j] = j < len ? latent_input(c_kv, k_pe, t, kv_lora, rope, which * hd + d0 + j) : 0.0f;
        const int64_t row = kv_row_index(pg, slot[t], pos[t], which, 0);
        kv_put_chunk(kv + row * hd + d0, pg.scales + row * nsc + c, x, len);
    }
}

template <int W, bool I16>
__global__ void __launch_bounds__(kThreads) latent_attention_kernel(
    float *out, const float *__restrict__ q_lat, const float *__restrict__ q_pe, const uint16_t *__restrict__ kv,
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
            float dot = 0.0f;
            for (int which = 0; which < 2; which++) {  // the K half (q[0, hd)), then the V half
                const int64_t row = kv_row_index(pg, sl, p, which, 0);
                const float *qh = q + which * hd;
                if constexpr (I16) {  // per chunk: q . codes, times the chunk's scale
                    const int16_t *codes = (const int16_t *)kv + row * hd;
                    const float *sc = pg.scales + row * pg.n_scales;
                    for (int c = 0; c < pg.n_scales; c++) {
                        const int end = min(hd, (c + 1) * MX_KV_SCALE_BLOCK);
                        float part = 0.0f;
                        for (int d = c * MX_KV_SCALE_BLOCK; d < end; d++) part = fmaf(qh[d], (float)codes[d], part);
                        dot = fmaf(part, sc[c], dot);
                    }
                } else {
                    for (int d = 0; d < hd; d++) dot = fmaf(qh[d], kv_value<false>(pg, kv, row, d), dot);
                }
            }
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
            const int64_t k = kv_row_index(pg, sl, p0 + j, 0, 0), v = kv_row_index(pg, sl, p0 + j, 1, 0);
            const float w = weight[j];
#pragma unroll
            for (int i = 0; i < kPerThread; i++) {
                const int d = tid + i * kThreads;
                if (d >= kv_lora) break;
                acc[i] = fmaf(w, latent_value<I16>(pg, kv, k, v, d), acc[i]);
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
    const KvPages pg = kv_pages(r, L->kv_i16);
    gpuStream_t s = (gpuStream_t)L->stream;
    if (L->kv_i16)
        latent_store_i16_kernel<<<(unsigned)n, kThreads, 0, s>>>((int16_t *)r->kv, c_kv, k_pe, r->slot, r->pos, pg,
                                                                 kv_lora, rope);
    else
        latent_store_f16_kernel<<<(unsigned)n, kThreads, 0, s>>>((__half *)r->kv, c_kv, k_pe, r->slot, r->pos, pg,
                                                                 kv_lora, rope);
}

extern "C" void mxg_latent_attention(const mxg_launch *L, float *out, const float *q_lat, const float *q_pe,
                                     const mx_kv_ref *r, int n, int n_heads, int kv_lora, int rope, float scale) {
    MX_ASSERT(r->lay.n_kv_heads == 1 && 2 * r->lay.head_dim == kv_lora + rope && kv_lora <= kMaxLatent);
    if (n == 0) return;
    const size_t shared = sizeof(float) * (size_t)(kv_lora + rope);
    const KvPages pg = kv_pages(r, L->kv_i16);
    const uint16_t *kv = (const uint16_t *)r->kv;
    gpuStream_t s = (gpuStream_t)L->stream;
    if (L->kv_i16) {
        MXG_WARP_DISPATCH(L->warp, {
            latent_attention_kernel<W, true><<<(unsigned)(n * n_heads), kThreads, shared, s>>>(
                out, q_lat, q_pe, kv, r->slot, r->pos, pg, n_heads, kv_lora, rope, scale);
        });
    } else {
        MXG_WARP_DISPATCH(L->warp, {
            latent_attention_kernel<W, false><<<(unsigned)(n * n_heads), kThreads, shared, s>>>(
                out, q_lat, q_pe, kv, r->slot, r->pos, pg, n_heads, kv_lora, rope, scale);
        });
    }
}
