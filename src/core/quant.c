// SPDX-License-Identifier: MIT
// Format table and reference dequantizer (see quant.h). Written straight from FORMAT.md, for
// clarity over speed; backends have their own fast paths and are tested against this.
#include "core/quant.h"

#include <stdio.h>
#include <string.h>

static const char *const mode_names[] = {"none", "affine", "mxfp4", "mxfp8", "nvfp4"};

int mx_quant_mode_parse(const char *s, mx_quant_mode *out) {
    for (int i = 1; i < 5; i++) {
        if (strcmp(s, mode_names[i]) == 0) {
            *out = (mx_quant_mode)i;
            return 0;
        }
    }
    return -1;
}

const char *mx_quant_mode_name(mx_quant_mode m) { return (unsigned)m < 5 ? mode_names[m] : "?"; }

bool mx_quant_valid(mx_quant q, char *why, int why_len) {
    switch (q.mode) {
    case MX_QUANT_NONE:
        return true;
    case MX_QUANT_AFFINE:
        if (q.bits != 2 && q.bits != 3 && q.bits != 4 && q.bits != 5 && q.bits != 6 && q.bits != 8) {
            snprintf(why, why_len, "affine bits must be 2, 3, 4, 5, 6 or 8 (got %d)", q.bits);
            return false;
        }
        if (q.group_size != 32 && q.group_size != 64 && q.group_size != 128) {
            snprintf(why, why_len, "affine group_size must be 32, 64 or 128 (got %d)", q.group_size);
            return false;
        }
        return true;
    case MX_QUANT_MXFP4:
    case MX_QUANT_MXFP8:
    case MX_QUANT_NVFP4: {
        int bits = q.mode == MX_QUANT_MXFP8 ? 8 : 4;
        int group = q.mode == MX_QUANT_NVFP4 ? 16 : 32;
        if (q.bits != bits || q.group_size != group) {
            snprintf(why, why_len, "%s needs bits %d and group_size %d (got %d and %d)",
                     mx_quant_mode_name(q.mode), bits, group, q.bits, q.group_size);
            return false;
        }
        return true;
    }
    }
    snprintf(why, why_len, "unknown quantization mode");
    return false;
}

int64_t mx_matrix_row_bytes(const mx_matrix *m) {
    if (m->q.mode == MX_QUANT_NONE) return m->cols * (int64_t)mx_dtype_size(m->dtype);
    return m->cols * m->q.bits / 8;
}

int64_t mx_matrix_data_bytes(const mx_matrix *m) {
    return mx_matrix_row_bytes(m) * m->rows * m->n_experts;
}

int64_t mx_matrix_scale_bytes(const mx_matrix *m) {
    if (m->q.mode == MX_QUANT_NONE) return 0;
    return m->n_experts * m->rows * (m->cols / m->q.group_size) * (int64_t)mx_dtype_size(m->scale_dtype);
}

void mx_matrix_dequant_row(const mx_matrix *m, int64_t row, float *out) {
    const uint8_t *data = (const uint8_t *)m->data + row * mx_matrix_row_bytes(m);
    if (m->q.mode == MX_QUANT_NONE) {
        for (int64_t j = 0; j < m->cols; j++) out[j] = mx_load_float(data, m->dtype, j);
        return;
    }
    int64_t groups = m->cols / m->q.group_size;
    for (int64_t g = 0; g < groups; g++) {
        int64_t si = row * groups + g;
        float scale, bias = 0.0f;
        if (m->q.mode == MX_QUANT_AFFINE) {
            scale = mx_load_float(m->scales, m->scale_dtype, si);
            bias = mx_load_float(m->biases, m->scale_dtype, si);
        } else {
            uint8_t s = ((const uint8_t *)m->scales)[si];
            scale = m->q.mode == MX_QUANT_NVFP4 ? mx_e4m3_to_f32(s) : mx_e8m0_to_f32(s);
        }
        for (int k = 0; k < m->q.group_size; k++) {
            int64_t j = g * m->q.group_size + k;
            uint32_t c = mx_quant_code(data, m->q.bits, j);
            float v;
            switch (m->q.mode) {
            case MX_QUANT_AFFINE: v = scale * (float)c + bias; break;
            case MX_QUANT_MXFP8: v = scale * mx_e4m3_to_f32((uint8_t)c); break;
            default: v = scale * mx_e2m1_to_f32(c); break;
            }
            out[j] = v;
        }
    }
}
