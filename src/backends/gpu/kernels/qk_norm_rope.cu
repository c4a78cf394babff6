// SPDX-License-Identifier: MIT
// The per-head q/k RMSNorm (qwen3) and RoPE of q and k in one launch: one block per (token, head)
// over the q heads then the k heads, head_dim / 2 threads, each owning the rotate-half pair
// (j, j + head_dim/2). Same formulas as rmsnorm.cu and rope_kv.cu (norm: x * r * w, r =
// 1/sqrt(mean(x^2) + eps); rope: angle pos * inv_freq[j] as exact as rope_sincos makes it, cos/sin times attn_factor), in place.
#include "backends/gpu/common.cuh"
#include "backends/gpu/kernels_fused.h"

namespace {

template <int W>
__global__ void qk_norm_rope_kernel(float *q, float *k, const float *__restrict__ qw, const float *__restrict__ kw,
                                    const int32_t *__restrict__ pos, int n_heads, int n_kv_heads, float eps,
                                    const float *__restrict__ inv_freq, int head_dim, float attn_factor) {
    __shared__ float red[1024 / W];
    const int t = blockIdx.y, h = blockIdx.x, half = head_dim / 2;
    const bool is_q = h < n_heads;
    float *v = is_q ? q + ((int64_t)t * n_heads + h) * head_dim : k + ((int64_t)t * n_kv_heads + (h - n_heads)) * head_dim;
    const float *w = is_q ? qw : kw;
    float a = 0.0f, b = 0.0f;
    const int j = threadIdx.x;
    if (j < half) a = v[j], b = v[j + half];
    if (w) {
        float ss = fmaf(a, a, 0.0f);
        ss = fmaf(b, b, ss);
        ss = block_sum<W>(ss, red);
        const float r = 1.0f / sqrtf(ss / (float)head_dim + eps);
        if (j < half) a = a * r * w[j], b = b * r * w[j + half];
    }
    if (j >= half) return;
    float s, c;
    rope_sincos((float)pos[t], inv_freq[j], &s, &c);
    c *= attn_factor;
    s *= attn_factor;
    v[j] = a * c - b * s;
    v[j + half] = b * c + a * s;
}

}  // namespace

extern "C" void mxg_qk_norm_rope(const mxg_launch *L, float *q, float *k, const float *q_norm, const float *k_norm,
                                 const int32_t *pos, int n, int n_heads, int n_kv_heads, float eps,
                                 const mx_rope *rope) {
    MX_ASSERT(n > 0 && rope->head_dim % 2 == 0 && rope->head_dim <= 2048 && (q_norm == NULL) == (k_norm == NULL));
    MXG_WARP_DISPATCH(L->warp, {
        int threads = (rope->head_dim / 2 + W - 1) / W * W;
        qk_norm_rope_kernel<W><<<dim3((unsigned)(n_heads + n_kv_heads), (unsigned)n), threads, 0,
                                 (gpuStream_t)L->stream>>>(q, k, q_norm, k_norm, pos, n_heads, n_kv_heads, eps,
                                                           rope->inv_freq, rope->head_dim, rope->attn_factor);
    });
}
