// SPDX-License-Identifier: MIT
// The CPU reference kernels of the records added for the Gemma 3, Phi-3 and DeepSeek-V3 families,
// against their formulas written out here in double: GeLU-tanh gating (also in place), the scale
// record, RoPE with a partial rotary dimension and longrope's long table from a position on, the
// latent cache and latent attention, and grouped routing on a case where the group choice and the
// score correction bias decide the experts. (The GPU kernels of
// the same records are checked by tests/gpu/test_gpu_ops.c; the families end to end by
// test_model_parity.)
#include <math.h>
#include <stdlib.h>

#include "backends/backend.h"
#include "backends/plan.h"
#include "check.h"
#include "test_cpu.h"
#include "test_formula.h"

static void test_geglu_scale(mx_backend *be) {
    enum { N = 257 };
    float gate[N], up[N], out[N];
    double want[N];
    for (int i = 0; i < N; i++) {
        gate[i] = -6.0f + 12.0f * i / (N - 1);
        up[i] = 0.5f + 0.01f * i;
        double g = gate[i];
        want[i] = 0.5 * g * (1.0 + tanh(sqrt(2.0 / M_PI) * (g + 0.044715 * g * g * g))) * up[i];
    }
    mx_error err = {{0}};
    CHECK(mx_run_op(be, (mx_op){.kind = MX_OP_GEGLU, .geglu = {out, gate, up, N}}, &err) == 0);
    CHECK_MSG(max_rel(out, want, N) < 1e-6, "geglu rel err %.3g", max_rel(out, want, N));
    CHECK(mx_run_op(be, (mx_op){.kind = MX_OP_GEGLU, .geglu = {gate, gate, up, N}}, &err) == 0);  // in place
    CHECK_MSG(max_rel(gate, want, N) < 1e-6, "geglu in place rel err %.3g", max_rel(gate, want, N));
    for (int i = 0; i < N; i++) want[i] = (double)up[i] * 11.3137085f;
    CHECK(mx_run_op(be, (mx_op){.kind = MX_OP_SCALE, .scale = {up, N, 11.3137085f}}, &err) == 0);
    CHECK_MSG(max_rel(up, want, N) < 1e-7, "scale rel err %.3g", max_rel(up, want, N));
}

// Phi-3 style: 24 of 32 dimensions rotate; positions from 512 on use the long table.
static void test_rope_partial_long(mx_backend *be) {
    enum { T = 4, HEADS = 2, HD = 32, ROT = 24, HALF = ROT / 2 };
    float x[T * HEADS * HD], inv[2 * HALF];
    double want[T * HEADS * HD];
    int32_t pos[T] = {3, 511, 512, 900};
    for (int j = 0; j < HALF; j++) {
        inv[j] = (float)(pow(10000.0, -2.0 * j / ROT) / (1.0 + 0.1 * j));
        inv[HALF + j] = (float)(pow(10000.0, -2.0 * j / ROT) / (1.0 + 0.9 * j));
    }
    for (int i = 0; i < T * HEADS * HD; i++) x[i] = want[i] = sinf(0.37f * i);
    const double attn = 1.2;
    for (int t = 0; t < T; t++)
        for (int h = 0; h < HEADS; h++) {
            double *v = want + (t * HEADS + h) * HD;
            const float *f = pos[t] >= 512 ? inv + HALF : inv;
            for (int j = 0; j < HALF; j++) {
                double ang = (double)pos[t] * f[j], a = v[j], b = v[j + HALF];
                v[j] = a * cos(ang) * attn - b * sin(ang) * attn;
                v[j + HALF] = b * cos(ang) * attn + a * sin(ang) * attn;
            }
        }
    mx_rope rope = {.inv_freq = inv, .head_dim = HD, .attn_factor = (float)attn, .rot_dim = ROT,
                    .long_inv_freq = inv + HALF, .long_from = 512};
    mx_error err = {{0}};
    CHECK(mx_run_op(be, (mx_op){.kind = MX_OP_ROPE, .rope = {x, pos, T, HEADS, rope}}, &err) == 0);
    CHECK_MSG(max_rel(x, want, T * HEADS * HD) < 1e-6, "rope rel err %.3g", max_rel(x, want, T * HEADS * HD));
    // Dimensions past rot_dim pass through unchanged.
    CHECK(x[ROT] == sinf(0.37f * ROT) && x[HD - 1] == sinf(0.37f * (HD - 1)));
}

