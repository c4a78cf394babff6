// SPDX-License-Identifier: MIT
// The flash-decoding kernel's one-launch form (MLXCEL_GPU_ATTN_ONE, L->attn_one; kernels/attn_decode.cu)
// on the host emulation (emu.h) against the combine launch and the CPU backend: where the step's
// context is split, each block takes a ticket after writing its partials and the block that draws
// its (token, query group)'s last one merges them. Each case fills a cache (its own slot per token,
// scrambled blocks when paged) and runs two consecutive steps on the same counters (the second at
// another context, so a counter left set shows there): today's form (a kernel and its combine),
// then ONE=1 and ONE=2 with the launch's blocks in order and shuffled (emu_block_seed: whichever
// block comes last merges). Checks: within 1e-5 (relative L2) of the CPU's attention; one launch
// where today's has two; every counter 0 after each launch; at 1 the split count and the bits of
// today's combine (the merge sums the splits in split order, whoever merges); at 2 no more splits
// than today's and the same bits in every block order. The scratch's partials are set to NaN
// before each launch, so a merge that reads a partial before its block wrote it fails. One case
// also at MLXCEL_GPU_PDL=3 (L->pdl_rest) under the emulated order of dependent launches (the q,
// outputs, partials and counters hidden from each block until its grid wait): the same bits, every
// block waited. The RoPE-folded form (mxg_attention_decode_rope): outputs and cache bytes with the
// knob those without it, one launch.
// Built and run by run.sh (its planted faults: the counter not set back to 0, the merge's splits in
// an order that starts after the merging block's own, the merge one ticket early, the merge's
// last split left out); exits 1 on any failure. Argument "quick": the faults' cases alone.
#include "emu.h"
#include "emu_random.h"
#include <cstdio>
#include <cstdlib>
extern "C" {
#include "backends/backend.h"
#include "backends/plan.h"
}
#include "backends/gpu/kernels_fused.h"
#include "decode_cache.h"

static mx_error err;
static int fails = 0, split_steps = 0;
static double rel(const float *a, const float *b, size_t n) {
    double d = 0, r = 0;
    for (size_t i = 0; i < n; i++) { double e = (double)a[i] - b[i]; if (std::isnan(a[i])) return INFINITY; d += e * e; r += (double)b[i] * b[i]; }
    return sqrt(d / r);
}
static void run(mx_backend *be, mx_op op) { if (mx_run_op(be, op, &err)) { printf("cpu op: %s\n", err.msg); exit(1); } }
static void poison(const mxg_launch *L) {  // the split partials: NaN
    float *p = (float *)L->scratch;
    for (size_t i = 0; i < L->scratch_bytes / sizeof(float); i++) p[i] = NAN;
}
static bool counters_clear(const mxg_launch *L) {
    const unsigned *c = (const unsigned *)L->attn_tickets;
    for (int i = 0; i < L->attn_tickets_n; i++)
        if (c[i]) return false;
    return true;
}
static bool same(const std::vector<float> &a, const std::vector<float> &b) {
    return !memcmp(a.data(), b.data(), a.size() * sizeof(float));
}

// One decode attention on the flash-decoding kernel into a NaN output, the partials poisoned, the
// blocks in the order of `seed`: its launches and the first one's split count (grid z).
struct launched { std::vector<float> out; size_t launches; unsigned splits; int rc; };
static launched decode(const mxg_launch *L, const std::vector<float> &q, const mx_kv_ref *r, int n, int nh, float scale,
                       int window, const float *sinks, unsigned seed) {
    launched o{std::vector<float>(q.size(), NAN), 0, 0, 0};
    poison(L);
    emu_grids.clear();
    emu_block_seed = seed;
    o.rc = mxg_attention_decode(L, o.out.data(), q.data(), r, n, nh, scale, window, sinks, true);
    emu_block_seed = 0;
    o.launches = emu_grids.size();
    o.splits = emu_grids.empty() ? 0 : emu_grids[0].z;
    return o;
}

