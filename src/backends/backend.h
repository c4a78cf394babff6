// SPDX-License-Identifier: MIT
// The backend interface: the small set of ops a model family is written against. A backend is a
// struct of function pointers plus its own context; the CPU backend is the reference and every
// other backend is tested op by op against it. No backend keeps file-level mutable state, so two
// models or two devices can coexist.
//
// Conventions for every op:
// - All pointers are in the backend's memory (host memory for the CPU, device memory for a GPU),
//   obtained from alloc() or from upload_matrix(). Activations are float32, row-major.
// - Ops are asynchronous on devices; results are visible to download() (which synchronizes).
// - Ops return nothing: arguments come from the engine, not from users, so a bad argument is an
//   internal bug (asserted), never an input error. Input errors are caught at load and request time.
// - A batch is a list of n tokens; token t belongs to KV slot slot[t] at position pos[t]. Prefill,
//   decode and the server's mixed continuous batches all use the same ops: attention for token t
//   reads keys 0..pos[t] of its slot (causality follows from positions).
#ifndef MX_BACKENDS_BACKEND_H
#define MX_BACKENDS_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "core/quant.h"

typedef struct mx_backend mx_backend;

// Optional fused ops may be NULL; supports() tells the engine whether an op/format pair has a kernel
// so it can route the rest to a general path.
typedef enum mx_backend_op {
    MX_OP_MATMUL,      // format given by the matrix
    MX_OP_MOE_MATMUL,
} mx_backend_op;

// Geometry of the KV cache; the backend chooses the element type (kv_dtype in mx_backend).
typedef struct mx_kv_layout {
    int n_layers;
    int n_slots;      // sequences held at once
    int max_ctx;      // positions per slot
    int n_kv_heads;
    int head_dim;
} mx_kv_layout;

// RoPE parameters: inv_freq[head_dim/2] lives in backend memory (computed by the engine, so llama3
// and linear scaling need no backend code).
typedef struct mx_rope {
    const float *inv_freq;  // [head_dim/2]
    int head_dim;
    float attn_factor;      // multiplies cos/sin (1.0 except yarn)
} mx_rope;

// Sampling parameters as a backend reads them: a small struct in backend memory, so a recorded graph
// picks up new values. Filters act on the temperature-1 probabilities (top-p, min-p, top-k, as
// mlx-lm orders them; together they keep the intersection), then the token is drawn at `temp`.
typedef struct mx_sample_params {
    float temp;     // > 0
    float top_p;    // 1: off
    float min_p;    // 0: off
    int32_t top_k;  // 0: off
    uint64_t seed;
} mx_sample_params;

