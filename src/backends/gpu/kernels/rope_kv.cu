// SPDX-License-Identifier: MIT
// RoPE (rotate-half: pairs (i, i + r/2) within the first r = rot_dim dimensions, angle pos *
// inv_freq[i] (the long table from long_from on), cos/sin times attn_factor) in
// place on [n, heads, head_dim], and the KV-cache write (int16 with scales, or f16; layout in
// kernels.h, element format in kv_block.cuh).
#include "backends/gpu/common.cuh"
#include "backends/gpu/kv_block.cuh"
#include "backends/gpu/kernels.h"

namespace {

__global__ void rope_kernel(float *x, const int32_t *__restrict__ pos, int n_heads, int head_dim, int rot_dim,
                            const float *__restrict__ inv_short, const float *__restrict__ inv_long, int long_from,
                            float attn_factor) {
    const int half = rot_dim / 2;
    const float p = (float)pos[blockIdx.x];
    const float *inv_freq = inv_long && pos[blockIdx.x] >= long_from ? inv_long : inv_short;
    float *xt = x + (int64_t)blockIdx.x * n_heads * head_dim;
    for (int i = threadIdx.x; i < n_heads * half; i += blockDim.x) {
        const int h = i / half, j = i % half;
        float s, c;
        rope_sincos(p, inv_freq[j], &s, &c);
        c *= attn_factor;
        s *= attn_factor;
        float *v = xt + h * head_dim;
        const float a = v[j], b = v[j + half];
        v[j] = a * c - b * s;
        v[j + half] = b * c + a * s;
    }
}

__global__ void kv_store_f16_kernel(__half *kv, const float *__restrict__ k, const float *__restrict__ v,
                                    const int32_t *__restrict__ slot, const int32_t *__restrict__ pos, KvPages pg) {
    const int t = blockIdx.x;
    const int per_token = pg.n_kv_heads * pg.head_dim;
    for (int i = threadIdx.x; i < per_token; i += blockDim.x) {
        const int h = i / pg.head_dim, d = i % pg.head_dim;
        kv[kv_row_index(pg, slot[t], pos[t], 0, h) * pg.head_dim + d] = __float2half_rn(k[(int64_t)t * per_token + i]);
        kv[kv_row_index(pg, slot[t], pos[t], 1, h) * pg.head_dim + d] = __float2half_rn(v[(int64_t)t * per_token + i]);
    }
}

// I16: one thread per chunk of MX_KV_SCALE_BLOCK values of a row (K and V rows of every head of
// token blockIdx.x), which it quantizes with its scale (kv_put_chunk).
__global__ void kv_store_i16_kernel(int16_t *kv, const float *__restrict__ k, const float *__restrict__ v,
                                    const int32_t *__restrict__ slot, const int32_t *__restrict__ pos, KvPages pg) {
    const int t = blockIdx.x, hd = pg.head_dim, nsc = pg.n_scales;
    const int per_token = pg.n_kv_heads * hd, chunks = 2 * pg.n_kv_heads * nsc;
    for (int i = threadIdx.x; i < chunks; i += blockDim.x) {
        const int which = i / (pg.n_kv_heads * nsc), h = i / nsc % pg.n_kv_heads, c = i % nsc;
        const float *src = (which ? v : k) + (int64_t)t * per_token + (int64_t)h * hd;
        kv_store_chunk(kv, pg, kv_row_index(pg, slot[t], pos[t], which, h), c, src);
    }
}

}  // namespace

extern "C" void mxg_rope(const mxg_launch *L, float *x, const int32_t *pos, int n, int n_heads, const mx_rope *rope) {
    MX_ASSERT(rope->head_dim % 2 == 0 && n >= 0);
    if (n == 0) return;
    int rot = rope->rot_dim ? rope->rot_dim : rope->head_dim;
    MX_ASSERT(rot % 2 == 0 && rot <= rope->head_dim);
    int threads = n_heads * rot / 2;
    threads = threads > 256 ? 256 : (threads + 31) / 32 * 32;
    rope_kernel<<<(unsigned)n, threads, 0, (gpuStream_t)L->stream>>>(x, pos, n_heads, rope->head_dim, rot, rope->inv_freq,
                                                                    rope->long_inv_freq, rope->long_from,
                                                                    rope->attn_factor);
}

extern "C" void mxg_kv_store(const mxg_launch *L, const mx_kv_ref *r, const float *k, const float *v, int n) {
    MX_ASSERT(r->layer >= 0 && r->layer < r->lay.n_layers && n >= 0);
    if (n == 0) return;
    const KvPages pg = kv_pages(r, L->kv_i16);
    gpuStream_t s = (gpuStream_t)L->stream;
    if (L->kv_i16) {
        int threads = 2 * pg.n_kv_heads * pg.n_scales;
        threads = threads > 256 ? 256 : (threads + 31) / 32 * 32;
        kv_store_i16_kernel<<<(unsigned)n, threads, 0, s>>>((int16_t *)r->kv, k, v, r->slot, r->pos, pg);
    } else {
        int threads = r->lay.n_kv_heads * r->lay.head_dim;
        threads = threads > 256 ? 256 : (threads + 31) / 32 * 32;
        kv_store_f16_kernel<<<(unsigned)n, threads, 0, s>>>((__half *)r->kv, k, v, r->slot, r->pos, pg);
    }
}
