// SPDX-License-Identifier: MIT
// Loading a model folder: config, tensors, validation against the architecture, upload to the
// backend. One loader serves every family: the family table (family.h) says which optional tensors
// a layer must have (q/k norms, attention biases) and whether its MLP is a mixture of experts.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "io/json_text.h"
#include "io/mapped_file.h"
#include "models/family.h"
#include "models/model_internal.h"

const char *mx_model_supported_types(void) { return mx_family_names(true); }

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

static int keep_host(mx_model *m, void *p, mx_error *err) {
    GROW(m->host_bufs, m->n_host_bufs, m->cap_host_bufs);
    m->host_bufs[m->n_host_bufs++] = p;
    return 0;
}

static int keep_backend(mx_model *m, void *p, mx_error *err) {
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
static const mx_st_tensor *find_tensor(const mx_model *m, const char *fmt_path, const char *suffix) {
    char name[600];
    snprintf(name, sizeof name, "%s%s%s", m->cfg.tensor_prefix, fmt_path, suffix);
    return mx_st_find(m->st, name);
}

static bool is_float_dtype(mx_dtype t) { return t == MX_DTYPE_BF16 || t == MX_DTYPE_F16 || t == MX_DTYPE_F32; }

static int check_shape(const mx_st_tensor *t, int ndim, const int64_t *want, mx_error *err) {
    bool ok = t->ndim == ndim;
    for (int i = 0; ok && i < ndim; i++) ok = t->shape[i] == want[i];
    if (ok) return 0;
    char got[128] = "", exp[128] = "";
    for (int i = 0; i < t->ndim; i++)
        snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", i ? ", " : "", (long long)t->shape[i]);
    for (int i = 0; i < ndim; i++)
        snprintf(exp + strlen(exp), sizeof exp - strlen(exp), "%s%lld", i ? ", " : "", (long long)want[i]);
    return mx_fail(err, "tensor '%s' has shape [%s], expected [%s]", t->name, got, exp);
}

// Describes the tensors of `path` (already located) as a host matrix and validates them.
static int describe_matrix(const mx_model *m, const char *path, int64_t n_exp, int64_t rows, int64_t cols,
                           mx_matrix *w, mx_error *err) {
    const mx_st_tensor *tw = find_tensor(m, path, ".weight");
    if (!tw) return mx_fail(err, "missing tensor '%s%s.weight'", m->cfg.tensor_prefix, path);
    const mx_st_tensor *ts = find_tensor(m, path, ".scales"), *tb = find_tensor(m, path, ".biases");
    memset(w, 0, sizeof *w);
    w->q = mx_config_quant_for(&m->cfg, path, ts != NULL);
    w->n_experts = n_exp;
    w->rows = rows;
    w->cols = cols;
    int lead = n_exp > 1 ? 1 : 0;  // stacked experts carry a leading [E] dimension
    int64_t shape[3];
    if (lead) shape[0] = n_exp;
    if (w->q.mode == MX_QUANT_NONE) {
        if (tw->dtype == MX_DTYPE_U32 && !ts)
            return mx_fail(err, "missing tensor '%s.scales': '%s' is U32 (packed quantized codes) and needs its scales",
                           path, tw->name);
        if (!is_float_dtype(tw->dtype))
            return mx_fail(err, "tensor '%s' has dtype %s; an unquantized weight must be BF16, F16 or F32%s", tw->name,
                           mx_dtype_name(tw->dtype), ts ? " (its config entry says it is not quantized)" : "");
        shape[lead] = rows;
        shape[lead + 1] = cols;
        if (check_shape(tw, lead + 2, shape, err)) return -1;
        w->dtype = tw->dtype;
        w->data = tw->data;
        return 0;
    }
    if (cols % w->q.group_size != 0)
        return mx_fail(err, "'%s': input size %lld is not a multiple of group size %d", path, (long long)cols,
                       w->q.group_size);
    if (!ts) return mx_fail(err, "missing tensor '%s.scales' (config says '%s' is quantized)", path, path);
    if (tw->dtype != MX_DTYPE_U32)
        return mx_fail(err, "tensor '%s' has dtype %s; a quantized weight must be U32", tw->name, mx_dtype_name(tw->dtype));
    shape[lead] = rows;
    shape[lead + 1] = cols * w->q.bits / 32;
    if (check_shape(tw, lead + 2, shape, err))
        return mx_fail_prefix(err, "quantized %d-bit: ", w->q.bits);
    shape[lead + 1] = cols / w->q.group_size;
    if (check_shape(ts, lead + 2, shape, err))
        return mx_fail_prefix(err, "quantization group %d: ", w->q.group_size);
    w->dtype = MX_DTYPE_U32;
    w->data = tw->data;
    w->scales = ts->data;
    if (w->q.mode == MX_QUANT_AFFINE) {
        if (!is_float_dtype(ts->dtype))
            return mx_fail(err, "tensor '%s' has dtype %s; affine scales must be BF16, F16 or F32", ts->name,
                           mx_dtype_name(ts->dtype));
        if (!tb) return mx_fail(err, "missing tensor '%s.biases' (affine quantization)", path);
        if (tb->dtype != ts->dtype)
            return mx_fail(err, "tensor '%s' has dtype %s but its scales are %s", tb->name, mx_dtype_name(tb->dtype),
                           mx_dtype_name(ts->dtype));
        if (check_shape(tb, lead + 2, shape, err)) return -1;
        w->scale_dtype = ts->dtype;
        w->biases = tb->data;
    } else {
        if (ts->dtype != MX_DTYPE_U8 && ts->dtype != MX_DTYPE_F8_E8M0 && ts->dtype != MX_DTYPE_F8_E4M3)
            return mx_fail(err, "tensor '%s' has dtype %s; %s scales must be U8", ts->name, mx_dtype_name(ts->dtype),
                           mx_quant_mode_name(w->q.mode));
        w->scale_dtype = MX_DTYPE_U8;
    }
    return 0;
}

static int upload(mx_model *m, const mx_matrix *host, mx_matrix *dst, mx_error *err) {
    if (m->be->ops->upload_matrix(m->be, host, dst, err) != 0) return -1;
    m->n_params += host->n_experts * host->rows * host->cols;
    m->weight_bytes += mx_matrix_data_bytes(host) + 2 * mx_matrix_scale_bytes(host) * (host->biases != NULL) +
                       mx_matrix_scale_bytes(host) * (host->biases == NULL);
    return keep_matrix(m, dst, err);
}

static int load_matrix(mx_model *m, const char *path, int64_t rows, int64_t cols, mx_matrix *dst, mx_error *err) {
    mx_matrix host;
    if (describe_matrix(m, path, 1, rows, cols, &host, err)) return -1;
    return upload(m, &host, dst, err);
}

// Experts: stacked `<mlp>.switch_mlp.<proj>` (MLX; gpt_oss: `<mlp>.experts.<proj>`) or per-expert
// `<mlp>.experts.<e>.<proj>` (Hub), which are copied into one stacked host buffer.
static int load_experts(mx_model *m, const char *mlp, const char *proj, int64_t n_exp, int64_t rows, int64_t cols,
                        mx_matrix *dst, mx_error *err) {
    char path[512];
    mx_matrix host;
    static const char *const stacks[] = {"switch_mlp", "experts"};
    for (int k = 0; k < 2; k++) {
        snprintf(path, sizeof path, "%s.%s.%s", mlp, stacks[k], proj);
        if (!find_tensor(m, path, ".weight")) continue;
        if (describe_matrix(m, path, n_exp, rows, cols, &host, err)) return -1;
        return upload(m, &host, dst, err);
    }
    mx_matrix one;
    uint8_t *data = NULL, *scales = NULL, *biases = NULL;
    for (int64_t e = 0; e < n_exp; e++) {
        snprintf(path, sizeof path, "%s.experts.%lld.%s", mlp, (long long)e, proj);
        if (!find_tensor(m, path, ".weight"))
            return mx_fail(err, "missing tensor '%s.switch_mlp.%s.weight' (or per-expert '%s.weight')", mlp, proj, path);
        if (describe_matrix(m, path, 1, rows, cols, &one, err)) return -1;
        size_t db = (size_t)mx_matrix_data_bytes(&one), sb = (size_t)mx_matrix_scale_bytes(&one);
        if (e == 0) {
            host = one;
            host.n_experts = n_exp;
            data = malloc(db * n_exp);
            if (!data || keep_host(m, data, err)) return mx_fail(err, "out of memory stacking experts of '%s'", mlp);
            if (one.scales) {
                scales = malloc(sb * n_exp);
                if (!scales || keep_host(m, scales, err)) return mx_fail(err, "out of memory");
            }
            if (one.biases) {
                biases = malloc(sb * n_exp);
                if (!biases || keep_host(m, biases, err)) return mx_fail(err, "out of memory");
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
    return upload(m, &host, dst, err);
}

// A float vector (norm weight or Linear bias) converted to float32 on the backend, plus `add` on
// every element (Gemma's norms scale by 1 + w; adding once at load is the same float32 value).
static int load_vector_add(mx_model *m, const char *name, int64_t len, bool required, float add, const float **dst,
                           mx_error *err) {
    *dst = NULL;
    const mx_st_tensor *t = find_tensor(m, name, "");
    if (!t) return required ? mx_fail(err, "missing tensor '%s%s'", m->cfg.tensor_prefix, name) : 0;
    if (!is_float_dtype(t->dtype))
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
    if (keep_backend(m, dev, err)) return -1;
    if (rc) return -1;
    m->n_params += len;
    m->weight_bytes += len * (int64_t)mx_dtype_size(t->dtype);
    *dst = dev;
    return 0;
}

static int load_vector(mx_model *m, const char *name, int64_t len, bool required, const float **dst, mx_error *err) {
    return load_vector_add(m, name, len, required, 0.0f, dst, err);
}

// A float table [rows, cols] (the biases of stacked experts) converted to float32 on the backend.
// Element (r, c) is read at r * cols * step + c * step + offset of the tensor [rows, cols * step]:
// step 2 with offset 0 or 1 takes the even or odd columns (the Hub layout's interleaved
// gate_up_proj_bias of gpt_oss holds gate and up alternately).
static int load_table(mx_model *m, const char *name, int64_t rows, int64_t cols, int step, int offset, const float **dst,
                      mx_error *err) {
    const mx_st_tensor *t = find_tensor(m, name, "");
    if (!t) return mx_fail(err, "missing tensor '%s%s'", m->cfg.tensor_prefix, name);
    if (!is_float_dtype(t->dtype))
        return mx_fail(err, "tensor '%s' has dtype %s, expected BF16, F16 or F32", name, mx_dtype_name(t->dtype));
    int64_t want[2] = {rows, cols * step};
    if (check_shape(t, 2, want, err)) return -1;
    float *host = malloc(sizeof(float) * (size_t)(rows * cols));
    if (!host) return mx_fail(err, "out of memory");
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) host[r * cols + c] = mx_load_float(t->data, t->dtype, r * cols * step + c * step + offset);
    size_t bytes = sizeof(float) * (size_t)(rows * cols);
    float *dev = m->be->ops->alloc(m->be, bytes, err);
    int rc = dev ? m->be->ops->upload(m->be, dev, host, bytes, err) : -1;
    free(host);
    if (!dev) return -1;
    if (keep_backend(m, dev, err) || rc) return -1;
    m->n_params += rows * cols;
    m->weight_bytes += rows * cols * (int64_t)mx_dtype_size(t->dtype);
    *dst = dev;
    return 0;
}

// An RMSNorm weight: (1 + w) for Gemma, w otherwise.
static int load_norm(mx_model *m, const char *name, int64_t len, bool required, const float **dst, mx_error *err) {
    return load_vector_add(m, name, len, required, m->family->gemma ? 1.0f : 0.0f, dst, err);
}

// Rows [r0, r0 + n) of a (non-expert) host matrix: quantization is per row, so a row range is a
// plain offset into data, scales and biases.
static mx_matrix matrix_rows(const mx_matrix *w, int64_t r0, int64_t n) {
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
static int load_split(mx_model *m, const char *path, int64_t cols, int n_parts, const int64_t *rows, mx_matrix **dst,
                      mx_error *err) {
    int64_t total = 0;
    for (int k = 0; k < n_parts; k++) total += rows[k];
    mx_matrix host;
    if (describe_matrix(m, path, 1, total, cols, &host, err)) return -1;
    int64_t r0 = 0;
    for (int k = 0; k < n_parts; k++) {
        mx_matrix part = matrix_rows(&host, r0, rows[k]);
        if (upload(m, &part, dst[k], err)) return -1;
        r0 += rows[k];
    }
    return 0;
}

// The attention projections of the families with per-head K/V (everything but latent attention).
static int load_attention(mx_model *m, const mx_family *fam, const char *p, mx_layer *L, mx_error *err) {
    const mx_config *c = &m->cfg;
    char name[512];
    int64_t H = c->hidden_size, q_out = (int64_t)c->n_heads * c->head_dim, kv_out = (int64_t)c->n_kv_heads * c->head_dim;
#define PATH(suffix) (snprintf(name, sizeof name, "%s.%s", p, suffix), name)
    if (fam->fused_qkv_gate_up) {
        int64_t rows[3] = {q_out, kv_out, kv_out};
        mx_matrix *parts[3] = {&L->wq, &L->wk, &L->wv};
        if (load_split(m, PATH("self_attn.qkv_proj"), H, 3, rows, parts, err)) return -1;
    } else if (load_matrix(m, PATH("self_attn.q_proj"), q_out, H, &L->wq, err) ||
               load_matrix(m, PATH("self_attn.k_proj"), kv_out, H, &L->wk, err) ||
               load_matrix(m, PATH("self_attn.v_proj"), kv_out, H, &L->wv, err)) {
        return -1;
    }
    if (load_matrix(m, PATH("self_attn.o_proj"), H, q_out, &L->wo, err)) return -1;
    bool need_qkv_bias = fam->qkv_bias || c->attention_bias;
    if (load_vector(m, PATH("self_attn.q_proj.bias"), q_out, need_qkv_bias, &L->bq, err) ||
        load_vector(m, PATH("self_attn.k_proj.bias"), kv_out, need_qkv_bias, &L->bk, err) ||
        load_vector(m, PATH("self_attn.v_proj.bias"), kv_out, need_qkv_bias, &L->bv, err) ||
        load_vector(m, PATH("self_attn.o_proj.bias"), H, fam->o_bias, &L->bo, err))
        return -1;
    if (fam->attn_sinks && load_vector(m, PATH("self_attn.sinks"), c->n_heads, true, &L->sinks, err)) return -1;
    if (load_norm(m, PATH("self_attn.q_norm.weight"), c->head_dim, fam->qk_norm, &L->q_norm, err) ||
        load_norm(m, PATH("self_attn.k_norm.weight"), c->head_dim, fam->qk_norm, &L->k_norm, err))
        return -1;
    return 0;
#undef PATH
}

// A host copy of rows rows[0..n) of a (non-expert) host matrix, in that order: quantization is per
// row, so a row's codes, scales and biases move together. The copy lives until the model is freed.
static int gather_rows(mx_model *m, const mx_matrix *w, const int64_t *rows, int64_t n, mx_matrix *out,
                       mx_error *err) {
    size_t rb = (size_t)mx_matrix_row_bytes(w);
    size_t sb = w->q.mode == MX_QUANT_NONE ? 0 : (size_t)(w->cols / w->q.group_size) * mx_dtype_size(w->scale_dtype);
    *out = *w;
    out->rows = n;
    uint8_t *parts[3] = {NULL, NULL, NULL};
    const uint8_t *src[3] = {w->data, w->scales, w->biases};
    size_t width[3] = {rb, sb, sb};
    for (int k = 0; k < 3; k++) {
        if (!src[k]) continue;
        parts[k] = malloc(width[k] * (size_t)n);
        if (!parts[k] || keep_host(m, parts[k], err)) {
            free(parts[k]);
            return mx_fail(err, "out of memory reordering rows");
        }
        for (int64_t r = 0; r < n; r++)
            memcpy(parts[k] + (size_t)r * width[k], src[k] + (size_t)rows[r] * width[k], width[k]);
    }
    out->data = parts[0];
    out->scales = parts[1];
    out->biases = parts[2];
    return 0;
}

// Dimension j of a RoPE block of width r in rotate-half order comes from dimension deinterleave(j)
// of DeepSeek's interleaved order (pairs (2i, 2i + 1)): the even dimensions first, then the odd ones.
// transformers applies the same reordering to q and k before its rotate-half RoPE.
static int64_t deinterleave(int64_t j, int64_t r) { return j < r / 2 ? 2 * j : 2 * (j - r / 2) + 1; }

// Multi-head latent attention (forward_mla.c): q through q_a_proj, q_a_layernorm, q_b_proj (or
// q_proj), split into its no-RoPE and RoPE parts; kv_a_proj_with_mqa split into the latent c_kv and
// the shared RoPE key; the per-head up-projections from mlx-lm's embed_q / unembed_out or, in the
// Hub layout, from kv_b_proj ([heads * (nope + v), kv_lora]: per head nope key rows, then v rows).
static int load_latent_attention(mx_model *m, const char *p, mx_layer *L, mx_error *err) {
    const mx_config *c = &m->cfg;
    int64_t H = c->hidden_size, NH = c->n_heads, nope = c->qk_nope_head_dim, R = c->qk_rope_head_dim,
            V = c->v_head_dim, KL = c->kv_lora_rank, QL = c->q_lora_rank, QD = nope + R;
    char name[512];
#define PATH(suffix) (snprintf(name, sizeof name, "%s.self_attn.%s", p, suffix), name)
    if (c->attention_bias) return mx_fail(err, "config.json: attention_bias with latent attention is not supported");
    if (NH < 2) return mx_fail(err, "config.json: latent attention needs at least 2 heads");
    int64_t q_in = H;
    const char *q_path = "q_proj";
    if (QL > 0) {
        if (load_matrix(m, PATH("q_a_proj"), QL, H, &L->wq_a, err) ||
            load_norm(m, PATH("q_a_layernorm.weight"), QL, true, &L->q_a_norm, err))
            return -1;
        q_in = QL;
        q_path = "q_b_proj";
    }
    int64_t n_rows = NH * QD > KL + R ? NH * QD : KL + R;
    if (NH * (nope + V) > n_rows) n_rows = NH * (nope + V);
    int64_t *rows = malloc(sizeof(int64_t) * (size_t)n_rows);
    if (!rows) return mx_fail(err, "out of memory");
    mx_matrix host, part;
    int rc = -1;
    // Queries: per head [nope | rope] rows.
    if (describe_matrix(m, PATH(q_path), 1, NH * QD, q_in, &host, err)) goto done;
    for (int64_t h = 0; h < NH; h++)
        for (int64_t j = 0; j < nope; j++) rows[h * nope + j] = h * QD + j;
    if (gather_rows(m, &host, rows, NH * nope, &part, err) || upload(m, &part, &L->wq_nope, err)) goto done;
    for (int64_t h = 0; h < NH; h++)
        for (int64_t j = 0; j < R; j++) rows[h * R + j] = h * QD + nope + deinterleave(j, R);
    if (gather_rows(m, &host, rows, NH * R, &part, err) || upload(m, &part, &L->wq_pe, err)) goto done;
    // The latent [kv_lora] and the shared RoPE key [rope].
    if (describe_matrix(m, PATH("kv_a_proj_with_mqa"), 1, KL + R, H, &host, err)) goto done;
    part = matrix_rows(&host, 0, KL);
    if (upload(m, &part, &L->wkv_a, err)) goto done;
    for (int64_t j = 0; j < R; j++) rows[j] = KL + deinterleave(j, R);
    if (gather_rows(m, &host, rows, R, &part, err) || upload(m, &part, &L->wk_pe, err)) goto done;
    if (load_norm(m, PATH("kv_a_layernorm.weight"), KL, true, &L->kv_a_norm, err) ||
        load_matrix(m, PATH("o_proj"), H, NH * V, &L->wo, err))
        goto done;
    if (find_tensor(m, PATH("embed_q"), ".weight")) {
        if (describe_matrix(m, PATH("embed_q"), NH, KL, nope, &host, err) || upload(m, &host, &L->embed_q, err) ||
            describe_matrix(m, PATH("unembed_out"), NH, V, KL, &host, err) || upload(m, &host, &L->unembed_out, err))
            goto done;
    } else if (!find_tensor(m, PATH("kv_b_proj"), ".weight")) {
        mx_fail(err, "missing tensor '%s%s.self_attn.embed_q.weight' (mlx-lm's layout, with unembed_out) or '%s.weight' "
                     "(the Hub layout)", m->cfg.tensor_prefix, p, name);
        goto done;
    } else {
        if (describe_matrix(m, PATH("kv_b_proj"), 1, NH * (nope + V), KL, &host, err)) goto done;
        if (host.q.mode != MX_QUANT_NONE) {
            mx_fail(err, "'%s': a quantized kv_b_proj must be split into embed_q and unembed_out (mlx-lm's layout)", name);
            goto done;
        }
        // embed_q[h] = (key rows of head h)^T: [kv_lora, nope], transposed element by element.
        size_t es = mx_dtype_size(host.dtype);
        uint8_t *t = malloc(es * (size_t)(NH * KL * nope));
        if (!t || keep_host(m, t, err)) {
            free(t);
            mx_fail(err, "out of memory");
            goto done;
        }
        for (int64_t h = 0; h < NH; h++)
            for (int64_t i = 0; i < KL; i++)
                for (int64_t j = 0; j < nope; j++)
                    memcpy(t + (size_t)((h * KL + i) * nope + j) * es,
                           (const uint8_t *)host.data + (size_t)((h * (nope + V) + j) * KL + i) * es, es);
        part = host;
        part.data = t;
        part.n_experts = NH, part.rows = KL, part.cols = nope;
        if (upload(m, &part, &L->embed_q, err)) goto done;
        for (int64_t h = 0; h < NH; h++)
            for (int64_t v = 0; v < V; v++) rows[h * V + v] = h * (nope + V) + nope + v;
        if (gather_rows(m, &host, rows, NH * V, &part, err)) goto done;
        part.n_experts = NH, part.rows = V;
        if (upload(m, &part, &L->unembed_out, err)) goto done;
    }
    rc = 0;
done:
    free(rows);
    return rc;
#undef PATH
}

// gpt_oss experts in the Hub layout (transformers' GptOssExperts, float only): gate_up_proj
// [E, H, 2I] with gate and up interleaved along its last axis and down_proj [E, I, H], both
// [in, out]; they are transposed into the stacked [E, out, in] matrices element by element, gate
// from the even columns and up from the odd ones (mlx-lm's sanitize, which `convert` applies too).
static int load_hub_gpt_oss_experts(mx_model *m, const char *mlp, int64_t E, int64_t I, int64_t H, mx_layer *L,
                                    mx_error *err) {
    char name[512];
    snprintf(name, sizeof name, "%s.experts.gate_up_proj", mlp);
    const mx_st_tensor *gu = find_tensor(m, name, "");
    snprintf(name, sizeof name, "%s.experts.down_proj", mlp);
    const mx_st_tensor *dn = find_tensor(m, name, "");
    if (!dn) return mx_fail(err, "missing tensor '%s%s' (next to %s)", m->cfg.tensor_prefix, name, gu->name);
    const int64_t gu_shape[3] = {E, H, 2 * I}, dn_shape[3] = {E, I, H};
    if (check_shape(gu, 3, gu_shape, err) || check_shape(dn, 3, dn_shape, err)) return -1;
    if (!is_float_dtype(gu->dtype) || dn->dtype != gu->dtype)
        return mx_fail(err, "tensors '%s' and '%s' must be BF16, F16 or F32 of one type (quantized experts need the "
                            "MLX layout: mlxcel convert)", gu->name, dn->name);
    size_t es = mx_dtype_size(gu->dtype), n = (size_t)(E * I * H);
    uint8_t *g = malloc(3 * es * n);
    if (!g || keep_host(m, g, err)) {
        free(g);
        return mx_fail(err, "out of memory transposing the experts of '%s'", mlp);
    }
    uint8_t *u = g + es * n, *d = u + es * n;
    const uint8_t *src = gu->data, *dsrc = dn->data;
    for (int64_t e = 0; e < E; e++)
        for (int64_t i = 0; i < I; i++)
            for (int64_t h = 0; h < H; h++) {
                size_t at = (size_t)((e * I + i) * H + h), from = (size_t)((e * H + h) * 2 * I + 2 * i);
                memcpy(g + at * es, src + from * es, es);
                memcpy(u + at * es, src + (from + 1) * es, es);
                memcpy(d + (size_t)((e * H + h) * I + i) * es, dsrc + (size_t)((e * I + i) * H + h) * es, es);
            }
    mx_matrix host = {.dtype = gu->dtype, .n_experts = E, .rows = I, .cols = H, .data = g};
    if (upload(m, &host, &L->e_gate, err)) return -1;
    host.data = u;
    if (upload(m, &host, &L->e_up, err)) return -1;
    host = (mx_matrix){.dtype = gu->dtype, .n_experts = E, .rows = H, .cols = I, .data = d};
    if (upload(m, &host, &L->e_down, err)) return -1;
    snprintf(name, sizeof name, "%s.experts.gate_up_proj_bias", mlp);
    if (load_table(m, name, E, I, 2, 0, &L->e_gate_bias, err) || load_table(m, name, E, I, 2, 1, &L->e_up_bias, err))
        return -1;
    snprintf(name, sizeof name, "%s.experts.down_proj_bias", mlp);
    return load_table(m, name, E, H, 1, 0, &L->e_down_bias, err);
}

// One of OpenAI's mxfp4 expert tensors: `<base>_blocks` U8 [E, rows, cols / 32, 16] (32 codes of 4
// bits per 16 bytes, low nibble first, which is MLX's mxfp4 packing read as U32 words) and
// `<base>_scales` U8 [E, rows, cols / 32] (E8M0), as a host mxfp4 matrix of rows `rows` of every
// `step`-th row from `first` (step 2 splits gate_up's interleaved rows; mlx-lm's sanitize does the
// same). Rows are copied into one host buffer that lives with the model.
static int describe_openai_mxfp4(mx_model *m, const char *base, int64_t E, int64_t rows, int64_t cols, int step,
                                 int first, mx_matrix *w, mx_error *err) {
    char name[512];
    snprintf(name, sizeof name, "%s_blocks", base);
    const mx_st_tensor *tb = find_tensor(m, name, "");
    snprintf(name, sizeof name, "%s_scales", base);
    const mx_st_tensor *ts = find_tensor(m, name, "");
    if (!tb || !ts)
        return mx_fail(err, "missing tensor '%s%s_%s' (OpenAI's mxfp4 experts)", m->cfg.tensor_prefix, base,
                       tb ? "scales" : "blocks");
    if (cols % 32) return mx_fail(err, "'%s': input size %lld is not a multiple of 32 (mxfp4)", base, (long long)cols);
    const int64_t bshape[4] = {E, rows * step, cols / 32, 16}, sshape[3] = {E, rows * step, cols / 32};
    if (tb->dtype != MX_DTYPE_U8 || ts->dtype != MX_DTYPE_U8)
        return mx_fail(err, "tensors '%s' and '%s' must be U8 (mxfp4 blocks and E8M0 scales)", tb->name, ts->name);
    if (check_shape(tb, 4, bshape, err) || check_shape(ts, 3, sshape, err)) return -1;
    size_t rb = (size_t)cols / 2, sb = (size_t)cols / 32, n = (size_t)(E * rows);
    uint8_t *buf = malloc(n * (rb + sb));
    if (!buf || keep_host(m, buf, err)) {
        free(buf);
        return mx_fail(err, "out of memory splitting '%s'", base);
    }
    for (size_t r = 0; r < n; r++) {  // row r of the result: expert r / rows, row r % rows
        size_t from = (r / (size_t)rows) * (size_t)(rows * step) + (r % (size_t)rows) * (size_t)step + (size_t)first;
        memcpy(buf + r * rb, tb->data + from * rb, rb);
        memcpy(buf + n * rb + r * sb, ts->data + from * sb, sb);
    }
    *w = (mx_matrix){.q = {MX_QUANT_MXFP4, 4, 32}, .dtype = MX_DTYPE_U32, .scale_dtype = MX_DTYPE_U8, .n_experts = E,
                     .rows = rows, .cols = cols, .data = buf, .scales = buf + n * rb};
    return 0;
}

// gpt_oss experts as OpenAI publishes them (mxfp4 `gate_up_proj_blocks`/`_scales` [E, 2I, ...] with
// gate and up interleaved by rows, `down_proj_blocks`/`_scales` [E, H, ...], biases as in the Hub
// layout): already [E, out, in], so only gate and up are split.
static int load_openai_gpt_oss_experts(mx_model *m, const char *mlp, int64_t E, int64_t I, int64_t H, mx_layer *L,
                                       mx_error *err) {
    char base[512], name[512];
    mx_matrix host;
    snprintf(base, sizeof base, "%s.experts.gate_up_proj", mlp);
    if (describe_openai_mxfp4(m, base, E, I, H, 2, 0, &host, err) || upload(m, &host, &L->e_gate, err) ||
        describe_openai_mxfp4(m, base, E, I, H, 2, 1, &host, err) || upload(m, &host, &L->e_up, err))
        return -1;
    snprintf(base, sizeof base, "%s.experts.down_proj", mlp);
    if (describe_openai_mxfp4(m, base, E, H, I, 1, 0, &host, err) || upload(m, &host, &L->e_down, err)) return -1;
    snprintf(name, sizeof name, "%s.experts.gate_up_proj_bias", mlp);
    if (load_table(m, name, E, I, 2, 0, &L->e_gate_bias, err) || load_table(m, name, E, I, 2, 1, &L->e_up_bias, err))
        return -1;
    snprintf(name, sizeof name, "%s.experts.down_proj_bias", mlp);
    return load_table(m, name, E, H, 1, 0, &L->e_down_bias, err);
}

// gpt_oss's MoE: the router with its bias, and experts with biases in mlx-lm's layout
// (`<mlp>.experts.<proj>.weight` / `.bias`, stacked), the Hub's float one or OpenAI's mxfp4 one.
static int load_gpt_oss_moe(mx_model *m, const mx_family *fam, const char *mlp, mx_layer *L, mx_error *err) {
    const mx_config *c = &m->cfg;
    int64_t E = c->num_experts, I = c->moe_intermediate_size, H = c->hidden_size;
    char name[512];
    snprintf(name, sizeof name, "%.*s.%s", (int)(strlen(mlp) - strlen(".mlp")), mlp, mx_family_router(fam));
    if (load_matrix(m, name, E, H, &L->router, err)) return -1;
    strncat(name, ".bias", sizeof name - strlen(name) - 1);
    if (load_vector(m, name, E, true, &L->router_linear_bias, err)) return -1;
    snprintf(name, sizeof name, "%s.experts.gate_up_proj", mlp);
    if (find_tensor(m, name, "")) return load_hub_gpt_oss_experts(m, mlp, E, I, H, L, err);
    if (find_tensor(m, name, "_blocks")) return load_openai_gpt_oss_experts(m, mlp, E, I, H, L, err);
    if (load_experts(m, mlp, "gate_proj", E, I, H, &L->e_gate, err) ||
        load_experts(m, mlp, "up_proj", E, I, H, &L->e_up, err) ||
        load_experts(m, mlp, "down_proj", E, H, I, &L->e_down, err))
        return -1;
    const char *proj[3] = {"gate_proj", "up_proj", "down_proj"};
    const float **bias[3] = {&L->e_gate_bias, &L->e_up_bias, &L->e_down_bias};
    for (int k = 0; k < 3; k++) {
        snprintf(name, sizeof name, "%s.experts.%s.bias", mlp, proj[k]);
        if (load_table(m, name, E, k == 2 ? H : I, 1, 0, bias[k], err)) return -1;
    }
    return 0;
}

static int load_layer(mx_model *m, const mx_family *fam, int i, mx_error *err) {
    const mx_config *c = &m->cfg;
    mx_layer *L = &m->layers[i];
    char p[256], name[512];
    snprintf(p, sizeof p, "model.layers.%d", i);
    int64_t H = c->hidden_size;
#define PATH(suffix) (snprintf(name, sizeof name, "%s.%s", p, suffix), name)
    if (load_norm(m, PATH("input_layernorm.weight"), H, true, &L->attn_norm, err)) return -1;
    if (fam->gemma) {
        if (load_norm(m, PATH("post_attention_layernorm.weight"), H, true, &L->post_attn_norm, err) ||
            load_norm(m, PATH("pre_feedforward_layernorm.weight"), H, true, &L->ffn_norm, err) ||
            load_norm(m, PATH("post_feedforward_layernorm.weight"), H, true, &L->post_ffn_norm, err))
            return -1;
    } else if (load_norm(m, PATH("post_attention_layernorm.weight"), H, true, &L->ffn_norm, err)) {
        return -1;
    }
    L->sliding = c->layer_sliding && c->layer_sliding[i];
    if (fam->latent_attention ? load_latent_attention(m, p, L, err) : load_attention(m, fam, p, L, err)) return -1;
    L->moe = mx_family_layer_is_moe(fam, c, i);
    if (L->moe) {
        char mlp[300];
        snprintf(mlp, sizeof mlp, "%s.mlp", p);
        if (fam->expert_biases) return load_gpt_oss_moe(m, fam, mlp, L, err);
        int64_t E = c->num_experts, I = c->moe_intermediate_size, IS = I * c->n_shared_experts;
        if (c->n_group > 0 && load_vector(m, PATH("mlp.gate.e_score_correction_bias"), E, true, &L->router_bias, err))
            return -1;
        if (IS > 0 && (load_matrix(m, PATH("mlp.shared_experts.gate_proj"), IS, H, &L->s_gate, err) ||
                       load_matrix(m, PATH("mlp.shared_experts.up_proj"), IS, H, &L->s_up, err) ||
                       load_matrix(m, PATH("mlp.shared_experts.down_proj"), H, IS, &L->s_down, err)))
            return -1;
        return load_matrix(m, PATH(mx_family_router(fam)), E, H, &L->router, err) ||
               load_experts(m, mlp, "gate_proj", E, I, H, &L->e_gate, err) ||
               load_experts(m, mlp, "up_proj", E, I, H, &L->e_up, err) ||
               load_experts(m, mlp, "down_proj", E, H, I, &L->e_down, err);
    }
    int64_t I = c->intermediate_size;
    if (fam->fused_qkv_gate_up) {
        int64_t rows[2] = {I, I};
        mx_matrix *parts[2] = {&L->w_gate, &L->w_up};
        if (load_split(m, PATH("mlp.gate_up_proj"), H, 2, rows, parts, err) ||
            load_matrix(m, PATH("mlp.down_proj"), H, I, &L->w_down, err))
            return -1;
    } else if (load_matrix(m, PATH("mlp.gate_proj"), I, H, &L->w_gate, err) ||
        load_matrix(m, PATH("mlp.up_proj"), I, H, &L->w_up, err) ||
        load_matrix(m, PATH("mlp.down_proj"), H, I, &L->w_down, err))
        return -1;
    return load_vector(m, PATH("mlp.gate_proj.bias"), I, c->mlp_bias, &L->b_gate, err) ||
           load_vector(m, PATH("mlp.up_proj.bias"), I, c->mlp_bias, &L->b_up, err) ||
           load_vector(m, PATH("mlp.down_proj.bias"), H, c->mlp_bias, &L->b_down, err);
#undef PATH
}

static int check_config(const mx_config *c, const mx_family *fam, mx_error *err) {
    if (fam->moe && (c->num_experts <= 0 || c->num_experts_per_tok <= 0 || c->moe_intermediate_size <= 0 ||
                     c->num_experts_per_tok > c->num_experts || c->num_experts > 1024))
        return mx_fail(err, "config.json: %s needs num_experts (<= 1024), num_experts_per_tok and moe_intermediate_size", fam->model_type);
    if ((!fam->moe || c->first_k_dense_replace > 0) && c->intermediate_size <= 0)
        return mx_fail(err, "config.json: missing 'intermediate_size'");
    if (fam->latent_attention && c->kv_lora_rank <= 0)
        return mx_fail(err, "config.json: %s needs kv_lora_rank", fam->model_type);
    if (c->head_dim > 512) return mx_fail(err, "config.json: head_dim %d is larger than 512", c->head_dim);
    if (c->rms_norm_eps <= 0) return mx_fail(err, "config.json: rms_norm_eps must be positive");
    if (c->rope_theta <= 0) return mx_fail(err, "config.json: rope_theta must be positive");
    return 0;
}

static int fail_not_running(const char *dir, const char *model_type, mx_error *err) {
    return mx_fail(err, "%s/config.json: model_type '%s' is not supported yet: its forward pass is not implemented "
                        "(mlxcel convert handles it; supported: %s)",
                   dir, model_type, mx_model_supported_types());
}

// When config.json does not parse into mx_config, a family whose forward pass is not written yet is
// the more useful thing to report: its config may use what only that forward pass would need (for
// example YaRN RoPE). Otherwise err keeps the parser's message.
static void explain_config_failure(const char *dir, mx_error *err) {
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    mx_error ignored = {{0}};
    char *text = mx_read_text_file(path, NULL, &ignored);
    json_error_t je;
    json_t *root = text ? mx_json_loads(text, 0, &je) : NULL;
    const mx_family *fam = mx_family_find(json_string_value(json_object_get(root, "model_type")));
    if (fam && !fam->runs) fail_not_running(dir, fam->model_type, err);
    json_decref(root);
    free(text);
}

static int model_load_into(mx_model *m, const char *dir, mx_error *err) {
    if (mx_config_load(dir, &m->cfg, err)) {
        explain_config_failure(dir, err);
        return -1;
    }
    const mx_family *fam = mx_family_find(m->cfg.model_type);
    if (fam && !fam->runs) return fail_not_running(dir, m->cfg.model_type, err);
    if (!fam)
        return mx_fail(err, "%s/config.json: unsupported model_type '%s' (supported: %s)", dir, m->cfg.model_type,
                       mx_model_supported_types());
    if (check_config(&m->cfg, fam, err)) return -1;
    m->family = fam;
    m->st = mx_st_open_dir(dir, err);
    if (!m->st) return -1;
    const mx_config *c = &m->cfg;
    if (load_matrix(m, "model.embed_tokens", c->vocab_size, c->hidden_size, &m->embed, err) ||
        load_norm(m, "model.norm.weight", c->hidden_size, true, &m->final_norm, err))
        return -1;
    bool has_head = find_tensor(m, "lm_head.weight", "") != NULL;
    m->tied = !has_head || (c->tie_set && c->tie_word_embeddings);
    if (m->tied) {
        m->lm_head = m->embed;
    } else if (load_matrix(m, "lm_head", c->vocab_size, c->hidden_size, &m->lm_head, err)) {
        return -1;
    }
    m->layers = calloc(c->n_layers, sizeof *m->layers);
    if (!m->layers) return mx_fail(err, "out of memory");
    for (int i = 0; i < c->n_layers; i++)
        if (load_layer(m, fam, i, err)) return -1;
    // Gemma scales embeddings by sqrt(hidden) (in float32, as the float32 reference does).
    m->embed_scale = fam->gemma ? sqrtf((float)c->hidden_size) : 1.0f;
    // RoPE: the main table, plus Gemma's local one or longrope's long one.
    int half = c->rope_dim / 2;
    float inv[2 * 256];
    mx_rope_inv_freq(c, MX_ROPE_TABLE_MAIN, inv);
    bool second = fam->gemma || c->rope_type == MX_ROPE_LONGROPE;
    if (second) mx_rope_inv_freq(c, fam->gemma ? MX_ROPE_TABLE_LOCAL : MX_ROPE_TABLE_LONG, inv + half);
    size_t bytes = sizeof(float) * (size_t)half * (second ? 2 : 1);
    m->rope_inv_freq = m->be->ops->alloc(m->be, bytes, err);
    if (!m->rope_inv_freq || keep_backend(m, m->rope_inv_freq, err)) return -1;
    if (m->be->ops->upload(m->be, m->rope_inv_freq, inv, bytes, err)) return -1;
    m->rope = (mx_rope){.inv_freq = m->rope_inv_freq, .head_dim = c->head_dim, .attn_factor = (float)c->rope_attn_factor,
                        .rot_dim = c->rope_dim};
    if (c->rope_type == MX_ROPE_LONGROPE) {
        m->rope.long_inv_freq = m->rope_inv_freq + half;
        m->rope.long_from = (int)c->rope_original_max_pos;
    }
    m->rope_local = m->rope;
    if (fam->gemma)
        m->rope_local = (mx_rope){.inv_freq = m->rope_inv_freq + half, .head_dim = c->head_dim, .attn_factor = 1.0f,
                                  .rot_dim = c->rope_dim};
    return m->be->ops->sync(m->be, err);
}

mx_model *mx_model_load(const char *dir, mx_backend *be, mx_error *err) {
    mx_model *m = calloc(1, sizeof *m);
    if (!m) {
        mx_fail(err, "out of memory");
        return NULL;
    }
    m->be = be;
    m->dir = strdup(dir);
    if (model_load_into(m, dir, err) != 0) {
        mx_model_free(m);
        return NULL;
    }
    return m;
}

void mx_model_free(mx_model *m) {
    if (!m) return;
    for (int i = 0; i < m->n_matrices; i++) m->be->ops->release_matrix(m->be, m->matrices[i]);
    for (int i = 0; i < m->n_backend_bufs; i++) m->be->ops->release(m->be, m->backend_bufs[i]);
    for (int i = 0; i < m->n_host_bufs; i++) free(m->host_bufs[i]);
    free(m->matrices);
    free(m->backend_bufs);
    free(m->host_bufs);
    free(m->layers);
    mx_st_close(m->st);
    mx_config_free(&m->cfg);
    free(m->dir);
    free(m);
}

const mx_config *mx_model_config(const mx_model *m) { return &m->cfg; }
mx_backend *mx_model_backend(const mx_model *m) { return m->be; }
const char *mx_model_dir(const mx_model *m) { return m->dir; }
int64_t mx_model_weight_bytes(const mx_model *m) { return m->weight_bytes; }

bool mx_model_is_eos(const mx_model *m, int32_t id) {
    for (int i = 0; i < m->cfg.n_eos; i++)
        if (m->cfg.eos_ids[i] == id) return true;
    return false;
}

// YaRN's correction range (transformers' find_correction_range): the dimensions whose wavelength
// makes beta_fast and beta_slow rotations over the original context, floored/ceiled when truncating.
static void yarn_range(const mx_config *cfg, double *low, double *high) {
    int d = cfg->rope_dim;
    double base = cfg->rope_theta, orig = cfg->rope_original_max_pos;
    double lo = d * log(orig / (cfg->rope_beta_fast * 2 * M_PI)) / (2 * log(base));
    double hi = d * log(orig / (cfg->rope_beta_slow * 2 * M_PI)) / (2 * log(base));
    if (cfg->rope_truncate) lo = floor(lo), hi = ceil(hi);
    *low = lo > 0 ? lo : 0;
    *high = hi < d - 1 ? hi : d - 1;
    if (*low == *high) *high += 0.001;  // transformers' guard against a zero-width ramp
}

void mx_rope_inv_freq(const mx_config *cfg, mx_rope_table table, float *out) {
    int d = cfg->rope_dim;
    double theta = table == MX_ROPE_TABLE_LOCAL ? cfg->rope_local_theta : cfg->rope_theta;
    double yarn_low = 0, yarn_high = 1;
    if (cfg->rope_type == MX_ROPE_YARN) yarn_range(cfg, &yarn_low, &yarn_high);
    for (int i = 0; i < d / 2; i++) {
        double inv = pow(theta, -(2.0 * i) / d);
        if (table == MX_ROPE_TABLE_LOCAL) {
        } else if (cfg->rope_type == MX_ROPE_YARN) {
            // Blend: extrapolated (original) frequencies below the ramp, interpolated (/ factor) above.
            double ramp = (i - yarn_low) / (yarn_high - yarn_low);
            double extrapolate = 1.0 - (ramp < 0 ? 0 : ramp > 1 ? 1 : ramp);
            inv = inv / cfg->rope_factor * (1.0 - extrapolate) + inv * extrapolate;
        } else if (cfg->rope_type == MX_ROPE_LINEAR && cfg->rope_factor > 0) {
            inv /= cfg->rope_factor;
        } else if (cfg->rope_type == MX_ROPE_LONGROPE) {
            inv /= table == MX_ROPE_TABLE_LONG ? cfg->rope_long_factor[i] : cfg->rope_short_factor[i];
        } else if (cfg->rope_type == MX_ROPE_LLAMA3) {
            double f = cfg->rope_factor, lo = cfg->rope_low_freq_factor, hi = cfg->rope_high_freq_factor;
            double old = cfg->rope_original_max_pos, wavelen = 2.0 * M_PI / inv;
            if (wavelen > old / lo) {
                inv = inv / f;
            } else if (wavelen >= old / hi) {
                double smooth = (old / wavelen - lo) / (hi - lo);
                inv = (1.0 - smooth) * inv / f + smooth * inv;
            }
        }
        out[i] = (float)inv;
    }
}
