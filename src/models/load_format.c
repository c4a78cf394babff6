// SPDX-License-Identifier: MIT
// What a stored weight must look like before it is used: the dtype, shape and quantization checks
// that turn the safetensors entries of one matrix (`.weight`, `.scales`, `.biases`) into a
// validated host mx_matrix, with an error naming the tensor and what was wrong. The config's
// quantization entry for the path says which format to expect.
#include <string.h>

#include "models/load_internal.h"

int mx_load_check_shape(const mx_st_tensor *t, int ndim, const int64_t *want, mx_error *err) {
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
int mx_load_describe_matrix(const mx_model *m, const char *path, int64_t n_exp, int64_t rows, int64_t cols,
                            mx_matrix *w, mx_error *err) {
    const mx_st_tensor *tw = mx_load_find(m, path, ".weight");
    if (!tw) return mx_fail(err, "missing tensor '%s%s.weight'", m->cfg.tensor_prefix, path);
    const mx_st_tensor *ts = mx_load_find(m, path, ".scales"), *tb = mx_load_find(m, path, ".biases");
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
        if (!mx_dtype_is_float(tw->dtype))
            return mx_fail(err, "tensor '%s' has dtype %s; an unquantized weight must be BF16, F16 or F32%s", tw->name,
                           mx_dtype_name(tw->dtype), ts ? " (its config entry says it is not quantized)" : "");
        shape[lead] = rows;
        shape[lead + 1] = cols;
        if (mx_load_check_shape(tw, lead + 2, shape, err)) return -1;
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
    if (mx_load_check_shape(tw, lead + 2, shape, err))
        return mx_fail_prefix(err, "quantized %d-bit: ", w->q.bits);
    shape[lead + 1] = cols / w->q.group_size;
    if (mx_load_check_shape(ts, lead + 2, shape, err))
        return mx_fail_prefix(err, "quantization group %d: ", w->q.group_size);
    w->dtype = MX_DTYPE_U32;
    w->data = tw->data;
    w->scales = ts->data;
    if (w->q.mode == MX_QUANT_AFFINE) {
        if (!mx_dtype_is_float(ts->dtype))
            return mx_fail(err, "tensor '%s' has dtype %s; affine scales must be BF16, F16 or F32", ts->name,
                           mx_dtype_name(ts->dtype));
        if (!tb) return mx_fail(err, "missing tensor '%s.biases' (affine quantization)", path);
        if (tb->dtype != ts->dtype)
            return mx_fail(err, "tensor '%s' has dtype %s but its scales are %s", tb->name, mx_dtype_name(tb->dtype),
                           mx_dtype_name(ts->dtype));
        if (mx_load_check_shape(tb, lead + 2, shape, err)) return -1;
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
