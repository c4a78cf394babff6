// SPDX-License-Identifier: MIT
// The GPU's token choice kernels run on the host emulation (emu.h): the split form
// (kernels/sample_split.cu, a row's vocabulary over many blocks; its fast form
// kernels/sample_fast.cu) against the one-block form (kernels/sample.cu) and the host rule
// (core/sample_rows.c), on batches of 1-8 random rows of vocabularies from 2,048 to 151,936 (odd
// sizes included): normal, peaked, tied, partly -inf and language-model-like logits; temperatures
// with top-k (1 to more than the vocabulary), top-p, min-p, alone and together; greedy rows; sparse
// edits (bias, repetition, presence; ids outside the row too); allowed-token masks (dense, sparse,
// empty: ignored); logprobs with 0-20 alternatives; the split at the rule's block count and at 2,
// 3, 7 and 128 blocks, and with scratch for fewer rows than the batch (several launches); warps of
// 32 lanes, and a few batches at AMD's 64. Then batches of 8-64 rows (the server's; the rule's 8
// blocks per row at 64 rows of 151,936), server-like rows (temperature and top-p, sometimes min-p;
// half of them flat) and rows with NaN logits.
// The two forms must agree exactly on every token, top id and edited logit, and within 1e-5 on
// logprobs; against the host rule, every greedy row and top id must agree and logprobs within 1e-5
// (rows with a NaN logit: the forms' tokens and top ids against each other only, and every logprob
// NaN in both forms and the host rule, whose log-softmax of such a row is NaN); a sampled token may
// differ from the host's only where float sums in another order move a boundary (counted, at most
// 2% of the sampled rows). On every batch the split form's fast form (L.sample_fast) must equal the
// split form bit for bit: outputs, edited logits, and each sampled row's threshold and 1,024
// draw-run masses; it must have taken each of its three ways (a list above a cut, a window's bin,
// the radix passes) somewhere.
// MLXCEL_GPU_PDL=3 (L.pdl_rest: every launch of the token choice a dependent launch whose grid wait
// comes first): on every batch the fast split form and the one-block form run again as dependent
// launches, on batches of at most 16 MB of logits with the
// logits, the scratch and the outputs hidden from each block until its grid wait (emu.h,
// emu_pdl_guard: as on a device where the kernel before has not finished writing them, and a
// block's writes before its wait undone), and must give the plain launches' outputs, edited logits
// and scratch bit for bit (the fast form's key lists, filled by atomics in thread order, as sets),
// every launch dependent and every block having waited. The argmax
// (kernels/rows.cu, the greedy decode step's token choice) likewise: against the host's first
// maximum with and without the level, where it drops the memset node and each launch's last block
// clears the scratch for the next one (checked: two launches in a row, the second row's maximum
// below the first's, then the scratch all zero; and a scratch of fewer rows than the batch).
// run.sh also builds it against planted faults that must fail: a grid wait moved below the stats
// kernel's first reads of the logits, one wait left out (split_cut), and the argmax's clearing left out.
// Built and run by run.sh; argument "quick": fewer batches; "pdl": a few batches and argmax cases. Exits 1 on any failure.
#include "emu.h"
#include "emu_fail.h"
#include "emu_random.h"
#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
extern "C" {
#include "core/sample_rows.h"
}
#include "backends/gpu/kernels_sample.h"
#include "backends/gpu/kernels/sample_split.cuh"  // SplitRow, FastRow (same_scratch)
#include <vector>

template <class T, size_t N> static T pick(const T (&a)[N]) { return a[emu_below((int)N)]; }

static int host_diff = 0, sampled_rows = 0, rows_total = 0;
static int nan_checked[3];  // rows with NaN logits whose logprobs were checked, by Batch::nan
static int fast_ways[3];  // the fast form's sampled rows by way: radix passes, list, window bin
static int pdl_launches = 0, pdl_unguarded = 0;  // dependent launches checked with the ranges guarded
                                                 // (MLXCEL_GPU_PDL=3), and those run without (kGuardBytes)
