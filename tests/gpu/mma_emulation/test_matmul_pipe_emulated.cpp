// SPDX-License-Identifier: MIT
// The pipelined tensor-core prefill product (vendor/cuda/matmul_pipe.cu) run on the host emulation
// (kv_emulation/emu.h with its mma.sync m16n8k16 by the PTX ISA's fragment layout, and emu_pipe.h:
// cp.async copies that land only at their wait, packed bf16 FMAs rounded once) on affine 4-bit
// weights with groups of 32, 64 and 128 and bf16/f16/f32 scales, against two references built from
// the CPU's dequantization (mx_quant_code, the scale and bias arrays; mx_matrix_dequant_row):
//   - exact inputs: the same bf16 roundings as the kernel (x to bf16; w = bf16(s q + b) rounded once
//     on the bf16-scale path, bf16(float32 s q + b) else), products summed in double. Every output
//     within (cols + 16) 2^-24 sum|wb xb| of it: only float32 accumulation may differ, so a code,
//     scale or activation in the wrong k slot, a stale pipeline stage or a wrong row fails here.
//   - the float32 product: within the tensor-core bound of test_gpu_ops (elem_bound: 2^-7 (1 + 2^-9)
//     sum|w x| plus the float32 term).
// Shapes: 1..300 tokens (partial token tiles; each block tile: 128 x 128, 64 x 128, 64 x 64 by the
// multiprocessor count given), rows not a multiple of 128 (1, 8, 72, 129, 200), odd
// row counts (scalar stores), 64 to 640 columns (1 to 10 k steps: fewer than the 4 pipeline
// stages too), with and without bias, and a scratch that holds only 64 tokens (several launch
// pairs). Also checks that the launcher declines (and writes nothing) what it has no kernel for.
// Built and run by run.sh; argument "quick": fewer cases. Exits 1 on any failure.
#include "emu_pipe.h"
#include "emu_affine.h"
#include "emu_fail.h"
#include "emu_tc_check.h"
#include <cstdio>
#include <cstdlib>
extern "C" {
#include "core/quant.h"
}
#include "backends/gpu/kernels.h"

int mxg_matmul_pipe(const mxg_launch *L, float *out, const float *x, const mx_matrix *w, const float *bias, int n);

static int cases = 0, tile_cases[3];  // launches per block tile: 128 x 128, 64 x 128, 64 x 64
static emu_tc_worst worst;

static void run_case(int gs, mx_dtype st, int rows, int cols, int n, bool with_bias, int sms, size_t scratch_tokens) {
    cases++;
    emu_product p;
    emu_product_random(&p, 4, gs, st, rows, cols, n, with_bias);
    const mx_matrix &w = p.m.w;
    const float *xa = p.acts.x, *bp = p.bp;

    std::vector<float> scratch(scratch_tokens * cols / 2 + 8, 0.0f);
    mxg_launch L{};
    L.warp = 32, L.sm_count = sms, L.cc = 90, L.scratch = scratch.data(), L.scratch_bytes = scratch_tokens * cols * 2;
    emu_copies().clear();
    emu_grids.clear();
    if (mxg_matmul_pipe(&L, p.out.data(), xa, &w, bp, n) != 0) {
        FAIL("declined: g%d %s %dx%d n=%d", gs, st_name(st), rows, cols, n);
        return;
    }
    // One launch pair per run of tokens that fits the scratch; the block tile the largest that
    // gives every multiprocessor a block (128 x 128, 64 x 128, 64 x 64).
    auto tiles = [&](int nt, int bm, int bn) { return (long)((rows + bn - 1) / bn) * ((nt + bm - 1) / bm); };
    const int run = (int)scratch_tokens, pairs = (n + run - 1) / run;
    if (emu_grids.size() != (size_t)(2 * pairs)) FAIL("%zu launches for %d runs of tokens", emu_grids.size(), pairs);
    for (int p = 0; p < pairs && (size_t)(2 * p + 1) < emu_grids.size(); p++) {
        const int nt = n - p * run < run ? n - p * run : run;
        const int bm = tiles(nt, 128, 128) >= sms ? 128 : 64, bn = bm == 128 || tiles(nt, 64, 128) >= sms ? 128 : 64;
        const dim3 gd = emu_grids[2 * p + 1];
        if (gd.x != (unsigned)((rows + bn - 1) / bn) || gd.y != (unsigned)((nt + bm - 1) / bm))
            FAIL("grid %u x %u, want tiles %d x %d: %dx%d n=%d sms=%d", gd.x, gd.y, bm, bn, rows, cols, n, sms);
        tile_cases[bm == 128 ? 0 : bn == 128 ? 1 : 2]++;
    }
    for (auto &kv : emu_copies())
        if (!kv.second.open.empty()) { FAIL("copies issued but never committed"); break; }

    char what[96];
    snprintf(what, sizeof what, "g%d %s %dx%d n=%d bias=%d sms=%d", gs, st_name(st), rows, cols, n, with_bias, sms);
    fails += emu_check_tc_product(p.m, xa, n, bp, p.out.data(), what, &worst);
}

