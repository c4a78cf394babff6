// SPDX-License-Identifier: MIT
// The loader's building blocks: tensor lookup under the config's prefix, the list of buffers the
// model gives back when freed, and the upload of one kind of weight each: a matrix, stacked
// experts (stacked or per-expert tensors), a float vector, a float table and an RMSNorm weight,
// plus the row ranges that split fused projections. Every one validates through load_format.c.
#include <stdlib.h>
#include <string.h>

#include "models/load_internal.h"

#define GROW(arr, n, cap)                                                    \
    do {                                                                     \
        if ((n) == (cap)) {                                                  \
            int nc = (cap) ? 2 * (cap) : 64;                                 \
            void *g = realloc((arr), (size_t)nc * sizeof *(arr));            \
            if (!g) return mx_fail(err, "out of memory");                    \
            (arr) = g;                                                       \
            (cap) = nc;                                                      \
        }                                                                    \
    } while (0)

int mx_load_keep_host(mx_model *m, void *p, mx_error *err) {
    GROW(m->host_bufs, m->n_host_bufs, m->cap_host_bufs);
    m->host_bufs[m->n_host_bufs++] = p;
    return 0;
}

int mx_load_keep_backend(mx_model *m, void *p, mx_error *err) {
    GROW(m->backend_bufs, m->n_backend_bufs, m->cap_backend_bufs);
    m->backend_bufs[m->n_backend_bufs++] = p;
    return 0;
}

static int keep_matrix(mx_model *m, mx_matrix *w, mx_error *err) {
    GROW(m->matrices, m->n_matrices, m->cap_matrices);
    m->matrices[m->n_matrices++] = w;
    return 0;
}

// Tensor lookup under the config's prefix ("language_model." for multimodal Gemma 3 checkpoints).
const mx_st_tensor *mx_load_find(const mx_model *m, const char *fmt_path, const char *suffix) {
    char name[600];
    snprintf(name, sizeof name, "%s%s%s", m->cfg.tensor_prefix, fmt_path, suffix);
    return mx_st_find(m->st, name);
}

int mx_load_upload(mx_model *m, const mx_matrix *host, mx_matrix *dst, mx_error *err) {
    if (m->be->ops->upload_matrix(m->be, host, dst, err) != 0) return -1;
    m->n_params += host->n_experts * host->rows * host->cols;
    m->weight_bytes += mx_matrix_data_bytes(host) + 2 * mx_matrix_scale_bytes(host) * (host->biases != NULL) +
                       mx_matrix_scale_bytes(host) * (host->biases == NULL);
    return keep_matrix(m, dst, err);
}

int mx_load_matrix(mx_model *m, const char *path, int64_t rows, int64_t cols, mx_matrix *dst, mx_error *err) {
    mx_matrix host;
    if (mx_load_describe_matrix(m, path, 1, rows, cols, &host, err)) return -1;
    return mx_load_upload(m, &host, dst, err);
}