// The guard copies its ranges at every block's start and wait: batches whose logits pass this size
// (the 64-row batches of 151,936) run their dependent launches without it (still against the plain
// launches' bytes, every launch dependent).
constexpr size_t kGuardBytes = (size_t)16 << 20;

// Runs `run` with the ranges hidden from each block until its grid wait (emu.h, emu_pdl_guard; not
// when spans[0], the logits, pass kGuardBytes); false (and a FAIL naming `what`) when a launch was
// not a dependent one, none was, or a block never waited.
template <class Run>
static bool with_guard(const char *what, std::vector<emu_span> spans, Run run) {
    const long unw0 = emu_pdl_unwaited;
    const bool guard = spans[0].bytes <= kGuardBytes;
    emu_dependent.clear();
    if (guard) emu_pdl_guard = std::move(spans);
    run();
    emu_pdl_guard.clear();
    const long dep = std::count(emu_dependent.begin(), emu_dependent.end(), true),
               plain = (long)emu_dependent.size() - dep, unw = emu_pdl_unwaited - unw0;
    (guard ? pdl_launches : pdl_unguarded) += (int)dep;
    if (dep == 0 || plain != 0 || unw != 0) {
        FAIL("%s, MLXCEL_GPU_PDL=3: %ld dependent launches, %ld plain ones, %ld blocks without a grid wait", what, dep,
             plain, unw);
        return false;
    }
    return true;
}

// Whether two fast split forms' scratch (`per` rows: SplitRows, then as many FastRows) hold the same
// records: every byte, but each FastRow's key list [0, n) compared as a set (its candidates are
// appended by atomics in the order the threads run, which a grid wait's barrier changes; the
// selection sorts them) and the stale keys past n not at all.
static bool same_scratch(const std::vector<unsigned char> &a, const std::vector<unsigned char> &b, int per) {
    using sample_split::FastRow, sample_split::SplitRow, sample_split::kFastCap;
    const size_t split = sizeof(SplitRow) * (size_t)per;
    if (a.size() != b.size() || a.size() < split + sizeof(FastRow) * (size_t)per || memcmp(a.data(), b.data(), split)) return false;
    for (int r = 0; r < per; r++) {
        const FastRow *x = (const FastRow *)(a.data() + split) + r, *y = (const FastRow *)(b.data() + split) + r;
        if (memcmp(x, y, offsetof(FastRow, keys))) return false;
        const size_t n = x->n < (unsigned long long)kFastCap ? (size_t)x->n : (size_t)kFastCap;
        std::vector<unsigned long long> kx(x->keys, x->keys + n), ky(y->keys, y->keys + n);
        std::sort(kx.begin(), kx.end()), std::sort(ky.begin(), ky.end());
        if (kx != ky) return false;
    }
    const size_t tail = split + sizeof(FastRow) * (size_t)per;
    return memcmp(a.data() + tail, b.data() + tail, a.size() - tail) == 0;
}

static void fill_row(float *l, int vocab, int kind) {
    if (kind == 4) {  // like a language model's: a bulk far below a few leading tokens
        const float lead = 6.0f + emu_unit() * 14.0f;
        for (int i = 0; i < vocab; i++) l[i] = (emu_unit() + emu_unit() + emu_unit() + emu_unit() - 2.0f) * 5.196f;  // ~N(0, 3)
        for (int k = 0, n = 1 + emu_below(30); k < n; k++) l[emu_below(vocab)] = 8.0f + lead - emu_unit() * (emu_below(2) ? 3.0f : 12.0f);
        return;
    }
    for (int i = 0; i < vocab; i++) {
        float g = (emu_unit() + emu_unit() + emu_unit() + emu_unit() - 2.0f) * 3.4641f;  // ~N(0, 2)
        switch (kind) {
        case 0: l[i] = g; break;
        case 1: l[i] = emu_unit() * 2.0f; break;
        case 2: l[i] = floorf(g * 2.0f) * 0.5f; break;  // many ties
        default: l[i] = emu_unit() < 0.3f ? -INFINITY : g; break;
        }
    }
    if (kind == 1)
        for (int k = 0; k < 300; k++) l[emu_below(vocab)] = 10.0f + emu_unit() * 4.0f;
}

