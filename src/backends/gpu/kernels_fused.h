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

// In place on q [n, n_heads, head_dim] and k [n, n_kv_heads, head_dim]: per-head RMSNorm with
// q_norm / k_norm [head_dim] (both NULL: none), then RoPE at positions pos[n]. kv != NULL: then
// also the kv_store record of the rotated k and v [n, n_kv_heads, head_dim] into the cache at kv
// (its own slots and positions), the bytes mxg_kv_store would write from those buffers; v must not
// overlap q or k.
void mxg_qk_norm_rope(const mxg_launch *L, float *q, float *k, const float *q_norm, const float *k_norm,
                      const int32_t *pos, int n, int n_heads, int n_kv_heads, float eps, const mx_rope *rope,
                      const mx_kv_ref *kv, const float *v);

// MoE decode (MLXCEL_GPU_MOE_FUSED=1 or 2, L->moe_fused): the records moe_matmul gate, moe_matmul up
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

// One token's MLP half in one launch of persistent blocks (kernels/persist_mlp.cu; L->persist): the
// records [matmul(o_out, attn, w_o, b_o), add(o_res, o_out),] rmsnorm(norm_out, x, norm_w),
// matmul(gate, norm_out, w_gate, b_gate), matmul(up, ...), swiglu(act, gate, up), matmul(down_out,
// act, w_down, b_down), add(res, down_out), phases separated by a grid-wide barrier
// (kernels/grid_barrier.cuh), each phase the streaming kernel's body with the one-record launch's
// task shape, so every buffer gets the values the unfused streaming launches would write. w_o NULL:
// no first phase. Returns 0 when it enqueued the launch, -1 when it declines (formats other than
// affine 4/8-bit with bf16/f16 scales, matrices of different formats, phases of different task
// shapes, staging over 48 KB, rows shorter than a warp's chunks, unaligned buffers, no barrier
// words); the caller then runs the records. The aliasing rules are the plan runner's (gpu_plan.c).
typedef struct mxg_persist_mlp {
    const mx_matrix *w_o;
    const float *b_o, *attn;
    float *o_out, *o_res;
    const float *x, *norm_w;
    float norm_eps;
    float *norm_out;
    const mx_matrix *w_gate, *w_up;
    const float *b_gate, *b_up;
    float *gate, *up, *act;
    const mx_matrix *w_down;
    const float *b_down;
    float *down_out, *res;
} mxg_persist_mlp;
int mxg_persist_mlp_run(const mxg_launch *L, const mxg_persist_mlp *m);

#ifdef __cplusplus
}
#endif

#endif
