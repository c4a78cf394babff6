// SPDX-License-Identifier: MIT
// The GPU's KV cache kernels (kv_store, attention, latent_store, latent_attention) run on the host
// emulation (emu.h) against the CPU backend, for both GPU cache types (I16 against the CPU's
// default cache, f16 against MLXCEL_CPU_KV=f16): after the same stores the two caches must be equal
// byte for byte (codes, scales, layout, block tables), and every attention output within 1e-5
// (relative L2) of the CPU's. Cases: head sizes 32-256 and 72, 36 (partial I16 chunks, 4-byte tile
// loads), each slot's own blocks and scrambled block tables, prefill chunks, decode (the context
// split over blocks and merged, on an emulated 132-multiprocessor device), mixed slots, sliding
// windows, sinks, head rows (groups of 2, 6 and 8 query heads) and token rows, no GQA; decode steps
// also on the flash-decoding kernel (kernels/attn_decode.cu), and it at long contexts (1,000-4,100
// positions, up to 33 splits; groups of 1-8, head sizes 64-256, warps of 32 and 64 lanes); batched
// decode steps of 17-64 tokens in their own slots (the record's decode hint; one split and several,
// told by the scratch); the q/k norm + RoPE launch with the KV store fused in (its cache bytes equal
// to the kv_store kernel's); latent caches of DeepSeek-V3's fixture sizes and a chunk that straddles
// c_kv and k_pe. The flash-decoding kernel's short form (MLXCEL_GPU_ATTN_SHORT=1) on caches of 1-129
// positions: its launch shape, and bit for bit today's form where the arithmetic is the same. The
// decode attention with the q/k norm + RoPE + KV store folded in (MLXCEL_GPU_ATTN_ROPE=1): outputs
// and cache bytes bit for bit those of the two launches; both again at MLXCEL_GPU_PDL=3 under the
// emulated order of dependent launches (emu.h, emu_pdl_guard).
// The attention cases (prefill chunks of up to 150 tokens among them) also on the tensor-core prefill
// kernel (vendor/cuda/attn_mma.cu), at its own bound (mma_vs_cpu).
// Built and run by run.sh; exits 1 on any failure.
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
static double rel(const float *a, const float *b, size_t n) {
    double d = 0, r = 0;
    for (size_t i = 0; i < n; i++) { double e = (double)a[i] - b[i]; if (std::isnan(a[i])) return INFINITY; d += e * e; r += (double)b[i] * b[i]; }
    return sqrt(d / r);
}
static int fails = 0;
static void run(mx_backend *be, mx_op op) { if (mx_run_op(be, op, &err)) { printf("cpu op: %s\n", err.msg); exit(1); } }

// One attention case's inputs and the CPU backend's answer: q [n, nh, D] in [-1, 1] and sinks [nh]
// in [-1, 3] (drawn in that order), scale 3 / sqrt(D), and oc [n, nh, D] from the CPU's attention
// record on rc (sinks only when `with_sinks`; `decode`: the record's decode hint).
struct attn_case_data {
    std::vector<float> q, sinks, oc;
    float scale;
    bool with_sinks;
    const float *sinks_arg() const { return with_sinks ? sinks.data() : NULL; }  // the records' sinks argument
};
static attn_case_data cpu_attention(mx_backend *cpu, const mx_kv_ref &rc, int n, int nh, int D, int window,
                                    bool with_sinks, bool decode) {
    const size_t qn = (size_t)n * nh * D;
    attn_case_data a{std::vector<float>(qn), std::vector<float>(nh), std::vector<float>(qn), 3.0f / sqrtf((float)D),
                     with_sinks};
    emu_fill(a.q.data(), qn, -1, 1);
    emu_fill(a.sinks.data(), nh, -1, 3);
    run(cpu, (mx_op){.kind = MX_OP_ATTENTION,
                     .attention = {a.oc.data(), a.q.data(), rc, n, nh, a.scale, window, a.sinks_arg(), decode}});
    return a;
}

// The GPU attention of r (on the flash-decoding kernel when L->attn_decode; no decode hint) into an
// output set to NaN first, so an output it never writes fails, against the CPU backend's a.oc:
// prints the case's line and counts a failure above 1e-5.
static void attention_vs_cpu(const mxg_launch *L, const char *name, const attn_case_data &a, const mx_kv_ref *r, int n,
                             int nh, int window) {
    std::vector<float> og(a.oc.size(), NAN);
    mxg_attention(L, og.data(), a.q.data(), r, n, nh, a.scale, window, a.sinks_arg(), false);
    double e = rel(og.data(), a.oc.data(), og.size());
    printf("   %-14s%s rel err %.2e%s\n", name, L->attn_decode ? " (flash)" : "", e, e > 1e-5 ? "  <-- FAIL" : "");
    if (!(e <= 1e-5)) fails++;
}

// The tensor-core prefill kernel (vendor/cuda/attn_mma.cu, f16 operands) on the same record,
// called directly on an emulated sm_90 device: it must take head sizes 64 and 128 and leave the
// output of others unwritten (declining), and its output must be within 2e-3 (relative L2) of the
// CPU's. Records of 64 tokens or more also go through mxg_attention's dispatch with L->attn_mma
// set, which must give the direct call's bits (the SIMT kernel's differ by ~1e-4).
static int mma_cases = 0;
static double mma_worst = 0.0;
static void mma_vs_cpu(const mxg_launch *L, const char *name, const attn_case_data &a, const mx_kv_ref *r, int n,
                       int nh, int window) {
    mxg_launch L2 = *L;
    L2.cc = 90, L2.attn_mma = true;
    const int D = r->lay.head_dim;
    std::vector<float> og(a.oc.size(), NAN);
    const int rc = mxg_attention_mma(&L2, og.data(), a.q.data(), r, n, nh, a.scale, window, a.sinks_arg());
    if (D != 64 && D != 128) {
        bool untouched = true;
        for (float v : og) untouched = untouched && std::isnan(v);
        if (rc != -1 || !untouched) printf("   %-14s (mma) should decline D=%d  <-- FAIL\n", name, D), fails++;
        return;
    }
    const double e = rel(og.data(), a.oc.data(), og.size());
    bool same = true;
    if (n >= 64) {
        std::vector<float> od(a.oc.size(), NAN);
        mxg_attention(&L2, od.data(), a.q.data(), r, n, nh, a.scale, window, a.sinks_arg(), false);
        same = memcmp(od.data(), og.data(), og.size() * sizeof(float)) == 0;
    }
    mma_cases++;
    mma_worst = e > mma_worst || e != e ? e : mma_worst;
    const bool ok = e <= 2e-3 && rc == 0 && same;
    printf("   %-14s (mma%s) rel err %.2e%s%s\n", name, n >= 64 ? ", dispatched alike" : "", e,
           same ? "" : " dispatch differs", ok ? "" : "  <-- FAIL");
    if (!ok) fails++;
}