struct Batch {
    int vocab, n;
    std::vector<float> logits;
    std::vector<mx_sample_row> rows;
    std::vector<mx_logit_mod> mods;
    std::vector<std::vector<uint32_t>> masks;
    std::vector<char> nan;  // rows with NaN logits: 1 a few anywhere, 2 one among -inf logits only
};

// nan: a few NaN logits in some rows (negative ones, which no filter keeps, and rarely a positive
// one, which both device forms take as the row's best and the host rule skips), or one NaN in a
// first half of -inf logits; such rows are compared with the host rule only in their logprobs,
// which are NaN.
// server: the server's usual rows (temperature and top-p, sometimes min-p, no top-k, no mask; half of them flat).
static Batch make_batch(int vocab, int n, bool nan = false, bool server = false) {
    Batch b{vocab, n, std::vector<float>((size_t)vocab * n), std::vector<mx_sample_row>(n), {}, {}};
    b.masks.resize(n);
    b.nan.assign(n, 0);
    const float temps[] = {0.0f, 0.3f, 0.7f, 1.0f, 1.5f, 2.5f};
    const float top_ps[] = {1.0f, 1.0f, 0.9f, 0.5f, 0.99f, 0.2f};
    const float min_ps[] = {0.0f, 0.0f, 0.05f, 0.3f};
    const int n_tops[] = {-1, -1, 0, 3, 20};
    for (int t = 0; t < n; t++) {
        fill_row(&b.logits[(size_t)t * vocab], vocab, emu_below(5));
        if (nan && emu_below(3) == 0 && (b.nan[t] = 1)) {
            float *l = &b.logits[(size_t)t * vocab];
            if (emu_below(2) == 0) {  // one NaN among -inf logits only: the split's slices there have no finite term
                b.nan[t] = 2;
                for (int i = 0; i <= vocab / 2; i++) l[i] = -INFINITY;
                l[emu_below(vocab / 2)] = -NAN;
            } else {
                for (int k = 0, c = 1 + emu_below(20); k < c; k++) l[emu_below(vocab)] = emu_below(25) ? -NAN : NAN;
            }
        }
        mx_sample_row &r = b.rows[t];
        r = mx_sample_row{};
        r.temp = emu_below(4) == 0 ? 0.0f : pick(temps);
        r.top_p = pick(top_ps);
        r.min_p = pick(min_ps);
        const int top_ks[] = {0, 0, 1, 7, 50, 1000, vocab + 5};
        r.top_k = pick(top_ks);
        r.seed = emu_next();
        r.pos = emu_below(100000);
        r.n_top = pick(n_tops);
        r.mod_off = (int32_t)b.mods.size();
        int n_mod = emu_below(3) == 0 ? 0 : emu_below(40);
        std::vector<int32_t> used;
        for (int k = 0; k < n_mod; k++) {
            int32_t id = emu_below(10) == 0 ? vocab + emu_below(50) : emu_below(vocab);
            if (std::find(used.begin(), used.end(), id) != used.end()) continue;
            used.push_back(id);
            const float biases[] = {0.0f, 0.0f, 5.0f, -5.0f, 10.0f, 30.0f};
            b.mods.push_back({id, pick(biases), emu_below(2) ? 1.0f : 1.3f, emu_below(2) ? 0.0f : 0.5f});
        }
        r.n_mod = (int32_t)b.mods.size() - r.mod_off;
        int mk = emu_below(8);
        if (mk >= 4) {
            std::vector<uint32_t> &m = b.masks[t];
            m.assign((size_t)(vocab + 31) / 32, 0u);
            if (mk == 4 || mk == 5)
                for (auto &w : m) w = (uint32_t)emu_next();
            else if (mk == 6)
                for (int k = 0; k < 5; k++) { int i = emu_below(vocab); m[i / 32] |= 1u << (i % 32); }
            // mk == 7: nothing allowed, so the mask is ignored
        }
    }
    if (server)
        for (int t = 0; t < n; t++) {
            const float s_temps[] = {0.6f, 0.7f, 1.0f}, s_top_ps[] = {0.95f, 0.9f, 0.8f, 0.95f}, s_min_ps[] = {0.0f, 0.0f, 0.05f};
            mx_sample_row &r = b.rows[t];
            r.temp = pick(s_temps), r.top_p = pick(s_top_ps), r.min_p = pick(s_min_ps), r.top_k = 0;
            b.masks[t].clear();
            if (emu_below(2) && !b.nan[t]) fill_row(&b.logits[(size_t)t * vocab], vocab, 0);  // flat, as the random bench model's
        }
    for (int t = 0; t < n; t++) b.rows[t].allowed = b.masks[t].empty() ? nullptr : b.masks[t].data();
    return b;
}