typedef struct mx_backend_ops {
    const char *name;  // "cpu", "cuda", "rocm"
    void (*destroy)(mx_backend *be);

    // Memory. alloc returns zeroed memory or NULL (error written to err).
    void *(*alloc)(mx_backend *be, size_t bytes, mx_error *err);
    void (*release)(mx_backend *be, void *ptr);
    int (*upload)(mx_backend *be, void *dst, const void *src, size_t bytes, mx_error *err);
    int (*download)(mx_backend *be, void *dst, const void *src, size_t bytes, mx_error *err);
    // Makes a backend copy of a host matrix (host pointers in `host`); out gets backend pointers.
    // The CPU backend may keep pointing at the mapped file when alignment allows.
    int (*upload_matrix)(mx_backend *be, const mx_matrix *host, mx_matrix *out, mx_error *err);
    void (*release_matrix)(mx_backend *be, mx_matrix *m);
    bool (*supports)(mx_backend *be, mx_backend_op op, const mx_matrix *w);

    // out[n, dim] = dequantized rows ids[n] of the embedding matrix w [vocab, dim].
    void (*embed)(mx_backend *be, float *out, const mx_matrix *w, const int32_t *ids, int n);
    // out[n, w.rows] = x[n, w.cols] @ w^T (+ bias[w.rows] when bias != NULL).
    void (*matmul)(mx_backend *be, float *out, const float *x, const mx_matrix *w, const float *bias, int n);
    // out[n, dim] = x * rsqrt(mean(x^2) + eps) * w[dim], in float32; out may equal x.
    void (*rmsnorm)(mx_backend *be, float *out, const float *x, const float *w, int n, int dim, float eps);
    // In place on x[n, n_heads, head_dim], rotate-half (pairs i, i + head_dim/2) at positions pos[n].
    void (*rope)(mx_backend *be, float *x, const int32_t *pos, int n, int n_heads, const mx_rope *rope);
    // Writes k, v [n, n_kv_heads, head_dim] into layer `layer` of the cache at (slot[t], pos[t]).
    void (*kv_store)(mx_backend *be, void *kv, const mx_kv_layout *lay, int layer, const float *k,
                     const float *v, const int32_t *slot, const int32_t *pos, int n);
    // out[n, n_heads, head_dim] = softmax(q k^T * scale) v over keys 0..pos[t] of slot[t] (GQA: query
    // head h reads kv head h / (n_heads / n_kv_heads)). window > 0 limits keys to the last `window`.
    void (*attention)(mx_backend *be, float *out, const float *q, const void *kv, const mx_kv_layout *lay,
                      int layer, const int32_t *slot, const int32_t *pos, int n, int n_heads,
                      float scale, int window);
    // out[i] = silu(gate[i]) * up[i] for i < count; out may equal gate.
    void (*swiglu)(mx_backend *be, float *out, const float *gate, const float *up, int64_t count);
    // x[i] += y[i].
    void (*add)(mx_backend *be, float *x, const float *y, int64_t count);
    // MoE router: probs = softmax(logits[n, n_experts]); top k per token into ids[n, k] and
    // weights[n, k] (renormalized to sum 1 when norm_topk).
    void (*moe_route)(mx_backend *be, int32_t *ids, float *weights, const float *logits, int n,
                      int n_experts, int k, bool norm_topk);
    // out[m, w.rows] where row r uses expert ids[r] and input row x[r / x_div] (x_div = k for the
    // gate/up projections that read the token's hidden state, 1 for the down projection).
    void (*moe_matmul)(mx_backend *be, float *out, const float *x, const mx_matrix *w,
                       const int32_t *ids, int m, int x_div);
    // out[n, dim] += sum_j weights[n*k + j] * y[(n*k + j), dim].
    void (*moe_combine)(mx_backend *be, float *out, const float *y, const float *weights, int n, int k, int dim);
    // Copies rows: out[i, dim] = x[rows[i], dim] for i < n (rows in host memory: it is engine data).
    void (*gather_rows)(mx_backend *be, float *out, const float *x, const int32_t *rows_host, int n, int dim);
    // ids[i] = argmax over logits[i, vocab] (first maximum wins).
    void (*argmax)(mx_backend *be, int32_t *ids, const float *logits, int n, int vocab);
    // Waits for queued work; returns -1 with a message if the device reported an error.
    int (*sync)(mx_backend *be, mx_error *err);

    // Optional graph capture (NULL when unsupported, e.g. on the CPU). The engine brackets the ops
    // of one decode step with graph_begin/graph_end to record them under `key`, and later replays
    // them with graph_launch instead of issuing the ops again. Every pointer and size is identical
    // on replay; only the contents of backend buffers (token ids, positions, slots) change, so
    // kernels must read positions from memory rather than take them as launch parameters.
    // graph_launch returns false when nothing is recorded under key; graph_end failing leaves no
    // graph (the engine then issues ops directly).
    int (*graph_begin)(mx_backend *be, mx_error *err);
    int (*graph_end)(mx_backend *be, int key, mx_error *err);
    bool (*graph_launch)(mx_backend *be, int key);

    // Optional (NULL: the engine downloads logits and samples on the host). ids[t] = a token drawn
    // from logits[t, vocab] under *params (backend memory) by the Gumbel-max rule over the tokens the
    // filters keep, with noise from a counter-based generator keyed by (seed, pos[t], token id)
    // (src/core/sample_noise.h), so the same seed and positions draw the same tokens.
    void (*sample)(mx_backend *be, int32_t *ids, const float *logits, int n, int vocab,
                   const mx_sample_params *params, const int32_t *pos);
} mx_backend_ops;

struct mx_backend {
    const mx_backend_ops *ops;
    void *ctx;           // backend-private state
    mx_dtype kv_dtype;   // element type of the KV cache this backend stores (F32, BF16, F16)
    char device_name[128];
};

// Backend registry: "cpu" always; "cuda"/"rocm" when built in. `threads` <= 0 means all cores.
typedef struct mx_backend_options {
    const char *name;   // NULL or "auto": the GPU when present and usable, else the CPU
    int threads;
    int device_index;
} mx_backend_options;

mx_backend *mx_backend_create(const mx_backend_options *opt, mx_error *err);
void mx_backend_free(mx_backend *be);
// Names of the backends compiled in, comma separated ("cpu,cuda").
const char *mx_backend_compiled(void);

// KV cache size in bytes for a layout and element type.
size_t mx_kv_bytes(const mx_kv_layout *lay, mx_dtype kv_dtype);

#endif