// Experts: stacked `<mlp>.switch_mlp.<proj>` (MLX; gpt_oss: `<mlp>.experts.<proj>`) or per-expert
// `<mlp>.experts.<e>.<proj>` (Hub), which are copied into one stacked host buffer.
int mx_load_experts(mx_model *m, const char *mlp, const char *proj, int64_t n_exp, int64_t rows, int64_t cols,
                    mx_matrix *dst, mx_error *err) {
    char path[512];
    mx_matrix host;
    static const char *const stacks[] = {"switch_mlp", "experts"};
    for (int k = 0; k < 2; k++) {
        snprintf(path, sizeof path, "%s.%s.%s", mlp, stacks[k], proj);
        if (!mx_load_find(m, path, ".weight")) continue;
        if (mx_load_describe_matrix(m, path, n_exp, rows, cols, &host, err)) return -1;
        return mx_load_upload(m, &host, dst, err);
    }
    mx_matrix one;
    uint8_t *data = NULL, *scales = NULL, *biases = NULL;
    // Every expert is found and validated before the stacked buffer (n_exp of them) is allocated.
    for (int64_t e = 0; e < n_exp; e++) {
        snprintf(path, sizeof path, "%s.experts.%lld.%s", mlp, (long long)e, proj);
        if (!mx_load_find(m, path, ".weight"))
            return mx_fail(err, "missing tensor '%s.switch_mlp.%s.weight' (or per-expert '%s.weight')", mlp, proj, path);
        if (mx_load_describe_matrix(m, path, 1, rows, cols, &one, err)) return -1;
    }
    for (int64_t e = 0; e < n_exp; e++) {
        snprintf(path, sizeof path, "%s.experts.%lld.%s", mlp, (long long)e, proj);
        if (mx_load_describe_matrix(m, path, 1, rows, cols, &one, err)) return -1;
        size_t db = (size_t)mx_matrix_data_bytes(&one), sb = (size_t)mx_matrix_scale_bytes(&one);
        if (e == 0) {
            host = one;
            host.n_experts = n_exp;
            data = malloc(db * n_exp);
            if (!data || mx_load_keep_host(m, data, err)) return mx_fail(err, "out of memory stacking experts of '%s'", mlp);
            if (one.scales) {
                scales = malloc(sb * n_exp);
                if (!scales || mx_load_keep_host(m, scales, err)) return mx_fail(err, "out of memory");
            }
            if (one.biases) {
                biases = malloc(sb * n_exp);
                if (!biases || mx_load_keep_host(m, biases, err)) return mx_fail(err, "out of memory");
            }
        } else if (one.q.mode != host.q.mode || one.q.bits != host.q.bits || one.dtype != host.dtype ||
                   one.scale_dtype != host.scale_dtype) {
            return mx_fail(err, "'%s': experts of one layer must share a format", path);
        }
        memcpy(data + e * db, one.data, db);
        if (scales) memcpy(scales + e * sb, one.scales, sb);
        if (biases) memcpy(biases + e * sb, one.biases, sb);
    }
    host.data = data;
    host.scales = scales;
    host.biases = biases;
    return mx_load_upload(m, &host, dst, err);
}

// A float vector (norm weight or Linear bias) converted to float32 on the backend, plus `add` on
// every element (Gemma's norms scale by 1 + w; adding once at load is the same float32 value).
static int load_vector_add(mx_model *m, const char *name, int64_t len, bool required, float add, const float **dst,
                           mx_error *err) {
    *dst = NULL;
    const mx_st_tensor *t = mx_load_find(m, name, "");
    if (!t) return required ? mx_fail(err, "missing tensor '%s%s'", m->cfg.tensor_prefix, name) : 0;
    if (!mx_dtype_is_float(t->dtype))
        return mx_fail(err, "tensor '%s' has dtype %s, expected BF16, F16 or F32", name, mx_dtype_name(t->dtype));
    if (t->ndim != 1 || t->shape[0] != len)
        return mx_fail(err, "tensor '%s' has %d dims / %lld elements, expected [%lld]", name, t->ndim,
                       (long long)(t->ndim ? t->shape[0] : 0), (long long)len);
    float *host = malloc(sizeof(float) * len);
    if (!host) return mx_fail(err, "out of memory");
    for (int64_t i = 0; i < len; i++) host[i] = mx_load_float(t->data, t->dtype, i) + add;
    float *dev = m->be->ops->alloc(m->be, sizeof(float) * len, err);
    int rc = dev ? m->be->ops->upload(m->be, dev, host, sizeof(float) * len, err) : -1;
    free(host);
    if (!dev) return -1;
    if (mx_load_keep_backend(m, dev, err)) return -1;
    if (rc) return -1;
    m->n_params += len;
    m->weight_bytes += len * (int64_t)mx_dtype_size(t->dtype);
    *dst = dev;
    return 0;
}