static void attn_case(mx_backend *cpu, mxg_launch *L, int D, int nkv, int nh, int paged, bool token_rows) {
    mx_kv_layout lay = {2, 3, 300, nkv, D, paged ? 64 : 0};
    int tl = mx_kv_table_len(&lay);
    int32_t table[3 * 19];
    for (int i = 0; i < 3 * tl; i++) table[i] = (int32_t)((5 * i + 2) % 64);
    size_t bytes = mx_kv_bytes(&lay, cpu->kv_dtype);
    unsigned char *gkv = (unsigned char *)calloc(1, bytes);
    void *ckv = cpu->ops->alloc(cpu, bytes, &err);
    const int filled[3] = {260, 120, 300};
    int per = nkv * D;
    for (int s = 0; s < 3; s++) {
        int n = filled[s];
        std::vector<float> k(n * per), v(n * per);
        emu_fill(k.data(), k.size(), -1, 1), emu_fill(v.data(), v.size(), -1, 1);
        for (int i = 0; i < n * per; i += 37) k[i] *= 7.0f;  // chunks with one large value
        std::vector<int32_t> sl(n, s), ps(n);
        for (int i = 0; i < n; i++) ps[i] = i;
        for (int layer = 0; layer < 2; layer++) {
            mx_kv_ref rg = {gkv, lay, layer, sl.data(), ps.data(), paged ? table : NULL};
            mx_kv_ref rc = {ckv, lay, layer, sl.data(), ps.data(), paged ? table : NULL};
            mxg_kv_store(L, &rg, layer ? k.data() : v.data(), layer ? v.data() : k.data(), n);
            run(cpu, (mx_op){.kind = MX_OP_KV_STORE, .kv_store = {rc, layer ? k.data() : v.data(), layer ? v.data() : k.data(), n}});
        }
    }
    size_t diff = 0;
    for (size_t i = 0; i < bytes; i++) diff += gkv[i] != ((unsigned char *)ckv)[i];
    printf("D=%d nkv=%d nh=%d paged=%d %s: cache bytes differing %zu of %zu\n", D, nkv, nh, paged, mx_dtype_name(cpu->kv_dtype), diff, bytes);
    if (diff) fails++;
    struct { const char *name; int n, window, slot0, pos0, mixed, sinks; } cases[] = {
        {"prefill 37", 37, 0, 1, 0, 0, 0}, {"decode", 1, 0, 0, 259, 0, 0}, {"decode 2", 1, 0, 2, 17, 0, 1},
        {"mixed", 9, 0, 0, 0, 1, 0}, {"window 16", 37, 16, 1, 80, 0, 1}, {"decode window", 1, 40, 2, 299, 0, 1},
        {"decode 3 tok", 3, 0, 2, 250, 0, 0}, {"prefill 150", 150, 0, 0, 100, 0, 1},
        {"window 150", 150, 40, 2, 120, 0, 0}, {"mixed 70", 70, 0, 0, 0, 1, 1}};
    for (auto &c : cases) {
        int n = c.n;
        std::vector<int32_t> sl(n), ps(n);
        for (int i = 0; i < n; i++) {
            if (c.mixed) { sl[i] = (int)(emu_uniform(0, 3)); if (sl[i] > 2) sl[i] = 2; ps[i] = (int)emu_uniform(0, filled[sl[i]]); if (ps[i] >= filled[sl[i]]) ps[i] = filled[sl[i]] - 1; }
            else sl[i] = c.slot0, ps[i] = c.pos0 + i;
        }
        mx_kv_ref rg = {gkv, lay, 1, sl.data(), ps.data(), paged ? table : NULL};
        mx_kv_ref rc = {ckv, lay, 1, sl.data(), ps.data(), paged ? table : NULL};
        const attn_case_data a = cpu_attention(cpu, rc, n, nh, D, c.window, c.sinks, false);
        L->attn_token_rows = token_rows;
        // Decode-sized steps on both decode kernels (kernels/attn_decode.cu, and the general one).
        for (int flash = token_rows || n > 16 ? 0 : 1; flash >= 0; flash--) {
            L->attn_decode = flash;
            attention_vs_cpu(L, c.name, a, &rg, n, nh, c.window);
        }
        L->attn_decode = false;
        mma_vs_cpu(L, c.name, a, &rg, n, nh, c.window);
    }
    free(gkv);
    cpu->ops->release(cpu, ckv);
}

// Long contexts on the flash-decoding kernel (many splits, every split's units spread over the
// warps): one slot filled to ctx positions (scrambled blocks when paged), then steps of 1 and 5
// tokens at its end, a sliding window, sinks; the same steps on the general kernel once (slow);
// also at a warp of 64 lanes.
static void long_case(mx_backend *cpu, mxg_launch *L, int D, int nkv, int nh, int ctx, int paged, bool also_general) {
    const int tl = (ctx + MX_KV_BLOCK - 1) / MX_KV_BLOCK;
    mx_kv_layout lay = {1, 1, ctx, nkv, D, paged ? tl + 7 : 0};
    std::vector<int32_t> table(tl);
    for (int i = 0; i < tl; i++) table[i] = (int32_t)((int64_t)(tl + 7 - 1 - i) * 5 % (tl + 7));  // distinct where 5 is prime to tl + 7
    size_t bytes = mx_kv_bytes(&lay, cpu->kv_dtype);
    unsigned char *gkv = (unsigned char *)calloc(1, bytes);
    void *ckv = cpu->ops->alloc(cpu, bytes, &err);
    int per = nkv * D;
    std::vector<float> k((size_t)ctx * per), v((size_t)ctx * per);
    emu_fill(k.data(), k.size(), -1, 1), emu_fill(v.data(), v.size(), -1, 1);
    for (size_t i = 0; i < k.size(); i += 41) k[i] *= 6.0f;
    std::vector<int32_t> sl(ctx, 0), ps(ctx);
    for (int i = 0; i < ctx; i++) ps[i] = i;
    mx_kv_ref rg = {gkv, lay, 0, sl.data(), ps.data(), paged ? table.data() : NULL};
    mx_kv_ref rc = {ckv, lay, 0, sl.data(), ps.data(), paged ? table.data() : NULL};
    mxg_kv_store(L, &rg, k.data(), v.data(), ctx);
    run(cpu, (mx_op){.kind = MX_OP_KV_STORE, .kv_store = {rc, k.data(), v.data(), ctx}});
    struct { const char *name; int n, window, sinks; } cases[] = {{"long decode", 1, 0, 0}, {"long 5 tok", 5, 0, 1},
                                                                   {"long window", 1, 1000, 1}};
    printf("D=%d nkv=%d nh=%d ctx=%d paged=%d %s\n", D, nkv, nh, ctx, paged, mx_dtype_name(cpu->kv_dtype));
    for (auto &c : cases) {
        int n = c.n;
        std::vector<int32_t> s2(n, 0), p2(n);
        for (int i = 0; i < n; i++) p2[i] = ctx - n + i;
        mx_kv_ref g2 = {gkv, lay, 0, s2.data(), p2.data(), paged ? table.data() : NULL};
        mx_kv_ref c2 = {ckv, lay, 0, s2.data(), p2.data(), paged ? table.data() : NULL};
        const attn_case_data a = cpu_attention(cpu, c2, n, nh, D, c.window, c.sinks, false);
        for (int flash = 1; flash >= (also_general ? 0 : 1); flash--) {
            L->attn_decode = flash;
            attention_vs_cpu(L, c.name, a, &g2, n, nh, c.window);
        }
    }
    free(gkv);
    cpu->ops->release(cpu, ckv);
}

