// SPDX-License-Identifier: MIT
// The GPU's MoE router (kernels/moe.cu, mxg_moe_route) on the host emulation (emu.h) against the CPU
// backend's (cpu_moe_route): the same experts in the same order, and weights within 1e-5 of the CPU's
// (NaN where the CPU's are NaN). Cases: random logits (60 and 128 experts, 4 and 8 chosen, warps of 32
// and 64), ties, and router logits that are NaN or infinite (NaN weights, a degenerate RoPE base): a
// NaN or +-inf logit makes every probability NaN and each pass takes the first expert not yet taken,
// and -inf alone gives probability 0. The kernel before this check wrote index 0x7fffffff there.
// The routing runs on one warp (kernels/moe_route.cuh); its ids and weights must also be bit for bit
// those of the block form of 128 threads it replaced (route_block_form, that form's arithmetic in
// its order on the host), on those cases and on ties across lanes and warps, 8 and 300 experts and
// k 70 (past a warp's lanes). Every routing case also runs the rank form (MLXCEL_GPU_MOE_ROUTE_RANK=1,
// L.moe_route_rank: a block per token, moe_route_rank), which must give the same bits and experts.
// The down launch under MLXCEL_GPU_PDL=3 (L.pdl_rest): the same bits, and its L2 prefetch before the
// grid wait inside the expert stack, at chosen experts' rows, 16-byte aligned and sized, within the
// launch's cap, none at level 2.
// Then the fused decode kernels (kernels/moe_stream.cu, MLXCEL_GPU_MOE_FUSED=1): gate/up + SwiGLU
// and down + combine against the double-precision reference of the records (tests/gpu/gpu_ref.c:
// its own dequantizer, ref_moe_matmul), relative error (L2) <= 1e-5 for gate, up, the SwiGLU and
// the down products; the combined output bit for bit equal to the combine record's arithmetic
// (out + sum_j fmaf(w_j, y_j), experts in order) on the kernel's own products; the SwiGLU written
// into the gate buffer (the records' aliasing) bit for bit equal to a separate one; with the
// routing folded in (level 2), the routing record's ids and weights (kernels/moe.cu) and the same
// product bits. Formats affine
// 4-bit g64 bf16 / g32 f16, 8-bit g128, mxfp4; 1-8 experts per token, 1-3 tokens, rows shorter than
// a warp's chunks, the 30B-A3B's widths (2048, 768; 16 experts); warps of 32 and 64. And what the
// launchers must decline (dense experts, 9 experts per token, staging over 48 KB, the switch off).
// Built and run by run.sh; exits 1 on any failure.
#include "emu.h"
#include "emu_random.h"
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>
extern "C" {
#include "backends/backend.h"
#include "backends/plan.h"
#include "gpu_ref.h"
}
#include "backends/gpu/kernels.h"
#include "backends/gpu/kernels_fused.h"

static int fails = 0;

// moe_route.cuh's pair order: larger first, then smaller index; NaN above every number.
static bool pair_first(float v, int i, float bv, int bi) {
    const bool v_nan = v != v, b_nan = bv != bv;
    if (v_nan != b_nan) return v_nan;
    return v_nan ? i < bi : v > bv || (v == bv && i < bi);
}

