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
// (mxg_matvec_mma_add), which must give the product's and the add record's bits. The grouped form
// (mxg_matvec_mma_group, MLXCEL_GPU_GROUPED=1: q/k/v, gate/up with the SwiGLU) on q/k/v- and
// gate/up-like groups at 2, 4, 16, 63 and 64 tokens and random groups, split and not: each output
// to the same bound, bit for bit the plain product where neither splits, act bit for bit silu(gate)
// * up of its own outputs (also in the gate's buffer), and what it declines.
// Built and run by run.sh; argument "quick": fewer cases. Exits 1 on any failure.
#include "emu.h"
#include "emu_affine.h"
#include "emu_fail.h"
#include <cstdio>
#include <cstdlib>
extern "C" {
#include "core/quant.h"
}
#include "backends/gpu/kernels.h"
#include "backends/gpu/kernels_fused.h"

static int cases = 0;
static double worst = 0.0;

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

// The double reference of out[n, rows] = x w^T (+ bias) and each output's magnitude sum(|s q x| +
// |b x|) (+ 0.1 |bias|), both [n, rows].
static void reference(const emu_affine &m, const float *xa, int n, const float *bias, std::vector<double> &ref,
                      std::vector<double> &mag) {
    const mx_matrix &w = m.w;
    const int rows = (int)w.rows, cols = (int)w.cols, gs = w.q.group_size, bits = w.q.bits;
    const mx_dtype st = w.scale_dtype;
    const int64_t rb = mx_matrix_row_bytes(&w), groups = cols / gs;
    ref.assign((size_t)n * rows, 0.0), mag.assign((size_t)n * rows, 0.0);
    std::vector<float> row(cols);
    for (int r = 0; r < rows; r++) {
        mx_matrix_dequant_row(&w, r, row.data());
        const uint8_t *rp = m.data.data() + rb * r;
        for (int tk = 0; tk < n; tk++) {
            double rf = bias ? bias[r] : 0.0, mg = bias ? 1e-1 * fabs(bias[r]) : 0.0;
            for (int k = 0; k < cols; k++) {
                const double xv = xa[(size_t)tk * cols + k];
                rf += (double)row[k] * xv;
                const size_t gi = (size_t)r * groups + k / gs;
                mg += fabs(get_scale(m.sc, st, gi) * (double)mx_quant_code(rp, bits, k) * xv) + fabs(get_scale(m.bi, st, gi) * xv);
            }
            ref[(size_t)tk * rows + r] = rf, mag[(size_t)tk * rows + r] = mg;
        }
    }
}

// Outputs past the bound (the first three reported, named by what); the worst ratio into `worst`.
static void check_bound(const float *out, const std::vector<double> &ref, const std::vector<double> &mag, int rows,
                        int n, const char *what) {
    int bad = 0;
    for (int r = 0; r < rows; r++)
        for (int tk = 0; tk < n; tk++) {
            const size_t i = (size_t)tk * rows + r;
            const double ratio = fabs((double)out[i] - ref[i]) / (mag[i] > 0 ? mag[i] : 1e-30);
            if (!(ratio <= 1e-6) && bad++ < 3)
                FAIL("%s: row %d token %d: %.9g, reference %.9g (err/sum %.3g)", what, r, tk, out[i], ref[i], ratio);
            worst = ratio > worst || ratio != ratio ? (ratio != ratio ? 1e9 : ratio) : worst;
        }
}