// The flash-decoding kernel's short form (MLXCEL_GPU_ATTN_SHORT=1, L->attn_short): one slot's cache
// of cap positions (scrambled blocks when paged), filled, then steps at its start, middle and end
// (contexts of 1 to cap positions), 3 tokens at its end, a sliding window of 8, sinks; each with the
// knob off (today's form) and on, both within 1e-5 of the CPU backend. Where the form applies (cap
// <= 128, at most a wave of query heads) the step must be one launch of a block per query head, one
// split (no combine); where it does not (cap 129), the same launches as today's. Where today's form
// has one split and groups of at most 4, the outputs must agree bit for bit (each head's arithmetic
// is the same); groups of 8 sum in another order.
static void short_case(mx_backend *cpu, mxg_launch *L, int D, int nkv, int nh, int cap, int paged) {
    const int tl = (cap + MX_KV_BLOCK - 1) / MX_KV_BLOCK, group = nh / nkv;
    mx_kv_layout lay = {1, 1, cap, nkv, D, paged ? tl + 3 : 0};
    std::vector<int32_t> table(tl);
    for (int i = 0; i < tl; i++) table[i] = (int32_t)(tl + 2 - i);  // distinct, in reverse, the first 3 unused
    size_t bytes = mx_kv_bytes(&lay, cpu->kv_dtype);
    unsigned char *gkv = (unsigned char *)calloc(1, bytes);
    void *ckv = cpu->ops->alloc(cpu, bytes, &err);
    const int per = nkv * D;
    std::vector<float> k((size_t)cap * per), v((size_t)cap * per);
    emu_fill(k.data(), k.size(), -1, 1), emu_fill(v.data(), v.size(), -1, 1);
    for (size_t i = 0; i < k.size(); i += 29) k[i] *= 5.0f;
    std::vector<int32_t> sl(cap, 0), ps(cap);
    for (int i = 0; i < cap; i++) ps[i] = i;
    mx_kv_ref rg = {gkv, lay, 0, sl.data(), ps.data(), paged ? table.data() : NULL};
    mx_kv_ref rc = {ckv, lay, 0, sl.data(), ps.data(), paged ? table.data() : NULL};
    mxg_kv_store(L, &rg, k.data(), v.data(), cap);
    run(cpu, (mx_op){.kind = MX_OP_KV_STORE, .kv_store = {rc, k.data(), v.data(), cap}});
    printf("short decode D=%d nkv=%d nh=%d cache %d paged=%d warp %d %s\n", D, nkv, nh, cap, paged, L->warp,
           mx_dtype_name(cpu->kv_dtype));
    struct { int n, pos, window, sinks; } cases[] = {{1, 0, 0, 0},   {1, 4, 0, 1},        {1, cap / 2, 0, 0},
                                                    {1, cap - 1, 0, 1}, {3, cap - 3, 0, 0}, {1, cap - 1, 8, 1}};
    const bool takes = cap <= 128;  // kernels/attn_decode.cu's kDecodeShortCtx
    for (auto &c : cases) {
        const int n = c.n, pos = std::min(c.pos, cap - n);
        if (pos < 0) continue;
        std::vector<int32_t> s2(n, 0), p2(n);
        for (int i = 0; i < n; i++) p2[i] = pos + i;
        mx_kv_ref g2 = {gkv, lay, 0, s2.data(), p2.data(), paged ? table.data() : NULL};
        mx_kv_ref c2 = {ckv, lay, 0, s2.data(), p2.data(), paged ? table.data() : NULL};
        const attn_case_data a = cpu_attention(cpu, c2, n, nh, D, c.window, c.sinks, false);
        std::vector<float> og[2];
        std::vector<dim3> grids[2];
        L->attn_decode = true;
        for (int on = 0; on < 2; on++) {
            L->attn_short = on;
            og[on].assign(a.oc.size(), NAN);
            emu_grids.clear();
            mxg_attention(L, og[on].data(), a.q.data(), &g2, n, nh, a.scale, c.window, a.sinks_arg(), false);
            grids[on] = emu_grids;
        }
        L->attn_short = false, L->attn_decode = false;
        const double e0 = rel(og[0].data(), a.oc.data(), a.oc.size()), e1 = rel(og[1].data(), a.oc.data(), a.oc.size());
        const bool one_block_per_head = takes && n * nh <= 2 * L->sm_count;
        bool shape = grids[1].size() == (one_block_per_head ? 1 : grids[0].size());
        for (size_t i = 0; shape && i < grids[1].size(); i++) {
            const dim3 want = one_block_per_head ? dim3(n, nh, 1) : grids[0][i];
            shape = grids[1][i].x == want.x && grids[1][i].y == want.y && grids[1][i].z == want.z;
        }
        const bool same = !memcmp(og[0].data(), og[1].data(), og[0].size() * sizeof(float));
        const bool want_same = !one_block_per_head || (group <= 4 && grids[0].size() == 1 && grids[0][0].z == 1);
        const bool ok = e0 <= 1e-5 && e1 <= 1e-5 && shape && (same || !want_same);
        printf("   %d token(s) at %d%s%s: off rel err %.2e (%zu launches, %u splits), on %.2e (%zu, grid y %u)%s%s\n", n, pos,
               c.window ? ", window 8" : "", c.sinks ? ", sinks" : "", e0, grids[0].size(),
               grids[0].empty() ? 0u : grids[0][0].z, e1, grids[1].size(), grids[1].empty() ? 0u : grids[1][0].y,
               same ? ", same bits" : "", ok ? "" : "  <-- FAIL");
        if (!ok) fails++;
    }
    free(gkv);
    cpu->ops->release(cpu, ckv);
}