// n tokens, each the next position of its own slot of a cache of cap positions (filled), D, nkv,
// nh; a sliding window and sinks where asked; `pdl`: the ONE=1 step again at level 3.
static void one_case(mx_backend *cpu, mxg_launch *L, int D, int nkv, int nh, int cap, int n, int window, bool sinks,
                     bool paged, bool pdl, bool quick) {
    const int tl = (cap + MX_KV_BLOCK - 1) / MX_KV_BLOCK;
    mx_kv_layout lay = {1, n, cap, nkv, D, paged ? n * tl + 3 : 0};
    std::vector<int32_t> table((size_t)n * tl);
    for (int i = 0; i < n * tl; i++) table[i] = (int32_t)((n * tl + 2 - i) % (n * tl + 3));  // distinct, reversed
    const size_t bytes = mx_kv_bytes(&lay, cpu->kv_dtype);
    std::vector<unsigned char> gkv(bytes, 0);
    void *ckv = cpu->ops->alloc(cpu, bytes, &err);
    const int per = nkv * D;
    for (int s = 0; s < n; s++) {
        std::vector<float> k((size_t)cap * per), v((size_t)cap * per);
        emu_fill(k.data(), k.size(), -1, 1), emu_fill(v.data(), v.size(), -1, 1);
        for (size_t i = 0; i < k.size(); i += 31) k[i] *= 6.0f;  // a few large scores
        std::vector<int32_t> sl(cap, s), ps(cap);
        for (int i = 0; i < cap; i++) ps[i] = i;
        mx_kv_ref rg = {gkv.data(), lay, 0, sl.data(), ps.data(), paged ? table.data() : NULL};
        mx_kv_ref rc = {ckv, lay, 0, sl.data(), ps.data(), paged ? table.data() : NULL};
        mxg_kv_store(L, &rg, k.data(), v.data(), cap);
        run(cpu, (mx_op){.kind = MX_OP_KV_STORE, .kv_store = {rc, k.data(), v.data(), cap}});
    }
    printf("one launch D=%d nkv=%d nh=%d cache %d tokens %d%s%s paged=%d warp %d %s\n", D, nkv, nh, cap, n,
           window ? " window" : "", sinks ? " sinks" : "", paged, L->warp, mx_dtype_name(cpu->kv_dtype));
    const float scale = 3.0f / sqrtf((float)D);
    const unsigned seeds[] = {0, 3, 2024};
    const int nseeds = quick ? 2 : 3;
    for (int step = 0; step < 2; step++) {
        std::vector<int32_t> sl(n), ps(n);
        for (int t = 0; t < n; t++) sl[t] = t, ps[t] = step == 0 ? cap - 1 - 5 * t : cap / 2 + 3 * t;
        std::vector<float> q((size_t)n * nh * D), snk(nh), oc(q.size());
        emu_fill(q.data(), q.size(), -1, 1), emu_fill(snk.data(), nh, -1, 3);
        const float *sk = sinks ? snk.data() : NULL;
        mx_kv_ref rg = {gkv.data(), lay, 0, sl.data(), ps.data(), paged ? table.data() : NULL};
        mx_kv_ref rc = {ckv, lay, 0, sl.data(), ps.data(), paged ? table.data() : NULL};
        run(cpu, (mx_op){.kind = MX_OP_ATTENTION, .attention = {oc.data(), q.data(), rc, n, nh, scale, window, sk, true}});
        L->attn_one = 0;
        const launched today = decode(L, q, &rg, n, nh, scale, window, sk, 0);
        const double e0 = rel(today.out.data(), oc.data(), oc.size());
        const bool ok0 = today.rc == 0 && e0 <= 1e-5 && today.launches == (today.splits > 1 ? 2u : 1u);
        printf("   step %d, today's form: %u splits, %zu launches, rel err %.2e%s\n", step, today.splits, today.launches,
               e0, ok0 ? "" : "  <-- FAIL");
        if (!ok0) fails++;
        if (today.splits > 1) split_steps++;
        for (int one = 1; one <= 2; one++) {
            std::vector<float> first;
            for (int si = 0; si < nseeds; si++) {
                L->attn_one = one;
                const launched g = decode(L, q, &rg, n, nh, scale, window, sk, seeds[si]);
                const double e = rel(g.out.data(), oc.data(), oc.size());
                const bool clear = counters_clear(L);
                if (si == 0) first = g.out;
                // 1: today's splits and bits; 2: at most today's splits, the same bits in every order.
                const bool bits = one == 1 ? same(g.out, today.out) : same(g.out, first);
                const bool shape = one == 1 ? g.splits == today.splits : g.splits <= today.splits;
                const bool ok = g.rc == 0 && e <= 1e-5 && clear && g.launches == 1 && bits && shape;
                printf("   step %d, ONE=%d, blocks %s %u: %u splits, %zu launch%s, rel err %.2e%s%s%s%s\n", step, one,
                       seeds[si] ? "shuffled by" : "in order", seeds[si], g.splits, g.launches,
                       g.launches == 1 ? "" : "es", e,
                       bits ? "" : one == 1 ? ", NOT the combine's bits" : ", bits DIFFER between block orders",
                       clear ? "" : ", counters left set", shape ? "" : ", wrong split count", ok ? "" : "  <-- FAIL");
                if (!ok) fails++;
                if (!clear) memset(L->attn_tickets, 0, (size_t)L->attn_tickets_n * sizeof(unsigned));
            }
        }
        if (pdl) {  // ONE=1 at level 3 under the emulated order of dependent launches
            mxg_launch L3 = *L;
            L3.dependent_launch = L3.pdl_early = L3.pdl_rest = true, L3.attn_one = 1;
            std::vector<float> q3 = q, o3(q.size(), NAN);
            poison(&L3);
            emu_dependent.clear(), emu_pdl_unwaited = 0;
            emu_pdl_guard = {{q3.data(), q3.size() * 4}, {o3.data(), o3.size() * 4}, {L3.scratch, L3.scratch_bytes},
                             {L3.attn_tickets, (size_t)L3.attn_tickets_n * sizeof(unsigned)}};
            emu_block_seed = 5;
            const int rc3 = mxg_attention_decode(&L3, o3.data(), q3.data(), &rg, n, nh, scale, window, sk, true);
            emu_block_seed = 0;
            emu_pdl_guard.clear();
            const bool dep = !emu_dependent.empty() &&
                             std::all_of(emu_dependent.begin(), emu_dependent.end(), [](bool d) { return d; });
            const bool ok3 = rc3 == 0 && same(o3, today.out) && emu_pdl_unwaited == 0 && dep && counters_clear(L);
            printf("   step %d, ONE=1, level 3: %s, blocks without their wait %ld, %s%s\n", step,
                   same(o3, today.out) ? "the combine's bits" : "NOT the combine's bits", emu_pdl_unwaited,
                   dep ? "a dependent launch" : "NOT dependent", ok3 ? "" : "  <-- FAIL");
            if (!ok3) fails++;
        }
    }
    L->attn_one = 0;
    cpu->ops->release(cpu, ckv);
}

