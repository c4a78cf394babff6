// SPDX-License-Identifier: MIT
// The C interface between the backend glue (gpu_backend.c, C11) and the kernel files (*.cu, CUDA C++
// compiled by nvcc or hipcc). Each function enqueues work on L->stream and returns at once; launch
// errors surface at the next sync (gpu_rt.h). Arguments follow backend.h: device pointers, float32
// activations, row-major, shapes as commented there. Nothing here keeps state between calls.
#ifndef MXG_KERNELS_H
#define MXG_KERNELS_H

#ifdef __cplusplus
extern "C" {
#endif

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backends/backend.h"

// What every launch needs to know about the device it runs on.
// Batches of at least this many tokens take the tensor-core decode product by default (on the H200
// it is slower than the float32 kernels at 2 tokens, even at 4, faster from 8: bench/RESULTS.md).
#define MXG_TC_DECODE_DEFAULT_TOKENS 4

// The CUDA tensor-core prefill products (vendor/cuda/matmul_*.cu), chosen by
// MLXCEL_GPU_PREFILL_KERNEL: wgmma where it can run, else pipe (the default, below), wmma (WMMA, the tile picked to fill the device), wmma128 (WMMA,
// always 128 x 128 tiles: the kernel before the tile choice), pipe (cp.async pipeline,
// vendor/cuda/matmul_pipe.cu, affine 4-bit; other formats on wmma), wgmma (Hopper's warpgroup MMA, vendor/cuda/matmul_wgmma.cu:
// affine 4-bit, weights in the A registers, only where the device is compute capability 9.0 and the build has
// sm_90a code, MLXCEL_CUDA_ARCHITECTURES=90a; what it declines goes to pipe, then wmma).
enum { MXG_PREFILL_WMMA, MXG_PREFILL_WMMA128, MXG_PREFILL_PIPE, MXG_PREFILL_WGMMA };

typedef struct mxg_launch {
    void *stream;          // gpuStream_t
    int warp;              // 32 or 64 lanes
    int sm_count;          // multiprocessors / compute units
    int cc;                // CUDA compute capability major*10+minor; 0 on ROCm
    bool use_mma;          // prefill matmuls may use the vendor matrix units (vendor/*)
    int prefill_kernel;    // CUDA: which tensor-core prefill product (MXG_PREFILL_*; MLXCEL_GPU_PREFILL_KERNEL)
    bool wgmma;            // the wgmma product can run: selected, and mxg_wgmma_probe found sm_90a code for the device
    int matvec_rows;       // most rows per warp in matrix-vector kernels (1, 2 or 4; tuning knob)
    int matvec_max_tokens; // batches of up to this many tokens use the matrix-vector kernels
    int tc_decode_tokens;  // 0, or batches of this many (at least 2) to 64 tokens on the tensor-core
                           // decode product where it applies (vendor/cuda/matvec_mma.cu; MLXCEL_GPU_TC_DECODE,
                           // default MXG_TC_DECODE_DEFAULT_TOKENS; taken only with use_mma)
    bool tc_grouped;       // products of one input (q/k/v; gate/up [+ SwiGLU]) of the batches that take the
                           // tensor-core decode product as one grouped launch (gpu_plan.c; on unless MLXCEL_GPU_GROUPED=0)
    bool matvec_old;       // matrix-vector kernels without the scaled 4/8-bit dot and split-K (A/B switch)
    bool matvec_stream;    // the streaming matrix-vector kernel where it applies (off: MLXCEL_GPU_NO_STREAM_MATVEC=1)
    int stream_min_cols;   // ... on rows at least this long (MLXCEL_GPU_STREAM_MIN_COLS; default 4096)
    int stream_min_rows;   // ... or, for one token, on shorter rows where the launch's matrices have at least
                           // this many rows together (MLXCEL_GPU_STREAM_MIN_ROWS; default 4096: the 0.6B's
                           // norm + q/k/v, norm + gate/up and lm_head; kernels/matvec_stream.cuh, stream_fits)
    int stream_rows;       // its rows per task for one token over long rows: 0 (default) by the launch's
                           // size (kernels/matvec_stream.cuh, stream_four_rows), or 2 or 4 for every
                           // launch (MLXCEL_GPU_STREAM_ROWS)
    bool stream_lean;      // its one-token affine 4/8-bit products in the lean form, bit for bit the same outputs
                           // (kernels/matvec_stream_lean.cuh; MLXCEL_GPU_STREAM_LEAN, on unless 0)
    bool stream_res_early; // its residual products (o, down) and the fused kernel's (kernels/matvec_fused.cu) read each
                           // task's residual and bias rows into its lanes after the grid wait or a task ahead, and
                           // write lane per row (EPI_RESIDUAL_EARLY, kernels/matvec_res_early.cuh; bit for bit the
                           // same outputs; on unless MLXCEL_GPU_STREAM_RES_EARLY=0)
    bool attn_token_rows;  // attention always in token rows, never head rows for decode (A/B switch)
    bool attn_decode;      // decode steps on kernels/attn_decode.cu (MLXCEL_GPU_ATTN_DECODE=0: off, A/B switch)
    bool attn_short;       // ... in their short-context form where the cache is short (kernels/attn_decode.cu;
                           // on by default; MLXCEL_GPU_ATTN_SHORT=0 turns it off)
    bool attn_rope;        // one-token decode steps with the q/k norm + RoPE + KV store folded into that kernel's
                           // launch (mxg_attention_decode_rope, gpu_plan.c; on by default; MLXCEL_GPU_ATTN_ROPE=0 turns it off)
    bool attn_mma;         // prefill attention on the tensor-core kernel (vendor/cuda/attn_mma.cu; off: MLXCEL_GPU_ATTN_MMA=0)
    bool kv_i16;           // the KV cache is int16 with scales (MX_DTYPE_I16, default); false: f16 (MLXCEL_GPU_KV=f16)
    bool dependent_launch; // matrix-vector and fused kernels start while the previous one ends (sm_90+)
    bool pdl_early;        // MLXCEL_GPU_PDL=2 and 3 (with dependent_launch): those kernels release the next one right
                           // after their grid wait and prefetch their first rows' weights into L2 before it;
                           // RMSNorm, embedding, SwiGLU, residual add and row gather become dependent
                           // launches too (their grid wait first, then the release)
    bool pdl_rest;         // MLXCEL_GPU_PDL=3, the default: level 2 plus the same wait-then-release in
                           // the kernels level 2 leaves as plain launches (attention decode and its combine,
                           // q/k norm + RoPE, the token choice, the MoE kernels)
    size_t pdl_prefetch;   // ... at most this many bytes per launch (mxg_pdl_prefetch_cap; 0: no prefetch)
    int moe_fused;         // decode MoE expert products on kernels/moe_stream.cu (MLXCEL_GPU_MOE_FUSED: 1,
                           // the default; 2: with the routing in the gate/up launch; 3: the norm, router
                           // product and routing in one launch, kernels/moe_router.cu; 0: the records)
    void *moe_tickets;     // level 3: MXG_MOE_MAX_TOKENS zeroed counters (kernels/moe_router.cu), else NULL
    bool moe_down;         // the down + combine launch's layout (MLXCEL_GPU_MOE_DOWN; 1, the default: every lane
                           // streams (expert, chunk) pairs of its warp's row; 0: a warp per output row over the
                           // chunks; kernels/moe_stream.cu)
    bool moe_route_rank;   // the routing launch (kernels/moe.cu) by a block of kMoeRouteThreads, its k picks by rank
                           // in one pass (moe_route_rank, kernels/moe_route.cuh; the same bits; the default;
                           // MLXCEL_GPU_MOE_ROUTE_RANK=0: one warp's k argmax passes)
    void *scratch;         // device workspace for split attention partials
    size_t scratch_bytes;
    void *small_scratch;   // device workspace for argmax keys (cleared by the op itself)
    size_t small_scratch_bytes;
    int sample_blocks;     // most blocks per row of the sample record (MLXCEL_GPU_SAMPLE_BLOCKS; 1: one)
    void *sample_scratch;  // device workspace of the split sample kernels (NULL when sample_blocks is 1)
    size_t sample_scratch_bytes;
    bool sample_fast;      // the split form's fast threshold (MLXCEL_GPU_SAMPLE_FAST; on by default, 0: the radix passes)
} mxg_launch;

// MLXCEL_GPU_PDL=2: the most weight bytes one matrix-vector launch prefetches into L2 before its grid
// wait, an eighth of the L2 (l2_bytes as the device reports it; MXG_PDL_L2_FALLBACK, an H100's 50 MB,
// when it reports none), a multiple of 16. Why so little: the prefetch lands while the previous
// kernel still streams its own weights through the same L2, and a block's first rows are all it
// needs early (its later rows come by its own loads); a larger one would evict lines before use.
#define MXG_PDL_L2_FALLBACK ((size_t)50 << 20)
static inline size_t mxg_pdl_prefetch_cap(size_t l2_bytes) {
    return ((l2_bytes ? l2_bytes : MXG_PDL_L2_FALLBACK) / 8) & ~(size_t)15;
}

// Whether matmul/embed/moe_matmul have a kernel for this weight format.
bool mxg_matrix_supported(const mx_matrix *w);

// out[n, w.cols] = dequantized rows ids[n] of w (device ids).
void mxg_embed(const mxg_launch *L, float *out, const mx_matrix *w, const int32_t *ids, int n);
// out[n, w.rows] = x[n, w.cols] @ w^T (+ bias). Small n: matrix-vector kernels reading each weight
// byte once; large n: tiled kernels (vendor matrix units when L->use_mma and available).
void mxg_matmul(const mxg_launch *L, float *out, const float *x, const mx_matrix *w, const float *bias, int n);
// out[m, w.rows]: row r uses expert ids[r] and input row x[r / x_div].
void mxg_moe_matmul(const mxg_launch *L, float *out, const float *x, const mx_matrix *w,
                    const int32_t *ids, int m, int x_div);
// Vendor tensor-core product for decode batches of 2..64 tokens on affine 4/8-bit weights
// (vendor/cuda/matvec_mma.cu). Returns 0 when it enqueued the product, -1 when it has no kernel for
// this device, format or batch (the caller then uses the float32 kernels). Split-column partial
// sums go through L->scratch to a second kernel.
int mxg_matvec_mma(const mxg_launch *L, float *out, const float *x, const mx_matrix *w, const float *bias, int n);
// The same product followed by res[n, w.rows] += out (the batched "matmul + residual add" pattern of
// gpu_plan.c): the product's final writer (its store or the split-sum kernel) adds, res + out
// per element as mxg_add does. res must not alias out or x.
int mxg_matvec_mma_add(const mxg_launch *L, float *out, const float *x, const mx_matrix *w, const float *bias, int n,
                       float *res);
// The portable tiled product (no matrix units), also used when the vendor path declines.
void mxg_matmul_tiled(const mxg_launch *L, float *out, const float *x, const mx_matrix *w, const float *bias, int n);
// Vendor matrix-unit product (vendor/cuda or vendor/hip). Returns 0 when it enqueued the product,
// -1 when this device/format has no such path (the caller then uses mxg_matmul_tiled).
int mxg_matmul_mma(const mxg_launch *L, float *out, const float *x, const mx_matrix *w, const float *bias, int n);
// Bytes of L->scratch the vendor's pipelined prefill product wants when `prefill_kernel`
// (MXG_PREFILL_*) selects it (vendor/cuda/matmul_pipe.cu); 0 when it is not selected or the vendor
// has none (vendor/hip), so a ROCm backend allocates nothing for it.
size_t mxg_matmul_pipe_scratch_bytes(int prefill_kernel);
// 1 when this build has sm_90a code for the current device (the wgmma prefill product's kernel,
// vendor/cuda/matmul_wgmma.cu), else 0 (always 0 on ROCm); runs a one-thread kernel on `stream` and
// waits for it, so it is called at backend creation, never while a graph is recorded.
int mxg_wgmma_probe(void *stream);

void mxg_rmsnorm(const mxg_launch *L, float *out, const float *x, const float *w, int n, int dim, float eps);
void mxg_rope(const mxg_launch *L, float *x, const int32_t *pos, int n, int n_heads, const mx_rope *rope);

// The KV cache holds, in blocks of MX_KV_BLOCK positions, int16 codes with one float scale per
// MX_KV_SCALE_BLOCK elements of a row (L->kv_i16, the CPU backend's format and rounding) or f16
// elements, laid out [layer][block][k|v][kv_head][MX_KV_BLOCK][head_dim] (backend.h; the I16 scales
// follow in the same order; total size: mx_kv_bytes of the backend's kv_dtype), so one head's keys
// are contiguous within a block. The block of a token's position comes from the ref's block table,
// the element format is read and written by kv_block.cuh.
void mxg_kv_store(const mxg_launch *L, const mx_kv_ref *r, const float *k, const float *v, int n);
// decode: the record's hint (mx_op attention: no slot has more than MX_DECODE_SLOT_TOKENS tokens).
void mxg_attention(const mxg_launch *L, float *out, const float *q, const mx_kv_ref *r, int n, int n_heads, float scale,
                   int window, const float *sinks, bool decode);
// kernels/attn_decode.cu: the decode form of mxg_attention (flash-decoding: steps of at most 16
// tokens, or of at most 64 with the decode hint; head sizes 64, 128, 256). 0 when it enqueued the
// attention, -1 when the shape is not one it takes (the caller then runs the general kernel).
// mxg_attention calls it when L->attn_decode.
int mxg_attention_decode(const mxg_launch *L, float *out, const float *q, const mx_kv_ref *r, int n, int n_heads,
                         float scale, int window, const float *sinks, bool decode);
// vendor/cuda/attn_mma.cu: the prefill form of mxg_attention on tensor cores (sm_80+, head sizes
// 64 and 128, warps of 32). 0 when it enqueued the attention, -1 when it has no kernel for this
// device or shape (the caller then runs the general kernel). mxg_attention calls it when L->attn_mma.
int mxg_attention_mma(const mxg_launch *L, float *out, const float *q, const mx_kv_ref *r, int n, int n_heads,
                      float scale, int window, const float *sinks);
// Bytes of L->scratch that mxg_attention wants for full split parallelism (it uses fewer splits
// when given less).
size_t mxg_attention_scratch_bytes(int sm_count, int head_dim);

void mxg_swiglu(const mxg_launch *L, float *out, const float *gate, const float *up, int64_t count);
void mxg_add(const mxg_launch *L, float *x, const float *y, int64_t count);
// kernels/gemma.cu: out = gelu_tanh(gate) * up (out may alias gate); x *= scale.
void mxg_geglu(const mxg_launch *L, float *out, const float *gate, const float *up, int64_t count);
void mxg_scale(const mxg_launch *L, float *x, int64_t count, float scale);
void mxg_moe_route(const mxg_launch *L, int32_t *ids, float *weights, const float *logits, int n,
                   int n_experts, int k, bool norm_topk);
void mxg_moe_route_grouped(const mxg_launch *L, int32_t *ids, float *weights, const float *logits,
                           const float *bias, int n, int n_experts, int k, int n_group, int topk_group,
                           bool norm_topk, float scaling);
// kernels/latent.cu: multi-head latent attention (backend.h: latent_store, latent_attention).
void mxg_latent_store(const mxg_launch *L, const mx_kv_ref *kv, const float *c_kv, const float *k_pe, int n,
                      int kv_lora, int rope);
void mxg_latent_attention(const mxg_launch *L, float *out, const float *q_lat, const float *q_pe,
                          const mx_kv_ref *kv, int n, int n_heads, int kv_lora, int rope, float scale);
// kernels/gpt_oss.cu (backend.h: swiglu_clamped, expert_bias).
void mxg_swiglu_clamped(const mxg_launch *L, float *out, const float *gate, const float *up, int64_t count, float limit,
                        float alpha);
void mxg_expert_bias(const mxg_launch *L, float *x, const float *bias, const int32_t *ids, int m, int dim);
void mxg_moe_combine(const mxg_launch *L, float *out, const float *y, const float *weights, int n, int k, int dim);
void mxg_gather_rows(const mxg_launch *L, float *out, const float *x, const int32_t *rows, int n, int dim);
void mxg_argmax(const mxg_launch *L, int32_t *ids, const float *logits, int n, int vocab);

#ifdef __cplusplus
}
#endif

#endif
