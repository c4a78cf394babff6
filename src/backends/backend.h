// SPDX-License-Identifier: MIT
// The backend interface. A backend is a struct of function pointers plus its own context; the CPU
// backend is the reference and every other backend is tested against it. No backend keeps
// file-level mutable state, so two models or two devices can coexist.
//
// The engine talks to a backend in two ways:
// - Memory: alloc/release/upload/download/upload_matrix/release_matrix/sync, called directly.
// - Compute: the model describes a step as a plan, a list of op records (mx_op: a kind, its
//   buffers and its shapes), and hands it to run_plan. A backend runs the records in order, and is
//   free to fuse adjacent records it recognizes into one kernel, or to record the whole plan once
//   (a CUDA/HIP graph) and replay it. Which fusions exist is the backend's business: a new fused
//   kernel touches only that backend's files (and a test), never this header or the model code.
//
// Conventions for every record:
// - All pointers are in the backend's memory (host memory for the CPU, device memory for a GPU),
//   obtained from alloc() or from upload_matrix(). Activations are float32, row-major.
// - A plan is fixed once built: the same records, pointers and shapes every time it runs. What
//   changes from step to step (token ids, positions, slots, output rows, sampling parameters) lives
//   in backend buffers the records point at, uploaded before run_plan. So kernels read positions
//   from memory, never take them as launch parameters, and a recorded graph stays valid.
// - Work is asynchronous on devices; results are visible to download() (which synchronizes).
// - Records carry no user input: a bad argument is an internal bug (asserted), never an input error.
//   Input errors are caught at load and request time.
// - A batch is a list of n tokens; token t belongs to KV slot slot[t] at position pos[t]. Prefill,
//   decode and the server's mixed continuous batches all use the same records: attention for token
//   t reads keys 0..pos[t] of its slot (causality follows from positions).
#ifndef MX_BACKENDS_BACKEND_H
#define MX_BACKENDS_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "core/quant.h"
#include "core/sample_rows.h"

typedef struct mx_backend mx_backend;

// Positions per KV block (docs/DESIGN.md, "Paged KV cache": why 16).
#define MX_KV_BLOCK 16
// The most tokens of one KV slot in a step whose attention records are marked `decode` (mx_op): a
// decode step has one per sequence, and the engine's padding slot up to 7 at its default padding
// (generate/engine.h).
#define MX_DECODE_SLOT_TOKENS 8
// An I16 or I8 cache row (MX_DTYPE_I16, MX_DTYPE_I8) has one float scale per this many elements
// (mx_kv_bytes).
#define MX_KV_SCALE_BLOCK 16
// An I4 cache row (MX_DTYPE_I4, the CPU's opt-in --kv-bits 4: two 4-bit codes a byte) has one float
// scale per this many elements: 0.625 bytes per value (cpu_attention.c).
#define MX_KV_I4_GROUP 32
// True for the cache element types stored as integer codes with per-block float scales.
static inline bool mx_kv_scaled(mx_dtype t) { return t == MX_DTYPE_I16 || t == MX_DTYPE_I8 || t == MX_DTYPE_I4; }
// Elements per float scale of a scaled type, and the scales of a row of hd elements.
static inline int mx_kv_scale_block(mx_dtype t) { return t == MX_DTYPE_I4 ? MX_KV_I4_GROUP : MX_KV_SCALE_BLOCK; }
static inline int mx_kv_row_scales(mx_dtype t, int hd) { return (hd + mx_kv_scale_block(t) - 1) / mx_kv_scale_block(t); }
// Bytes of n consecutive cache elements (n even for I4, whose rows have an even head_dim: mx_ctx_create).
// The cache's types spelled out, not mx_dtype_size (a call): the attention kernels take it per row.
static inline size_t mx_kv_elem_bytes(mx_dtype t, size_t n) {
    if (t == MX_DTYPE_I4) return n / 2;
    if (t == MX_DTYPE_I16 || t == MX_DTYPE_F16 || t == MX_DTYPE_BF16) return 2 * n;
    return t == MX_DTYPE_I8 ? n : t == MX_DTYPE_F32 ? 4 * n : n * mx_dtype_size(t);
}