// The block form of the routing that the warp form replaced (a block of 128 threads: each thread's
// sum of the probabilities e = thread, thread + 128, ... in index order, each warp's xor-butterfly
// sum, the warps' sums added from warp 0; then k argmax passes in pair_first's order, the picks'
// sum in pass order), on the host in that order: the warp form must give its bits.
static void route_block_form(const float *l, int E, int k, bool norm, int W, int32_t *ids, float *w) {
    const int T = 128;
    float mx = -INFINITY;
    for (int e = 0; e < E; e++) mx = fmaxf(mx, l[e]);
    std::vector<float> probs(E), part(T, 0.0f);
    for (int t = 0; t < T; t++)
        for (int e = t; e < E; e += T) {
            probs[e] = expf(l[e] - mx);
            part[t] += probs[e];
        }
    float sum = 0.0f;
    for (int wi = 0; wi < T / W; wi++) {
        std::vector<float> v(part.begin() + wi * W, part.begin() + (wi + 1) * W), nv(W);
        for (int o = W / 2; o > 0; o >>= 1) {
            for (int lane = 0; lane < W; lane++) nv[lane] = v[lane] + v[lane ^ o];
            v = nv;
        }
        sum += v[0];
    }
    for (int e = 0; e < E; e++) probs[e] /= sum;
    float picked = 0.0f;
    for (int j = 0; j < k; j++) {
        float v = -INFINITY;
        int idx = 0x7fffffff;
        for (int e = 0; e < E; e++)
            if (!(probs[e] < 0.0f) && pair_first(probs[e], e, v, idx)) v = probs[e], idx = e;
        ids[j] = idx, w[j] = v;
        probs[idx] = -1.0f;
        picked += v;
    }
    if (norm)
        for (int j = 0; j < k; j++) w[j] /= picked;
}

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
    // The block form's bits (ids and weights, NaN included).
    std::vector<int32_t> ids_block(n * k);
    std::vector<float> w_block(n * k);
    for (int t = 0; t < n; t++)
        route_block_form(logits.data() + (size_t)t * n_experts, n_experts, k, norm, L->warp, ids_block.data() + t * k,
                         w_block.data() + t * k);
    const bool block_same = ids_gpu == ids_block && memcmp(w_gpu.data(), w_block.data(), sizeof(float) * n * k) == 0;
    printf("moe_route %s%s: %d experts, k %d, norm %d, warp %d%s%s: %s\n", name, L->moe_route_rank ? " rank form" : "",
           n_experts, k, norm, L->warp,
           bad ? ", differs from the CPU's" : "", block_same ? "" : ", bits differ from the block form", bad || !block_same ? "FAIL" : "ok");
    fails += bad != 0 || !block_same;
}

static double rel(const std::vector<float> &a, const std::vector<float> &b) {
    return ref_rel_err(a.data(), b.data(), (int64_t)a.size());
}