// Batched decode steps (the engine's server steps): 17-64 tokens, each the next position of its own
// slot (contexts of 1-120 positions), the last 7 of some steps in one padding slot at positions 0-6
// (generate/engine.c), with the record's decode hint; on the flash-decoding kernel (which takes them
// only with the hint), and three of them on the general kernel too (slow here), against the CPU backend. The split choice is
// checked through the scratch, poisoned first: a step whose blocks fill 3/4 of a wave (0.6B's 8 KV
// heads from 25 tokens on, groups of 8 on 2 KV heads from 50) writes no partials, a smaller one
// splits the context and writes them.
static void batch_case(mx_backend *cpu, mxg_launch *L, int D, int nkv, int nh, int paged) {
    const int S = 72, ctx = 128, tl = ctx / MX_KV_BLOCK;
    mx_kv_layout lay = {1, S, ctx, nkv, D, paged ? S * tl + 5 : 0};
    std::vector<int32_t> table(S * tl);
    for (int i = 0; i < S * tl; i++) table[i] = (int32_t)((int64_t)(S * tl + 4 - i) * 5 % (S * tl + 5));  // distinct: 5 is prime to 581 = 7 * 83
    size_t bytes = mx_kv_bytes(&lay, cpu->kv_dtype);
    unsigned char *gkv = (unsigned char *)calloc(1, bytes);
    void *ckv = cpu->ops->alloc(cpu, bytes, &err);
    std::vector<int> filled(S);
    int total = 0;
    for (int s = 0; s < S; s++) filled[s] = s == S - 1 ? 7 : 1 + (int)emu_uniform(0, 119.99f), total += filled[s];
    const int per = nkv * D;
    std::vector<float> k((size_t)total * per), v((size_t)total * per);
    emu_fill(k.data(), k.size(), -1, 1), emu_fill(v.data(), v.size(), -1, 1);
    std::vector<int32_t> sl(total), ps(total);
    for (int s = 0, t = 0; s < S; s++)
        for (int p = 0; p < filled[s]; p++, t++) sl[t] = s, ps[t] = p;
    mx_kv_ref rg = {gkv, lay, 0, sl.data(), ps.data(), paged ? table.data() : NULL};
    mx_kv_ref rc = {ckv, lay, 0, sl.data(), ps.data(), paged ? table.data() : NULL};
    mxg_kv_store(L, &rg, k.data(), v.data(), total);
    run(cpu, (mx_op){.kind = MX_OP_KV_STORE, .kv_store = {rc, k.data(), v.data(), total}});
    printf("batched decode D=%d nkv=%d nh=%d paged=%d %s\n", D, nkv, nh, paged, mx_dtype_name(cpu->kv_dtype));
    struct { int n, window, sinks, pad; } cases[] = {{17, 0, 0, 0}, {24, 0, 1, 7}, {32, 0, 0, 0}, {40, 50, 1, 7},
                                                    {48, 0, 0, 0}, {56, 0, 1, 7}, {64, 0, 0, 0}};
    for (auto &c : cases) {
        const int n = c.n;
        std::vector<int32_t> s2(n), p2(n);
        for (int i = 0; i < n; i++) {
            const bool pad = i >= n - c.pad;
            s2[i] = pad ? S - 1 : (i * 5 + 3) % (S - 1), p2[i] = pad ? i - (n - c.pad) : filled[s2[i]] - 1;
        }
        mx_kv_ref g2 = {gkv, lay, 0, s2.data(), p2.data(), paged ? table.data() : NULL};
        mx_kv_ref c2 = {ckv, lay, 0, s2.data(), p2.data(), paged ? table.data() : NULL};
        const attn_case_data a = cpu_attention(cpu, c2, n, nh, D, c.window, c.sinks, true);
        std::vector<float> og(a.oc.size());
        const int G = nh / nkv >= 8 ? 8 : nh / nkv > 2 ? 4 : nh / nkv, parts = (nh / nkv + G - 1) / G;
        const int64_t blocks = (int64_t)n * nkv * parts, wave = (int64_t)(G >= 8 ? 1 : 2) * L->sm_count;
        const bool split = 4 * blocks < 3 * wave;  // kernels/attn_decode.cu's rule
        for (int flash = 1; flash >= (n == 17 || c.window || n == 64 ? 0 : 1); flash--) {
            L->attn_decode = flash;
            std::fill(og.begin(), og.end(), NAN);
            std::fill((float *)L->scratch, (float *)L->scratch + L->scratch_bytes / sizeof(float), NAN);
            mxg_attention(L, og.data(), a.q.data(), &g2, n, nh, a.scale, c.window, a.sinks_arg(), true);
            double e = rel(og.data(), a.oc.data(), og.size());
            bool wrote = false;
            for (size_t i = 0; i < L->scratch_bytes / sizeof(float) && !wrote; i++) wrote = !std::isnan(((float *)L->scratch)[i]);
            const bool ok = e <= 1e-5 && (!flash || wrote == split);
            printf("   %2d tokens%s%s%s%s rel err %.2e, %s%s\n", n, c.window ? ", window" : "", c.sinks ? ", sinks" : "",
                   c.pad ? ", 7 padding" : "", flash ? " (flash)" : "", e, wrote ? "split" : "one split",
                   ok ? "" : "  <-- FAIL");
            if (!ok) fails++;
        }
    }
    free(gkv);
    cpu->ops->release(cpu, ckv);
}

