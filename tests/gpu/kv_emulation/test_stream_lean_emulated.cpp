// SPDX-License-Identifier: MIT
// The streaming kernel's lean one-token form (kernels/matvec_stream_lean.cuh, MLXCEL_GPU_STREAM_LEAN=1)
// on the host emulation (emu.h), through the fused one-token launches of kernels/matvec_fused.cu
// (plain, RMSNorm + q/k/v, RMSNorm + gate/up + SwiGLU, down + residual; the one-record products of
// kernels/matvec_stream.cu take the same stream_launch). Each case runs today's form (lean off) and
// the lean form on the same inputs and requires of the lean form:
// - every output bit for bit today's (the form's claim: the same float operations in the same
//   order), and every buffer the launch writes (outputs, the norm's row, SwiGLU's act, the residual
//   stream) byte for byte today's;
// - every output within the float32 bound of the double-precision reference (tests/gpu/gpu_ref.c):
//   (cols + 16) float32 roundings of its evaluation scale, the bound test_gpu_ops.c applies;
// - a lean launch: the launch's dynamic shared memory is the lean form's (the row plus one float per
//   chunk), so a case where the knob changed nothing fails rather than passing as "equal".
// Shapes: Qwen3-8B's (4096 -> 4096, 1024, 12288; 12288 -> 4096, whose 49.5 KB of staging needs the
// raised shared memory limit), odd ones (333 x 4160: a partial last step and a partial last task;
// 64-lane warps over 8256 columns), the previous two-row task shape (stream_rows 2); affine 4-bit
// g64 bf16, 4-bit g32 f16, 4-bit g128 bf16, 8-bit g64 bf16, 8-bit g128 f16. All rows are at least a
// step long (the lean form declines the eight-row shape of shorter rows). run.sh also
// builds it against a copy of the kernel with a planted fault (each chunk's sum of x taken from the
// neighbouring chunk), which must fail. Exits 1 on any failure.
// MLXCEL_GPU_PDL=2 (every run_case shape, today's form under an H100's cap and the lean form under a
// small one that cuts the ranges): the same outputs bit for bit as without it, at least one L2
// prefetch, and every prefetched range a non-zero multiple of 16 bytes at a 16-byte aligned address
// inside one of the launch's matrices' codes, scales or biases, the launch's total within its cap
// (mxg_pdl_prefetch_cap). run.sh plants a fault (the per-warp budget ignored) that must fail.
#include "emu.h"
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
extern "C" {
#include "backends/backend.h"
#include "core/quant.h"
#include "gpu_ref.h"
}
#include "backends/gpu/kernels.h"
#include "backends/gpu/kernels_fused.h"
#include "backends/gpu/kernels/matvec_stream.cuh"
#include "emu_fail.h"
#include "fused_case.h"

// One launch of the pattern with the lean form on or off; every written buffer starts as a known fill
// so that a buffer left unwritten shows.
static void launch(Run &u, bool lean, Pattern pat, int count, mx_matrix *w, const int64_t *rws,
                   const std::vector<float> *bs, bool bias, const std::vector<float> &x, const std::vector<float> &nw,
                   const std::vector<float> &res0, int warp, int sms, int stream_rows, size_t pdl_cap = 0) {
    mxg_launch L;
    memset(&L, 0, sizeof L);
    L.warp = warp, L.sm_count = sms, L.matvec_stream = true, L.stream_min_cols = 0, L.stream_rows = stream_rows;
    L.dependent_launch = L.pdl_early = pdl_cap != 0, L.pdl_prefetch = pdl_cap;  // MLXCEL_GPU_PDL=2
    L.matvec_rows = 4, L.stream_lean = lean;
    mxg_fused_matvec f = fused_case_args(u, pat, count, w, rws, bs, bias, x, nw, res0);
    emu_grids.clear();
    emu_smem_sizes.clear();
    emu_prefetches.clear();
    mxg_run_fused_matvec(&L, &f);
    u.smem = emu_smem_sizes.empty() ? 0 : emu_smem_sizes.back();
    u.prefetches = emu_prefetches;
}

