// SPDX-License-Identifier: MIT
// The tensor-core decode product (vendor/cuda/matvec_mma.cu) run on the host emulation (emu.h, with
// its mma.sync m16n8k16 by the PTX ISA's fragment layout) against a double-precision reference
// built from the CPU's dequantization (mx_matrix_dequant_row): affine 4- and 8-bit weights with
// groups of 32, 64 and 128 and f32/f16/bf16 scales, 2..64 tokens (every tile count, partial tiles),
// rows that are not a multiple of the block's 128 (1, 17, 129...), columns of 1 to 40 chunks, with
// and without bias, with the column split at several multiprocessor counts and scratch sizes (no
// split, a partial last range, 32 ranges), at a server step's batch sizes split and unsplit, and
// (full form) on the 0.6B's products. Bound (the kernel file's precision paragraph): |out -
// ref| <= 1e-6 * (sum_k(|s q_k x_k| + |b x_k|) + 0.1 |bias|); the worst ratio is printed. Also checks
// that the launcher declines what it has no kernel for (one token, 65 tokens, 3-bit, mxfp4,
// unaligned x) and writes nothing then. A split product's partial sums go through the scratch to a
// second kernel. Every product also runs as the batched "matmul + residual add"
// (mxg_matvec_mma_add), which must give the product's and the add record's bits.
// Built and run by run.sh; argument "quick": fewer cases. Exits 1 on any failure.
#include "emu.h"
#include "emu_affine.h"
#include <cstdio>
#include <cstdlib>
extern "C" {
#include "core/quant.h"
}
#include "backends/gpu/kernels.h"

static int fails = 0, cases = 0;
static double worst = 0.0;
#define FAIL(...) do { printf("FAIL: " __VA_ARGS__); printf("\n"); fails++; } while (0)


// The batched "matmul + residual add" (mxg_matvec_mma_add) on the launch settings of L: out equal
// to the plain product `two` bit for bit and res equal to res0 + two per element (the add record's
// float32 sum), whether the product's store or the split-sum kernel adds.
static int add_cases = 0;
static void add_check(mxg_launch L, const std::vector<float> &two, const float *xa, const mx_matrix &w,
                      const float *bias, int n) {
    add_cases++;
    std::vector<float> res0(two.size());
    for (auto &v : res0) v = (emu_unit() - 0.5f) * 8.0f;
    std::vector<float> out(two.size(), -7.0f), res = res0;
    const int rc = mxg_matvec_mma_add(&L, out.data(), xa, &w, bias, n, res.data());
    bool ok = rc == 0 && memcmp(out.data(), two.data(), two.size() * sizeof(float)) == 0;
    for (size_t i = 0; ok && i < res.size(); i++) {
        const float want = res0[i] + two[i];
        ok = memcmp(&res[i], &want, sizeof want) == 0;
    }
    if (!ok) FAIL("matmul + residual add differs from the two records (rc %d): %dx%d n=%d", rc, (int)w.rows,
                  (int)w.cols, n);
}

