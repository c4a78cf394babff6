// SPDX-License-Identifier: MIT
// Host references and random inputs for the GPU op tests: plain loops in double precision written
// from backend.h's op contracts. Weights are dequantized by the tests' own dequantizer written from
// the format description (tests/unit/format_ref.h), not by the library's, so a format misread shared
// by the library and its kernels still fails. Slow and obvious on purpose.
#ifndef MX_TESTS_GPU_REF_H
#define MX_TESTS_GPU_REF_H

#include <stdbool.h>
#include <stdint.h>

#include "backends/backend.h"

typedef struct ref_rng {
    uint64_t s;
} ref_rng;

uint64_t ref_next(ref_rng *r);
float ref_uniform(ref_rng *r, float lo, float hi);
void ref_fill(ref_rng *r, float *x, int64_t n, float lo, float hi);

// A random host matrix of the given format (owned buffers inside; free with ref_matrix_free).
// Scales keep values moderate so products stay in a sane range.
mx_matrix ref_matrix_random(ref_rng *r, mx_quant q, mx_dtype dtype, mx_dtype scale_dtype, int64_t experts,
                            int64_t rows, int64_t cols);
void ref_matrix_free(mx_matrix *m);
const char *ref_matrix_label(const mx_matrix *m, char *buf, int cap);

// The scales of one output's rounding error, for per-element bounds: abs = sum |w_j x_j| (+ |bias|);
// eval = sum |x_j| mag_j (+ |bias|), mag_j being the weight's evaluation magnitude (format_ref.h).
typedef struct ref_scale {
    double abs, eval;
} ref_scale;

// out[n, rows] = x[n, cols] W^T (+ bias); scale[n, rows] (may be NULL). With round_bf16 the
// activations and dequantized weights are first rounded to bfloat16 (nearest, ties to even), as
// the tensor-core path documents it does: the expected size of that path's error.
void ref_matmul(float *out, ref_scale *scale, const float *x, const mx_matrix *w, const float *bias, int n,
                bool round_bf16);
void ref_moe_matmul(float *out, ref_scale *scale, const float *x, const mx_matrix *w, const int32_t *ids, int m,
                    int x_div);
// mag[n, cols] (may be NULL): each element's evaluation magnitude.
void ref_embed(float *out, double *mag, const mx_matrix *w, const int32_t *ids, int n);
void ref_rmsnorm(float *out, const float *x, const float *w, int n, int dim, float eps);
void ref_rope(float *x, const int32_t *pos, int n, int n_heads, const float *inv_freq, int head_dim, float attn_factor);
// Rounds one cache row of hd values in place as a cache of element type dt stores it: F16/BF16 to
// nearest even; I16 (backend.h, mx_kv_bytes) per chunk of MX_KV_SCALE_BLOCK values, s = max|x| /
// 32767 and x = round(x * (32767 / max|x|)) * s, written here from that description.
void ref_kv_round(float *row, int hd, mx_dtype dt);
// k/v_cache: host copies [slot][pos][kv_head][head_dim] (already rounded like the device cache).
void ref_attention(float *out, const float *q, const float *k_cache, const float *v_cache, int max_ctx,
                   int n_kv_heads, int head_dim, const int32_t *slot, const int32_t *pos, int n, int n_heads,
                   float scale, int window);
// probs = softmax(logits[n, n_experts]) in double; the k best per token into ids[n, k] and weights[n, k]
// (renormalized when norm). NaN probabilities (from NaN or infinite logits) rank above numbers, so each
// pass takes the first expert not yet taken, like the backends.
void ref_moe_route(int32_t *ids, float *weights, const float *logits, int n, int n_experts, int k, bool norm);

// ||a - b|| / ||b|| (NaN anywhere gives +inf), and max |a - b|.
double ref_rel_err(const float *a, const float *b, int64_t n);

#endif
