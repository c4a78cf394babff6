// SPDX-License-Identifier: MIT
// The wgmma prefill product (vendor/cuda/matmul_wgmma.cu, its sm_90a body: weights as wgmma's A in
// registers, activations as B in shared memory) run on the host emulation (kv_emulation/emu.h;
// emu_pipe.h: cp.async copies that land only at their wait, packed bf16 FMAs rounded once;
// emu_wgmma.h: a wgmma.mma_async that gathers the warp's A registers and decodes the B descriptor
// by the PTX ISA's rules, reads its operands at issue and at its wait and refuses a change of its A
// registers or its shared B between them, and wants a wgmma.fence before each batch) on affine 4-bit
// weights with bf16, f16 and f32 scales, groups of 32, 64 and 128, against two references built from
// the CPU's dequantization (emu_tc_check.h):
//   - exact inputs: x rounded to bf16, w = bf16(s q + b) rounded once, products summed in double.
//     Every output within (cols + 16) 2^-24 sum|wb xb| of it: only float32 accumulation may differ,
//     so a weight or activation in the wrong k slot, a wrong row or token, a wrong descriptor, a
//     stale ring stage or fragment set fails here.
//   - the float32 product: within the tensor-core bound of test_gpu_ops (elem_bound).
// First the layout alone: for every element of a [128][64] tile and every k16 slice, the address
// the kernel's copies use (mxg_wg_offset) against the one the PTX rules give for its descriptors.
// Then the 8B gate product's block tile (128 rows x 128 tokens, 4096 columns) with the global
// sectors of its copies counted per k step (emu_pipe.h's emu_cp_sectors; printed, bench/RESULTS.md):
// the activations' and the codes' copies must touch no sector more than their bytes fill, the
// scale and bias words (16-byte copies of 8 steps' words there) at most twice what theirs fill.
// Shapes: the models' (qwen3 0.6B: 1024 columns in, q 2048 / kv 1024 / mlp 3072 rows and 3072
// columns in; 8B: 4096 and 12288 columns, rows scaled down to keep the host run short) with 1, 7,
// 64, 77, 128, 300 and 512 tokens; then 1..200 tokens (partial token tiles; each block tile: 128
// rows x 128 tokens, 128 x 64, 64 x 64 by the multiprocessor count given), rows not a multiple of 64
// (1, 8, 72, 129, 200, 133), 64 to 640 columns (1 to 10 k steps: fewer than the 4 ring stages
// too), with and without bias, and a scratch of only 64 tokens (several launch pairs). Also: the
// launcher declines (and writes nothing) what it has no kernel for, or when the backend's probe
// found no sm_90a code (L->wgmma false), and the probe finds it here (the emulation defines the
// sm_90a macro). Built and run by run.sh; argument "quick": fewer cases, "mutant": the first few
// cases only (run.sh's mutation check runs planted faults this way and wants a failure). Exits 1
// on any failure (an emulation refusal aborts). Prints a digest of every output's bits: a change
// that only moves data (copy order, layouts) must leave it as it was.
#include "emu_wgmma.h"
#include "emu_affine.h"
#include "emu_tc_check.h"
#include "emu_fail.h"
#include <cstdio>
#include <cstdlib>
extern "C" {
#include "core/quant.h"
}
#include "backends/gpu/kernels.h"

int mxg_matmul_wgmma(const mxg_launch *L, float *out, const float *x, const mx_matrix *w, const float *bias, int n);
extern "C" int mxg_wgmma_probe(void *stream);

static int cases = 0, tile_cases[3];  // launches per block tile: 128 x 128, 128 x 64, 64 x 64 (rows x tokens)
static uint64_t digest = 1469598103934665603ull;  // FNV-1a of every output's bits, in case order
static emu_tc_worst worst;

// The kernel's copies and its descriptors agree with the PTX ISA's rule for every element.
static void layout() {
    int bad = 0;
    for (int s = 0; s < 4; s++)
        for (uint32_t base : {0u, 22528u, 90112u - 22528u}) {
            const uint64_t d = mxg_wgmma_desc(base + s * 2 * MXG_WG_LBO, MXG_WG_LBO, MXG_WG_SBO);
            for (int r = 0; r < 128; r++)
                for (int k = 0; k < 16; k++)
                    if (emu_wgmma_addr(d, r, k) != base + mxg_wg_offset(r, 16 * s + k) && bad++ < 3)
                        FAIL("layout: slice %d token %d k %d: descriptor gives %u, the copies %u", s, r, k,
                             emu_wgmma_addr(d, r, k), base + mxg_wg_offset(r, 16 * s + k));
        }
    // Every byte of a tile written once: 128 x 64 elements on 16384 distinct even offsets.
    std::vector<int> seen(16384, 0);
    for (int r = 0; r < 128; r++)
        for (int k = 0; k < 64; k++) {
            const uint32_t o = mxg_wg_offset(r, k);
            if (o >= 16384 || (o & 1) || seen[o]++) { FAIL("layout: element (%d, %d) at %u, taken or outside", r, k, o); return; }
        }
}