// Geometry of the KV cache; the backend chooses the element type (kv_dtype in mx_backend). The cache
// is a pool of blocks of MX_KV_BLOCK positions; a block id names the same block in every layer. The
// stored width (n_kv_heads x head_dim per position) is the layer's, not necessarily the attention's
// head count: a family that caches a compressed latent stores one "head" of the latent's width.
typedef struct mx_kv_layout {
    int n_layers;
    int n_slots;      // sequences held at once: rows of the block table
    int max_ctx;      // positions per sequence (a table row has mx_kv_table_len entries)
    int n_kv_heads;   // heads stored per position
    int head_dim;     // width of one stored head
    int n_blocks;     // blocks in the pool; 0: n_slots x mx_kv_table_len (each slot's own blocks)
} mx_kv_layout;

static inline int mx_kv_table_len(const mx_kv_layout *lay) { return (lay->max_ctx + MX_KV_BLOCK - 1) / MX_KV_BLOCK; }
static inline int mx_kv_blocks(const mx_kv_layout *lay) {
    return lay->n_blocks > 0 ? lay->n_blocks : lay->n_slots * mx_kv_table_len(lay);
}

// Where the tokens of a kv_store or attention record live in the cache: one layer of `kv`, token t
// at (slot[t], pos[t]), position p of slot s in block table[s * mx_kv_table_len + p / MX_KV_BLOCK]
// at offset p % MX_KV_BLOCK. Everything that decides where a key is stored or read is in this
// struct, read by the kv_store and attention kernels only. The table lives in backend memory and is
// uploaded before a step, so a recorded graph stays valid when sequences get new blocks.
typedef struct mx_kv_ref {
    void *kv;
    mx_kv_layout lay;
    int layer;
    const int32_t *slot;  // [n] backend memory
    const int32_t *pos;   // [n] backend memory
    const int32_t *table; // [n_slots][mx_kv_table_len] backend memory; NULL: slot s owns blocks
                          // s * mx_kv_table_len .. in order
} mx_kv_ref;

// RoPE parameters: inv_freq[rot_dim/2] lives in backend memory (computed by the engine, so llama3,
// linear and longrope scaling need no backend code). Pairs are (i, i + rot_dim/2) within the first
// rot_dim dimensions; the rest of the head passes through (Phi's partial rotary factor).
typedef struct mx_rope {
    const float *inv_freq;       // [rot_dim/2]
    int head_dim;
    float attn_factor;           // multiplies cos/sin (1.0 except yarn and longrope)
    int rot_dim;                 // rotated dimensions; 0 means head_dim
    const float *long_inv_freq;  // longrope: [rot_dim/2] used at positions >= long_from; NULL: none
    int long_from;
} mx_rope;

// The op records. Each kind's meaning is written next to its fields in mx_op. A new kind is added at
// the end of this list (before MX_OP_KIND_COUNT), with its struct in mx_op, the CPU reference in
// cpu/, every other backend's kernel, and a case in the conformance test.
typedef enum mx_op_kind {
    MX_OP_EMBED,
    MX_OP_MATMUL,
    MX_OP_RMSNORM,
    MX_OP_ROPE,
    MX_OP_KV_STORE,
    MX_OP_ATTENTION,
    MX_OP_SWIGLU,
    MX_OP_ADD,
    MX_OP_MOE_ROUTE,
    MX_OP_MOE_MATMUL,
    MX_OP_MOE_COMBINE,
    MX_OP_GATHER_ROWS,
    MX_OP_ARGMAX,
    MX_OP_SAMPLE,
    MX_OP_GEGLU,
    MX_OP_SCALE,
    MX_OP_LATENT_STORE,
    MX_OP_LATENT_ATTENTION,
    MX_OP_MOE_ROUTE_GROUPED,
    MX_OP_SWIGLU_CLAMPED,
    MX_OP_EXPERT_BIAS,
    MX_OP_KIND_COUNT
} mx_op_kind;