// Whether every prefetch of `u` keeps compat.h's rules for mxg_prefetch_l2 inside the matrices'
// buffers and the launch's total within `cap`; at least one prefetch. `why` says the first breach.
static bool prefetches_ok(const Run &u, const mx_matrix *w, int count, size_t cap, char *why, size_t n) {
    size_t total = 0;
    if (u.prefetches.empty()) return snprintf(why, n, "no prefetch"), false;
    for (const emu_range &r : u.prefetches) {
        const uintptr_t p = (uintptr_t)r.p;
        if (r.bytes == 0 || r.bytes % 16 || p % 16) return snprintf(why, n, "%u bytes at %#lx", r.bytes, (unsigned long)p), false;
        bool inside = false;
        for (int k = 0; k < count && !inside; k++) {
            const int64_t sb = mx_matrix_scale_bytes(&w[k]);
            const struct { const void *b; int64_t len; } bufs[3] = {
                {w[k].data, mx_matrix_data_bytes(&w[k])}, {w[k].scales, sb}, {w[k].biases, sb}};
            for (const auto &b : bufs)
                inside = inside || (b.b && p >= (uintptr_t)b.b && p + r.bytes <= (uintptr_t)b.b + (uintptr_t)b.len);
        }
        if (!inside) return snprintf(why, n, "%u bytes at %#lx outside the matrices", r.bytes, (unsigned long)p), false;
        total += r.bytes;
    }
    if (total > cap) return snprintf(why, n, "%zu bytes prefetched, cap %zu", total, cap), false;
    snprintf(why, n, "%zu prefetches, %zu bytes", u.prefetches.size(), total);
    return true;
}

static void run_case(const char *name, Pattern pat, mx_quant q, mx_dtype st, int rows, int cols, bool bias, int warp,
                     int sms, int stream_rows) {
    ref_rng rng = {0x1ea4f00du ^ (uint64_t)(rows * 131 + cols * 7 + pat * 3 + warp + q.bits + st)};
    const int count = pat == NORM_QKV ? 3 : pat == NORM_GATE_UP ? 2 : 1;
    const int64_t rws[3] = {rows, pat == NORM_QKV ? rows / 4 : rows, pat == NORM_QKV ? rows / 4 : rows};
    mx_matrix w[3];
    std::vector<float> bs[3];
    for (int k = 0; k < count; k++) {
        w[k] = ref_matrix_random(&rng, q, MX_DTYPE_U32, st, 1, rws[k], cols);
        bs[k].resize(rws[k]);
        ref_fill(&rng, bs[k].data(), rws[k], -0.5f, 0.5f);
    }
    std::vector<float> x(cols), nw(cols), res0(pat == DOWN_RESIDUAL ? rows : 1);
    ref_fill(&rng, x.data(), cols, -2.0f, 2.0f);
    for (int i = 0; i < cols; i += 97) x[i] *= 40.0f;  // outliers: chunks of very different sums
    for (int i = 64; i < 96 && i < cols; i++) x[i] = 0.0f;  // one chunk all zero
    ref_fill(&rng, nw.data(), cols, 0.5f, 1.5f);
    ref_fill(&rng, res0.data(), (int64_t)res0.size(), -1.0f, 1.0f);
    Run today, lean;
    launch(today, false, pat, count, w, rws, bs, bias, x, nw, res0, warp, sms, stream_rows);
    launch(lean, true, pat, count, w, rws, bs, bias, x, nw, res0, warp, sms, stream_rows);
    // The reference's activations: the norm's output (checked equal between the forms) or x.
    const bool norm = pat == NORM_QKV || pat == NORM_GATE_UP;
    const std::vector<float> &act_in = norm ? today.h : x;
    bool equal = true;
    for (int k = 0; k < count; k++) equal = equal && same(today.out[k], lean.out[k]);
    const RefCheck rc = fused_case_ref_check(lean.out, count, w, rws, bs, bias, act_in.data(), cols);
    const bool side = same(today.h, lean.h) && same(today.act, lean.act) && same(today.res, lean.res);
    const size_t lean_smem = (size_t)cols * 4 + (size_t)(cols / 32) * 4;
    const bool ran = lean.smem == lean_smem && today.smem == (size_t)cols * 4;
    char ml[64];
    printf("stream lean %-14s %s %dx%d%s warp %d rows/task %d: bit-equal %s, side buffers %s, worst err/bound %.2e, "
           "smem %zu/%zu\n",
           name, ref_matrix_label(&w[0], ml, sizeof ml), rows, cols, bias ? " bias" : "", warp, stream_rows,
           equal ? "yes" : "NO", side ? "equal" : "DIFFER", rc.worst, today.smem, lean.smem);
    if (!equal || !side) FAIL("%s: the lean form's outputs are not today's", name);
    // MLXCEL_GPU_PDL=2: today's form under an H100's cap (whole first tasks), the lean form under a
    // small one (128 KB a launch: ranges cut by the per-warp budget).
    const size_t caps[2] = {mxg_pdl_prefetch_cap(MXG_PDL_L2_FALLBACK), mxg_pdl_prefetch_cap((size_t)1 << 20)};
    for (int form = 0; form < 2; form++) {
        Run pdl;
        launch(pdl, form == 1, pat, count, w, rws, bs, bias, x, nw, res0, warp, sms, stream_rows, caps[form]);
        const Run &base = form == 1 ? lean : today;
        bool pdl_same = same(pdl.h, base.h) && same(pdl.act, base.act) && same(pdl.res, base.res);
        for (int k = 0; k < count; k++) pdl_same = pdl_same && same(pdl.out[k], base.out[k]);
        char why[128];
        const bool ranges = prefetches_ok(pdl, w, count, caps[form], why, sizeof why);
        printf("stream lean %-14s pdl=2 %s form, cap %zu: outputs %s, prefetch %s (%s)\n", name,
               form ? "lean" : "today's", caps[form], pdl_same ? "equal" : "DIFFER", ranges ? "ok" : "BAD", why);
        if (!pdl_same) FAIL("%s: MLXCEL_GPU_PDL=2 changed the %s form's outputs", name, form ? "lean" : "today's");
        if (!ranges) FAIL("%s: a bad prefetch of the %s form: %s", name, form ? "lean" : "today's", why);
    }
    if (!rc.within) FAIL("%s: an output outside its float32 bound of the reference (worst %.2e of it)", name, rc.worst);
    if (!ran) FAIL("%s: the lean form did not run (shared memory %zu, expected %zu)", name, lean.smem, lean_smem);
    for (int k = 0; k < count; k++) ref_matrix_free(&w[k]);
}