// count: also the global sectors of the product's copies per k step and block (emu_cp_sectors), by
// what they copy; the activations and codes must take no more sectors than their bytes fill.
static void run_case(int gs, mx_dtype st, int rows, int cols, int n, bool with_bias, int sms, size_t scratch_tokens,
                     bool count = false) {
    cases++;
    emu_affine m;
    emu_affine_random(&m, 4, gs, st, rows, cols);
    const mx_matrix &w = m.w;
    emu_acts acts;
    emu_acts_random(&acts, n, cols);
    float *xa = acts.x;
    std::vector<float> bias(rows), out((size_t)n * rows, -7.0f);
    for (auto &b : bias) b = emu_unit() - 0.5f;
    const float *bp = with_bias ? bias.data() : nullptr;

    std::vector<float> scratch(scratch_tokens * cols / 2 + 40, 0.0f);
    float *scr = (float *)(((uintptr_t)scratch.data() + 127) & ~(uintptr_t)127);  // as a device allocation's start
    mxg_launch L{};
    L.warp = 32, L.sm_count = sms, L.cc = 90, L.wgmma = true, L.prefill_kernel = MXG_PREFILL_WGMMA;
    L.scratch = scr, L.scratch_bytes = scratch_tokens * cols * 2;
    emu_copies().clear();
    emu_wgmma_states().clear();
    emu_grids.clear();
    emu_cp_async_log().recs.clear();
    emu_cp_async_log().on = count;
    const int declined = mxg_matmul_wgmma(&L, out.data(), xa, &w, bp, n);
    emu_cp_async_log().on = false;
    if (declined) {
        FAIL("declined: g%d %s %dx%d n=%d", gs, st_name(st), rows, cols, n);
        return;
    }
    if (count) {
        long sec[3] = {0, 0, 0}, ideal[3] = {0, 0, 0}, instr[3] = {0, 0, 0};  // activations, codes, scales and biases
        const uintptr_t sb = (uintptr_t)scr, wd = (uintptr_t)w.data;
        emu_cp_sectors(emu_cp_async_log().recs, [&](const emu_cp_record &r, long s, long id) {
            const int k = r.g >= sb && r.g < sb + L.scratch_bytes ? 0 : r.g >= wd && r.g < wd + (uintptr_t)rows * cols / 2 ? 1 : 2;
            sec[k] += s, ideal[k] += id, instr[k]++;
        });
        const long per = (long)emu_grids.back().x * emu_grids.back().y * (cols / 64);  // block k steps
        const char *names[3] = {"activations", "codes", "scales and biases"};
        printf("global sectors of the copies per block and k step, %d rows x %d columns, %d tokens, group %d %s:\n", rows,
               cols, n, gs, st_name(st));
        for (int k = 0; k < 3; k++)
            printf("  %-18s %5.0f warp copies, %6.0f sectors (ideal %6.0f)\n", names[k], (double)instr[k] / per,
                   (double)sec[k] / per, (double)ideal[k] / per);
        for (int k = 0; k < 2; k++)
            if (sec[k] != ideal[k]) FAIL("%s: %ld sectors, %ld would do", names[k], sec[k], ideal[k]);
        // 2-byte scales at group 64, rows 16-byte aligned: one 16-byte copy per row and array every 8
        // k steps, each half of a sector (4-byte copies per step: 8 times the ideal).
        const bool wide = gs == 64 && st != MX_DTYPE_F32 && (cols / 64) % 8 == 0;
        if (wide && sec[2] > 2 * ideal[2]) FAIL("%s: %ld sectors, over twice the %ld ideal", names[2], sec[2], ideal[2]);
    }
    // One launch pair per run of tokens that fits the scratch; the block tile the largest of 128
    // rows x 128 tokens, 128 x 64, 64 x 64 that gives every multiprocessor a block.
    auto tiles = [&](int nt, int br, int bt) { return (long)((rows + br - 1) / br) * ((nt + bt - 1) / bt); };
    const int run = (int)scratch_tokens, pairs = (n + run - 1) / run;
    if (emu_grids.size() != (size_t)(2 * pairs)) FAIL("%zu launches for %d runs of tokens", emu_grids.size(), pairs);
    for (int p = 0; p < pairs && (size_t)(2 * p + 1) < emu_grids.size(); p++) {
        const int nt = n - p * run < run ? n - p * run : run;
        const int bt = tiles(nt, 128, 128) >= sms ? 128 : 64, br = bt == 128 || tiles(nt, 128, 64) >= sms ? 128 : 64;
        const dim3 gd = emu_grids[2 * p + 1];
        if (gd.x != (unsigned)((rows + br - 1) / br) || gd.y != (unsigned)((nt + bt - 1) / bt))
            FAIL("grid %u x %u, want tiles %d rows x %d tokens: %dx%d n=%d sms=%d", gd.x, gd.y, br, bt, rows, cols, n, sms);
        tile_cases[bt == 128 ? 0 : br == 128 ? 1 : 2]++;
    }
    for (auto &kv : emu_copies())
        if (!kv.second.open.empty()) { FAIL("copies issued but never committed"); break; }
    for (auto &kv : emu_wgmma_states())
        if (!kv.second.open.empty() || !kv.second.committed.empty()) { FAIL("wgmma left in flight at the kernel's end"); break; }

    char what[96];
    snprintf(what, sizeof what, "g%d %s %dx%d n=%d bias=%d sms=%d", gs, st_name(st), rows, cols, n, with_bias, sms);
    fails += emu_check_tc_product(m, xa, n, bp, out.data(), what, &worst);
    for (float v : out) {
        uint32_t b;
        memcpy(&b, &v, 4);
        for (int i = 0; i < 4; i++) digest = (digest ^ ((b >> (8 * i)) & 0xffu)) * 1099511628211ull;
    }
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
    L.warp = 32, L.sm_count = 8, L.scratch = scratch.data();
    struct { const char *what; int bits; mx_quant_mode mode; mx_dtype st; int cols; int xoff; int cc; bool wg; size_t scratch; } c[] = {
        {"8-bit", 8, MX_QUANT_AFFINE, MX_DTYPE_BF16, 128, 0, 90, true, 1 << 18},
        {"mxfp4", 4, MX_QUANT_MXFP4, MX_DTYPE_BF16, 128, 0, 90, true, 1 << 18},
        {"u8 scales", 4, MX_QUANT_AFFINE, MX_DTYPE_U8, 128, 0, 90, true, 1 << 18},
        {"96 columns", 4, MX_QUANT_AFFINE, MX_DTYPE_BF16, 96, 0, 90, true, 1 << 18},
        {"unaligned x", 4, MX_QUANT_AFFINE, MX_DTYPE_BF16, 128, 1, 90, true, 1 << 18},
        {"sm_80", 4, MX_QUANT_AFFINE, MX_DTYPE_BF16, 128, 0, 80, true, 1 << 18},
        {"sm_100", 4, MX_QUANT_AFFINE, MX_DTYPE_BF16, 128, 0, 100, true, 1 << 18},
        {"no sm_90a code (probe)", 4, MX_QUANT_AFFINE, MX_DTYPE_BF16, 128, 0, 90, false, 1 << 18},
        {"scratch under 64 tokens", 4, MX_QUANT_AFFINE, MX_DTYPE_BF16, 128, 0, 90, true, 63 * 128 * 2},
    };
    for (auto &k : c) {
        w.q.bits = k.bits, w.q.mode = k.mode, w.scale_dtype = k.st, w.cols = k.cols, w.q.group_size = 32;
        L.cc = k.cc, L.wgmma = k.wg, L.scratch_bytes = k.scratch;
        if (mxg_matmul_wgmma(&L, out.data(), xa + k.xoff, &w, nullptr, 70) != -1) FAIL("did not decline: %s", k.what);
        for (float v : out)
            if (v != -7.0f) { FAIL("wrote output while declining: %s", k.what); break; }
    }
    if (mxg_wgmma_probe(nullptr) != 1) FAIL("the probe found no sm_90a code in the emulation");
}