typedef struct mx_op {
    mx_op_kind kind;
    union {
        // out[n, dim] = dequantized rows ids[n] of the embedding matrix w [vocab, dim].
        struct { float *out; const mx_matrix *w; const int32_t *ids; int n; } embed;
        // out[n, w.rows] = x[n, w.cols] @ w^T (+ bias[w.rows] when bias != NULL).
        struct { float *out; const float *x; const mx_matrix *w; const float *bias; int n; } matmul;
        // out[n, dim] = x * rsqrt(mean(x^2) + eps) * w[dim], in float32; out may equal x.
        struct { float *out; const float *x; const float *w; int n, dim; float eps; } rmsnorm;
        // In place on x[n, n_heads, head_dim], rotate-half (pairs i, i + rot_dim/2) at positions pos[n].
        struct { float *x; const int32_t *pos; int n, n_heads; mx_rope rope; } rope;
        // Writes k, v [n, n_kv_heads, head_dim] into the cache at kv (see mx_kv_ref).
        struct { mx_kv_ref kv; const float *k, *v; int n; } kv_store;
        // out[n, n_heads, head_dim] = softmax(q k^T * scale) v over keys 0..pos[t] of slot[t] (GQA:
        // query head h reads kv head h / (n_heads / n_kv_heads)). window > 0 keeps the last `window`.
        // sinks != NULL (gpt_oss): sinks[n_heads] logits, one per query head, join the softmax's
        // denominator without a value: out = sum_p e^(s_p) v_p / (sum_p e^(s_p) + e^(sinks[h])).
        // decode: a hint, true when no KV slot has more than MX_DECODE_SLOT_TOKENS tokens in the
        // step (a decode step of several sequences, each token attending to its own context); the
        // attention is the same either way (up to float rounding), a backend may pick its kernel by it.
        struct { float *out; const float *q; mx_kv_ref kv; int n, n_heads; float scale; int window;
                 const float *sinks; bool decode; } attention;
        // out[i] = silu(gate[i]) * up[i] for i < count; out may equal gate.
        struct { float *out; const float *gate, *up; int64_t count; } swiglu;
        // x[i] += y[i].
        struct { float *x; const float *y; int64_t count; } add;
        // MoE router: probs = softmax(logits[n, n_experts]); top k per token into ids[n, k] and
        // weights[n, k] (renormalized to sum 1 when norm_topk).
        struct { int32_t *ids; float *weights; const float *logits; int n, n_experts, k; bool norm_topk; } moe_route;
        // out[m, w.rows] where row r uses expert ids[r] and input row x[r / x_div] (x_div = k for the
        // gate/up projections that read the token's hidden state, 1 for the down projection).
        struct { float *out; const float *x; const mx_matrix *w; const int32_t *ids; int m, x_div; } moe_matmul;
        // out[n, dim] += sum_j weights[n*k + j] * y[(n*k + j), dim].
        struct { float *out; const float *y, *weights; int n, k, dim; } moe_combine;
        // Copies rows: out[i, dim] = x[rows[i], dim] for i < n (rows in backend memory).
        struct { float *out; const float *x; const int32_t *rows; int n, dim; } gather_rows;
        // ids[i] = argmax over logits[i, vocab] (first maximum wins).
        struct { int32_t *ids; const float *logits; int n, vocab; } argmax;
        // out[t] = the token chosen for row t of logits[n, vocab] under rows[t] and its edits in mods
        // (core/sample_rows.h: edits, allowed-token mask, greedy or filters + one uniform draw keyed
        // by (seed, pos), raw logprobs). rows, mods and the rows' masks are in
        // backend memory. The logits are edited in place.
        struct { mx_sample_out *out; float *logits; int n, vocab; const mx_sample_row *rows; const mx_logit_mod *mods; } sample;
        // out[i] = gelu_tanh(gate[i]) * up[i] for i < count (Gemma's MLP), with gelu_tanh(g) =
        // 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))); out may equal gate.
        struct { float *out; const float *gate, *up; int64_t count; } geglu;
        // x[i] *= scale for i < count (Gemma's embedding scale).
        struct { float *x; int64_t count; float scale; } scale;
        // Multi-head latent attention (DeepSeek-V3) keeps one latent row of W = kv_lora + rope values
        // per position instead of per-head keys and values: the cache of kv.lay has one KV head of
        // head_dim W / 2, whose K row holds the first half of the latent row and whose V row the
        // second. latent_store writes row [c_kv[t] | k_pe[t]] for token t (c_kv [n, kv_lora], k_pe
        // [n, rope]) at (slot[t], pos[t]).
        struct { mx_kv_ref kv; const float *c_kv, *k_pe; int n, kv_lora, rope; } latent_store;
        // out[n, n_heads, kv_lora] = sum over keys p in 0..pos[t] of slot[t] of
        // softmax_p(scale * (q_lat[t, h] . c_kv[p] + q_pe[t, h] . k_pe[p])) * c_kv[p], with q_lat
        // [n, n_heads, kv_lora] and q_pe [n, n_heads, rope]: attention in the absorbed form (the
        // per-head key up-projection is folded into q_lat, the value one is applied to out later).
        struct { float *out; const float *q_lat, *q_pe; mx_kv_ref kv; int n, n_heads, kv_lora, rope; float scale; } latent_attention;
        // DeepSeek-V3 routing (noaux_tc): s = sigmoid(logits[n, n_experts]), c = s + bias[n_experts];
        // the experts form n_group equal groups ranked by the sum of their two largest c, experts
        // outside the topk_group best groups get c = 0; the k largest c give ids[n, k] (first index
        // wins ties), their weights are s (divided by their sum + 1e-20 when norm_topk) * scaling.
        struct { int32_t *ids; float *weights; const float *logits, *bias; int n, n_experts, k, n_group, topk_group;
                 bool norm_topk; float scaling; } moe_route_grouped;
        // gpt_oss's clamped SwiGLU: g = min(gate[i], limit), u = clamp(up[i], -limit, limit),
        // out[i] = g * sigmoid(alpha * g) * (u + 1) for i < count; out may equal gate.
        struct { float *out; const float *gate, *up; int64_t count; float limit, alpha; } swiglu_clamped;
        // Per-expert bias of MoE rows: x[r, dim] += bias[ids[r], dim] for r < m (bias [n_experts, dim]),
        // for the outputs of moe_matmul records whose experts have biases (gpt_oss).
        struct { float *x; const float *bias; const int32_t *ids; int m, dim; } expert_bias;
    };
} mx_op;

