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
// positions, up to 33 splits; groups of 1-8, head sizes 64-256, warps of 32 and 64 lanes); latent
// caches of DeepSeek-V3's fixture sizes and a chunk that straddles c_kv and k_pe.
// Built and run by run.sh; exits 1 on any failure.
#include "emu.h"
#include <cstdio>
#include <cstdlib>
extern "C" {
#include "backends/backend.h"
#include "backends/plan.h"
}
#include "backends/gpu/kernels.h"

static mx_error err;
static uint64_t rs = 0x9e3779b97f4a7c15ull;
static float rnd(float lo, float hi) { rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17; return lo + (hi - lo) * (float)((rs >> 40) * (1.0 / 16777216.0)); }
static void fill(float *x, size_t n, float lo, float hi) { for (size_t i = 0; i < n; i++) x[i] = rnd(lo, hi); }
static double rel(const float *a, const float *b, size_t n) {
    double d = 0, r = 0;
    for (size_t i = 0; i < n; i++) { double e = (double)a[i] - b[i]; if (std::isnan(a[i])) return INFINITY; d += e * e; r += (double)b[i] * b[i]; }
    return sqrt(d / r);
}
static int fails = 0;
static void run(mx_backend *be, mx_op op) { if (mx_run_op(be, op, &err)) { printf("cpu op: %s\n", err.msg); exit(1); } }

// The GPU attention of r (on the flash-decoding kernel when L->attn_decode) into og, cleared to NaN
// first so an output it never writes fails, against the CPU backend's oc: prints the case's line and
// counts a failure above 1e-5.
static void attention_vs_cpu(const mxg_launch *L, const char *name, std::vector<float> &og, const std::vector<float> &oc,
                             const float *q, const mx_kv_ref *r, int n, int nh, float scale, int window,
                             const float *sinks) {
    std::fill(og.begin(), og.end(), NAN);
    mxg_attention(L, og.data(), q, r, n, nh, scale, window, sinks);
    double e = rel(og.data(), oc.data(), og.size());
    printf("   %-14s%s rel err %.2e%s\n", name, L->attn_decode ? " (flash)" : "", e, e > 1e-5 ? "  <-- FAIL" : "");
    if (!(e <= 1e-5)) fails++;
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
        fill(k.data(), k.size(), -1, 1), fill(v.data(), v.size(), -1, 1);
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
        {"decode 3 tok", 3, 0, 2, 250, 0, 0}};
    for (auto &c : cases) {
        int n = c.n;
        std::vector<int32_t> sl(n), ps(n);
        for (int i = 0; i < n; i++) {
            if (c.mixed) { sl[i] = (int)(rnd(0, 3)); if (sl[i] > 2) sl[i] = 2; ps[i] = (int)rnd(0, filled[sl[i]]); if (ps[i] >= filled[sl[i]]) ps[i] = filled[sl[i]] - 1; }
            else sl[i] = c.slot0, ps[i] = c.pos0 + i;
        }
        size_t qn = (size_t)n * nh * D;
        std::vector<float> q(qn), og(qn, NAN), oc(qn), sinks(nh);
        fill(q.data(), qn, -1, 1);
        fill(sinks.data(), nh, -1, 3);
        float scale = 3.0f / sqrtf((float)D);
        mx_kv_ref rg = {gkv, lay, 1, sl.data(), ps.data(), paged ? table : NULL};
        mx_kv_ref rc = {ckv, lay, 1, sl.data(), ps.data(), paged ? table : NULL};
        L->attn_token_rows = token_rows;
        run(cpu, (mx_op){.kind = MX_OP_ATTENTION, .attention = {oc.data(), q.data(), rc, n, nh, scale, c.window, c.sinks ? sinks.data() : NULL}});
        // Decode-sized steps on both decode kernels (kernels/attn_decode.cu, and the general one).
        for (int flash = token_rows || n > 16 ? 0 : 1; flash >= 0; flash--) {
            L->attn_decode = flash;
            attention_vs_cpu(L, c.name, og, oc, q.data(), &rg, n, nh, scale, c.window, c.sinks ? sinks.data() : NULL);
        }
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
    fill(k.data(), k.size(), -1, 1), fill(v.data(), v.size(), -1, 1);
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
        size_t qn = (size_t)n * nh * D;
        std::vector<float> q(qn), og(qn), oc(qn), sinks(nh);
        fill(q.data(), qn, -1, 1);
        fill(sinks.data(), nh, -1, 3);
        float scale = 3.0f / sqrtf((float)D);
        mx_kv_ref g2 = {gkv, lay, 0, s2.data(), p2.data(), paged ? table.data() : NULL};
        mx_kv_ref c2 = {ckv, lay, 0, s2.data(), p2.data(), paged ? table.data() : NULL};
        run(cpu, (mx_op){.kind = MX_OP_ATTENTION, .attention = {oc.data(), q.data(), c2, n, nh, scale, c.window, c.sinks ? sinks.data() : NULL}});
        for (int flash = 1; flash >= (also_general ? 0 : 1); flash--) {
            L->attn_decode = flash;
            attention_vs_cpu(L, c.name, og, oc, q.data(), &g2, n, nh, scale, c.window, c.sinks ? sinks.data() : NULL);
        }
    }
    free(gkv);
    cpu->ops->release(cpu, ckv);
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
        fill(c.data(), c.size(), -1, 1), fill(kp.data(), kp.size(), -2, 2);
        mx_kv_ref rg = {gkv, lay, 1, s2.data(), p2.data(), NULL}, rc = {ckv, lay, 1, s2.data(), p2.data(), NULL};
        mxg_latent_store(L, &rg, c.data(), kp.data(), 38, KL, R);
        run(cpu, (mx_op){.kind = MX_OP_LATENT_STORE, .latent_store = {rc, c.data(), kp.data(), 38, KL, R}});
    }
    std::vector<float> c(n * KL), kp(n * R), ql((size_t)n * nh * KL), qp((size_t)n * nh * R), og((size_t)n * nh * KL, NAN), oc(og.size());
    fill(c.data(), c.size(), -1, 1), fill(kp.data(), kp.size(), -2, 2), fill(ql.data(), ql.size(), -0.3f, 0.3f), fill(qp.data(), qp.size(), -0.3f, 0.3f);
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

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    // argument "quick": half the head-size runs and I16 only (for the sanitizer build).
    bool quick = argc > 1 && !strcmp(argv[1], "quick");
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
        latent_case(cpu, &L, 64, 64, 4, 1);
        latent_case(cpu, &L, 64, 64, 4, 45);
        latent_case(cpu, &L, 512, 64, 8, 3);
        latent_case(cpu, &L, 40, 24, 2, 5);        // chunk crossing c_kv | k_pe
        free(L.scratch);
        mx_backend_free(cpu);
    }
    printf("%d failures\n", fails);
    return fails != 0;
}