// One product against the double reference, then as matmul + residual add.
static void run_case(int bits, int gs, mx_dtype st, int rows, int cols, int n, bool with_bias, int sms,
                     size_t scratch_bytes) {
    cases++;
    emu_product p;
    emu_product_random(&p, bits, gs, st, rows, cols, n, with_bias);
    const mx_matrix &w = p.m.w;
    const float *xa = p.acts.x, *bp = p.bp;
    std::vector<float> &out = p.out;
    std::vector<double> ref, mag;
    reference(p.m, xa, n, bp, ref, mag);
    std::vector<float> scratch(scratch_bytes / 4 + 1, 0.0f);
    mxg_launch L{};
    L.warp = 32, L.sm_count = sms, L.cc = 90, L.scratch = scratch_bytes ? scratch.data() : nullptr;
    L.scratch_bytes = scratch_bytes;
    if (mxg_matvec_mma(&L, out.data(), xa, &w, bp, n) != 0) {
        FAIL("declined: %d-bit g%d %s %dx%d n=%d", bits, gs, st_name(st), rows, cols, n);
        return;
    }
    char what[128];
    snprintf(what, sizeof what, "%d-bit g%d %s %dx%d n=%d bias=%d sms=%d", bits, gs, st_name(st), rows, cols, n,
             with_bias, sms);
    check_bound(out.data(), ref, mag, rows, n, what);
    add_check(L, out, xa, w, bp, n);
}

// The grouped form (mxg_matvec_mma_group): `count` matrices of rows[k] x cols reading one input.
// Each output against its double reference (the same bound); where the group does not split (one
// multiprocessor, few chunks or no scratch), each output bit for bit the plain product's (which does
// not split there either); nothing written past an output. With act (count 2, equal rows): act bit
// for bit silu(gate) * up of the group's own outputs (the swiglu record's formula), and then the same
// launch with act in the gate's buffer must leave there the bits act had, and the same up.
static int group_cases = 0, group_split = 0;
static void group_case(int bits, int gs, mx_dtype st, int count, const int *rows, int cols, int n, bool with_bias,
                       int sms, size_t scratch_bytes, bool act) {
    group_cases++;
    emu_affine m[3];
    for (int k = 0; k < count; k++) emu_affine_random(&m[k], bits, gs, st, rows[k], cols);
    emu_acts acts;
    emu_acts_random(&acts, n, cols);
    const float *xa = acts.x;
    std::vector<float> bias[3], buf[3], act_buf;
    mxg_fused_matvec f{};
    f.count = count, f.x = xa;
    for (int k = 0; k < count; k++) {
        bias[k].resize(rows[k]);
        for (auto &b : bias[k]) b = emu_unit() - 0.5f;
        buf[k].assign((size_t)n * rows[k] + 8, -7.0f);
        f.w[k] = &m[k].w, f.out[k] = emu_align16(buf[k].data()), f.bias[k] = with_bias ? bias[k].data() : nullptr;
    }
    if (act) {
        act_buf.assign((size_t)n * rows[0] + 8, -7.0f);
        f.act = emu_align16(act_buf.data());
    }
    std::vector<float> scratch(scratch_bytes / 4 + 1, 0.0f);
    mxg_launch L{};
    L.warp = 32, L.sm_count = sms, L.cc = 90, L.scratch = scratch_bytes ? scratch.data() : nullptr;
    L.scratch_bytes = scratch_bytes;
    char what[160];
    snprintf(what, sizeof what, "group of %d (%d, %d, %d rows) %d-bit g%d %s x %d cols n=%d bias=%d sms=%d act=%d",
             count, rows[0], rows[1], count > 2 ? rows[2] : 0, bits, gs, st_name(st), cols, n, with_bias, sms, act);
    if (mxg_matvec_mma_group(&L, &f, n) != 0) {
        FAIL("declined: %s", what);
        return;
    }
    // It splits where the column rule (2 blocks per multiprocessor wanted, at least 2 chunks per
    // split, partials in the scratch) gives 2 or more splits for the group's blocks, and always with act.
    int64_t blocks = 0, total_rows = 0;
    for (int k = 0; k < count; k++) blocks += (rows[k] + 127) / 128, total_rows += rows[k];
    const bool room = scratch_bytes >= 2 * (size_t)n * total_rows * sizeof(float) && cols / 32 >= 4;
    const bool split = room && (act || blocks < 2 * sms);
    group_split += split;
    std::vector<double> ref, mag;
    for (int k = 0; k < count; k++) {
        reference(m[k], xa, n, f.bias[k], ref, mag);
        check_bound(f.out[k], ref, mag, rows[k], n, what);
        for (size_t i = (size_t)n * rows[k]; i < (size_t)n * rows[k] + 4; i++)
            if (f.out[k][i] != -7.0f) { FAIL("%s: output %d written past its end", what, k); break; }
        const int64_t blocks_k = (rows[k] + 127) / 128;
        const bool plain_split = scratch_bytes >= 2 * (size_t)n * rows[k] * sizeof(float) && cols / 32 >= 4 &&
                                 blocks_k < 2 * sms;
        if (!split && !plain_split) {
            std::vector<float> plain((size_t)n * rows[k]);
            if (mxg_matvec_mma(&L, plain.data(), xa, &m[k].w, f.bias[k], n) != 0 ||
                memcmp(plain.data(), f.out[k], plain.size() * sizeof(float)) != 0)
                FAIL("%s: output %d differs from the plain product's bits", what, k);
        }
    }
    if (!act) return;
    int bad = 0;
    const size_t na = (size_t)n * rows[0];
    for (size_t i = 0; i < na; i++) {
        const float g = f.out[0][i], u = f.out[1][i], want = g / (1.0f + expf(-g)) * u;
        if (memcmp(&want, &f.act[i], sizeof want) != 0 && bad++ < 3)
            FAIL("%s: act[%zu] %.9g, silu(gate) * up %.9g", what, i, f.act[i], want);
    }
    for (size_t i = na; i < na + 4; i++)
        if (f.act[i] != -7.0f) { FAIL("%s: act written past its end", what); break; }
    // act in the gate's buffer (the swiglu record gate = silu(gate) * up, in place).
    std::vector<float> g2(na + 8, -7.0f), u2(na + 8, -7.0f);
    mxg_fused_matvec f2 = f;
    f2.out[0] = f2.act = emu_align16(g2.data()), f2.out[1] = emu_align16(u2.data());
    if (mxg_matvec_mma_group(&L, &f2, n) != 0 || memcmp(f2.out[0], f.act, na * sizeof(float)) != 0 ||
        memcmp(f2.out[1], f.out[1], na * sizeof(float)) != 0)
        FAIL("%s: act in the gate's buffer differs from act in its own", what);
}