// A step as a list of records. `id` is unique in the process and never reused, so whatever a
// backend keeps per plan (a recorded graph) can never be found by another plan, even one built at
// the same address after this one was freed. Build with plan.h; never edit a plan after it ran.
typedef struct mx_plan {
    uint64_t id;
    mx_op *ops;
    int n_ops, cap_ops;
    bool failed;  // a record could not be added (out of memory); the plan must not run
} mx_plan;

typedef struct mx_backend_ops {
    const char *name;  // "cpu", "cuda", "rocm"
    void (*destroy)(mx_backend *be);

    // Memory. alloc returns zeroed memory or NULL (error written to err).
    void *(*alloc)(mx_backend *be, size_t bytes, mx_error *err);
    void (*release)(mx_backend *be, void *ptr);
    int (*upload)(mx_backend *be, void *dst, const void *src, size_t bytes, mx_error *err);
    int (*download)(mx_backend *be, void *dst, const void *src, size_t bytes, mx_error *err);
    // Copies `count` runs of `bytes` within backend memory, run i from src + i * stride to
    // dst + i * stride (runs do not overlap). Queued in order with the plans, like upload; the KV
    // cache copies one block of every layer with it (a copy-on-write of a shared block).
    int (*copy_runs)(mx_backend *be, void *dst, const void *src, size_t bytes, size_t count, size_t stride,
                     mx_error *err);
    // Makes a backend copy of a host matrix (host pointers in `host`); out gets backend pointers.
    // The CPU backend may keep pointing at the mapped file when alignment allows.
    int (*upload_matrix)(mx_backend *be, const mx_matrix *host, mx_matrix *out, mx_error *err);
    void (*release_matrix)(mx_backend *be, mx_matrix *m);
    // Whether a record of this kind has a kernel for the weight format (MX_OP_EMBED, MX_OP_MATMUL,
    // MX_OP_MOE_MATMUL); other kinds answer true when the backend implements them.
    bool (*supports)(mx_backend *be, mx_op_kind kind, const mx_matrix *w);
    // Waits for queued work; returns -1 with a message if the device reported an error.
    int (*sync)(mx_backend *be, mx_error *err);

    // Enqueues the records of `plan` in order (fusing or replaying a recording as it sees fit; the
    // results are those of running the records one by one). Returns -1 with a message only for
    // what the backend cannot do (a kind it lacks, a recording that failed to start).
    int (*run_plan)(mx_backend *be, const mx_plan *plan, mx_error *err);
    // Optional (NULL when the backend keeps nothing per plan): forget what is kept for plan `id`.
    // Called by mx_plan_free before the plan's buffers may be released.
    void (*plan_release)(mx_backend *be, uint64_t id);

    // Optional (NULL: unknown). Memory the backend allocates from: bytes free for new allocations
    // now and in total (host memory for the CPU, device memory for a GPU). Returns 0 or -1.
    int (*mem_info)(mx_backend *be, size_t *free_bytes, size_t *total_bytes);
    // True when the weights live in the memory mem_info describes as mapped files (CPU), so they
    // count against its total but not against what is free for allocations.
    bool weights_mapped;
} mx_backend_ops;

