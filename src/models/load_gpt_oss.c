// SPDX-License-Identifier: MIT
// gpt_oss's mixture of experts in its three layouts: mlx-lm's (stacked `.weight` and `.bias`), the
// Hub's float one (interleaved gate_up_proj in [in, out] order, transposed here) and OpenAI's own
// mxfp4 one (`_blocks` / `_scales`, MLX's mxfp4 bytes already, split into gate and up by rows).
// All three end as the same stacked [E, out, in] matrices with float biases.
#include <stdlib.h>
#include <string.h>

#include "models/load_internal.h"

// gpt_oss experts in the Hub layout (transformers' GptOssExperts, float only): gate_up_proj
// [E, H, 2I] with gate and up interleaved along its last axis and down_proj [E, I, H], both
// [in, out]; they are transposed into the stacked [E, out, in] matrices element by element, gate
// from the even columns and up from the odd ones (mlx-lm's sanitize, which `convert` applies too).
static int load_hub_gpt_oss_experts(mx_model *m, const char *mlp, int64_t E, int64_t I, int64_t H, mx_layer *L,
                                    mx_error *err) {
    char name[512];
    snprintf(name, sizeof name, "%s.experts.gate_up_proj", mlp);
    const mx_st_tensor *gu = mx_load_find(m, name, "");
    snprintf(name, sizeof name, "%s.experts.down_proj", mlp);
    const mx_st_tensor *dn = mx_load_find(m, name, "");
    if (!dn) return mx_fail(err, "missing tensor '%s%s' (next to %s)", m->cfg.tensor_prefix, name, gu->name);
    const int64_t gu_shape[3] = {E, H, 2 * I}, dn_shape[3] = {E, I, H};
    if (mx_load_check_shape(gu, 3, gu_shape, err) || mx_load_check_shape(dn, 3, dn_shape, err)) return -1;
    if (!mx_dtype_is_float(gu->dtype) || dn->dtype != gu->dtype)
        return mx_fail(err, "tensors '%s' and '%s' must be BF16, F16 or F32 of one type (quantized experts need the "
                            "MLX layout: mlxcel convert)", gu->name, dn->name);
    size_t es = mx_dtype_size(gu->dtype), n = (size_t)(E * I * H);
    uint8_t *g = malloc(3 * es * n);
    if (!g || mx_load_keep_host(m, g, err)) {
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
    if (mx_load_upload(m, &host, &L->e_gate, err)) return -1;
    host.data = u;
    if (mx_load_upload(m, &host, &L->e_up, err)) return -1;
    host = (mx_matrix){.dtype = gu->dtype, .n_experts = E, .rows = H, .cols = I, .data = d};
    if (mx_load_upload(m, &host, &L->e_down, err)) return -1;
    snprintf(name, sizeof name, "%s.experts.gate_up_proj_bias", mlp);
    if (mx_load_table(m, name, E, I, 2, 0, &L->e_gate_bias, err) || mx_load_table(m, name, E, I, 2, 1, &L->e_up_bias, err))
        return -1;
    snprintf(name, sizeof name, "%s.experts.down_proj_bias", mlp);
    return mx_load_table(m, name, E, H, 1, 0, &L->e_down_bias, err);
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
    const mx_st_tensor *tb = mx_load_find(m, name, "");
    snprintf(name, sizeof name, "%s_scales", base);
    const mx_st_tensor *ts = mx_load_find(m, name, "");
    if (!tb || !ts)
        return mx_fail(err, "missing tensor '%s%s_%s' (OpenAI's mxfp4 experts)", m->cfg.tensor_prefix, base,
                       tb ? "scales" : "blocks");
    if (cols % 32) return mx_fail(err, "'%s': input size %lld is not a multiple of 32 (mxfp4)", base, (long long)cols);
    const int64_t bshape[4] = {E, rows * step, cols / 32, 16}, sshape[3] = {E, rows * step, cols / 32};
    if (tb->dtype != MX_DTYPE_U8 || ts->dtype != MX_DTYPE_U8)
        return mx_fail(err, "tensors '%s' and '%s' must be U8 (mxfp4 blocks and E8M0 scales)", tb->name, ts->name);
    if (mx_load_check_shape(tb, 4, bshape, err) || mx_load_check_shape(ts, 3, sshape, err)) return -1;
    size_t rb = (size_t)cols / 2, sb = (size_t)cols / 32, n = (size_t)(E * rows);
    uint8_t *buf = malloc(n * (rb + sb));
    if (!buf || mx_load_keep_host(m, buf, err)) {
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
    if (describe_openai_mxfp4(m, base, E, I, H, 2, 0, &host, err) || mx_load_upload(m, &host, &L->e_gate, err) ||
        describe_openai_mxfp4(m, base, E, I, H, 2, 1, &host, err) || mx_load_upload(m, &host, &L->e_up, err))
        return -1;
    snprintf(base, sizeof base, "%s.experts.down_proj", mlp);
    if (describe_openai_mxfp4(m, base, E, H, I, 1, 0, &host, err) || mx_load_upload(m, &host, &L->e_down, err)) return -1;
    snprintf(name, sizeof name, "%s.experts.gate_up_proj_bias", mlp);
    if (mx_load_table(m, name, E, I, 2, 0, &L->e_gate_bias, err) || mx_load_table(m, name, E, I, 2, 1, &L->e_up_bias, err))
        return -1;
    snprintf(name, sizeof name, "%s.experts.down_proj_bias", mlp);
    return mx_load_table(m, name, E, H, 1, 0, &L->e_down_bias, err);
}

// gpt_oss's MoE: the router with its bias, and experts with biases in mlx-lm's layout
// (`<mlp>.experts.<proj>.weight` / `.bias`, stacked), the Hub's float one or OpenAI's mxfp4 one.
int mx_load_gpt_oss_moe(mx_model *m, const mx_family *fam, const char *mlp, mx_layer *L, mx_error *err) {
    const mx_config *c = &m->cfg;
    int64_t E = c->num_experts, I = c->moe_intermediate_size, H = c->hidden_size;
    char name[512];
    snprintf(name, sizeof name, "%.*s.%s", (int)(strlen(mlp) - strlen(".mlp")), mlp, mx_family_router(fam));
    if (mx_load_matrix(m, name, E, H, &L->router, err)) return -1;
    strncat(name, ".bias", sizeof name - strlen(name) - 1);
    if (mx_load_vector(m, name, E, true, &L->router_linear_bias, err)) return -1;
    snprintf(name, sizeof name, "%s.experts.gate_up_proj", mlp);
    if (mx_load_find(m, name, "")) return load_hub_gpt_oss_experts(m, mlp, E, I, H, L, err);
    if (mx_load_find(m, name, "_blocks")) return load_openai_gpt_oss_experts(m, mlp, E, I, H, L, err);
    if (mx_load_experts(m, mlp, "gate_proj", E, I, H, &L->e_gate, err) ||
        mx_load_experts(m, mlp, "up_proj", E, I, H, &L->e_up, err) ||
        mx_load_experts(m, mlp, "down_proj", E, H, I, &L->e_down, err))
        return -1;
    const char *proj[3] = {"gate_proj", "up_proj", "down_proj"};
    const float **bias[3] = {&L->e_gate_bias, &L->e_up_bias, &L->e_down_bias};
    for (int k = 0; k < 3; k++) {
        snprintf(name, sizeof name, "%s.experts.%s.bias", mlp, proj[k]);
        if (mx_load_table(m, name, E, k == 2 ? H : I, 1, 0, bias[k], err)) return -1;
    }
    return 0;
}
