// SPDX-License-Identifier: MIT
// The CPU reference of the records gpt_oss adds, against their formulas written out here in double:
// attention with sinks (a logit per query head in the softmax's denominator, no value) over a GQA
// cache with and without a sliding window, under the scalar and the AVX-512 attention kernels,
// including a sink far above every score; the clamped SwiGLU (also in place) on inputs on both
// sides of the limits; the per-expert bias of MoE rows; and gpt_oss's routing (top k of the router
// logits, softmax over those k), which is the moe_route record with norm_topk (softmax over all,
// top k, renormalized: the same weights). The GPU kernels of the same records are compared with
// these by tests/gpu/test_gpu_conformance.c; the family end to end by test_model_parity.
#include <math.h>
#include <stdlib.h>

#include "backends/backend.h"
#include "backends/cpu/cpu_kernels.h"
#include "backends/plan.h"
#include "check.h"
#include "test_cpu.h"
#include "test_formula.h"

enum { NH = 4, NKV = 2, HD = 32, N = 9, CTX = 32 };

// Two sequences in one batch: slot 0 at positions 0..5, slot 1 at 0..2. window 0: all keys.
static void attention_case(mx_backend *be, const float *sinks, int window, const char *what) {
    const int32_t pos[N] = {0, 1, 2, 3, 4, 5, 0, 1, 2}, slot[N] = {0, 0, 0, 0, 0, 0, 1, 1, 1};
    float q[N * NH * HD], k[N * NKV * HD], v[N * NKV * HD], out[N * NH * HD];
    for (int i = 0; i < N * NH * HD; i++) q[i] = sinf(0.37f * i + 0.5f);
    for (int i = 0; i < N * NKV * HD; i++) k[i] = cosf(0.71f * i), v[i] = sinf(1.3f * i + 2.0f);
    const float scale = 0.45f;
    mx_kv_layout lay = {1, 2, CTX, NKV, HD, 0};
    mx_error err = {{0}};
    void *kv = be->ops->alloc(be, mx_kv_bytes(&lay, be->kv_dtype), &err);
    CHECK(kv != NULL);
    if (!kv) return;
    mx_kv_ref ref = {kv, lay, 0, slot, pos, NULL};
    CHECK(mx_run_op(be, (mx_op){.kind = MX_OP_KV_STORE, .kv_store = {ref, k, v, N}}, &err) == 0);
    CHECK(mx_run_op(be, (mx_op){.kind = MX_OP_ATTENTION, .attention = {out, q, ref, N, NH, scale, window, sinks}},
                    &err) == 0);
    double want[N * NH * HD];
    for (int t = 0; t < N; t++)
        for (int h = 0; h < NH; h++) {
            const float *qr = q + (t * NH + h) * HD;
            int kvh = h / (NH / NKV), first = t - pos[t];  // the token holding position 0 of this slot
            int lo = window > 0 && pos[t] - window + 1 > 0 ? pos[t] - window + 1 : 0;
            double sc[CTX], mx = sinks ? sinks[h] : -INFINITY, sum = 0;
            for (int p = lo; p <= pos[t]; p++) {
                double d = 0;
                for (int i = 0; i < HD; i++) d += (double)qr[i] * k[((first + p) * NKV + kvh) * HD + i];
                sc[p] = scale * d;
                mx = fmax(mx, sc[p]);
            }
            for (int p = lo; p <= pos[t]; p++) sum += sc[p] = exp(sc[p] - mx);
            if (sinks) sum += exp(sinks[h] - mx);
            for (int i = 0; i < HD; i++) {
                double o = 0;
                for (int p = lo; p <= pos[t]; p++) o += sc[p] / sum * v[((first + p) * NKV + kvh) * HD + i];
                want[(t * NH + h) * HD + i] = o;
            }
        }
    int nonfinite = 0;
    for (int i = 0; i < N * NH * HD; i++) nonfinite += !isfinite(out[i]);
    CHECK_MSG(nonfinite == 0, "attention %s (%s kernels): %d outputs not finite", what, cpu_kernels_name(), nonfinite);
    double e = max_rel(out, want, N * NH * HD);
    CHECK_MSG(e < 2e-6, "attention %s (%s kernels) rel err %.3g", what, cpu_kernels_name(), e);
    be->ops->release(be, kv);
}

static void test_sinks(mx_backend *be) {
    const float sinks[NH] = {0.8f, -1.5f, 2.5f, 0.0f};
    const float huge[NH] = {60.0f, -60.0f, 0.3f, 95.0f};  // e^95 overflows float: the safe form must hold
    const char *sets[] = {"scalar", "avx512"};
    int tested = 0;
    for (int s = 0; s < 2; s++) {
        if (cpu_kernels_select(sets[s]) != 0) {
            printf("kernel set %s: not supported by this CPU, not tested\n", sets[s]);
            continue;
        }
        tested++;
        attention_case(be, NULL, 0, "without sinks");
        attention_case(be, sinks, 0, "with sinks");
        attention_case(be, sinks, 3, "with sinks, window 3");
        attention_case(be, huge, 0, "with large sinks");
    }
    CHECK_MSG(tested >= 1, "no attention kernel set tested");
}

