// SPDX-License-Identifier: MIT
// Host references for the GPU op tests (see gpu_ref.h).
#include "gpu_ref.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../unit/format_ref.h"

uint64_t ref_next(ref_rng *r) {
    uint64_t x = r->s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return r->s = x;
}

float ref_uniform(ref_rng *r, float lo, float hi) {
    return lo + (hi - lo) * (float)((ref_next(r) >> 40) * (1.0 / 16777216.0));
}

void ref_fill(ref_rng *r, float *x, int64_t n, float lo, float hi) {
    for (int64_t i = 0; i < n; i++) x[i] = ref_uniform(r, lo, hi);
}

static void store_float(void *base, mx_dtype t, int64_t i, float v) {
    if (t == MX_DTYPE_F32) {
        memcpy((uint8_t *)base + 4 * i, &v, 4);
        return;
    }
    uint16_t h = t == MX_DTYPE_BF16 ? mx_f32_to_bf16(v) : mx_f32_to_f16(v);
    memcpy((uint8_t *)base + 2 * i, &h, 2);
}

mx_matrix ref_matrix_random(ref_rng *r, mx_quant q, mx_dtype dtype, mx_dtype scale_dtype, int64_t experts,
                            int64_t rows, int64_t cols) {
    mx_matrix m;
    memset(&m, 0, sizeof m);
    m.q = q;
    m.dtype = q.mode == MX_QUANT_NONE ? dtype : MX_DTYPE_U32;
    m.scale_dtype = q.mode == MX_QUANT_AFFINE ? scale_dtype : MX_DTYPE_U8;
    m.n_experts = experts;
    m.rows = rows;
    m.cols = cols;
    int64_t dbytes = mx_matrix_data_bytes(&m);
    uint8_t *data = malloc((size_t)dbytes + 16);
    if (q.mode == MX_QUANT_NONE) {
        for (int64_t i = 0; i < experts * rows * cols; i++) store_float(data, dtype, i, ref_uniform(r, -0.1f, 0.1f));
    } else {
        for (int64_t i = 0; i < dbytes; i++) data[i] = (uint8_t)ref_next(r);
    }
    m.data = data;
    if (q.mode != MX_QUANT_NONE) {
        int64_t ns = experts * rows * (cols / q.group_size);
        void *scales = malloc((size_t)(mx_matrix_scale_bytes(&m) + 16));
        void *biases = NULL;
        if (q.mode == MX_QUANT_AFFINE) {
            biases = malloc((size_t)(mx_matrix_scale_bytes(&m) + 16));
            float range = (float)((1 << q.bits) - 1);
            for (int64_t i = 0; i < ns; i++) {
                store_float(scales, scale_dtype, i, ref_uniform(r, -0.2f, 0.2f) / range);
                store_float(biases, scale_dtype, i, ref_uniform(r, -0.1f, 0.1f));
            }
        } else {
            uint8_t *s = scales;
            for (int64_t i = 0; i < ns; i++)
                s[i] = q.mode == MX_QUANT_NVFP4 ? (uint8_t)(0x18 + ref_next(r) % 24)  // e4m3 about 2^-4 .. 2^-1
                                                : (uint8_t)(118 + ref_next(r) % 8);   // e8m0 2^-9 .. 2^-2
        }
        m.scales = scales;
        m.biases = biases;
    }
    return m;
}

void ref_matrix_free(mx_matrix *m) {
    free((void *)m->data);
    free((void *)m->scales);
    free((void *)m->biases);
    memset(m, 0, sizeof *m);
}

const char *ref_matrix_label(const mx_matrix *m, char *buf, int cap) {
    if (m->q.mode == MX_QUANT_NONE)
        snprintf(buf, cap, "dense %s", mx_dtype_name(m->dtype));
    else if (m->q.mode == MX_QUANT_AFFINE)
        snprintf(buf, cap, "affine %db g%d %s", m->q.bits, m->q.group_size, mx_dtype_name(m->scale_dtype));
    else
        snprintf(buf, cap, "%s", mx_quant_mode_name(m->q.mode));
    return buf;
}

// float to bfloat16 and back, nearest with ties to even (finite inputs).
static float round_to_bf16(float v) {
    uint32_t u;
    memcpy(&u, &v, 4);
    u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    memcpy(&v, &u, 4);
    return v;
}