// The q/k RMSNorm + RoPE launch with the KV store fused in (kernels/qk_norm_rope.cu, the plan's
// norm, norm, rope, rope, kv_store pattern): q and k against the CPU backend's records (float32
// summation order apart), and the cache it writes byte for byte equal to the kv_store kernel's
// (rope_kv.cu) from the k it leaves and v, into a second cache; with and without the norms, paged or
// not, tokens of several slots (a prefill chunk's and a decode step's), head sizes with a partial
// I16 chunk.
static void qk_store_case(mx_backend *cpu, mxg_launch *L, int D, int nkv, int nh, int n, int paged, bool norm) {
    const int S = 4, ctx = 64, tl = ctx / MX_KV_BLOCK;
    mx_kv_layout lay = {2, S, ctx, nkv, D, paged ? S * tl + 3 : 0};
    std::vector<int32_t> table(S * tl);
    for (int i = 0; i < S * tl; i++) table[i] = (int32_t)((i * 5 + 1) % (S * tl + 3));
    size_t bytes = mx_kv_bytes(&lay, cpu->kv_dtype);
    std::vector<unsigned char> fused(bytes, 0), plain(bytes, 0);
    std::vector<int32_t> sl(n), ps(n);
    for (int t = 0; t < n; t++) sl[t] = n > S ? t * S / n : t, ps[t] = n > S ? 20 + t % (n / S + 1) : 3 + 11 * t;
    const size_t qn = (size_t)n * nh * D, kn = (size_t)n * nkv * D;
    std::vector<float> q(qn), k(kn), v(kn), qw(D), kw(D), inv(D / 2);
    emu_fill(q.data(), qn, -2, 2), emu_fill(k.data(), kn, -2, 2), emu_fill(v.data(), kn, -1, 1);
    emu_fill(qw.data(), D, 0.5f, 1.5f), emu_fill(kw.data(), D, 0.5f, 1.5f);
    for (int j = 0; j < D / 2; j++) inv[j] = 1.0f / powf(1e6f, 2.0f * j / D);
    std::vector<float> qc = q, kc = k, qg = q, kg = k;
    mx_rope rope = {inv.data(), D, 0.9f, 0, NULL, 0};
    if (norm) {
        run(cpu, (mx_op){.kind = MX_OP_RMSNORM, .rmsnorm = {qc.data(), qc.data(), qw.data(), n * nh, D, 1e-6f}});
        run(cpu, (mx_op){.kind = MX_OP_RMSNORM, .rmsnorm = {kc.data(), kc.data(), kw.data(), n * nkv, D, 1e-6f}});
    }
    run(cpu, (mx_op){.kind = MX_OP_ROPE, .rope = {qc.data(), ps.data(), n, nh, rope}});
    run(cpu, (mx_op){.kind = MX_OP_ROPE, .rope = {kc.data(), ps.data(), n, nkv, rope}});
    mx_kv_ref rf = {fused.data(), lay, 1, sl.data(), ps.data(), paged ? table.data() : NULL};
    mx_kv_ref rp = {plain.data(), lay, 1, sl.data(), ps.data(), paged ? table.data() : NULL};
    mxg_qk_norm_rope(L, qg.data(), kg.data(), norm ? qw.data() : NULL, norm ? kw.data() : NULL, ps.data(), n, nh, nkv,
                     1e-6f, &rope, &rf, v.data());
    mxg_kv_store(L, &rp, kg.data(), v.data(), n);
    size_t diff = 0;
    for (size_t i = 0; i < bytes; i++) diff += fused[i] != plain[i];
    const double eq = rel(qg.data(), qc.data(), qn), ek = rel(kg.data(), kc.data(), kn);
    const bool ok = diff == 0 && eq <= 1e-6 && ek <= 1e-6;
    printf("q/k %srope + kv store D=%d nkv=%d nh=%d n=%d paged=%d %s: q %.2e, k %.2e, cache bytes differing from "
           "kv_store's %zu%s\n", norm ? "norm + " : "", D, nkv, nh, n, paged, mx_dtype_name(cpu->kv_dtype), eq, ek, diff,
           ok ? "" : "  <-- FAIL");
    if (!ok) fails++;
}

// Whether every L2 prefetch of a MLXCEL_GPU_PDL=3 step (emu_prefetches) keeps compat.h's rules
// for mxg_prefetch_l2 (16-byte aligned, a non-zero multiple of 16), lies in `cache` (slot 1 of
// attn_rope_case's layer 0), misses every K and V row (codes and I16 scales) of position `pos`
// (the row this step writes) and sums to at most `cap`; `why` says the first breach.
static bool pdl3_prefetches_ok(const unsigned char *cache, size_t bytes, const mx_kv_layout &lay, const int32_t *table,
                               bool i16, int pos, size_t cap, char *why, size_t n) {
    const int D = lay.head_dim, nsc = i16 ? (D + MX_KV_SCALE_BLOCK - 1) / MX_KV_SCALE_BLOCK : 0;
    const int tl = mx_kv_table_len(&lay), nb = mx_kv_blocks(&lay);
    const size_t codes = (size_t)nb * 2 * lay.n_kv_heads * MX_KV_BLOCK * D * sizeof(int16_t);  // one layer
    size_t total = 0;
    for (const emu_range &r : emu_prefetches) {
        const uintptr_t a = (uintptr_t)r.p;
        if (a % 16 || r.bytes == 0 || r.bytes % 16) return snprintf(why, n, "a range of %u bytes at %#lx", r.bytes, (unsigned long)a), false;
        if (a < (uintptr_t)cache || a + r.bytes > (uintptr_t)cache + bytes) return snprintf(why, n, "a range outside the cache"), false;
        total += r.bytes;
        const int i = 1 * tl + pos / MX_KV_BLOCK, b = table ? table[i] : i;
        for (int which = 0; which < 2; which++)
            for (int h = 0; h < lay.n_kv_heads; h++) {
                const size_t row = (((size_t)b * 2 + which) * lay.n_kv_heads + h) * MX_KV_BLOCK + pos % MX_KV_BLOCK;
                const uintptr_t c0 = (uintptr_t)cache + row * D * sizeof(int16_t), c1 = c0 + D * sizeof(int16_t);
                const uintptr_t s0 = (uintptr_t)cache + codes + row * nsc * sizeof(float), s1 = s0 + nsc * sizeof(float);
                if ((a < c1 && a + r.bytes > c0) || (nsc && a < s1 && a + r.bytes > s0))
                    return snprintf(why, n, "a range over position %d's row", pos), false;
            }
    }
    if (total > cap) return snprintf(why, n, "%zu bytes prefetched, cap %zu", total, cap), false;
    snprintf(why, n, "%zu prefetches, %zu bytes", emu_prefetches.size(), total);
    return true;
}