int mx_load_vector(mx_model *m, const char *name, int64_t len, bool required, const float **dst, mx_error *err) {
    return load_vector_add(m, name, len, required, 0.0f, dst, err);
}

// A float table [rows, cols] (the biases of stacked experts) converted to float32 on the backend.
// Element (r, c) is read at r * cols * step + c * step + offset of the tensor [rows, cols * step]:
// step 2 with offset 0 or 1 takes the even or odd columns (the Hub layout's interleaved
// gate_up_proj_bias of gpt_oss holds gate and up alternately).
int mx_load_table(mx_model *m, const char *name, int64_t rows, int64_t cols, int step, int offset, const float **dst,
                  mx_error *err) {
    const mx_st_tensor *t = mx_load_find(m, name, "");
    if (!t) return mx_fail(err, "missing tensor '%s%s'", m->cfg.tensor_prefix, name);
    if (!mx_dtype_is_float(t->dtype))
        return mx_fail(err, "tensor '%s' has dtype %s, expected BF16, F16 or F32", name, mx_dtype_name(t->dtype));
    int64_t want[2] = {rows, cols * step};
    if (mx_load_check_shape(t, 2, want, err)) return -1;
    float *host = malloc(sizeof(float) * (size_t)(rows * cols));
    if (!host) return mx_fail(err, "out of memory");
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) host[r * cols + c] = mx_load_float(t->data, t->dtype, r * cols * step + c * step + offset);
    size_t bytes = sizeof(float) * (size_t)(rows * cols);
    float *dev = m->be->ops->alloc(m->be, bytes, err);
    int rc = dev ? m->be->ops->upload(m->be, dev, host, bytes, err) : -1;
    free(host);
    if (!dev) return -1;
    if (mx_load_keep_backend(m, dev, err) || rc) return -1;
    m->n_params += rows * cols;
    m->weight_bytes += rows * cols * (int64_t)mx_dtype_size(t->dtype);
    *dst = dev;
    return 0;
}

// An RMSNorm weight: (1 + w) for Gemma, w otherwise.
int mx_load_norm(mx_model *m, const char *name, int64_t len, bool required, const float **dst, mx_error *err) {
    return load_vector_add(m, name, len, required, m->family->gemma ? 1.0f : 0.0f, dst, err);
}

// Rows [r0, r0 + n) of a (non-expert) host matrix: quantization is per row, so a row range is a
// plain offset into data, scales and biases.
mx_matrix mx_matrix_row_range(const mx_matrix *w, int64_t r0, int64_t n) {
    mx_matrix s = *w;
    int64_t groups = w->q.mode == MX_QUANT_NONE ? 0 : w->cols / w->q.group_size;
    int64_t sb = groups * (int64_t)mx_dtype_size(w->scale_dtype);
    s.rows = n;
    s.data = (const uint8_t *)w->data + r0 * mx_matrix_row_bytes(w);
    if (w->scales) s.scales = (const uint8_t *)w->scales + r0 * sb;
    if (w->biases) s.biases = (const uint8_t *)w->biases + r0 * sb;
    return s;
}

// Phi-3's fused projections, split by rows into the separate matrices of the other families.
int mx_load_split_rows(mx_model *m, const char *path, int64_t cols, int n_parts, const int64_t *rows, mx_matrix **dst,
                       mx_error *err) {
    int64_t total = 0;
    for (int k = 0; k < n_parts; k++) total += rows[k];
    mx_matrix host;
    if (mx_load_describe_matrix(m, path, 1, total, cols, &host, err)) return -1;
    int64_t r0 = 0;
    for (int k = 0; k < n_parts; k++) {
        mx_matrix part = mx_matrix_row_range(&host, r0, rows[k]);
        if (mx_load_upload(m, &part, dst[k], err)) return -1;
        r0 += rows[k];
    }
    return 0;
}