// Plan runs by how the backend ran them, counted by its run_plan (the engine's stats and the server's
// /metrics report the part its steps ran). A GPU backend replays a recorded graph (the plan ran
// before), records one (a plan's second run) or enqueues the records one by one (a plan's first run,
// recording off or failed); the CPU backend runs every plan directly. device_seconds: the device's
// time from the start of the first plan run to the end of the last one before each sync, summed
// (GPU backends with MLXCEL_GPU_PLAN_TIMES=1, timed by events; otherwise 0).
typedef struct mx_plan_runs {
    uint64_t replayed, recorded, direct;
    double device_seconds;
} mx_plan_runs;

struct mx_backend {
    const mx_backend_ops *ops;
    void *ctx;           // backend-private state
    mx_plan_runs plan_runs;  // counted by run_plan (see mx_plan_runs)
    mx_dtype kv_dtype;   // element type of the KV cache this backend stores (F32, BF16, F16; I16 = int16 and
                         // I8 = int8 with one float scale per MX_KV_SCALE_BLOCK elements of a row, I4 = 4-bit
                         // codes with one per MX_KV_I4_GROUP, mx_kv_bytes)
    char device_name[128];
};

// Backend registry: "cpu" always; "cuda"/"rocm" when built in. `threads` <= 0 means all cores.
typedef struct mx_backend_options {
    const char *name;   // NULL or "auto": the GPU when present and usable, else the CPU
    int threads;
    int device_index;
    int kv_bits;        // KV cache codes (--kv-bits): 0 the backend's default, 16 int16, 8 int8, 4 (CPU only; a
                        // backend without it refuses to start rather than ignore it)
} mx_backend_options;

mx_backend *mx_backend_create(const mx_backend_options *opt, mx_error *err);
void mx_backend_free(mx_backend *be);
// Names of the backends compiled in, comma separated ("cpu,cuda").
const char *mx_backend_compiled(void);

// KV cache size in bytes for a layout and element type: [layer][block][K|V][kv_head][MX_KV_BLOCK][head_dim]
// elements, then for I16, I8 and I4 their scales, [layer][block][K|V][kv_head][MX_KV_BLOCK][mx_kv_row_scales]
// floats (the same layout and quantization on every backend: cpu_attention.c).
// SIZE_MAX when the size does not fit a size_t (a context creation refuses it).
size_t mx_kv_bytes(const mx_kv_layout *lay, mx_dtype kv_dtype);

#endif