static void fused_case(mx_quant q, mx_dtype dt, mx_dtype st, int n, int H, int E, int K, int I, int warp) {
    ref_rng r = {0x9e3779b97f4a7c15ull ^ (uint64_t)(n * 131 + H * 7 + K * 3 + I + warp)};
    mx_matrix wg = ref_matrix_random(&r, q, dt, st, E, I, H), wu = ref_matrix_random(&r, q, dt, st, E, I, H);
    mx_matrix wd = ref_matrix_random(&r, q, dt, st, E, H, I);
    const int m = n * K;
    std::vector<float> x(n * H), wts(m), res0(n * H);
    ref_fill(&r, x.data(), n * H, -1, 1);
    ref_fill(&r, wts.data(), m, 0, 1);
    ref_fill(&r, res0.data(), n * H, -2, 2);
    std::vector<int32_t> ids(m);
    for (int t = 0; t < n; t++)  // distinct experts per token, in random order
        for (int j = 0; j < K; j++) {
            int e;
            bool dup;
            do {
                e = (int)(ref_next(&r) % (uint64_t)E);
                dup = false;
                for (int i = 0; i < j; i++) dup |= ids[t * K + i] == e;
            } while (dup);
            ids[t * K + j] = e;
        }
    mxg_launch L;
    memset(&L, 0, sizeof L);
    L.warp = warp, L.sm_count = 132, L.moe_fused = 1;
    char label[96], ml[64];
    snprintf(label, sizeof label, "%s n=%d H=%d E=%d K=%d I=%d warp %d", ref_matrix_label(&wg, ml, sizeof ml), n, H, E,
             K, I, warp);
    if (!mxg_moe_gate_up_ok(&L, &wg, &wu, x.data(), m, K, 0) || !mxg_moe_down_combine_ok(&L, &wd, x.data(), n, K)) {
        printf("moe fused %s: FAIL (declined)\n", label);
        fails++;
        return;
    }
    std::vector<float> gate(m * I, 7.0f), up(m * I, 7.0f), act(m * I, 7.0f), gate2(m * I, 7.0f), up2(m * I);
    mxg_moe_gate_up(&L, gate.data(), up.data(), act.data(), x.data(), &wg, &wu, ids.data(), m, K, NULL);
    mxg_moe_gate_up(&L, gate2.data(), up2.data(), gate2.data(), x.data(), &wg, &wu, ids.data(), m, K, NULL);  // act = gate
    // Level 2: the routing in the same launch, from logits whose top K are the ids above (each
    // token's experts in order get the K largest logits; the rest lower): the record's ids and
    // weights (kernels/moe.cu, the same block size) and the products bit for bit.
    bool route_ok = true;
    {
        std::vector<float> logits((size_t)n * E);
        for (int t = 0; t < n; t++) {
            for (int e = 0; e < E; e++) logits[(size_t)t * E + e] = -4.0f + (float)(ref_next(&r) % 1000) * 1e-3f;
            for (int j = 0; j < K; j++) logits[(size_t)t * E + ids[t * K + j]] = 4.0f - 0.25f * (float)j;
        }
        std::vector<int32_t> rid(m, -1), rid_rec(m, -2);
        std::vector<float> rw(m, -1.0f), rw_rec(m, -2.0f), g3(m * I), u3(m * I), a3(m * I);
        mxg_moe_route(&L, rid_rec.data(), rw_rec.data(), logits.data(), n, E, K, true);
        L.moe_fused = 2;
        const mxg_moe_route_fold fold = {rid.data(), rw.data(), logits.data(), E, true};
        if (!mxg_moe_gate_up_ok(&L, &wg, &wu, x.data(), m, K, E)) {
            route_ok = false;
        } else {
            mxg_moe_gate_up(&L, g3.data(), u3.data(), a3.data(), x.data(), &wg, &wu, NULL, m, K, &fold);
            route_ok = rid == rid_rec && rid == ids && memcmp(rw.data(), rw_rec.data(), sizeof(float) * m) == 0 &&
                       memcmp(g3.data(), gate.data(), sizeof(float) * g3.size()) == 0 &&
                       memcmp(u3.data(), up.data(), sizeof(float) * u3.size()) == 0 &&
                       memcmp(a3.data(), act.data(), sizeof(float) * a3.size()) == 0;
        }
        L.moe_fused = 1;
    }
    std::vector<float> gref(m * I), uref(m * I), aref(m * I);
    ref_moe_matmul(gref.data(), NULL, x.data(), &wg, ids.data(), m, K);
    ref_moe_matmul(uref.data(), NULL, x.data(), &wu, ids.data(), m, K);
    for (int i = 0; i < m * I; i++) aref[i] = (float)((double)gate[i] / (1.0 + exp(-(double)gate[i])) * up[i]);
    const double eg = rel(gate, gref), eu = rel(up, uref), ea = rel(act, aref);
    const bool alias_ok = memcmp(gate2.data(), act.data(), sizeof(float) * act.size()) == 0 &&
                          memcmp(up2.data(), up.data(), sizeof(float) * up.size()) == 0;
    std::vector<float> y(m * H, 7.0f), out = res0, yref(m * H);
    mxg_moe_down_combine(&L, y.data(), out.data(), act.data(), &wd, ids.data(), wts.data(), n, K);
    ref_moe_matmul(yref.data(), NULL, act.data(), &wd, ids.data(), m, 1);
    const double ey = rel(y, yref);
    // Level 3's down launch (the combine's weights and out read early): the same bits.
    std::vector<float> y3(m * H, 7.0f), out3 = res0;
    L.moe_fused = 3;
    mxg_moe_down_combine(&L, y3.data(), out3.data(), act.data(), &wd, ids.data(), wts.data(), n, K);
    L.moe_fused = 1;
    const bool early_ok = y3 == y && memcmp(out3.data(), out.data(), sizeof(float) * out.size()) == 0;
    // The full-lane down form (MLXCEL_GPU_MOE_DOWN=1, at levels 1 and 3): products within 1e-5 of
    // the reference, the combine the record's arithmetic on the form's own products, bit for bit;
    // the output starts at res0, y at 7, so a row or expert left out shows.
    bool flat_ok = true;
    double eflat = 0;
    std::vector<float> yflat, outflat;  // level 1's
    for (int level = 1; level <= 3; level += 2) {
        std::vector<float> yf(m * H, 7.0f), outf = res0;
        L.moe_fused = level, L.moe_down = true;
        mxg_moe_down_combine(&L, yf.data(), outf.data(), act.data(), &wd, ids.data(), wts.data(), n, K);
        L.moe_fused = 1, L.moe_down = false;
        if (level == 1) yflat = yf, outflat = outf;
        eflat = std::fmax(eflat, rel(yf, yref));
        flat_ok &= rel(yf, yref) <= 1e-5;
        for (int t = 0; t < n; t++)
            for (int d = 0; d < H; d++) {
                float acc = 0.0f;
                for (int j = 0; j < K; j++) acc = fmaf(wts[t * K + j], yf[((int64_t)t * K + j) * H + d], acc);
                const float want = res0[t * H + d] + acc;
                flat_ok &= memcmp(&want, &outf[t * H + d], sizeof want) == 0;
            }
    }
    // MLXCEL_GPU_PDL=3 (L.pdl_rest) on the full-lane form: the same bits as without it; before the
    // grid wait each (warp, expert) lane's L2 prefetch of its expert's row inside the down stack's
    // buffers, 16-byte aligned and sized, the launch's total within its cap (small here, so the
    // budget binds where a row's codes pass 48 bytes), at least one, and each at an id's row; at
    // level 2 (the routing in the gate/up launch just before, so the ids not yet final) none.
    bool pdl_ok = true;
    char pdl_why[160] = "";
    {
        const size_t cap = (size_t)H * n * K * 48;  // ~48 bytes a (warp, expert): under a row's codes
        std::vector<float> yp(m * H, 7.0f), outp = res0, y2(m * H, 7.0f), out2 = res0;
        L.moe_down = true, L.dependent_launch = L.pdl_early = L.pdl_rest = true, L.pdl_prefetch = cap;
        emu_prefetches.clear();
        mxg_moe_down_combine(&L, yp.data(), outp.data(), act.data(), &wd, ids.data(), wts.data(), n, K);
        const std::vector<emu_range> pf = emu_prefetches;
        L.moe_fused = 2;
        emu_prefetches.clear();
        mxg_moe_down_combine(&L, y2.data(), out2.data(), act.data(), &wd, ids.data(), wts.data(), n, K);
        const bool none_at_2 = emu_prefetches.empty();
        L.moe_fused = 1, L.moe_down = false, L.dependent_launch = L.pdl_early = L.pdl_rest = false, L.pdl_prefetch = 0;
        const int64_t sb = mx_matrix_scale_bytes(&wd), row_bytes = mx_matrix_data_bytes(&wd) / (wd.n_experts * wd.rows);
        size_t total = 0;
        for (const emu_range &q : pf) {
            const uintptr_t a0 = (uintptr_t)q.p;
            const struct { const void *b; int64_t len; } bufs[3] = {
                {wd.data, mx_matrix_data_bytes(&wd)}, {wd.scales, sb}, {wd.biases, sb}};
            bool inside = false;
            for (const auto &b : bufs)
                inside = inside || (b.b && a0 >= (uintptr_t)b.b && a0 + q.bytes <= (uintptr_t)b.b + (uintptr_t)b.len);
            // A codes range starts in the row (expert ids[t, j], r) of some token t and pick j.
            bool at_id = a0 < (uintptr_t)wd.data || a0 >= (uintptr_t)wd.data + (uintptr_t)mx_matrix_data_bytes(&wd);
            if (!at_id) {
                const int64_t row = (int64_t)(a0 - (uintptr_t)wd.data) / row_bytes, e = row / wd.rows;
                for (int i = 0; i < m && !at_id; i++) at_id = ids[i] == e;
            }
            if (q.bytes == 0 || q.bytes % 16 || a0 % 16 || !inside || !at_id) {
                snprintf(pdl_why, sizeof pdl_why, ", a bad prefetch: %u bytes at %#lx%s", q.bytes, (unsigned long)a0,
                         inside ? (at_id ? "" : " (no chosen expert's row)") : " (outside the stack)");
                pdl_ok = false;
                break;
            }
            total += q.bytes;
        }
        if (pdl_ok && (pf.empty() || total > cap))
            snprintf(pdl_why, sizeof pdl_why, ", %zu prefetches of %zu bytes (cap %zu)", pf.size(), total, cap), pdl_ok = false;
        if (!none_at_2) snprintf(pdl_why, sizeof pdl_why, ", a prefetch at level 2"), pdl_ok = false;
        if (yp != yflat || memcmp(outp.data(), outflat.data(), sizeof(float) * outp.size()) != 0 || y2 != yflat)
            snprintf(pdl_why, sizeof pdl_why, ", MLXCEL_GPU_PDL=3 changed the products"), pdl_ok = false;
    }
    bool comb_ok = true;
    for (int t = 0; t < n; t++)
        for (int d = 0; d < H; d++) {
            float acc = 0.0f;
            for (int j = 0; j < K; j++) acc = fmaf(wts[t * K + j], y[((int64_t)t * K + j) * H + d], acc);
            const float want = res0[t * H + d] + acc;
            comb_ok &= memcmp(&want, &out[t * H + d], sizeof want) == 0;
        }
    const bool ok = eg <= 1e-5 && eu <= 1e-5 && ea <= 1e-5 && ey <= 1e-5 && alias_ok && comb_ok && route_ok &&
                    early_ok && flat_ok && pdl_ok;
    printf("moe fused %s: gate %.1e up %.1e act %.1e y %.1e full-lane y %.1e%s%s%s%s%s%s%s: %s\n", label, eg, eu, ea, ey,
           eflat, alias_ok ? "" : ", act in gate differs", comb_ok ? "" : ", combine differs",
           route_ok ? "" : ", routing folded in differs", early_ok ? "" : ", level 3 down differs",
           flat_ok ? "" : ", full-lane down differs", pdl_ok ? "" : " pdl=3", pdl_why, ok ? "ok" : "FAIL");
    fails += !ok;
    ref_matrix_free(&wg);
    ref_matrix_free(&wu);
    ref_matrix_free(&wd);
}