static void declines() {
    mx_matrix w{};
    w.q.mode = MX_QUANT_AFFINE, w.q.bits = 4, w.q.group_size = 64, w.dtype = MX_DTYPE_U32;
    w.scale_dtype = MX_DTYPE_BF16, w.n_experts = 1, w.rows = 64, w.cols = 128;
    std::vector<uint8_t> data(64 * 128 + 16), sc(64 * 4 * 2 + 16);
    uint8_t *da = emu_align16(data.data());
    w.data = da, w.scales = sc.data(), w.biases = sc.data();
    std::vector<float> x(70 * 128 + 8, 1.0f), out(70 * 64, -7.0f), scratch(1 << 16);
    float *xa = emu_align16(x.data());
    mxg_launch L{};
    L.warp = 32, L.sm_count = 8, L.cc = 90, L.scratch = scratch.data(), L.scratch_bytes = scratch.size() * 4;
    struct { const char *what; int bits; mx_quant_mode mode; int cols; int xoff; int cc; size_t scratch; } c[] = {
        {"8-bit", 8, MX_QUANT_AFFINE, 128, 0, 90, 1 << 18},   {"3-bit", 3, MX_QUANT_AFFINE, 128, 0, 90, 1 << 18},
        {"mxfp4", 4, MX_QUANT_MXFP4, 128, 0, 90, 1 << 18},    {"96 columns", 4, MX_QUANT_AFFINE, 96, 0, 90, 1 << 18},
        {"unaligned x", 4, MX_QUANT_AFFINE, 128, 1, 90, 1 << 18}, {"sm_75", 4, MX_QUANT_AFFINE, 128, 0, 75, 1 << 18},
        {"scratch under 64 tokens", 4, MX_QUANT_AFFINE, 128, 0, 90, 63 * 128 * 2},
    };
    for (auto &k : c) {
        w.q.bits = k.bits, w.q.mode = k.mode, w.cols = k.cols, w.q.group_size = k.mode == MX_QUANT_MXFP4 ? 32 : 32;
        L.cc = k.cc, L.scratch_bytes = k.scratch;
        if (mxg_matmul_pipe(&L, out.data(), xa + k.xoff, &w, nullptr, 70) != -1) FAIL("did not decline: %s", k.what);
        for (float v : out)
            if (v != -7.0f) { FAIL("wrote output while declining: %s", k.what); break; }
    }
}

int main(int argc, char **argv) {
    emu_seed(0x2545f4914f6cdd1dull);
    const bool quick = argc > 1 && !strcmp(argv[1], "quick");
    declines();
    const mx_dtype sts[] = {MX_DTYPE_BF16, MX_DTYPE_F16, MX_DTYPE_F32};
    const int gss[] = {32, 64, 128};
    // Every scale format and group on each block tile (multiprocessors 1: 128 x 128; 132: 64 x 64;
    // 5 with 2 row blocks x 3 token blocks of 64: 64 x 128).
    for (mx_dtype st : sts)
        for (int gs : gss) {
            run_case(gs, st, 129, 256, 70, true, 1, 4096);
            run_case(gs, st, 72, 384, 33, false, 132, 4096);
            run_case(gs, st, 200, 128, 150, gs == 64, 5, 4096);
        }
    run_case(64, MX_DTYPE_BF16, 200, 640, 150, true, 1, 64);   // three launch pairs of 64 tokens
    run_case(64, MX_DTYPE_BF16, 1, 128, 1, false, 1, 4096);     // one row, one token
    run_case(32, MX_DTYPE_BF16, 8, 64, 300, true, 132, 4096);   // one k step, 5 token blocks of 64
    run_case(64, MX_DTYPE_BF16, 1024, 128, 64, false, 132, 4096);  // 16 row blocks of 64
    run_case(128, MX_DTYPE_F16, 133, 512, 129, true, 1, 4096);  // odd rows: scalar stores
    const int random_cases = quick ? 4 : 24;
    for (int i = 0; i < random_cases; i++) {
        const int gs = gss[emu_below(3)], cols = gs == 128 ? 128 * (1 + emu_below(5)) : 64 * (1 + emu_below(10));
        const int rowss[] = {1, 8, 72, 129, 200, 133};
        const int sms[] = {1, 5, 132};
        run_case(gs, sts[emu_below(3)], rowss[emu_below(6)], cols, 1 + emu_below(200), emu_below(2), sms[emu_below(3)], emu_below(4) ? 4096 : 64);
    }
    printf("block tiles launched: %d of 128 x 128, %d of 64 x 128, %d of 64 x 64\n", tile_cases[0], tile_cases[1], tile_cases[2]);
    if (tile_cases[0] < 5 || tile_cases[1] < 5 || tile_cases[2] < 5) FAIL("a block tile checked fewer than 5 times");
    printf("%d products, worst error as a fraction of its bound: %.3g (exact bf16 inputs, float32 sums), "
           "%.3g (tensor-core bound against float32)\n", cases, worst.exact, worst.tc);
    if (fails) printf("%d failed\n", fails);
    else printf("passed\n");
    return fails ? 1 : 0;
}