int main(int argc, char **argv) {
    emu_seed(0x9e3779b97f4a7c15ull);
    const bool quick = argc > 1 && !strcmp(argv[1], "quick"), mutant = argc > 1 && !strcmp(argv[1], "mutant");
    const mx_dtype sts[] = {MX_DTYPE_BF16, MX_DTYPE_F16, MX_DTYPE_F32};
    const int gss[] = {32, 64, 128};
    if (!mutant) {
        layout();
        declines();
        // The 8B gate product's block tile (128 rows x 128 tokens, 4096 columns), with its copies counted.
        run_case(64, MX_DTYPE_BF16, 128, 4096, 128, false, 1, 128, true);
    }
    // Every scale format and group on each block tile (multiprocessors 1: 128 x 128; 132: 64 x 64;
    // 5 with 2 row blocks x 3 token blocks of 64: 128 x 64).
    for (mx_dtype st : sts)
        for (int gs : gss) {
            run_case(gs, st, 129, 256, 70, true, 1, 4096);
            run_case(gs, st, 72, 384, 33, false, 132, 4096);
            run_case(gs, st, 200, 128, 150, gs == 64, 5, 4096);
            if (mutant) break;
        }
    run_case(64, MX_DTYPE_F16, 72, 1024, 100, true, 5, 4096);  // f16 scales on the wide scale copies
    if (mutant) return fails ? 1 : 0;
    // The models' shapes (rows scaled down), token counts 1..512 (ragged too), the H100's 132
    // multiprocessors and one (the largest tile).
    run_case(64, MX_DTYPE_BF16, 256, 1024, 512, false, 132, 4096);  // 0.6B q/k/v/gate/up in, pp512
    run_case(64, MX_DTYPE_BF16, 136, 3072, 300, false, 1, 4096);    // 0.6B down
    run_case(64, MX_DTYPE_BF16, 128, 4096, 77, false, 132, 4096);   // 8B q/k/v/gate/up in
    run_case(32, MX_DTYPE_F16, 64, 12288, 7, true, 132, 4096);      // 8B down, f16 scales, group 32
    run_case(128, MX_DTYPE_F32, 192, 1024, 128, false, 1, 4096);    // one full 128-token tile
    run_case(64, MX_DTYPE_BF16, 200, 640, 150, true, 1, 64);        // three launch pairs of 64 tokens
    run_case(64, MX_DTYPE_BF16, 1, 128, 1, false, 1, 4096);          // one row, one token
    run_case(32, MX_DTYPE_BF16, 8, 64, 300, true, 132, 4096);        // one k step, 5 token blocks of 64
    run_case(128, MX_DTYPE_F16, 133, 512, 129, true, 1, 4096);       // odd rows
    run_case(64, MX_DTYPE_BF16, 1024, 128, 64, false, 132, 4096);    // 16 row blocks of 64
    if (!quick) {
        run_case(64, MX_DTYPE_BF16, 512, 1024, 512, true, 132, 4096);
        run_case(64, MX_DTYPE_BF16, 64, 4096, 512, false, 1, 4096);
        run_case(128, MX_DTYPE_BF16, 96, 12288, 65, false, 5, 4096);
    }
    const int random_cases = quick ? 4 : 24;
    for (int i = 0; i < random_cases; i++) {
        const int gs = gss[emu_below(3)], cols = gs == 128 ? 128 * (1 + emu_below(5)) : 64 * (1 + emu_below(10));
        const int rowss[] = {1, 8, 72, 129, 200, 133};
        const int sms[] = {1, 5, 132};
        run_case(gs, sts[emu_below(3)], rowss[emu_below(6)], cols, 1 + emu_below(200), emu_below(2), sms[emu_below(3)],
                 emu_below(4) ? 4096 : 64);
    }
    printf("block tiles launched: %d of 128 x 128, %d of 128 x 64, %d of 64 x 64 (rows x tokens); %ld wgmma.mma_async "
           "(per thread)\n", tile_cases[0], tile_cases[1], tile_cases[2], emu_wgmma_count);
    if (tile_cases[0] < 5 || tile_cases[1] < 5 || tile_cases[2] < 5) FAIL("a block tile checked fewer than 5 times");
    printf("%d products, worst error as a fraction of its bound: %.3g (exact bf16 inputs, float32 sums), "
           "%.3g (tensor-core bound against float32); outputs' digest %016llx\n", cases, worst.exact, worst.tc,
           (unsigned long long)digest);
    if (fails) printf("%d failed\n", fails);
    else printf("passed\n");
    return fails ? 1 : 0;
}