// One output: the dot of a dequantized row (values w, magnitudes mag) with x, and its error scales.
static float dot_row(const float *w, const double *mag, const float *x, int64_t cols, double bias, bool round_bf16,
                     ref_scale *scale) {
    double acc = bias, a = fabs(bias), e = fabs(bias);
    for (int64_t j = 0; j < cols; j++) {
        double wj = round_bf16 ? round_to_bf16(w[j]) : w[j], xj = round_bf16 ? round_to_bf16(x[j]) : x[j];
        acc += wj * xj;
        a += fabs(wj * xj);
        e += fabs(xj) * mag[j];
    }
    if (scale) *scale = (ref_scale){a, e};
    return (float)acc;
}

void ref_matmul(float *out, ref_scale *scale, const float *x, const mx_matrix *w, const float *bias, int n,
                bool round_bf16) {
    float *row = malloc(sizeof(float) * (size_t)w->cols);
    double *mag = malloc(sizeof(double) * (size_t)w->cols);
    for (int64_t r = 0; r < w->rows; r++) {
        fref_dequant_row(w, r, row, mag);
        for (int t = 0; t < n; t++) {
            int64_t o = (int64_t)t * w->rows + r;
            out[o] = dot_row(row, mag, x + (int64_t)t * w->cols, w->cols, bias ? bias[r] : 0.0, round_bf16,
                             scale ? &scale[o] : NULL);
        }
    }
    free(row);
    free(mag);
}

void ref_moe_matmul(float *out, ref_scale *scale, const float *x, const mx_matrix *w, const int32_t *ids, int m,
                    int x_div) {
    float *row = malloc(sizeof(float) * (size_t)w->cols);
    double *mag = malloc(sizeof(double) * (size_t)w->cols);
    for (int i = 0; i < m; i++) {
        for (int64_t r = 0; r < w->rows; r++) {
            int64_t o = (int64_t)i * w->rows + r;
            fref_dequant_row(w, (int64_t)ids[i] * w->rows + r, row, mag);
            out[o] = dot_row(row, mag, x + (int64_t)(i / x_div) * w->cols, w->cols, 0.0, false,
                             scale ? &scale[o] : NULL);
        }
    }
    free(row);
    free(mag);
}

void ref_embed(float *out, double *mag, const mx_matrix *w, const int32_t *ids, int n) {
    for (int t = 0; t < n; t++)
        fref_dequant_row(w, ids[t], out + (int64_t)t * w->cols, mag ? mag + (int64_t)t * w->cols : NULL);
}

void ref_rmsnorm(float *out, const float *x, const float *w, int n, int dim, float eps) {
    for (int t = 0; t < n; t++) {
        double ss = 0.0;
        for (int i = 0; i < dim; i++) ss += (double)x[(int64_t)t * dim + i] * x[(int64_t)t * dim + i];
        double r = 1.0 / sqrt(ss / dim + eps);
        for (int i = 0; i < dim; i++) out[(int64_t)t * dim + i] = (float)(x[(int64_t)t * dim + i] * r * w[i]);
    }
}

void ref_rope(float *x, const int32_t *pos, int n, int n_heads, const float *inv_freq, int head_dim, float attn_factor) {
    int half = head_dim / 2;
    for (int t = 0; t < n; t++)
        for (int h = 0; h < n_heads; h++) {
            float *v = x + ((int64_t)t * n_heads + h) * head_dim;
            for (int j = 0; j < half; j++) {
                double ang = (double)pos[t] * inv_freq[j];  // a double product, as the CPU backend's
                double c = cos(ang) * attn_factor, s = sin(ang) * attn_factor;
                double a = v[j], b = v[j + half];
                v[j] = (float)(a * c - b * s);
                v[j + half] = (float)(b * c + a * s);
            }
        }
}

void ref_kv_round(float *row, int hd, mx_dtype dt) {
    if (dt == MX_DTYPE_I16) {
        for (int b0 = 0; b0 < hd; b0 += MX_KV_SCALE_BLOCK) {
            int len = hd - b0 < MX_KV_SCALE_BLOCK ? hd - b0 : MX_KV_SCALE_BLOCK;
            float amax = 0.0f;
            for (int i = 0; i < len; i++) amax = fmaxf(amax, fabsf(row[b0 + i]));
            float inv = amax > 0.0f ? 32767.0f / amax : 0.0f, s = amax / 32767.0f;
            for (int i = 0; i < len; i++) row[b0 + i] = (float)(int16_t)lrintf(row[b0 + i] * inv) * s;
        }
    } else if (dt == MX_DTYPE_F16) {
        for (int i = 0; i < hd; i++) row[i] = mx_f16_to_f32(mx_f32_to_f16(row[i]));
    } else if (dt == MX_DTYPE_BF16) {
        for (int i = 0; i < hd; i++) row[i] = mx_bf16_to_f32(mx_f32_to_bf16(row[i]));
    }
}