// The decode attention with the q/k norm + RoPE + KV store folded in (MLXCEL_GPU_ATTN_ROPE=1,
// mxg_attention_decode_rope): one slot's cache of cap positions (scrambled blocks when paged) filled
// with other rows (what a reused slot holds), then one-token steps at several positions: the two
// launches (mxg_qk_norm_rope with its store, then mxg_attention on the flash-decoding kernel) on one
// copy of the cache, the fused launch on another. Outputs and cache bytes must be equal bit for bit,
// the raw q and k left as they were, and the fused step one launch fewer. A two-token step must be
// refused (-1). Both again at MLXCEL_GPU_PDL=3 (L->pdl_rest) under the emulated order of dependent
// launches (emu.h, emu_pdl_guard: the raw q, k and v, the caches, the outputs and the split partials
// hidden from each block until its grid wait): bit for bit the same outputs and caches, every launch
// dependent, no block without its wait, and the fused launch's L2 prefetches inside the cache, off
// the step's own row and within the cap (pdl3_prefetches_ok); below level 3 plain launches that
// release nothing and prefetch nothing.
static void attn_rope_case(mxg_launch *L, int D, int nkv, int nh, int cap, int paged, bool norm, int window,
                           bool sinks, bool short_form) {
    DecodeCache cache = decode_cache_filled(L, D, nkv, cap, paged);  // slot 1 filled with rows the steps overwrite
    const mx_kv_layout &lay = cache.lay;
    std::vector<unsigned char> &base = cache.base;
    const int32_t *table = cache.block_table();
    const size_t bytes = base.size();
    const int per = nkv * D;
    std::vector<float> qw(D), kw(D), inv(D / 2), snk(nh);
    emu_fill(qw.data(), D, 0.5f, 1.5f), emu_fill(kw.data(), D, 0.5f, 1.5f), emu_fill(snk.data(), nh, -1, 3);
    for (int j = 0; j < D / 2; j++) inv[j] = 1.0f / powf(1e6f, 2.0f * j / D);
    const mx_rope rope = {inv.data(), D, 0.9f, 0, NULL, 0};
    const float scale = 1.0f / sqrtf((float)D);
    printf("decode attention + rope D=%d nkv=%d nh=%d cache %d paged=%d%s%s%s%s warp %d %s\n", D, nkv, nh, cap, paged,
           norm ? " norms" : "", window ? " window" : "", sinks ? " sinks" : "", short_form ? " short" : "", L->warp,
           L->kv_i16 ? "i16" : "f16");
    const int wanted[] = {0, 1, 2, 15, 16, 63, 64, cap / 2, cap - 2, cap - 1};
    L->attn_decode = true, L->attn_short = short_form;
    for (size_t wi = 0; wi < sizeof wanted / sizeof *wanted; wi++) {
        const int pos = wanted[wi];
        if (pos < 0 || pos >= cap || std::find(wanted, wanted + wi, pos) != wanted + wi) continue;
        int32_t sl = 1, ps = pos;
        std::vector<float> q((size_t)nh * D), k(per), v(per);
        emu_fill(q.data(), q.size(), -2, 2), emu_fill(k.data(), per, -2, 2), emu_fill(v.data(), per, -1, 1);
        std::vector<unsigned char> two = base, one = base;
        std::vector<float> qt = q, kt = k, ot((size_t)nh * D, NAN), of((size_t)nh * D, NAN);
        mx_kv_ref rt = {two.data(), lay, 0, &sl, &ps, table};
        mx_kv_ref rf = {one.data(), lay, 0, &sl, &ps, table};
        emu_grids.clear(), emu_dependent.clear(), emu_prefetches.clear(), emu_pdl_releases = 0;
        mxg_qk_norm_rope(L, qt.data(), kt.data(), norm ? qw.data() : NULL, norm ? kw.data() : NULL, &ps, 1, nh, nkv,
                         1e-6f, &rope, &rt, v.data());
        mxg_attention(L, ot.data(), qt.data(), &rt, 1, nh, scale, window, sinks ? snk.data() : NULL, false);
        const size_t launches_two = emu_grids.size();
        emu_grids.clear();
        std::vector<float> qf = q, kf = k;
        const mxg_attn_rope f = {of.data(), qf.data(), kf.data(), v.data(), norm ? qw.data() : NULL,
                                 norm ? kw.data() : NULL, 1e-6f, &ps, &rope, &rf, 1, nh, nkv, scale, window,
                                 sinks ? snk.data() : NULL, false};
        const int rc = mxg_attention_decode_rope(L, &f);
        const size_t launches_one = emu_grids.size();
        size_t diff = 0;
        for (size_t i = 0; i < bytes; i++) diff += two[i] != one[i];
        const bool same_out = !memcmp(ot.data(), of.data(), ot.size() * sizeof(float));
        const bool raw_kept = !memcmp(qf.data(), q.data(), q.size() * sizeof(float)) && !memcmp(kf.data(), k.data(), per * sizeof(float));
        const bool plain = std::none_of(emu_dependent.begin(), emu_dependent.end(), [](bool d) { return d; }) &&
                           emu_pdl_releases == 0 && emu_prefetches.empty();
        const bool ok = rc == 0 && same_out && diff == 0 && raw_kept && launches_one + 1 == launches_two && plain;
        printf("   at %d: %s outputs, cache bytes differing %zu, %zu launches against %zu%s%s%s\n", pos,
               same_out ? "same" : "different", diff, launches_one, launches_two, raw_kept ? "" : ", raw q/k changed",
               plain ? "" : ", a dependent launch, release or prefetch below level 3", ok ? "" : "  <-- FAIL");
        if (!ok) fails++;
        // MLXCEL_GPU_PDL=3: both forms again as dependent launches under the emulated order.
        mxg_launch L3 = *L;
        L3.dependent_launch = L3.pdl_early = L3.pdl_rest = true;
        L3.pdl_prefetch = mxg_pdl_prefetch_cap(MXG_PDL_L2_FALLBACK);
        std::vector<unsigned char> two3 = base, one3 = base;
        std::vector<float> qt3 = q, kt3 = k, qf3 = q, kf3 = k, v3 = v, ot3((size_t)nh * D, NAN), of3((size_t)nh * D, NAN);
        const size_t part = std::min((size_t)nh * 64 * (D + 2) * sizeof(float), L->scratch_bytes);  // 64 splits' partials
        mx_kv_ref rt3 = {two3.data(), lay, 0, &sl, &ps, table};
        mx_kv_ref rf3 = {one3.data(), lay, 0, &sl, &ps, table};
        emu_dependent.clear(), emu_prefetches.clear(), emu_pdl_releases = 0, emu_pdl_unwaited = 0;
        emu_pdl_guard = {{qt3.data(), qt3.size() * 4}, {kt3.data(), kt3.size() * 4}, {v3.data(), v3.size() * 4},
                         {two3.data(), bytes}, {ot3.data(), ot3.size() * 4}, {L->scratch, part}};
        mxg_qk_norm_rope(&L3, qt3.data(), kt3.data(), norm ? qw.data() : NULL, norm ? kw.data() : NULL, &ps, 1, nh, nkv,
                         1e-6f, &rope, &rt3, v3.data());
        mxg_attention(&L3, ot3.data(), qt3.data(), &rt3, 1, nh, scale, window, sinks ? snk.data() : NULL, false);
        const long unwaited_two = emu_pdl_unwaited;
        emu_pdl_guard = {{qf3.data(), qf3.size() * 4}, {kf3.data(), kf3.size() * 4}, {v3.data(), v3.size() * 4},
                         {one3.data(), bytes}, {of3.data(), of3.size() * 4}, {L->scratch, part}};
        const mxg_attn_rope f3 = {of3.data(), qf3.data(), kf3.data(), v3.data(), norm ? qw.data() : NULL,
                                  norm ? kw.data() : NULL, 1e-6f, &ps, &rope, &rf3, 1, nh, nkv, scale, window,
                                  sinks ? snk.data() : NULL, false};
        const int rc3 = mxg_attention_decode_rope(&L3, &f3);
        emu_pdl_guard.clear();
        const long unwaited_one = emu_pdl_unwaited - unwaited_two;
        const bool two_same = !memcmp(ot3.data(), ot.data(), ot.size() * sizeof(float)) && two3 == two;
        const bool one_same = rc3 == 0 && !memcmp(of3.data(), of.data(), of.size() * sizeof(float)) && one3 == one;
        const bool dep = !emu_dependent.empty() && emu_pdl_releases > 0 &&
                         std::all_of(emu_dependent.begin(), emu_dependent.end(), [](bool d) { return d; });
        char why[128];
        const bool ranges = pdl3_prefetches_ok(one3.data(), bytes, lay, table, L->kv_i16, pos,
                                               L3.pdl_prefetch, why, sizeof why);
        const int lo = window > 0 ? std::max(0, pos - window + 1) : 0;
        const bool some = emu_prefetches.empty() == (pos == lo);  // rows before the token's own, where it has any
        const bool ok3 = two_same && one_same && unwaited_two == 0 && unwaited_one == 0 && dep && ranges && some;
        printf("   at %d, level 3: two launches %s, fused %s, blocks without their wait %ld and %ld, %s, prefetch %s "
               "(%s)%s\n", pos, two_same ? "same" : "DIFFER", one_same ? "same" : "DIFFER", unwaited_two, unwaited_one,
               dep ? "dependent launches" : "NOT all dependent", ranges && some ? "ok" : "BAD", why,
               ok3 ? "" : "  <-- FAIL");
        if (!ok3) fails++;
    }
    {  // two tokens (of one sequence, or not): refused
        int32_t sl2[2] = {1, 1}, ps2[2] = {3, 4};
        std::vector<float> q((size_t)2 * nh * D), k(2 * per), v(2 * per), o((size_t)2 * nh * D);
        mx_kv_ref r2 = {base.data(), lay, 0, sl2, ps2, table};
        const mxg_attn_rope f = {o.data(), q.data(), k.data(), v.data(), NULL, NULL, 1e-6f, ps2, &rope, &r2, 2, nh,
                                 nkv, scale, window, NULL, true};
        emu_grids.clear();
        if (mxg_attention_decode_rope(L, &f) != -1 || !emu_grids.empty())
            printf("   a two-token step taken  <-- FAIL\n"), fails++;
    }
    L->attn_decode = false, L->attn_short = false;
}

