// SPDX-License-Identifier: MIT
// The per-head q/k RMSNorm (qwen3) and RoPE of q and k in one launch: one block per (token, head)
// over the q heads then the k heads, head_dim / 2 threads, each owning the rotate-half pair
// (j, j + head_dim/2). Same formulas as rmsnorm.cu and rope_kv.cu (norm: x * r * w, r =
// 1/sqrt(mean(x^2) + eps); rope: angle pos * inv_freq[j] as exact as rope_sincos makes it, cos/sin times attn_factor), in place.
// Optionally the KV-cache write that follows (the kv_store record of k and v): each k head's block
// also writes its rotated row and the token's v row of that head into the cache, from the same
// float32 values it leaves in k, by the element rules of kv_block.cuh (I16: one thread per chunk of
// MX_KV_SCALE_BLOCK values, kv_put_chunk; f16: round to nearest), so the cache holds the bytes
// rope_kv.cu's kv_store kernels would write from those buffers.
// MLXCEL_GPU_PDL=3 (L->pdl_rest): a programmatic dependent launch that waits for the previous kernel
// before it reads or writes anything (q, k, v and the cache among them: a kernel before it may still
// read the cache) and then releases the next one at once; below level 3 the plain launch it was.
#include "backends/gpu/common.cuh"
#include "backends/gpu/kernels_fused.h"
#include "backends/gpu/kv_block.cuh"

namespace {

enum Store { kStoreNone, kStoreI16, kStoreF16 };

// The cache write of a k head's block (STORE != kStoreNone).
struct KvWrite {
    void *kv;                    // the cache: int16 codes (I16) or f16
    const float *v;              // [n, n_kv_heads, head_dim]
    const int32_t *slot, *pos;   // [n] of the kv_store record
    KvPages pg;
};

template <int W, int STORE>
__global__ void qk_norm_rope_kernel(float *q, float *k, const float *__restrict__ qw, const float *__restrict__ kw,
                                    const int32_t *__restrict__ pos, int n_heads, int n_kv_heads, float eps,
                                    const float *__restrict__ inv_freq, int head_dim, float attn_factor, KvWrite st,
                                    bool early) {
    __shared__ float red[1024 / W];
    extern __shared__ float krow[];  // I16 store: [head_dim] the rotated k row, read back by chunks
    mxg_grid_wait_release(early);    // level 3: nothing before reads or writes what other kernels touch
    const int t = blockIdx.y, h = blockIdx.x, half = head_dim / 2;
    const bool is_q = h < n_heads;
    float *v = is_q ? q + ((int64_t)t * n_heads + h) * head_dim : k + ((int64_t)t * n_kv_heads + (h - n_heads)) * head_dim;
    const float *w = is_q ? qw : kw;
    float a = 0.0f, b = 0.0f;
    const int j = threadIdx.x;
    if (j < half) a = v[j], b = v[j + half];
    head_norm_rope<W>(a, b, j, half, w, eps, (float)pos[t], inv_freq, attn_factor, red);
    if (j < half) v[j] = a, v[j + half] = b;
    if constexpr (STORE != kStoreNone) {
        if (is_q) return;  // block-uniform
        const int hk = h - n_heads, D = head_dim;
        const int64_t krow_i = kv_row_index(st.pg, st.slot[t], st.pos[t], 0, hk);
        const int64_t vrow_i = kv_row_index(st.pg, st.slot[t], st.pos[t], 1, hk);
        const float *vsrc = st.v + ((int64_t)t * n_kv_heads + hk) * D;
        if constexpr (STORE == kStoreF16) {
            __half *kv = (__half *)st.kv;
            if (j < half) {
                kv[krow_i * D + j] = __float2half_rn(a);
                kv[krow_i * D + j + half] = __float2half_rn(b);
            }
            for (int d = j; d < D; d += blockDim.x) kv[vrow_i * D + d] = __float2half_rn(vsrc[d]);
        } else {
            if (j < half) krow[j] = a, krow[j + half] = b;
            __syncthreads();
            const int nsc = st.pg.n_scales;
            for (int i = j; i < 2 * nsc; i += blockDim.x) {
                const int which = i / nsc;
                kv_store_chunk((int16_t *)st.kv, st.pg, which ? vrow_i : krow_i, i % nsc, which ? vsrc : krow);
            }
        }
    }
}

}  // namespace

extern "C" void mxg_qk_norm_rope(const mxg_launch *L, float *q, float *k, const float *q_norm, const float *k_norm,
                                 const int32_t *pos, int n, int n_heads, int n_kv_heads, float eps,
                                 const mx_rope *rope, const mx_kv_ref *kv, const float *v) {
    MX_ASSERT(n > 0 && rope->head_dim % 2 == 0 && rope->head_dim <= 2048 && (q_norm == NULL) == (k_norm == NULL));
    KvWrite st = {NULL, v, NULL, NULL, {}};
    int store = kStoreNone;
    size_t smem = 0;
    if (kv) {
        MX_ASSERT(v != NULL && kv->lay.n_kv_heads == n_kv_heads && kv->lay.head_dim == rope->head_dim &&
                  kv->layer >= 0 && kv->layer < kv->lay.n_layers);
        st.kv = kv->kv, st.slot = kv->slot, st.pos = kv->pos, st.pg = kv_pages(kv, L->kv_i16);
        store = L->kv_i16 ? kStoreI16 : kStoreF16;
        smem = L->kv_i16 ? sizeof(float) * (size_t)rope->head_dim : 0;
    }
    const dim3 grid((unsigned)(n_heads + n_kv_heads), (unsigned)n);
    gpuStream_t s = (gpuStream_t)L->stream;
    MXG_WARP_DISPATCH(L->warp, {
        int threads = (rope->head_dim / 2 + W - 1) / W * W;
        void (*kernel)(float *, float *, const float *, const float *, const int32_t *, int, int, float, const float *,
                       int, float, KvWrite, bool) = store == kStoreI16   ? qk_norm_rope_kernel<W, kStoreI16>
                                                    : store == kStoreF16 ? qk_norm_rope_kernel<W, kStoreF16>
                                                                         : qk_norm_rope_kernel<W, kStoreNone>;
        if (L->pdl_rest)
            mxg_launch_dep(kernel, grid, dim3(threads), smem, s, true, q, k, q_norm, k_norm, pos, n_heads, n_kv_heads,
                           eps, rope->inv_freq, rope->head_dim, rope->attn_factor, st, true);
        else
            kernel<<<grid, threads, smem, s>>>(q, k, q_norm, k_norm, pos, n_heads, n_kv_heads, eps, rope->inv_freq,
                                               rope->head_dim, rope->attn_factor, st, false);
    });
}
