// SPDX-License-Identifier: MIT
// The GPU's MoE router (kernels/moe.cu, mxg_moe_route) on the host emulation (emu.h) against the CPU
// backend's (cpu_moe_route): the same experts in the same order, and weights within 1e-5 of the CPU's
// (NaN where the CPU's are NaN). Cases: random logits (60 and 128 experts, 4 and 8 chosen, warps of 32
// and 64), ties, and router logits that are NaN or infinite (NaN weights, a degenerate RoPE base): a
// NaN or +-inf logit makes every probability NaN and each pass takes the first expert not yet taken,
// and -inf alone gives probability 0. The kernel before this check wrote index 0x7fffffff there.
// Built and run by run.sh; exits 1 on any failure.
#include "emu.h"
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>
extern "C" {
#include "backends/backend.h"
#include "backends/plan.h"
}
#include "backends/gpu/kernels.h"

static int fails = 0;

static void route_case(mx_backend *cpu, const mxg_launch *L, const char *name, const std::vector<float> &logits, int n,
                       int n_experts, int k, bool norm) {
    std::vector<int32_t> ids_gpu(n * k, -7), ids_cpu(n * k, -9);
    std::vector<float> w_gpu(n * k, 12345.0f), w_cpu(n * k, -12345.0f);
    mxg_moe_route(L, ids_gpu.data(), w_gpu.data(), logits.data(), n, n_experts, k, norm);
    mx_error err = {{0}};
    mx_op op = {.kind = MX_OP_MOE_ROUTE};
    op.moe_route = {ids_cpu.data(), w_cpu.data(), logits.data(), n, n_experts, k, norm};
    if (mx_run_op(cpu, op, &err)) { printf("cpu op: %s\n", err.msg); exit(1); }
    int bad = 0;
    for (int i = 0; i < n * k; i++) {
        bool id_ok = ids_gpu[i] == ids_cpu[i] && ids_gpu[i] >= 0 && ids_gpu[i] < n_experts;
        bool w_ok = std::isnan(w_cpu[i]) ? (bool)std::isnan(w_gpu[i])
                                         : std::fabs(w_gpu[i] - w_cpu[i]) <= 1e-5f * std::fmax(1.0f, std::fabs(w_cpu[i]));
        if (!id_ok || !w_ok) {
            if (bad++ < 4)
                printf("  %s (norm %d, warp %d) token %d choice %d: gpu expert %d weight %g, cpu expert %d weight %g\n", name,
                       norm, L->warp, i / k, i % k, ids_gpu[i], w_gpu[i], ids_cpu[i], w_cpu[i]);
        }
    }
    printf("moe_route %s: %d experts, k %d, norm %d, warp %d: %s\n", name, n_experts, k, norm, L->warp,
           bad ? "FAIL" : "ok");
    fails += bad != 0;
}

static uint64_t rs = 0x2545f4914f6cdd1dull;
static float rnd(float lo, float hi) {
    rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
    return lo + (hi - lo) * (float)((rs >> 40) * (1.0 / 16777216.0));
}

int main() {
    setvbuf(stdout, NULL, _IOLBF, 0);
    mx_error err = {{0}};
    mx_backend_options o = {"cpu", 1, 0};
    mx_backend *cpu = mx_backend_create(&o, &err);
    if (!cpu) { printf("%s\n", err.msg); return 1; }
    mxg_launch L;
    memset(&L, 0, sizeof L);
    const float nan = NAN, inf = INFINITY;
    for (int warp = 32; warp <= 64; warp += 32) {
        L.warp = warp;
        for (int norm = 0; norm <= 1; norm++) {
            const int n = 5, E = norm ? 128 : 60, k = norm ? 8 : 4;
            std::vector<float> l(n * E);
            for (auto &x : l) x = rnd(-4, 4);
            l[E + 3] = l[E + 40] = l[E + 41] = 9.0f;  // ties: the first index wins
            route_case(cpu, &L, "random", l, n, E, k, norm);
            // Each row a way to be NaN or infinite: NaN first, NaN inside, all NaN, one +inf, two +inf,
            // +inf and -inf, all -inf, -inf everywhere but 2 experts (fewer than k finite), one -inf.
            const int rows = 9;
            std::vector<float> b(rows * E);
            for (auto &x : b) x = rnd(-4, 4);
            b[0 * E + 0] = nan;
            b[1 * E + E / 2] = nan;
            for (int e = 0; e < E; e++) b[2 * E + e] = nan;
            b[3 * E + 7] = inf;
            b[4 * E + 1] = inf, b[4 * E + E - 1] = inf;
            b[5 * E + 0] = -inf, b[5 * E + 5] = inf;
            for (int e = 0; e < E; e++) b[6 * E + e] = -inf;
            for (int e = 0; e < E; e++)
                if (e != 11 && e != E - 3) b[7 * E + e] = -inf;
            b[8 * E + 2] = -inf;
            route_case(cpu, &L, "nan/inf", b, rows, E, k, norm);
            // Every expert chosen (k = n_experts) from all-NaN logits: each pass must find an untaken one.
            std::vector<float> all(2 * 6, nan);
            all[6 + 2] = inf;
            route_case(cpu, &L, "nan, k = experts", all, 2, 6, 6, norm);
        }
    }
    mx_backend_free(cpu);
    printf("%d failures\n", fails);
    return fails != 0;
}