// What the launchers must decline (the plan then runs the records).
static void fused_declines() {
    ref_rng r = {42};
    const mx_quant q4 = {MX_QUANT_AFFINE, 4, 64}, dense = {MX_QUANT_NONE, 0, 0};
    mx_matrix w4 = ref_matrix_random(&r, q4, MX_DTYPE_U32, MX_DTYPE_BF16, 4, 64, 256);
    mx_matrix wb = ref_matrix_random(&r, dense, MX_DTYPE_BF16, MX_DTYPE_BF16, 4, 64, 256);
    mx_matrix wide = ref_matrix_random(&r, q4, MX_DTYPE_U32, MX_DTYPE_BF16, 4, 64, 2048);
    std::vector<float> x(16 * 2048);
    mxg_launch L;
    memset(&L, 0, sizeof L);
    L.warp = 32, L.sm_count = 132, L.moe_fused = 1;
    bool ok = mxg_moe_gate_up_ok(&L, &w4, &w4, x.data(), 4, 2, 0) && mxg_moe_down_combine_ok(&L, &w4, x.data(), 2, 8);
    ok &= !mxg_moe_gate_up_ok(&L, &wb, &wb, x.data(), 4, 2, 0) && !mxg_moe_down_combine_ok(&L, &wb, x.data(), 2, 2);
    ok &= !mxg_moe_down_combine_ok(&L, &w4, x.data(), 1, 9);      // more experts than registers
    ok &= !mxg_moe_down_combine_ok(&L, &wide, x.data(), 1, 8);    // 8 x 2048 floats: 64 KB to stage
    ok &= !mxg_moe_gate_up_ok(&L, &w4, &wide, x.data(), 4, 2, 0);    // gate and up of different shapes
    ok &= !mxg_moe_gate_up_ok(&L, &w4, &w4, x.data() + 1, 4, 2, 0);  // unaligned input
    ok &= !mxg_moe_gate_up_ok(&L, &w4, &w4, x.data(), 4, 2, 4);  // routing folded in: level 2 only
    L.moe_fused = 2;
    ok &= mxg_moe_gate_up_ok(&L, &w4, &w4, x.data(), 4, 2, 4);
    ok &= !mxg_moe_gate_up_ok(&L, &w4, &w4, x.data(), 4, 2, 1);      // fewer experts than chosen
    ok &= !mxg_moe_gate_up_ok(&L, &w4, &w4, x.data(), 4, 2, 12200);  // probabilities past the staging
    L.moe_fused = 0;
    ok &= !mxg_moe_gate_up_ok(&L, &w4, &w4, x.data(), 4, 2, 0) && !mxg_moe_down_combine_ok(&L, &w4, x.data(), 2, 2);
    printf("moe fused declines: %s\n", ok ? "ok" : "FAIL");
    fails += !ok;
    ref_matrix_free(&w4);
    ref_matrix_free(&wb);
    ref_matrix_free(&wide);
}