static void latent_case(mx_backend *cpu, mxg_launch *L, int KL, int R, int nh, int n) {
    mx_kv_layout lay = {2, 3, 64, 1, (KL + R) / 2, 0};
    size_t bytes = mx_kv_bytes(&lay, cpu->kv_dtype);
    unsigned char *gkv = (unsigned char *)calloc(1, bytes);
    void *ckv = cpu->ops->alloc(cpu, bytes, &err);
    std::vector<int32_t> sl(n), ps(n);
    for (int t = 0; t < n; t++) ps[t] = n == 1 ? 37 : t % 40, sl[t] = n == 1 ? 2 : t / 40;
    if (n == 1) {  // fill positions 0..37 of slot 2 first
        std::vector<int32_t> s2(38, 2), p2(38);
        for (int i = 0; i < 38; i++) p2[i] = i;
        std::vector<float> c(38 * KL), kp(38 * R);
        emu_fill(c.data(), c.size(), -1, 1), emu_fill(kp.data(), kp.size(), -2, 2);
        mx_kv_ref rg = {gkv, lay, 1, s2.data(), p2.data(), NULL}, rc = {ckv, lay, 1, s2.data(), p2.data(), NULL};
        mxg_latent_store(L, &rg, c.data(), kp.data(), 38, KL, R);
        run(cpu, (mx_op){.kind = MX_OP_LATENT_STORE, .latent_store = {rc, c.data(), kp.data(), 38, KL, R}});
    }
    std::vector<float> c(n * KL), kp(n * R), ql((size_t)n * nh * KL), qp((size_t)n * nh * R), og((size_t)n * nh * KL, NAN), oc(og.size());
    emu_fill(c.data(), c.size(), -1, 1), emu_fill(kp.data(), kp.size(), -2, 2), emu_fill(ql.data(), ql.size(), -0.3f, 0.3f), emu_fill(qp.data(), qp.size(), -0.3f, 0.3f);
    mx_kv_ref rg = {gkv, lay, 1, sl.data(), ps.data(), NULL}, rc = {ckv, lay, 1, sl.data(), ps.data(), NULL};
    mxg_latent_store(L, &rg, c.data(), kp.data(), n, KL, R);
    run(cpu, (mx_op){.kind = MX_OP_LATENT_STORE, .latent_store = {rc, c.data(), kp.data(), n, KL, R}});
    size_t diff = 0;
    for (size_t i = 0; i < bytes; i++) diff += gkv[i] != ((unsigned char *)ckv)[i];
    mxg_latent_attention(L, og.data(), ql.data(), qp.data(), &rg, n, nh, KL, R, 0.17f);
    run(cpu, (mx_op){.kind = MX_OP_LATENT_ATTENTION, .latent_attention = {oc.data(), ql.data(), qp.data(), rc, n, nh, KL, R, 0.17f}});
    double e = rel(og.data(), oc.data(), og.size());
    printf("latent KL=%d R=%d nh=%d n=%d %s: cache bytes differing %zu, rel err %.2e%s\n", KL, R, nh, n, mx_dtype_name(cpu->kv_dtype), diff, e, (diff || !(e <= 1e-5)) ? "  <-- FAIL" : "");
    if (diff || !(e <= 1e-5)) fails++;
    free(gkv);
    cpu->ops->release(cpu, ckv);
}

