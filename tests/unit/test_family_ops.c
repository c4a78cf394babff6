// SPDX-License-Identifier: MIT
// The CPU reference kernels of the records added for the Gemma 3 and Phi-3 families, against their
// formulas written out here in double: GeLU-tanh gating (also in place), the scale record, and RoPE
// with a partial rotary dimension and longrope's long table from a position on. (The GPU kernels of
// the same records are checked by tests/gpu/test_gpu_ops.c; the families end to end by
// test_model_parity.)
#include <math.h>
#include <stdlib.h>

#include "backends/backend.h"
#include "backends/plan.h"
#include "check.h"

static double max_rel(const float *got, const double *want, int n) {
    double md = 0, mw = 0;
    for (int i = 0; i < n; i++) {
        md = fmax(md, fabs(got[i] - want[i]));
        mw = fmax(mw, fabs(want[i]));
    }
    return mw > 0 ? md / mw : md;
}

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

int main(void) {
    mx_backend_options opt = {.name = "cpu", .threads = 1};
    mx_error err = {{0}};
    mx_backend *be = mx_backend_create(&opt, &err);
    CHECK_MSG(be != NULL, "%s", err.msg);
    if (!be) return check_finish();
    test_geglu_scale(be);
    test_rope_partial_long(be);
    mx_backend_free(be);
    return check_finish();
}