// One product against the double reference, then as matmul + residual add.
static void run_case(int bits, int gs, mx_dtype st, int rows, int cols, int n, bool with_bias, int sms,
                     size_t scratch_bytes) {
    cases++;
    emu_affine m;
    emu_affine_random(&m, bits, gs, st, rows, cols);
    const mx_matrix &w = m.w;
    const std::vector<uint8_t> &data = m.data, &sc = m.sc, &bi = m.bi;
    const int64_t rb = mx_matrix_row_bytes(&w), groups = cols / gs;
    emu_acts acts;
    emu_acts_random(&acts, n, cols);
    float *xa = acts.x;
    std::vector<float> bias(rows), out((size_t)n * rows, -7.0f);
    for (auto &b : bias) b = emu_unit() - 0.5f;
    const float *bp = with_bias ? bias.data() : nullptr;
    // The double reference and each output's magnitude sum(|s q x| + |b x|) (+ 0.1 |bias|).
    std::vector<double> ref((size_t)n * rows), mag((size_t)n * rows);
    std::vector<float> row(cols);
    for (int r = 0; r < rows; r++) {
        mx_matrix_dequant_row(&w, r, row.data());
        const uint8_t *rp = data.data() + rb * r;
        for (int tk = 0; tk < n; tk++) {
            double rf = with_bias ? bias[r] : 0.0, mg = with_bias ? 1e-1 * fabs(bias[r]) : 0.0;
            for (int k = 0; k < cols; k++) {
                const double xv = xa[(size_t)tk * cols + k];
                rf += (double)row[k] * xv;
                const size_t gi = (size_t)r * groups + k / gs;
                mg += fabs(get_scale(sc, st, gi) * (double)mx_quant_code(rp, bits, k) * xv) + fabs(get_scale(bi, st, gi) * xv);
            }
            ref[(size_t)tk * rows + r] = rf, mag[(size_t)tk * rows + r] = mg;
        }
    }
    std::vector<float> scratch(scratch_bytes / 4 + 1, 0.0f);
    mxg_launch L{};
    L.warp = 32, L.sm_count = sms, L.cc = 90, L.scratch = scratch_bytes ? scratch.data() : nullptr;
    L.scratch_bytes = scratch_bytes;
    if (mxg_matvec_mma(&L, out.data(), xa, &w, bp, n) != 0) {
        FAIL("declined: %d-bit g%d %s %dx%d n=%d", bits, gs, st_name(st), rows, cols, n);
        return;
    }
    // Outputs past the bound (the first three reported); the worst ratio into `worst`.
    int bad = 0;
    for (int r = 0; r < rows; r++)
        for (int tk = 0; tk < n; tk++) {
            const size_t i = (size_t)tk * rows + r;
            const double ratio = fabs((double)out[i] - ref[i]) / (mag[i] > 0 ? mag[i] : 1e-30);
            if (!(ratio <= 1e-6) && bad++ < 3)
                FAIL("%d-bit g%d %s %dx%d n=%d bias=%d sms=%d: row %d token %d: %.9g, reference %.9g (err/sum %.3g)",
                     bits, gs, st_name(st), rows, cols, n, with_bias, sms, r, tk, out[i], ref[i], ratio);
            worst = ratio > worst || ratio != ratio ? (ratio != ratio ? 1e9 : ratio) : worst;
        }
    add_check(L, out, xa, w, bp, n);
}

static void declines() {
    mx_matrix w{};
    w.q.mode = MX_QUANT_AFFINE, w.q.bits = 4, w.q.group_size = 64, w.dtype = MX_DTYPE_U32;
    w.scale_dtype = MX_DTYPE_BF16, w.n_experts = 1, w.rows = 64, w.cols = 128;
    std::vector<uint8_t> data(64 * 128), sc(64 * 4 * 2);
    w.data = data.data(), w.scales = sc.data(), w.biases = sc.data();
    std::vector<float> x(65 * 128 + 4, 1.0f), out(65 * 64, -7.0f), scratch(1 << 16);
    float *xa = emu_align16(x.data());
    mxg_launch L{};
    L.warp = 32, L.sm_count = 8, L.cc = 90, L.scratch = scratch.data(), L.scratch_bytes = scratch.size() * 4;
    struct { const char *what; int n; int bits; mx_quant_mode mode; int offset; int cc; } c[] = {
        {"one token", 1, 4, MX_QUANT_AFFINE, 0, 90}, {"65 tokens", 65, 4, MX_QUANT_AFFINE, 0, 90},
        {"3-bit", 8, 3, MX_QUANT_AFFINE, 0, 90},     {"mxfp4", 8, 4, MX_QUANT_MXFP4, 0, 90},
        {"unaligned x", 8, 4, MX_QUANT_AFFINE, 1, 90}, {"sm_75", 8, 4, MX_QUANT_AFFINE, 0, 75},
    };
    for (auto &k : c) {
        w.q.bits = k.bits, w.q.mode = k.mode, L.cc = k.cc;
        if (mxg_matvec_mma(&L, out.data(), xa + k.offset, &w, nullptr, k.n) != -1) FAIL("did not decline: %s", k.what);
        for (float v : out)
            if (v != -7.0f) { FAIL("wrote output while declining: %s", k.what); break; }
    }
}