// Level 3's router launch (kernels/moe_router.cu): rmsnorm + router product + routing of n tokens
// against the records: h within 1e-6 (L2) of the double-precision norm (gpu_ref.c), the logits
// within 1e-5 of the reference product of the kernel's own h, the ids exactly the CPU backend's
// (cpu_moe_route on the kernel's logits) and its weights within 1e-5, the routing record's kernel
// (kernels/moe.cu) on the same logits bit for bit, the tickets back to 0, and a second launch bit
// for bit the first. The logits buffer starts at 50 (above every real logit), so routing before
// every block has written its logits picks the wrong experts.
static void router_case(mx_backend *cpu, mx_quant q, mx_dtype st, int n, int H, int E, int k, bool bias, bool norm,
                        int warp) {
    ref_rng r = {0x51ed270b27a2f6c1ull ^ (uint64_t)(n * 131 + H * 7 + E * 3 + k + warp + bias)};
    mx_matrix w = ref_matrix_random(&r, q, MX_DTYPE_U32, st, 1, E, H);
    std::vector<float> x(n * H), g(H), b(E);
    ref_fill(&r, x.data(), n * H, -2, 2);
    ref_fill(&r, g.data(), H, 0.5f, 1.5f);
    ref_fill(&r, b.data(), E, -0.5f, 0.5f);
    std::vector<unsigned> tickets(MXG_MOE_MAX_TOKENS, 0);
    mxg_launch L;
    memset(&L, 0, sizeof L);
    L.warp = warp, L.sm_count = 132, L.moe_fused = 3, L.moe_tickets = tickets.data();
    char label[96], ml[64];
    snprintf(label, sizeof label, "%s n=%d H=%d E=%d k=%d bias %d norm %d warp %d", ref_matrix_label(&w, ml, sizeof ml),
             n, H, E, k, bias, norm, warp);
    if (!mxg_moe_router_ok(&L, &w, x.data(), g.data(), x.data(), n, k)) {
        printf("moe router %s: FAIL (declined)\n", label);
        fails++;
        ref_matrix_free(&w);
        return;
    }
    std::vector<float> h[2], lg[2], wt[2];
    std::vector<int32_t> id[2];
    for (int run = 0; run < 2; run++) {
        h[run].assign(n * H, 7.0f), lg[run].assign(n * E, 50.0f), wt[run].assign(n * k, -1.0f), id[run].assign(n * k, -1);
        mxg_moe_router(&L, h[run].data(), lg[run].data(), id[run].data(), wt[run].data(), x.data(), g.data(), 1e-6f,
                       &w, bias ? b.data() : NULL, n, k, norm);
    }
    std::vector<float> href(n * H), lref(n * E), wcpu(n * k), wrec(n * k);
    std::vector<int32_t> icpu(n * k), irec(n * k);
    ref_rmsnorm(href.data(), x.data(), g.data(), n, H, 1e-6f);
    ref_matmul(lref.data(), NULL, h[0].data(), &w, bias ? b.data() : NULL, n, false);
    mx_error err = {{0}};
    mx_op op = {.kind = MX_OP_MOE_ROUTE};
    op.moe_route = {icpu.data(), wcpu.data(), lg[0].data(), n, E, k, norm};
    if (mx_run_op(cpu, op, &err)) { printf("cpu op: %s\n", err.msg); exit(1); }
    mxg_moe_route(&L, irec.data(), wrec.data(), lg[0].data(), n, E, k, norm);
    const double eh = rel(h[0], href), el = rel(lg[0], lref);
    bool w_ok = true;
    for (int i = 0; i < n * k; i++) w_ok &= std::fabs(wt[0][i] - wcpu[i]) <= 1e-5f * std::fmax(1.0f, std::fabs(wcpu[i]));
    bool zero = true;
    for (unsigned c : tickets) zero &= c == 0;
    const bool ids_ok = id[0] == icpu, rec_ok = id[0] == irec && wt[0] == wrec;
    const bool again = h[1] == h[0] && lg[1] == lg[0] && id[1] == id[0] && wt[1] == wt[0];
    const bool ok = eh <= 1e-6 && el <= 1e-5 && ids_ok && w_ok && rec_ok && zero && again;
    printf("moe router %s: h %.1e logits %.1e%s%s%s%s%s: %s\n", label, eh, el, ids_ok ? "" : ", ids differ from the CPU's",
           w_ok ? "" : ", weights differ from the CPU's", rec_ok ? "" : ", routing differs from the record's",
           zero ? "" : ", tickets left set", again ? "" : ", second launch differs", ok ? "ok" : "FAIL");
    fails += !ok;
    ref_matrix_free(&w);
}