static bool close(float a, float b) { return (a == b) || fabsf(a - b) <= 1e-5f; }

// Runs the batch through the one-block kernel, the split kernels (blocks 0: the rule's count;
// scratch_rows: rows of scratch) and the host rule, and compares.
static int warp = 32;  // the emulated warp width: 32 (NVIDIA) or 64 (AMD's wave64)

static void run_batch(const Batch &b, int blocks, int scratch_rows) {
    const int vocab = b.vocab, n = b.n;
    const mx_logit_mod *mods = b.mods.empty() ? nullptr : b.mods.data();
    std::vector<float> l1 = b.logits, l2 = b.logits, lh = b.logits;
    std::vector<mx_sample_out> o1(n), o2(n), oh(n);
    mxg_launch L;
    memset(&L, 0, sizeof L);
    L.warp = warp, L.sm_count = 132, L.sample_blocks = 1;
    mxg_sample(&L, o1.data(), l1.data(), n, vocab, b.rows.data(), mods);
    std::vector<unsigned char> scratch(mxg_sample_split_row_bytes() * (size_t)scratch_rows + 64);
    L.sample_blocks = MXG_SAMPLE_MAX_BLOCKS;
    L.sample_scratch = scratch.data();
    L.sample_scratch_bytes = mxg_sample_split_row_bytes() * (size_t)scratch_rows;
    int g = blocks ? blocks : mxg_sample_split_blocks(&L, n, vocab);
    if (g < 2) { FAIL("vocab %d, %d rows: the rule gives %d blocks per row", vocab, n, g); return; }
    mxg_sample_split(&L, o2.data(), l2.data(), n, vocab, b.rows.data(), mods, g);
    // The fast form (L.sample_fast) on the same rows and blocks: equal to the split form bit for bit
    // (outputs, edited logits, and each sampled row's threshold and draw-run masses).
    std::vector<float> l3 = b.logits;
    std::vector<mx_sample_out> o3(n);
    const size_t fast_row = mxg_sample_split_row_bytes() + mxg_sample_fast_row_bytes();
    std::vector<unsigned char> fscratch(fast_row * (size_t)scratch_rows + 64);
    mxg_launch F = L;
    F.sample_fast = true, F.sample_scratch = fscratch.data(), F.sample_scratch_bytes = fast_row * (size_t)scratch_rows;
    mxg_sample_split(&F, o3.data(), l3.data(), n, vocab, b.rows.data(), mods, g);
    if (memcmp(l2.data(), l3.data(), sizeof(float) * l2.size()) != 0) FAIL("vocab %d g %d: fast form's edited logits differ", vocab, g);
    // MLXCEL_GPU_PDL=3: the fast split form and the one-block form as dependent launches, the logits,
    // scratch and outputs hidden from each block until its wait: the plain launches' bytes (the
    // scratch's key lists as sets: same_scratch).
    {
        std::vector<float> l4 = b.logits, l5 = b.logits;
        std::vector<mx_sample_out> o4(n), o5(n);
        std::vector<unsigned char> pscratch(fscratch.size());
        mxg_launch P = F, Q = L;
        P.sample_scratch = pscratch.data();
        P.dependent_launch = P.pdl_early = P.pdl_rest = Q.dependent_launch = Q.pdl_early = Q.pdl_rest = true;
        Q.sample_blocks = 1, Q.sample_scratch = nullptr, Q.sample_scratch_bytes = 0;
        char what[96];
        snprintf(what, sizeof what, "vocab %d, %d rows, %d blocks", vocab, n, g);
        const size_t lb = sizeof(float) * l4.size(), ob = sizeof(mx_sample_out) * (size_t)n;
        if (with_guard(what, {{l4.data(), lb}, {pscratch.data(), pscratch.size()}, {o4.data(), ob}},
                        [&] { mxg_sample_split(&P, o4.data(), l4.data(), n, vocab, b.rows.data(), mods, g); }) &&
            (memcmp(l4.data(), l3.data(), lb) || memcmp(o4.data(), o3.data(), ob) ||
             !same_scratch(pscratch, fscratch, scratch_rows)))
            FAIL("%s: the split form's dependent launches (MLXCEL_GPU_PDL=3) differ from its plain ones", what);
        if (with_guard(what, {{l5.data(), lb}, {o5.data(), ob}},
                        [&] { mxg_sample(&Q, o5.data(), l5.data(), n, vocab, b.rows.data(), mods); }) &&
            (memcmp(l5.data(), l1.data(), lb) || memcmp(o5.data(), o1.data(), ob)))
            FAIL("%s: the one-block form's dependent launch (MLXCEL_GPU_PDL=3) differs from its plain one", what);
    }
    for (int t = 0; t < n; t++) {
        const mx_sample_out &c = o2[t], &d = o3[t];
        bool same = c.id == d.id && c.n_top == d.n_top;
        if (b.rows[t].n_top >= 0)
            for (int k = 0; same && k < c.n_top; k++)
                same = c.top_id[k] == d.top_id[k] && !memcmp(&c.top_logprob[k], &d.top_logprob[k], sizeof(float));
        if (same && b.rows[t].n_top >= 0) same = !memcmp(&c.logprob, &d.logprob, sizeof(float));
        if (!same) FAIL("vocab %d, %d rows, %d blocks, row %d: fast form chose %d, split %d (or top ids / logprobs differ)", vocab, n, g, t, d.id, c.id);
        if (n > scratch_rows || !(b.rows[t].temp > 0.0f)) continue;
        float thr2, thr3;
        static float parts2[1024], parts3[1024];
        int st2, st3;
        mxg_sample_split_peek(&L, t, &thr2, parts2, &st2);
        mxg_sample_split_peek(&F, t, &thr3, parts3, &st3);
        if (st2 != -1 || st3 < 0 || st3 > 2) FAIL("row %d: fast form outcomes %d / %d", t, st2, st3);
        else fast_ways[st3]++;
        if (memcmp(&thr2, &thr3, sizeof thr2) || memcmp(parts2, parts3, sizeof parts2))
            FAIL("vocab %d, %d rows, %d blocks, row %d (%s; top-k %d top-p %.2f min-p %.2f): fast form's threshold %.9g, split's %.9g, or draw runs differ",
                 vocab, n, g, t, st3 == 1 ? "from the list" : st3 == 2 ? "window bin" : "radix passes", b.rows[t].top_k, b.rows[t].top_p, b.rows[t].min_p, thr3, thr2);
    }
    std::vector<uint64_t> hs(MX_SAMPLE_SCRATCH_BYTES(vocab) / 8 + 1);
    for (int t = 0; t < n; t++)
        mx_sample_row_host(&lh[(size_t)t * vocab], vocab, &b.rows[t], mods, hs.data(), &oh[t]);
    if (memcmp(l1.data(), l2.data(), sizeof(float) * l1.size()) != 0) FAIL("vocab %d g %d: edited logits differ", vocab, g);
    for (int t = 0; t < n; t++) {
        const mx_sample_row &r = b.rows[t];
        const mx_sample_out &a = o1[t], &c = o2[t], &h = oh[t];
        char what[200];
        snprintf(what, sizeof what, "warp %d, vocab %d, %d rows, %d blocks, row %d (temp %.2f top-k %d top-p %.2f min-p %.2f, %d edits, %s, n_top %d)",
                 warp, vocab, n, g, t, r.temp, r.top_k, r.top_p, r.min_p, r.n_mod, r.allowed ? "mask" : "no mask", r.n_top);
        rows_total++;
        if (a.id != c.id) FAIL("%s: one block chose %d, split %d", what, a.id, c.id);
        if (r.temp > 0.0f) sampled_rows++;
        if (!b.nan[t] && c.id != h.id) {
            if (r.temp <= 0.0f) FAIL("%s: greedy row, split chose %d, host %d", what, c.id, h.id);
            else {
                host_diff++;
                printf("  host boundary? %s: device %d (l %.6f), host %d (l %.6f)\n", what, c.id, l2[(size_t)t * vocab + c.id], h.id,
                       lh[(size_t)t * vocab + h.id]);
            }
        }
        if (r.n_top < 0) continue;
        if (a.n_top != c.n_top || c.n_top != h.n_top) FAIL("%s: n_top %d / %d / host %d", what, a.n_top, c.n_top, h.n_top);
        if (b.nan[t]) {  // a NaN logit: the row's log-softmax is NaN, so every logprob is NaN in every form
            nan_checked[(int)b.nan[t]]++;
            bool all_nan = std::isnan(a.logprob) && std::isnan(c.logprob) && std::isnan(h.logprob);
            for (int k = 0; k < c.n_top; k++) {
                all_nan = all_nan && std::isnan(a.top_logprob[k]) && std::isnan(c.top_logprob[k]) && std::isnan(h.top_logprob[k]);
                if (a.top_id[k] != c.top_id[k]) FAIL("%s, NaN logits: top %d id %d / %d", what, k, a.top_id[k], c.top_id[k]);
            }
            if (!all_nan)
                FAIL("%s, NaN logits: logprob one block %.7f, split %.7f, host %.7f (top 0: %.7f / %.7f): all must be NaN", what,
                     a.logprob, c.logprob, h.logprob, c.n_top ? a.top_logprob[0] : 0.0f, c.n_top ? c.top_logprob[0] : 0.0f);
            continue;
        }
        if (!close(a.logprob, c.logprob)) FAIL("%s: logprob one block %.7f, split %.7f", what, a.logprob, c.logprob);
        if (c.id == h.id && !close(c.logprob, h.logprob)) FAIL("%s: logprob split %.7f, host %.7f", what, c.logprob, h.logprob);
        for (int k = 0; k < c.n_top; k++) {
            if (a.top_id[k] != c.top_id[k] || c.top_id[k] != h.top_id[k])
                FAIL("%s: top %d id %d / %d / host %d", what, k, a.top_id[k], c.top_id[k], h.top_id[k]);
            if (!close(a.top_logprob[k], c.top_logprob[k]) || !close(c.top_logprob[k], h.top_logprob[k]))
                FAIL("%s: top %d logprob %.7f / %.7f / host %.7f", what, k, a.top_logprob[k], c.top_logprob[k], h.top_logprob[k]);
        }
    }
}