// The fused decode attention + RoPE cases (attn_rope_case): groups of 1-8, head sizes 64-256, caches
// of 2-130 positions (the short form's bound and past it, one split and several) and long ones, with
// and without norms, windows, sinks, the short form on and off, warps of 32 and 64.
static void attn_rope_cases(mxg_launch *L, bool quick) {
    attn_rope_case(L, 128, 8, 16, 130, 1, true, 0, false, true);   // Qwen3-0.6B: G 2
    attn_rope_case(L, 128, 8, 32, 97, 1, true, 0, false, true);    // Qwen3-8B: G 4
    attn_rope_case(L, 128, 4, 32, 129, 1, true, 0, false, true);   // Qwen3-30B-A3B: G 8, past the short bound
    attn_rope_case(L, 128, 4, 32, 128, 0, true, 0, true, false);   // G 8, one group form, sinks
    attn_rope_case(L, 64, 4, 4, 2, 1, false, 0, false, true);      // G 1, no norms, 2 positions
    attn_rope_case(L, 256, 2, 4, 70, 1, true, 8, true, false);     // G 2, D 256, a window
    attn_rope_case(L, 64, 2, 16, 1100, 1, true, 0, false, true);   // G 8, many splits
    if (quick) return;
    attn_rope_case(L, 128, 8, 32, 1500, 1, true, 300, true, true); // the 8B at 1.5k: splits, window, sinks
    attn_rope_case(L, 256, 4, 8, 600, 0, true, 0, false, true);    // G 2, D 256, splits
    L->warp = 64;
    attn_rope_case(L, 128, 4, 16, 130, 1, true, 0, true, true);
    attn_rope_case(L, 64, 2, 8, 900, 0, false, 0, false, false);
    L->warp = 32;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    // argument "quick": half the head-size runs and I16 only (for the sanitizer build); "rope": two
    // of the fused decode attention + RoPE cases alone, I16 (run.sh's planted faults); "rope_all":
    // all of them, both cache types.
    bool quick = argc > 1 && !strcmp(argv[1], "quick"), rope_only = argc > 1 && !strcmp(argv[1], "rope");
    if (argc > 1 && !strcmp(argv[1], "rope_all")) {  // every fused case, both cache types (by hand)
        for (int f16 = 0; f16 <= 1; f16++) {
            mxg_launch L;
            memset(&L, 0, sizeof L);
            L.warp = 32, L.sm_count = 132, L.kv_i16 = !f16;
            L.scratch_bytes = mxg_attention_scratch_bytes(132, 256);
            L.scratch = malloc(L.scratch_bytes);
            attn_rope_cases(&L, false);
            free(L.scratch);
        }
        printf("%d failures\n", fails);
        return fails != 0;
    }
    if (rope_only) {
        for (int f16 = 0; f16 <= 0; f16++) {  // I16 only: the faults show in either cache type
            mxg_launch L;
            memset(&L, 0, sizeof L);
            L.warp = 32, L.sm_count = 132, L.kv_i16 = !f16;
            L.scratch_bytes = mxg_attention_scratch_bytes(132, 256);
            L.scratch = malloc(L.scratch_bytes);
            attn_rope_case(&L, 128, 8, 32, 97, 1, true, 0, false, true);  // one split (the short form)
            attn_rope_case(&L, 128, 8, 16, 130, 1, true, 0, false, true); // several
            free(L.scratch);
        }
        printf("%d failures\n", fails);
        return fails != 0;
    }
    for (int f16 = 0; f16 <= 1; f16++) {
        if (quick && f16) break;
        if (f16) setenv("MLXCEL_CPU_KV", "f16", 1);
        mx_backend_options o = {"cpu", 2, 0};
        mx_backend *cpu = mx_backend_create(&o, &err);
        if (!cpu) { printf("%s\n", err.msg); return 1; }
        mxg_launch L;
        memset(&L, 0, sizeof L);
        L.warp = 32, L.sm_count = 132, L.kv_i16 = !f16;
        L.scratch_bytes = mxg_attention_scratch_bytes(132, 256);
        L.scratch = malloc(L.scratch_bytes);
        int hds[] = {32, 64, 128, 256, 72, 36};
        for (int hi = 0; hi < 6; hi++)
            for (int paged = 0; paged < 2; paged++) {
                int nkv = 2, nh = hds[hi] == 256 ? 8 : 4;
                if (quick && hi % 2 == paged) continue;
                attn_case(cpu, &L, hds[hi], nkv, nh, paged, false);
            }
        attn_case(cpu, &L, 128, 2, 16, 1, false);  // group 8: two head parts
        attn_case(cpu, &L, 128, 2, 12, 1, false);  // group 6: partial head part
        attn_case(cpu, &L, 64, 2, 8, 1, true);     // token rows
        attn_case(cpu, &L, 64, 4, 4, 0, false);    // no GQA
        attn_case(cpu, &L, 128, 2, 14, 1, false);  // group 7: heads parts of 4 and 3
        // Qwen3-8B's attention shape at 4k context (33 splits on 132 multiprocessors), then others.
        long_case(cpu, &L, 128, 8, 32, quick ? 1100 : 4100, 1, !quick);  // quick (sanitizer): 18 splits
        if (!quick) {
            long_case(cpu, &L, 64, 8, 64, 3000, 0, false);   // gpt-oss's shape: group 8
            long_case(cpu, &L, 256, 4, 8, 2100, 1, false);   // group 2, D 256
            long_case(cpu, &L, 128, 4, 4, 1500, 1, false);   // no GQA
            L.warp = 64;  // AMD's wave of 64: other units (4 and 8 rows at once) and merges
            long_case(cpu, &L, 128, 8, 32, 2000, 1, false);
            long_case(cpu, &L, 64, 2, 16, 1000, 0, false);
            long_case(cpu, &L, 256, 2, 4, 1040, 1, false);
            L.warp = 32;
        }
        // The short form (MLXCEL_GPU_ATTN_SHORT=1): the 8B's shape at the p32 n64 bench's cache, the
        // 30B-A3B's (groups of 8), the 0.6B's at 5 positions, then groups of 1-8 at head sizes 64-256,
        // the form's bound and one past it, one position, a wave of 64.
        short_case(cpu, &L, 128, 8, 32, 97, 1);
        short_case(cpu, &L, 128, 4, 32, 40, 0);
        short_case(cpu, &L, 128, 4, 32, 128, 1);
        short_case(cpu, &L, 128, 8, 16, 5, 1);
        short_case(cpu, &L, 64, 2, 16, 33, 0);
        short_case(cpu, &L, 256, 4, 8, 24, 1);
        short_case(cpu, &L, 256, 2, 16, 128, 0);
        short_case(cpu, &L, 64, 4, 4, 17, 1);
        short_case(cpu, &L, 128, 4, 32, 129, 1);
        short_case(cpu, &L, 128, 8, 32, 1, 0);
        L.warp = 64;
        short_case(cpu, &L, 128, 4, 32, 64, 1);
        short_case(cpu, &L, 64, 2, 8, 20, 0);
        L.warp = 32;
        batch_case(cpu, &L, 128, 8, 16, 1);       // Qwen3-0.6B's attention: splits 2 at 17 and 24 tokens, then 1
        if (!quick && !f16) {
            batch_case(cpu, &L, 64, 2, 16, 0);    // groups of 8: split below 50 tokens
            batch_case(cpu, &L, 256, 4, 8, 1);    // group 2, D 256: split below 50
            L.warp = 64;
            batch_case(cpu, &L, 128, 8, 32, 1);   // the 8B's shape on a wave of 64: split below 25
            L.warp = 32;
        }
        qk_store_case(cpu, &L, 128, 8, 16, 1, 1, true);
        qk_store_case(cpu, &L, 128, 8, 16, 37, 0, true);
        qk_store_case(cpu, &L, 72, 2, 6, 5, 1, false);  // a partial I16 chunk, no norms
        qk_store_case(cpu, &L, 256, 4, 8, 3, 1, true);
        attn_rope_cases(&L, quick);
        latent_case(cpu, &L, 64, 64, 4, 1);
        latent_case(cpu, &L, 64, 64, 4, 45);
        latent_case(cpu, &L, 512, 64, 8, 3);
        latent_case(cpu, &L, 40, 24, 2, 5);        // chunk crossing c_kv | k_pe
        free(L.scratch);
        mx_backend_free(cpu);
    }
    printf("tensor-core prefill attention: %d runs, worst rel err %.2e (bound 2e-3)\n", mma_cases, mma_worst);
    if (mma_cases == 0) fails++;
    printf("%d failures\n", fails);
    return fails != 0;
}