// What the router launch must decline (the plan then runs the records).
static void router_declines() {
    ref_rng r = {43};
    const mx_quant q4 = {MX_QUANT_AFFINE, 4, 64}, dense = {MX_QUANT_NONE, 0, 0};
    mx_matrix w4 = ref_matrix_random(&r, q4, MX_DTYPE_U32, MX_DTYPE_BF16, 1, 128, 2048);
    mx_matrix wb = ref_matrix_random(&r, dense, MX_DTYPE_BF16, MX_DTYPE_BF16, 1, 128, 256);
    mx_matrix we = ref_matrix_random(&r, q4, MX_DTYPE_U32, MX_DTYPE_BF16, 2, 128, 256);
    mx_matrix big = ref_matrix_random(&r, q4, MX_DTYPE_U32, MX_DTYPE_BF16, 1, 4096, 8192);
    std::vector<float> x(4 * 8192), g(8192);
    std::vector<unsigned> tickets(MXG_MOE_MAX_TOKENS, 0);
    mxg_launch L;
    memset(&L, 0, sizeof L);
    L.warp = 32, L.sm_count = 132, L.moe_fused = 3, L.moe_tickets = tickets.data();
    bool ok = mxg_moe_router_ok(&L, &w4, x.data(), g.data(), x.data(), 1, 8);
    ok &= !mxg_moe_router_ok(&L, &wb, x.data(), g.data(), x.data(), 1, 8);              // dense router
    ok &= !mxg_moe_router_ok(&L, &we, x.data(), g.data(), x.data(), 1, 8);              // an expert stack
    ok &= !mxg_moe_router_ok(&L, &big, x.data(), g.data(), x.data(), 1, 8);             // staging over 48 KB
    ok &= !mxg_moe_router_ok(&L, &w4, x.data(), g.data(), x.data(), MXG_MOE_MAX_TOKENS + 1, 8);  // tickets
    ok &= !mxg_moe_router_ok(&L, &w4, x.data(), g.data(), x.data(), 1, 129);            // k past the block
    ok &= !mxg_moe_router_ok(&L, &w4, x.data() + 1, g.data(), x.data(), 1, 8);          // unaligned input
    ok &= !mxg_moe_router_ok(&L, &w4, x.data(), g.data() + 1, x.data(), 1, 8);          // unaligned norm weight
    L.moe_tickets = NULL;
    ok &= !mxg_moe_router_ok(&L, &w4, x.data(), g.data(), x.data(), 1, 8);
    L.moe_tickets = tickets.data(), L.moe_fused = 2;
    ok &= !mxg_moe_router_ok(&L, &w4, x.data(), g.data(), x.data(), 1, 8);
    printf("moe router declines: %s\n", ok ? "ok" : "FAIL");
    fails += !ok;
    ref_matrix_free(&w4);
    ref_matrix_free(&wb);
    ref_matrix_free(&we);
    ref_matrix_free(&big);
}

