// SPDX-License-Identifier: MIT
// The C interface of the fused kernels (kernels/matvec_fused.cu, kernels/qk_norm_rope.cu,
// kernels/moe_stream.cu) that the
// plan runner (gpu_plan.c) substitutes for runs of records. Device pointers; each call enqueues on
// L->stream and returns.
#ifndef MXG_KERNELS_FUSED_H
#define MXG_KERNELS_FUSED_H

#include "backends/gpu/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

// One token through `count` matrices that read the same input row x (same format and cols):
// out[k][r] = w[k] x + bias[k]. With norm_w: x is first normalized (RMSNorm, eps), and the
// normalized row is also written to norm_out. With res (count 1): res[r] += out[0][r]. With act
// (count 2, gate and up of equal rows): act[r] = silu(out[0][r]) * out[1][r].
typedef struct mxg_fused_matvec {
    int count;
    const mx_matrix *w[3];
    float *out[3];
    const float *bias[3];
    const float *x;
    const float *norm_w;
    float norm_eps;
    float *norm_out;
    float *res;
    float *act;
} mxg_fused_matvec;

// Whether a kernel exists for this combination (format, shapes, alignment).
bool mxg_fused_matvec_ok(const mxg_fused_matvec *f);
void mxg_run_fused_matvec(const mxg_launch *L, const mxg_fused_matvec *f);

// Several tokens (n, 2..64) through `count` (2 or 3) matrices that read the same input x [n, cols]
// on the tensor-core decode product (vendor/cuda/matvec_mma.cu), one product launch and at most one
// sum launch for the group: out[k] [n, rows_k] = x w[k]^T + bias[k]; with act (count 2, gate and up
// of equal rows): act = silu(out[0]) * out[1] per element too (act may be out[0]). norm_w and res
// must be NULL. 0 when enqueued; -1 when the product has no kernel for some matrix, the matrices
// differ in bits, scale type or cols, rows are not a multiple of 4, an output is not 16-byte
// aligned, or (with act) the scratch holds too few splits (the caller then runs the records).
int mxg_matvec_mma_group(const mxg_launch *L, const mxg_fused_matvec *f, int n);

// In place on q [n, n_heads, head_dim] and k [n, n_kv_heads, head_dim]: per-head RMSNorm with
// q_norm / k_norm [head_dim] (both NULL: none), then RoPE at positions pos[n]. kv != NULL: then
// also the kv_store record of the rotated k and v [n, n_kv_heads, head_dim] into the cache at kv
// (its own slots and positions), the bytes mxg_kv_store would write from those buffers; v must not
// overlap q or k.
void mxg_qk_norm_rope(const mxg_launch *L, float *q, float *k, const float *q_norm, const float *k_norm,
                      const int32_t *pos, int n, int n_heads, int n_kv_heads, float eps, const mx_rope *rope,
                      const mx_kv_ref *kv, const float *v);

// The q/k norm + RoPE + KV store above folded into the decode attention that follows it, one launch
// (kernels/attn_decode.cu; L->attn_rope, MLXCEL_GPU_ATTN_ROPE=1): q [n, n_heads, head_dim] and k [n,
// n_kv_heads, head_dim] are raw (the per-head norms q_norm / k_norm, both NULL: none, and the RoPE
// at rope_pos happen inside) and stay unchanged; the token's k row (rotated) and v row go into the
// cache at kv's slot and position as mxg_qk_norm_rope's store writes them, and out [n, n_heads,
// head_dim] is mxg_attention's over kv (scale, window, sinks, decode hint), bit for bit the two
// launches' where the attention's form is the same. Takes one token (n 1), head sizes 64, 128 and
// 256, whole-head RoPE of one frequency table, on the flash-decoding kernel (L->attn_decode); 0
// when it enqueued the launch, -1 when it does not take the step (the caller runs the two launches).
typedef struct mxg_attn_rope {
    float *out;
    const float *q, *k, *v, *q_norm, *k_norm;
    float eps;
    const int32_t *rope_pos;
    const mx_rope *rope;
    const mx_kv_ref *kv;
    int n, n_heads, n_kv_heads;
    float scale;
    int window;
    const float *sinks;
    bool decode;
} mxg_attn_rope;
int mxg_attention_decode_rope(const mxg_launch *L, const mxg_attn_rope *f);

// MoE decode (MLXCEL_GPU_MOE_FUSED=1 to 3, L->moe_fused): the records moe_matmul gate, moe_matmul up
// (m rows: row i uses expert ids[i] and input row x[i / x_div]) and swiglu(act, gate, up) in one
// launch, writing gate [m, rows], up and act (act may be gate); and the records moe_matmul down
// (x_div 1: y[i] = w_ids[i] x[i]) and moe_combine(out, y, weights, n, k) in one launch, writing y
// [n * k, rows] and out[t] += sum_j weights[t, j] y[t * k + j] (in that order). The _ok functions
// say whether a kernel takes the shapes and formats (else the caller runs the records).
// With the routing folded in (L->moe_fused 2; route != NULL, n_experts > 0 for _ok): the moe_route
// record (route->ids [m / x_div, x_div] and route->weights from route->logits [m / x_div,
// n_experts], k = x_div) runs in the same launch, and its ids are those the products use.
typedef struct mxg_moe_route_fold {
    int32_t *ids;
    float *weights;
    const float *logits;
    int n_experts;
    bool norm_topk;
} mxg_moe_route_fold;
bool mxg_moe_gate_up_ok(const mxg_launch *L, const mx_matrix *wg, const mx_matrix *wu, const float *x, int m,
                        int x_div, int n_experts);
void mxg_moe_gate_up(const mxg_launch *L, float *gate, float *up, float *act, const float *x, const mx_matrix *wg,
                     const mx_matrix *wu, const int32_t *ids, int m, int x_div, const mxg_moe_route_fold *route);
bool mxg_moe_down_combine_ok(const mxg_launch *L, const mx_matrix *w, const float *x, int n, int k);
void mxg_moe_down_combine(const mxg_launch *L, float *y, float *out, const float *x, const mx_matrix *w,
                          const int32_t *ids, const float *weights, int n, int k);

// Tokens a fused MoE decode launch takes (the router's tickets, L->moe_tickets, one per token).
#define MXG_MOE_MAX_TOKENS 64
// MoE decode's router (MLXCEL_GPU_MOE_FUSED=3, kernels/moe_router.cu): the records rmsnorm(norm_out,
// x, norm_w, n, w.cols, norm_eps), matmul(logits, norm_out, w, bias, n) and moe_route(ids, weights,
// logits, n, w.rows, k, norm_topk) in one launch, writing all four outputs. norm_out must not be x
// and logits neither x nor norm_out (the plan runner checks).
bool mxg_moe_router_ok(const mxg_launch *L, const mx_matrix *w, const float *x, const float *norm_w,
                       const float *norm_out, int n, int k);
void mxg_moe_router(const mxg_launch *L, float *norm_out, float *logits, int32_t *ids, float *weights, const float *x,
                    const float *norm_w, float norm_eps, const mx_matrix *w, const float *bias, int n, int k,
                    bool norm_topk);

#ifdef __cplusplus
}
#endif

#endif