// The RoPE-folded decode attention (mxg_attention_decode_rope) of one token with and without the
// knob on two copies of one cache (slot 1 holds other rows the step overwrites): the same outputs
// bit for bit, the same cache bytes, one launch with it.
static void one_rope_case(mxg_launch *L, int D, int nkv, int nh, int cap, int paged) {
    DecodeCache cache = decode_cache_filled(L, D, nkv, cap, paged);  // slot 1 filled with rows the steps overwrite
    const mx_kv_layout &lay = cache.lay;
    const std::vector<unsigned char> &base = cache.base;
    const int32_t *table = cache.block_table();
    const int per = nkv * D;
    std::vector<float> qw(D), kw(D), inv(D / 2);
    emu_fill(qw.data(), D, 0.5f, 1.5f), emu_fill(kw.data(), D, 0.5f, 1.5f);
    for (int j = 0; j < D / 2; j++) inv[j] = 1.0f / powf(1e6f, 2.0f * j / D);
    const mx_rope rope = {inv.data(), D, 0.9f, 0, NULL, 0};
    printf("one launch + rope D=%d nkv=%d nh=%d cache %d paged=%d\n", D, nkv, nh, cap, paged);
    for (int pos : {cap - 1, cap / 2}) {
        int32_t sl = 1, ps = pos;
        std::vector<float> q((size_t)nh * D), k(per), v(per);
        emu_fill(q.data(), q.size(), -2, 2), emu_fill(k.data(), per, -2, 2), emu_fill(v.data(), per, -1, 1);
        std::vector<unsigned char> off = base, on = base;
        std::vector<float> oo((size_t)nh * D, NAN), o1((size_t)nh * D, NAN);
        size_t launches[2];
        for (int one = 0; one <= 1; one++) {
            mx_kv_ref r = {one ? on.data() : off.data(), lay, 0, &sl, &ps, table};
            const mxg_attn_rope f = {one ? o1.data() : oo.data(), q.data(), k.data(), v.data(), qw.data(), kw.data(),
                                     1e-6f, &ps, &rope, &r, 1, nh, nkv, 1.0f / sqrtf((float)D), 0, NULL, false};
            L->attn_one = one;
            poison(L);
            emu_grids.clear();
            emu_block_seed = one ? 11 : 0;
            if (mxg_attention_decode_rope(L, &f) != 0) printf("   refused  <-- FAIL\n"), fails++;
            emu_block_seed = 0;
            launches[one] = emu_grids.size();
        }
        const bool ok = same(oo, o1) && off == on && launches[1] == 1 && launches[0] == 2 && counters_clear(L);
        printf("   at %d: %s outputs, %s cache, %zu launch against %zu%s\n", pos, same(oo, o1) ? "same" : "DIFFERENT",
               off == on ? "same" : "DIFFERENT", launches[1], launches[0], ok ? "" : "  <-- FAIL");
        if (!ok) fails++;
    }
    L->attn_one = 0;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    const bool quick = argc > 1 && !strcmp(argv[1], "quick");
    for (int f16 = 0; f16 <= (quick ? 0 : 1); f16++) {
        if (f16) setenv("MLXCEL_CPU_KV", "f16", 1);
        mx_backend_options o = {"cpu", 2, 0};
        mx_backend *cpu = mx_backend_create(&o, &err);
        if (!cpu) { printf("%s\n", err.msg); return 1; }
        mxg_launch L;
        memset(&L, 0, sizeof L);
        L.warp = 32, L.sm_count = 132, L.kv_i16 = !f16, L.attn_decode = true, L.attn_short = true;
        L.scratch_bytes = mxg_attention_scratch_bytes(132, 256);
        L.scratch = malloc(L.scratch_bytes);
        L.attn_tickets_n = mxg_attn_one_tickets(132);
        L.attn_tickets = calloc((size_t)L.attn_tickets_n, sizeof(unsigned));
        if (f16) {
            one_case(cpu, &L, 128, 8, 32, 640, 1, 0, false, true, false, quick);  // the 8B's shape, f16 cache
        } else {
            one_case(cpu, &L, 128, 8, 32, 640, 1, 0, false, true, true, quick);   // the 8B at -p 512 -n 128: G 4
            one_case(cpu, &L, 64, 2, 16, 1100, 1, 300, true, true, false, quick); // G 8, a window, sinks
            one_case(cpu, &L, 128, 4, 16, 300, 3, 0, true, true, false, quick);   // 3 tokens (batched decode), G 4
            if (!quick) {
                one_case(cpu, &L, 128, 8, 16, 640, 1, 0, false, false, false, quick);  // the 0.6B: G 2
                one_case(cpu, &L, 128, 8, 32, 4100, 1, 0, false, true, false, quick);  // a full wave of splits
                L.warp = 64;                                                           // AMD's wave: 4 warps a block
                one_case(cpu, &L, 256, 2, 4, 700, 1, 0, true, true, false, quick);
                one_case(cpu, &L, 128, 8, 64, 500, 2, 0, false, false, false, quick);  // G 8, 2 tokens
                L.warp = 32;
                one_rope_case(&L, 128, 8, 32, 640, 1);
                one_rope_case(&L, 128, 8, 16, 300, 0);
            }
        }
        mx_backend_free(cpu);
        free(L.scratch);
        free(L.attn_tickets);
    }
    if (split_steps == 0) printf("no step split its context: nothing above tested the merge  <-- FAIL\n"), fails++;
    printf("%d failures\n", fails);
    return fails != 0;
}