int main() {
    emu_seed(0x2545f4914f6cdd1dull);
    setvbuf(stdout, NULL, _IOLBF, 0);
    mx_error err = {{0}};
    mx_backend_options o = {"cpu", 1, 0};
    mx_backend *cpu = mx_backend_create(&o, &err);
    if (!cpu) { printf("%s\n", err.msg); return 1; }
    mxg_launch L;
    memset(&L, 0, sizeof L);
    const float nan = NAN, inf = INFINITY;
    for (int c = 0; c < 4; c++) {  // warps of 32 and 64, each with the warp form and the rank form
        const int warp = c < 2 ? 32 : 64;
        L.warp = warp, L.moe_route_rank = c % 2 == 1;
        for (int norm = 0; norm <= 1; norm++) {
            const int n = 5, E = norm ? 128 : 60, k = norm ? 8 : 4;
            std::vector<float> l(n * E);
            for (auto &x : l) x = emu_uniform(-4, 4);
            route_case(cpu, &L, "random", l, n, E, k, norm);
            // Ties: the first index wins (three equal largest, across lanes and across the block
            // form's warps; a tie of the lane's own experts, 32 apart; a tie below the largest).
            std::vector<float> ties = l;
            ties[E + 3] = ties[E + 40] = ties[E + 41] = 9.0f;
            ties[2 * E + 5] = ties[2 * E + 37] = 9.0f;
            ties[3 * E + 50] = 9.0f, ties[3 * E + 2] = ties[3 * E + 33] = 8.5f;
            route_case(cpu, &L, "ties", ties, n, E, k, norm);
            // Other widths: more experts than the block (each thread of the block form summing
            // two), fewer than a warp, and k past a warp's lanes.
            std::vector<float> wide(2 * 300), narrow(3 * 8);
            for (auto &x : wide) x = emu_uniform(-4, 4);
            for (auto &x : narrow) x = emu_uniform(-4, 4);
            route_case(cpu, &L, "300 experts", wide, 2, 300, 8, norm);
            route_case(cpu, &L, "300 experts, k 70", wide, 2, 300, 70, norm);
            route_case(cpu, &L, "8 experts", narrow, 3, 8, 2, norm);
            // Each row a way to be NaN or infinite: NaN first, NaN inside, all NaN, one +inf, two +inf,
            // +inf and -inf, all -inf, -inf everywhere but 2 experts (fewer than k finite), one -inf.
            const int rows = 9;
            std::vector<float> b(rows * E);
            for (auto &x : b) x = emu_uniform(-4, 4);
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
    const mx_quant r4 = {MX_QUANT_AFFINE, 4, 64}, r8 = {MX_QUANT_AFFINE, 8, 64}, rfp4 = {MX_QUANT_MXFP4, 4, 32};
    for (int warp = 32; warp <= 64; warp += 32) {
        router_case(cpu, r4, MX_DTYPE_BF16, 1, 2048, 128, 8, false, true, warp);  // the 30B-A3B's router
        router_case(cpu, r4, MX_DTYPE_BF16, 3, 256, 60, 4, true, false, warp);
        router_case(cpu, r8, MX_DTYPE_F16, 2, 512, 16, 2, false, true, warp);
        router_case(cpu, rfp4, MX_DTYPE_U8, 2, 256, 32, 4, true, true, warp);
        router_case(cpu, r8, MX_DTYPE_BF16, 1, 128, 8, 2, false, true, warp);  // the fixtures' router (qwen3_moe-*)
        router_case(cpu, r4, MX_DTYPE_BF16, 1, 8192, 32, 4, false, true, warp);  // 256 chunks: 8 a lane at warp 32
    }
    router_declines();
    mx_backend_free(cpu);
    const mx_quant q4 = {MX_QUANT_AFFINE, 4, 64}, q4s = {MX_QUANT_AFFINE, 4, 32}, q8 = {MX_QUANT_AFFINE, 8, 128};
    const mx_quant fp4 = {MX_QUANT_MXFP4, 4, 32};
    for (int warp = 32; warp <= 64; warp += 32) {
        fused_case(q4, MX_DTYPE_U32, MX_DTYPE_BF16, 1, 256, 8, 2, 128, warp);
        fused_case(q4, MX_DTYPE_U32, MX_DTYPE_BF16, 3, 512, 16, 8, 192, warp);
        fused_case(q4s, MX_DTYPE_U32, MX_DTYPE_F16, 2, 256, 8, 4, 96, warp);
        fused_case(q8, MX_DTYPE_U32, MX_DTYPE_BF16, 2, 384, 8, 6, 256, warp);
        fused_case(fp4, MX_DTYPE_U32, MX_DTYPE_U8, 1, 256, 8, 4, 192, warp);
    }
    fused_case(q4, MX_DTYPE_U32, MX_DTYPE_BF16, 1, 2048, 16, 8, 768, 32);
    fused_case(q4, MX_DTYPE_U32, MX_DTYPE_BF16, 1, 2048, 16, 8, 768, 64);
    fused_case(q4, MX_DTYPE_U32, MX_DTYPE_BF16, 2, 128, 8, 2, 128, 32);  // the fixtures' experts (qwen3_moe-q4g64)
    fused_case(q8, MX_DTYPE_U32, MX_DTYPE_BF16, 1, 128, 8, 2, 128, 32);
    fused_declines();
    printf("%d failures\n", fails);
    return fails != 0;
}