// What the grouped form declines (-1, nothing written): one matrix, four, a norm or a residual in
// the request, matrices of different bits or columns, rows not a multiple of 4, an output not
// 16-byte aligned, act over unequal rows or three matrices, act without room for two splits, and
// anything the plain product declines (one token).
static void group_declines() {
    emu_affine a, b, c, d;
    emu_affine_random(&a, 4, 64, MX_DTYPE_BF16, 256, 256);
    emu_affine_random(&b, 4, 64, MX_DTYPE_BF16, 256, 256);
    emu_affine_random(&c, 8, 64, MX_DTYPE_BF16, 256, 256);
    emu_affine_random(&d, 4, 64, MX_DTYPE_BF16, 130, 256);
    emu_affine e;
    emu_affine_random(&e, 4, 64, MX_DTYPE_BF16, 256, 512);
    emu_acts acts;
    emu_acts_random(&acts, 8, 512);
    std::vector<float> o0(8 * 256 + 8, -7.0f), o1 = o0, o2 = o0, scratch(1 << 20);
    float *p0 = emu_align16(o0.data()), *p1 = emu_align16(o1.data()), *p2 = emu_align16(o2.data());
    mxg_launch L{};
    L.warp = 32, L.sm_count = 132, L.cc = 90, L.scratch = scratch.data(), L.scratch_bytes = scratch.size() * 4;
    const mxg_fused_matvec base = {2, {&a.w, &b.w, nullptr}, {p0, p1, nullptr}, {nullptr, nullptr, nullptr},
                                   acts.x, nullptr, 0.0f, nullptr, nullptr, nullptr};
    float norm_w[256];
    struct { const char *what; mxg_fused_matvec f; int n; size_t scratch; } c_[] = {
        {"one matrix", base, 8, 0}, {"a norm", base, 8, 0}, {"a residual", base, 8, 0},
        {"different bits", base, 8, 0}, {"different columns", base, 8, 0}, {"130 rows", base, 8, 0},
        {"unaligned output", base, 8, 0}, {"act over unequal rows", base, 8, 0}, {"act over three", base, 8, 0},
        {"act without room for two splits", base, 8, 0}, {"one token", base, 1, 0},
    };
    c_[0].f.count = 1;
    c_[1].f.norm_w = norm_w, c_[1].f.norm_out = p2;
    c_[2].f.res = p2;
    c_[3].f.w[1] = &c.w;
    c_[4].f.w[1] = &e.w;
    c_[5].f.w[1] = &d.w;
    c_[6].f.out[1] = p1 + 1;
    c_[7].f.w[1] = &d.w, c_[7].f.act = p2;
    c_[8].f.count = 3, c_[8].f.w[2] = &b.w, c_[8].f.out[2] = p2 + 0, c_[8].f.act = p2;
    c_[9].f.act = p2;
    for (auto &k : c_) {
        L.scratch_bytes = k.what == c_[9].what ? 4096 : scratch.size() * 4;
        if (mxg_matvec_mma_group(&L, &k.f, k.n) != -1) FAIL("group did not decline: %s", k.what);
        for (const auto *o : {&o0, &o1, &o2})
            for (float v : *o)
                if (v != -7.0f) { FAIL("group wrote output while declining: %s", k.what); return; }
    }
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
    // The grouped form: q/k/v and gate/up shapes at the batches the plan sends it (2, 4, 16, 63, 64
    // tokens), split (132 multiprocessors) and not (one), with and without bias, every scale type,
    // 4- and 8-bit, the SwiGLU folded in; then random groups.
    group_declines();
    const int qkv[3] = {256, 128, 128}, gu[3] = {384, 384, 0}, odd[3] = {132, 4, 260};
    for (int n : {2, 4, 16, 63, 64}) {
        group_case(4, 64, MX_DTYPE_BF16, 3, qkv, 256, n, n % 2 == 0, 132, 8 << 20, false);
        group_case(4, 64, MX_DTYPE_BF16, 2, gu, 256, n, n == 16, 132, 8 << 20, true);
        group_case(8, 32, MX_DTYPE_F16, 3, qkv, 256, n, true, 1, 8 << 20, false);
        group_case(8, 128, MX_DTYPE_F32, 2, gu, 256, n, false, 1, 8 << 20, true);
    }
    group_case(4, 32, MX_DTYPE_F32, 3, odd, 384, 17, true, 4, 8 << 20, false);
    group_case(4, 64, MX_DTYPE_BF16, 2, odd, 384, 33, false, 132, 0, false);  // no scratch: unsplit
    group_case(4, 64, MX_DTYPE_BF16, 3, qkv, 128, 9, true, 132, 8 << 20, false);  // 4 chunks: 2 splits at most
    for (int i = 0; i < (quick ? 6 : 30); i++) {
        const int bits = emu_below(2) ? 4 : 8, gs = gss[emu_below(3)], count = 2 + emu_below(2);
        const bool act = count == 2 && emu_below(2);
        int rows[3];
        for (int k = 0; k < 3; k++) rows[k] = 4 * (1 + emu_below(80));
        if (act) rows[1] = rows[0];
        const int sms[] = {1, 4, 132};
        group_case(bits, gs, sts[emu_below(3)], count, rows, gs * (1 + emu_below(512 / gs)), ns[emu_below(11)],
                   emu_below(2), sms[emu_below(3)], 8 << 20, act);
    }
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
    printf("%d grouped launches (%d split), every output within the bound, act bit-identical to silu(gate) * up\n",
           group_cases, group_split);
    printf("%d products, worst |err| / sum(|s q x| + |b x|) = %.3g (bound 1e-6)\n", cases, worst);
    if (fails) printf("%d failed\n", fails);
    else printf("passed\n");
    return fails ? 1 : 0;
}
