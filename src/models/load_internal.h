// SPDX-License-Identifier: MIT
// The loader's shared helpers, private to src/models/: each reads one kind of weight from the
// model's safetensors (names under the config's tensor prefix), validates it (load_format.c),
// uploads it to the backend and records what the model must give back when freed. Every function
// returns 0, or -1 with err naming the tensor and what was wrong.
#ifndef MX_MODELS_LOAD_INTERNAL_H
#define MX_MODELS_LOAD_INTERNAL_H

#include "models/model_internal.h"

// Bookkeeping (load_tensors.c): a host buffer or a backend buffer that lives until mx_model_free.
int mx_load_keep_host(mx_model *m, void *p, mx_error *err);
int mx_load_keep_backend(mx_model *m, void *p, mx_error *err);
// The tensor `<prefix><path><suffix>` or NULL (the prefix is "language_model." for multimodal
// Gemma 3 checkpoints).
const mx_st_tensor *mx_load_find(const mx_model *m, const char *path, const char *suffix);

// config.json's sizes against the weights' shapes before anything is sized from them (load_check.c):
// the last layer exists, and the embedding and the first layers' projections agree with the
// fields, or err names the field and the tensor.
int mx_load_check_config(const mx_model *m, mx_error *err);
// Formats (load_format.c): fails naming both shapes unless t has shape want[0..ndim).
int mx_load_check_shape(const mx_st_tensor *t, int ndim, const int64_t *want, mx_error *err);
// The tensors of `path` (.weight and, when quantized, .scales/.biases) as a validated host matrix of
// n_exp stacked experts (1: a plain matrix) of [rows, cols]; the data stays in the mapped file.
int mx_load_describe_matrix(const mx_model *m, const char *path, int64_t n_exp, int64_t rows, int64_t cols,
                            mx_matrix *w, mx_error *err);

// Uploads (load_tensors.c). A host matrix to the backend, counted in the model's parameters.
int mx_load_upload(mx_model *m, const mx_matrix *host, mx_matrix *dst, mx_error *err);
// The matrix `path` [rows, cols], described and uploaded.
int mx_load_matrix(mx_model *m, const char *path, int64_t rows, int64_t cols, mx_matrix *dst, mx_error *err);
// The experts' projection `proj` of `mlp` as one stacked [n_exp, rows, cols] matrix.
int mx_load_experts(mx_model *m, const char *mlp, const char *proj, int64_t n_exp, int64_t rows, int64_t cols,
                    mx_matrix *dst, mx_error *err);
// A float vector [len] as float32 on the backend; a missing optional one leaves *dst NULL.
int mx_load_vector(mx_model *m, const char *name, int64_t len, bool required, const float **dst, mx_error *err);
// A float table [rows, cols] read from [rows, cols * step] at column offset `offset` every `step`.
int mx_load_table(mx_model *m, const char *name, int64_t rows, int64_t cols, int step, int offset, const float **dst,
                  mx_error *err);
// An RMSNorm weight: stored as 1 + w for Gemma, w otherwise.
int mx_load_norm(mx_model *m, const char *name, int64_t len, bool required, const float **dst, mx_error *err);
// Rows [r0, r0 + n) of a (non-expert) host matrix, as a view into the same bytes.
mx_matrix mx_matrix_row_range(const mx_matrix *w, int64_t r0, int64_t n);
// The fused matrix `path` [sum of rows, cols] split by rows into n_parts uploaded matrices.
int mx_load_split_rows(mx_model *m, const char *path, int64_t cols, int n_parts, const int64_t *rows, mx_matrix **dst,
                       mx_error *err);

// The parts of a layer `p` ("model.layers.<i>"): per-head attention (load_attention.c), latent
// attention (load_latent.c) and gpt_oss's experts under `mlp` (load_gpt_oss.c).
int mx_load_attention(mx_model *m, const mx_family *fam, const char *p, mx_layer *L, mx_error *err);
int mx_load_latent_attention(mx_model *m, const char *p, mx_layer *L, mx_error *err);
int mx_load_gpt_oss_moe(mx_model *m, const mx_family *fam, const char *mlp, mx_layer *L, mx_error *err);

#endif