// The argmax (mxg_argmax, the greedy step's token choice) of n rows of `vocab` random logits, with
// scratch for `scratch_rows` rows: plain launches after a memset, then at MLXCEL_GPU_PDL=3 (no
// memset; each launch's last blocks clear the scratch) twice in a row, the second batch's maxima
// below the first's so that a key left over from the first would win; every id the host's first
// maximum, the scratch all zero at the end.
static void argmax_check(int vocab, int n, int scratch_rows) {
    std::vector<float> a((size_t)n * vocab), c((size_t)n * vocab);
    for (size_t i = 0; i < a.size(); i++) a[i] = (float)emu_below(1 << 20) * 1e-3f;
    for (size_t i = 0; i < c.size(); i++) c[i] = (float)emu_below(1 << 20) * 1e-3f - 2000.0f;
    a[(size_t)emu_below(vocab)] = a[0];  // a tie with an earlier id in row 0 (the first one wins)
    auto host = [&](const std::vector<float> &l, int t) {
        int best = 0;
        for (int i = 1; i < vocab; i++)
            if (l[(size_t)t * vocab + i] > l[(size_t)t * vocab + best]) best = i;
        return best;
    };
    const size_t sb = (sizeof(unsigned long long) + sizeof(unsigned int)) * (size_t)scratch_rows;
    std::vector<unsigned char> scratch(sb);
    mxg_launch L;
    memset(&L, 0, sizeof L);
    L.warp = warp, L.sm_count = 132, L.small_scratch = scratch.data(), L.small_scratch_bytes = sb;
    std::vector<int32_t> plain(n), first(n), second(n);
    memset(scratch.data(), 0x5a, sb);  // the memset node clears what is there
    mxg_argmax(&L, plain.data(), a.data(), n, vocab);
    memset(scratch.data(), 0, sb);  // as allocated (mxg_rt_malloc zeroes)
    L.dependent_launch = L.pdl_early = L.pdl_rest = true;
    char what[96];
    snprintf(what, sizeof what, "argmax, vocab %d, %d rows, scratch %d rows", vocab, n, scratch_rows);
    const size_t lb = sizeof(float) * a.size(), ib = sizeof(int32_t) * (size_t)n;
    with_guard(what, {{a.data(), lb}, {scratch.data(), sb}, {first.data(), ib}}, [&] { mxg_argmax(&L, first.data(), a.data(), n, vocab); });
    with_guard(what, {{c.data(), lb}, {scratch.data(), sb}, {second.data(), ib}}, [&] { mxg_argmax(&L, second.data(), c.data(), n, vocab); });
    for (int t = 0; t < n; t++) {
        const int ha = host(a, t), hc = host(c, t);
        if (plain[t] != ha || first[t] != ha || second[t] != hc)
            FAIL("%s, row %d: plain %d, MLXCEL_GPU_PDL=3 %d then %d; the host's %d then %d", what, t, plain[t], first[t], second[t], ha, hc);
    }
    for (size_t i = 0; i < sb; i++)
        if (scratch[i]) { FAIL("%s: the scratch is not clear after the launches (byte %zu)", what, i); break; }
}