// Two prefilled sequences; every token attends over its own slot's latent rows 0..pos.
static void test_latent_attention(mx_backend *be) {
    enum { NH = 3, KL = 8, R = 4, N = 7, W = KL + R };
    const int32_t pos[N] = {0, 1, 2, 3, 4, 0, 1}, slot[N] = {0, 0, 0, 0, 0, 1, 1};
    float c_kv[N * KL], k_pe[N * R], q_lat[N * NH * KL], q_pe[N * NH * R], out[N * NH * KL];
    for (int i = 0; i < N * KL; i++) c_kv[i] = sinf(0.7f * i);
    for (int i = 0; i < N * R; i++) k_pe[i] = cosf(1.3f * i);
    for (int i = 0; i < N * NH * KL; i++) q_lat[i] = sinf(0.37f * i + 1);
    for (int i = 0; i < N * NH * R; i++) q_pe[i] = cosf(0.91f * i + 2);
    const float scale = 0.4f;
    mx_kv_layout lay = {2, 2, 8, 1, W / 2, 0};
    mx_error err = {{0}};
    void *kv = be->ops->alloc(be, mx_kv_bytes(&lay, be->kv_dtype), &err);
    CHECK(kv != NULL);
    if (!kv) return;
    mx_kv_ref ref = {kv, lay, 1, slot, pos, NULL};
    CHECK(mx_run_op(be, (mx_op){.kind = MX_OP_LATENT_STORE, .latent_store = {ref, c_kv, k_pe, N, KL, R}}, &err) == 0);
    CHECK(mx_run_op(be, (mx_op){.kind = MX_OP_LATENT_ATTENTION,
                                .latent_attention = {out, q_lat, q_pe, ref, N, NH, KL, R, scale}}, &err) == 0);
    double want[N * NH * KL];
    for (int t = 0; t < N; t++)
        for (int h = 0; h < NH; h++) {
            const float *ql = q_lat + (t * NH + h) * KL, *qp = q_pe + (t * NH + h) * R;
            double sc[8], mx = -INFINITY, sum = 0;
            int first = t - pos[t];  // the token holding position 0 of this slot
            for (int p = 0; p <= pos[t]; p++) {
                double d = 0;
                for (int i = 0; i < KL; i++) d += (double)ql[i] * c_kv[(first + p) * KL + i];
                for (int i = 0; i < R; i++) d += (double)qp[i] * k_pe[(first + p) * R + i];
                sc[p] = scale * d;
                mx = fmax(mx, sc[p]);
            }
            for (int p = 0; p <= pos[t]; p++) sum += sc[p] = exp(sc[p] - mx);
            for (int i = 0; i < KL; i++) {
                double o = 0;
                for (int p = 0; p <= pos[t]; p++) o += sc[p] / sum * c_kv[(first + p) * KL + i];
                want[(t * NH + h) * KL + i] = o;
            }
        }
    double e = max_rel(out, want, N * NH * KL);
    CHECK_MSG(e < 1e-5, "latent attention rel err %.3g", e);
    be->ops->release(be, kv);
}

// Sigmoid scores s (logits = logit(s)); two groups of four. Expert 0 is the best alone, but group 1
// has the larger sum of its two best biased scores, so the choice is made inside group 1, where the
// bias (+0.3 on expert 6, -0.3 on expert 5) moves expert 6 ahead of 5. Weights use s, not s + bias.
static void test_grouped_route(mx_backend *be) {
    const double s[8] = {0.95, 0.10, 0.10, 0.10, 0.60, 0.55, 0.20, 0.20};
    float logits[8], bias[8] = {0, 0, 0, 0, 0, -0.3f, 0.3f, 0}, weights[2];
    for (int e = 0; e < 8; e++) logits[e] = (float)log(s[e] / (1 - s[e]));
    int32_t ids[2] = {-1, -1};
    mx_error err = {{0}};
    CHECK(mx_run_op(be, (mx_op){.kind = MX_OP_MOE_ROUTE_GROUPED,
                                .moe_route_grouped = {ids, weights, logits, bias, 1, 8, 2, 2, 1, true, 2.5f}}, &err) == 0);
    CHECK_MSG(ids[0] == 4 && ids[1] == 6, "ids %d %d", ids[0], ids[1]);
    CHECK_MSG(fabs(weights[0] - 0.6 / 0.8 * 2.5) < 1e-5 && fabs(weights[1] - 0.2 / 0.8 * 2.5) < 1e-5, "weights %g %g",
              weights[0], weights[1]);
    // Without renormalization the weights are the scores times the scaling factor.
    CHECK(mx_run_op(be, (mx_op){.kind = MX_OP_MOE_ROUTE_GROUPED,
                                .moe_route_grouped = {ids, weights, logits, bias, 1, 8, 2, 2, 1, false, 2.5f}}, &err) == 0);
    CHECK_MSG(fabs(weights[0] - 0.6 * 2.5) < 1e-5 && fabs(weights[1] - 0.2 * 2.5) < 1e-5, "weights %g %g", weights[0],
              weights[1]);
}

// NaN router logits (NaN weights, or a RoPE base that overflows the frequencies) route to real
// experts: every pass used to skip NaN probabilities, found none, and wrote probs[-1].
static void test_route_nan(mx_backend *be) {
    float logits[2][4] = {{NAN, 1.0f, 2.0f, 0.5f}, {NAN, NAN, NAN, NAN}}, weights[4];
    int32_t ids[4] = {-9, -9, -9, -9};
    mx_error err = {{0}};
    CHECK(mx_run_op(be, (mx_op){.kind = MX_OP_MOE_ROUTE, .moe_route = {ids, weights, &logits[0][0], 2, 4, 2, true}}, &err) == 0);
    for (int i = 0; i < 4; i++) CHECK_MSG(ids[i] >= 0 && ids[i] < 4, "NaN routing: id %d of row %d", ids[i], i / 2);
    CHECK_MSG(ids[2] != ids[3], "one expert chosen twice: %d", ids[2]);
}

int main(void) {
    setenv("MLXCEL_CPU_KV", "f32", 1);  // a float32 cache: the latent attention check is exact up to summation order
    mx_backend *be = test_cpu_backend(1);
    if (!be) return check_finish();
    test_geglu_scale(be);
    test_rope_partial_long(be);
    test_latent_attention(be);
    test_grouped_route(be);
    test_route_nan(be);
    mx_backend_free(be);
    return check_finish();
}