int main(int argc, char **argv) {
    const bool quick = argc > 1 && !strcmp(argv[1], "quick");
    const mx_quant q4 = {MX_QUANT_AFFINE, 4, 64}, q4g32 = {MX_QUANT_AFFINE, 4, 32}, q8 = {MX_QUANT_AFFINE, 8, 64};
    const mx_quant q8g128 = {MX_QUANT_AFFINE, 8, 128}, q4g128 = {MX_QUANT_AFFINE, 4, 128};
    // Qwen3-8B's products (affine 4-bit g64, bf16 scales) in the default four-row task shape.
    run_case("norm+qkv", NORM_QKV, q4, MX_DTYPE_BF16, 4096, 4096, true, 32, 8, 4);
    run_case("norm+gate/up", NORM_GATE_UP, q4, MX_DTYPE_BF16, 12288, 4096, false, 32, 8, 4);
    run_case("down+residual", DOWN_RESIDUAL, q4, MX_DTYPE_BF16, 4096, 12288, false, 32, 8, 4);
    // Odd shapes, the two-row task shape, other formats, 64-lane warps.
    run_case("plain", PLAIN, q4, MX_DTYPE_BF16, 333, 4160, true, 32, 3, 4);
    run_case("plain", PLAIN, q4, MX_DTYPE_BF16, 333, 4160, true, 32, 3, 2);
    run_case("plain", PLAIN, q4g32, MX_DTYPE_F16, 515, 4160, true, 32, 2, 4);
    run_case("plain", PLAIN, q8, MX_DTYPE_BF16, 1001, 4096, true, 32, 5, 4);
    run_case("plain", PLAIN, q4g128, MX_DTYPE_BF16, 259, 4096, true, 32, 2, 4);
    run_case("norm+gate/up", NORM_GATE_UP, q8g128, MX_DTYPE_F16, 517, 4096, true, 32, 3, 4);
    run_case("down+residual", DOWN_RESIDUAL, q4, MX_DTYPE_BF16, 333, 8256, true, 64, 3, 4);
    if (!quick) {
        run_case("norm+qkv", NORM_QKV, q8, MX_DTYPE_BF16, 4096, 4096, false, 32, 8, 2);
        run_case("norm+gate/up", NORM_GATE_UP, q4, MX_DTYPE_BF16, 1537, 8256, true, 64, 4, 2);
        run_case("down+residual", DOWN_RESIDUAL, q8, MX_DTYPE_BF16, 1024, 8192, true, 64, 2, 4);
    }
    printf("%d failures\n", fails);
    return fails != 0;
}