int main(int argc, char **argv) {
    emu_seed(0x2545f4914f6cdd1dull);
    setvbuf(stdout, NULL, _IOLBF, 0);
    const bool quick = argc > 1 && !strcmp(argv[1], "quick");
    if (argc > 1 && !strcmp(argv[1], "pdl")) {  // run.sh's planted faults: a few batches and the argmax
        run_batch(make_batch(32000, 1), 0, 8);
        run_batch(make_batch(151936, 2), 0, 8);
        run_batch(make_batch(5003, 5), 3, 2);
        argmax_check(151936, 3, 2);
        argmax_check(5003, 4, 64);
        printf("%d failures\n", fails);
        return fails != 0;
    }
    struct { int vocab, n, blocks, scratch_rows, reps; } plan[] = {
        {151936, 1, 0, 8, 12}, {151936, 2, 0, 8, 3}, {151936, 8, 0, 8, 2}, {151936, 3, 128, 2, 1},
        {32000, 1, 0, 8, 8}, {32000, 5, 0, 8, 4}, {32000, 8, 7, 3, 2}, {100003, 4, 0, 8, 2},
        {5003, 5, 0, 8, 8}, {5003, 2, 3, 8, 8}, {4096, 3, 0, 8, 8}, {2048, 1, 0, 8, 10},
        {2048, 6, 2, 8, 6}, {2049, 7, 128, 8, 6},
    };
    for (auto &p : plan) {
        int reps = quick ? 1 : p.reps;
        for (int k = 0; k < reps; k++) run_batch(make_batch(p.vocab, p.n), p.blocks, p.scratch_rows);
        printf("vocab %6d, %d rows, blocks %s, scratch %d rows: %d batches done, %d failures so far\n", p.vocab, p.n,
               p.blocks ? std::to_string(p.blocks).c_str() : "by rule", p.scratch_rows, reps, fails);
    }
    // The same kernels at AMD's warp width of 64 (a few batches: the warp width changes only the
    // reductions and the histogram copies).
    warp = 64;
    for (int k = 0; k < (quick ? 1 : 3); k++) {
        run_batch(make_batch(151936, 2), 0, 8);
        run_batch(make_batch(5003, 3), 7, 2);
        run_batch(make_batch(32000, 8), 0, 8);
        run_batch(make_batch(151936, 16, false, true), 0, 16);
    }
    printf("warp 64: %d failures so far\n", fails);
    // Many rows (the server's batches; the rule's 8 blocks per row at 64 rows of 151,936), and rows
    // with NaN logits.
    warp = 32;
    struct { int vocab, n, blocks, scratch_rows, reps; bool nan, server; } many[] = {
        {151936, 64, 0, 64, 1, false, true}, {151936, 64, 0, 64, 1, false, false}, {151936, 24, 0, 24, 1, true, false},
        {151936, 8, 0, 8, 2, false, true}, {32000, 64, 0, 64, 2, false, false}, {32000, 64, 0, 64, 1, false, true},
        {32000, 48, 0, 20, 1, false, true}, {32000, 32, 0, 32, 2, true, false}, {5003, 64, 0, 64, 3, false, false},
        {5003, 64, 0, 64, 2, false, true}, {5003, 40, 0, 40, 2, true, true}, {2049, 32, 2, 32, 2, false, true},
    };
    for (auto &p : many) {
        int reps = quick ? 1 : p.reps;
        for (int k = 0; k < reps; k++) run_batch(make_batch(p.vocab, p.n, p.nan, p.server), p.blocks, p.scratch_rows);
        printf("vocab %6d, %d rows%s%s, scratch %d rows: %d batches done, %d failures so far\n", p.vocab, p.n,
               p.server ? " (server rows)" : "", p.nan ? " with NaN logits" : "", p.scratch_rows, reps, fails);
    }
    printf("rows with NaN logits, logprobs checked: %d with a few NaN anywhere, %d with one NaN among -inf logits only\n",
           nan_checked[1], nan_checked[2]);
    if (!nan_checked[1] || !nan_checked[2]) FAIL("the NaN rows did not include both kinds");
    for (int w : {32, 64}) {
        warp = w;
        argmax_check(151936, 1, 64);
        argmax_check(151936, 3, 2);  // two launches, the second reusing the first's keys
        argmax_check(5003, 4, 64);
        argmax_check(100, 2, 1);
    }
    warp = 32;
    printf("MLXCEL_GPU_PDL=3: %d dependent launches checked with the logits, scratch and outputs hidden from each block until its wait "
           "(%d more in batches past the guard's size, unguarded)\n", pdl_launches, pdl_unguarded);
    printf("fast form: of %d sampled rows, %d settled from a list above a cut, %d from a window's bin, %d by the radix passes\n",
           fast_ways[0] + fast_ways[1] + fast_ways[2], fast_ways[1], fast_ways[2], fast_ways[0]);
    if (!fast_ways[0] || !fast_ways[1] || !fast_ways[2]) FAIL("the fast form did not take all three ways");
    printf("%d rows (%d sampled): split == one block everywhere unless failures below; %d sampled tokens differ from "
           "the host rule (float-sum boundaries)\n", rows_total, sampled_rows, host_diff);
    if (host_diff * 50 > sampled_rows) FAIL("%d of %d sampled rows differ from the host rule", host_diff, sampled_rows);
    printf("%d failures\n", fails);
    return fails != 0;
}