static double clamped_swiglu(double g, double u, double limit, double alpha) {
    g = fmin(g, limit);
    u = fmin(fmax(u, -limit), limit);
    return g / (1.0 + exp(-alpha * g)) * (u + 1.0);
}

static void test_swiglu_clamped(mx_backend *be) {
    enum { C = 301 };
    float gate[C], up[C], out[C];
    double want[C];
    const float limit = 7.0f, alpha = 1.702f;
    for (int i = 0; i < C; i++) {
        gate[i] = -12.0f + 24.0f * i / (C - 1);  // both sides of +-limit
        up[i] = 10.0f * cosf(0.13f * i);
        want[i] = clamped_swiglu(gate[i], up[i], limit, alpha);
    }
    mx_error err = {{0}};
    CHECK(mx_run_op(be, (mx_op){.kind = MX_OP_SWIGLU_CLAMPED, .swiglu_clamped = {out, gate, up, C, limit, alpha}},
                    &err) == 0);
    CHECK_MSG(max_rel(out, want, C) < 1e-6, "swiglu_clamped rel err %.3g", max_rel(out, want, C));
    // Above the limit the gate is clamped: gate 12 gives what gate 7 gives.
    CHECK_MSG(fabs(out[C - 1] - clamped_swiglu(7.0, up[C - 1], limit, alpha)) < 1e-5, "clamp at %g", out[C - 1]);
    CHECK(mx_run_op(be, (mx_op){.kind = MX_OP_SWIGLU_CLAMPED, .swiglu_clamped = {gate, gate, up, C, limit, alpha}},
                    &err) == 0);
    CHECK_MSG(max_rel(gate, want, C) < 1e-6, "swiglu_clamped in place rel err %.3g", max_rel(gate, want, C));
}

static void test_expert_bias(mx_backend *be) {
    enum { E = 4, M = 6, DIM = 5 };
    float x[M * DIM], bias[E * DIM];
    const int32_t ids[M] = {3, 0, 3, 1, 2, 0};
    double want[M * DIM];
    for (int i = 0; i < E * DIM; i++) bias[i] = 0.25f * i - 2.0f;
    for (int r = 0; r < M; r++)
        for (int c = 0; c < DIM; c++) {
            x[r * DIM + c] = sinf((float)(r * DIM + c));
            want[r * DIM + c] = (double)x[r * DIM + c] + bias[ids[r] * DIM + c];
        }
    mx_error err = {{0}};
    CHECK(mx_run_op(be, (mx_op){.kind = MX_OP_EXPERT_BIAS, .expert_bias = {x, bias, ids, M, DIM}}, &err) == 0);
    CHECK_MSG(max_rel(x, want, M * DIM) < 1e-7, "expert_bias rel err %.3g", max_rel(x, want, M * DIM));
}

// gpt_oss routing: torch.topk of the logits, then softmax over the k chosen logits.
static void test_topk_softmax_route(mx_backend *be) {
    enum { T = 3, E = 8, K = 3 };
    const float logits[T * E] = {0.3f, -1.2f, 2.5f, 0.9f, 2.4f, -0.1f, 1.7f, 0.0f,
                                 -3.0f, -2.0f, -1.0f, -4.0f, -0.5f, -6.0f, -2.5f, -1.5f,
                                 12.0f, 11.5f, -20.0f, 3.0f, 0.0f, 11.9f, 2.0f, -1.0f};
    const int32_t want_ids[T * K] = {2, 4, 6, 4, 2, 7, 0, 5, 1};
    int32_t ids[T * K];
    float weights[T * K];
    mx_error err = {{0}};
    CHECK(mx_run_op(be, (mx_op){.kind = MX_OP_MOE_ROUTE, .moe_route = {ids, weights, logits, T, E, K, true}}, &err) == 0);
    for (int t = 0; t < T; t++) {
        double sum = 0, w[K];
        for (int j = 0; j < K; j++) sum += w[j] = exp((double)logits[t * E + want_ids[t * K + j]] - logits[t * E + want_ids[t * K]]);
        for (int j = 0; j < K; j++) {
            CHECK_MSG(ids[t * K + j] == want_ids[t * K + j], "token %d choice %d: expert %d, expected %d", t, j,
                      ids[t * K + j], want_ids[t * K + j]);
            CHECK_MSG(fabs(weights[t * K + j] - w[j] / sum) < 1e-6, "token %d weight %d: %g, expected %g", t, j,
                      weights[t * K + j], w[j] / sum);
        }
    }
}

int main(void) {
    setenv("MLXCEL_CPU_KV", "f32", 1);  // a float32 cache: attention is exact up to summation order
    mx_backend *be = test_cpu_backend(2);
    if (!be) return check_finish();
    test_sinks(be);
    test_swiglu_clamped(be);
    test_expert_bias(be);
    test_topk_softmax_route(be);
    mx_backend_free(be);
    return check_finish();
}