int main(int argc, char **argv) {
    const bool quick = argc > 1 && !strcmp(argv[1], "quick");
    declines();
    const mx_dtype sts[] = {MX_DTYPE_BF16, MX_DTYPE_F16, MX_DTYPE_F32};
    const int gss[] = {32, 64, 128};
    const int ns[] = {2, 3, 8, 9, 16, 17, 31, 32, 33, 47, 64};
    const int rowss[] = {1, 17, 128, 129, 200, 257};
    // Every format once with the column split and without, then random mixes.
    for (int bits : {4, 8})
        for (mx_dtype st : sts)
            for (int gs : gss) {
                run_case(bits, gs, st, 129, 256, 17, true, 132, 8 << 20);
                run_case(bits, gs, st, 40, 384, 33, false, 1, 8 << 20);
            }
    for (int n : ns) run_case(4, 64, MX_DTYPE_BF16, 136, 1024, n, true, 132, 8 << 20);
    // The batch sizes of a server step (1-8, 9-16, 17-32, 33-64 tokens: each token-tile count), 4- and
    // 8-bit, every scale type, unsplit (one multiprocessor); then split (132 multiprocessors).
    for (int n : {2, 8, 17, 32, 33, 64})
        for (int bits : {4, 8})
            for (mx_dtype st : sts) run_case(bits, bits == 4 ? 64 : 32, st, 200, 512, n, true, 1, 8 << 20);
    for (int n : {8, 17, 33, 64}) run_case(4, 128, MX_DTYPE_BF16, 300, 1024, n, false, 132, 8 << 20);
    const int random_cases = quick ? 20 : 80;
    for (int i = 0; i < random_cases; i++) {
        const int bits = emu_below(2) ? 4 : 8, gs = gss[emu_below(3)];
        const int cols = gs * (1 + emu_below(1280 / gs));
        const int sms[] = {1, 4, 132};
        const size_t scr[] = {0, 4096, 8 << 20};
        run_case(bits, gs, sts[emu_below(3)], rowss[emu_below(6)], cols, ns[emu_below(11)], emu_below(2), sms[emu_below(3)], scr[emu_below(3)]);
    }
    if (!quick) {
        run_case(4, 64, MX_DTYPE_BF16, 1024, 1024, 64, false, 132, 8 << 20);  // the 0.6B's shape, 32 splits
        // The 0.6B's products (q, k/v, o, gate/up, down; 4-bit g64 bf16, 132 multiprocessors) at 16,
        // 32 and 64 tokens, and odd batches of an 8-bit product.
        const int shapes06[5][2] = {{2048, 1024}, {1024, 1024}, {1024, 2048}, {3072, 1024}, {1024, 3072}};
        for (auto &sh : shapes06)
            for (int n : {16, 32, 64}) run_case(4, 64, MX_DTYPE_BF16, sh[0], sh[1], n, n == 32, 132, 8 << 20);
        for (int n : {17, 47, 63}) run_case(8, 32, MX_DTYPE_F16, 1000, 1056, n, true, 132, 8 << 20);
    }
    printf("%d products also as matmul + residual add: out and residual bit-identical to the two records "
           "(store or split-sum kernel)\n", add_cases);
    printf("%d products, worst |err| / sum(|s q x| + |b x|) = %.3g (bound 1e-6)\n", cases, worst);
    if (fails) printf("%d failed\n", fails);
    else printf("passed\n");
    return fails ? 1 : 0;
}