void ref_attention(float *out, const float *q, const float *k_cache, const float *v_cache, int max_ctx,
                   int n_kv_heads, int head_dim, const int32_t *slot, const int32_t *pos, int n, int n_heads,
                   float scale, int window) {
    int group = n_heads / n_kv_heads;
    double *sc = malloc(sizeof(double) * (size_t)max_ctx);
    for (int t = 0; t < n; t++)
        for (int h = 0; h < n_heads; h++) {
            int kvh = h / group, p = pos[t], lo = window > 0 && p - window + 1 > 0 ? p - window + 1 : 0;
            const float *qv = q + ((int64_t)t * n_heads + h) * head_dim;
            double mx = -INFINITY, sum = 0.0;
            for (int k = lo; k <= p; k++) {
                const float *kv = k_cache + (((int64_t)slot[t] * max_ctx + k) * n_kv_heads + kvh) * head_dim;
                double d = 0.0;
                for (int i = 0; i < head_dim; i++) d += (double)qv[i] * kv[i];
                sc[k] = d * scale;
                if (sc[k] > mx) mx = sc[k];
            }
            for (int k = lo; k <= p; k++) sum += (sc[k] = exp(sc[k] - mx));
            for (int i = 0; i < head_dim; i++) {
                double acc = 0.0;
                for (int k = lo; k <= p; k++)
                    acc += sc[k] * v_cache[(((int64_t)slot[t] * max_ctx + k) * n_kv_heads + kvh) * head_dim + i];
                out[((int64_t)t * n_heads + h) * head_dim + i] = (float)(acc / sum);
            }
        }
    free(sc);
}

// The routers' order on (probability, expert): NaN ranks above every number, then the larger value,
// then the smaller index (also among NaNs). A NaN or infinite logit makes the softmax's sum NaN, so
// the probabilities are all NaN or none, and with NaN each pass takes the first expert not yet
// taken: what the CPU backend (cpu_moe_route) and the GPU kernel (moe.cu) choose.
static bool route_better(double v, int e, double best_v, int best_e) {
    if (isnan(v) != isnan(best_v)) return isnan(v);
    if (isnan(v) || v == best_v) return e < best_e;
    return v > best_v;
}

void ref_moe_route(int32_t *ids, float *weights, const float *logits, int n, int n_experts, int k, bool norm) {
    double *p = malloc(sizeof(double) * (size_t)n_experts);
    bool *taken = malloc(sizeof(bool) * (size_t)n_experts);
    for (int t = 0; t < n; t++) {
        const float *l = logits + (int64_t)t * n_experts;
        double mx = -INFINITY, sum = 0.0, picked = 0.0;
        for (int e = 0; e < n_experts; e++) mx = l[e] > mx ? l[e] : mx;
        for (int e = 0; e < n_experts; e++) sum += (p[e] = exp(l[e] - mx));
        for (int e = 0; e < n_experts; e++) {
            p[e] /= sum;
            taken[e] = false;
        }
        for (int j = 0; j < k; j++) {
            int best = -1;
            for (int e = 0; e < n_experts; e++)
                if (!taken[e] && (best < 0 || route_better(p[e], e, p[best], best))) best = e;
            ids[t * k + j] = best;
            weights[t * k + j] = (float)p[best];
            picked += p[best];
            taken[best] = true;
        }
        if (norm)
            for (int j = 0; j < k; j++) weights[t * k + j] = (float)(weights[t * k + j] / picked);
    }
    free(taken);
    free(p);
}

double ref_rel_err(const float *a, const float *b, int64_t n) {
    double num = 0.0, den = 0.0;
    for (int64_t i = 0; i < n; i++) {
        if (isnan(a[i]) || isnan(b[i])) return INFINITY;
        double d = (double)a[i] - b[i];
        num += d * d;
        den += (double)b[i] * b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}
