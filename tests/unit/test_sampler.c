// SPDX-License-Identifier: MIT
// The batched token choice (core/sample_rows.h) and the per-sequence sampler (sample/sampler.h)
// against a plain reference written here: edits applied one by one, the vocabulary fully sorted,
// the filters' kept set computed from the sorted order, and softmax(l / temp) over it. Checks: greedy
// and masks; every filter alone and together keeps exactly the reference set (every draw falls in
// it) and draws follow the reference distribution (total variation over 40,000 draws on a fixed
// seed); the radix selection on a full-size flat vocabulary; penalties and logit_bias as edits;
// logprobs and top_logprobs; seeds; the threaded batch equals row-by-row; NaN logits (no mass, never
// chosen, top-p unchanged by them).
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/sample_rows.h"
#include "core/thread_pool.h"
#include "sample/sampler.h"

#define V 64
#define DRAWS 40000

static void fill(float *l, int n, unsigned seed, float spread) {
    for (int i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        l[i] = spread * (float)((seed >> 8) % 10000) / 10000.0f;
    }
}

static const float *sort_vals;
static int by_value_desc(const void *a, const void *b) {
    float x = sort_vals[*(const int *)a], y = sort_vals[*(const int *)b];
    if (x != y) return x > y ? -1 : 1;
    return *(const int *)a - *(const int *)b;
}

static bool allowed_ref(const uint32_t *mask, int i) { return !mask || ((mask[i / 32] >> (i % 32)) & 1u); }

// Reference: probabilities of each token under the rule of sample_rows.h (n tokens).
static void reference(const float *raw, int n, const mx_sample_row *r, const mx_logit_mod *mods, double *prob) {
    float *l = malloc(sizeof(float) * n);
    int *order = malloc(sizeof(int) * n);
    memcpy(l, raw, sizeof(float) * n);
    for (int k = 0; k < r->n_mod; k++) {
        const mx_logit_mod *m = &mods[r->mod_off + k];
        float x = l[m->id] + m->bias;
        x = x > 0 ? x / m->rep : x * m->rep;
        l[m->id] = x - m->sub;
    }
    int na = 0;
    for (int i = 0; i < n; i++)
        if (allowed_ref(r->allowed, i)) order[na++] = i;
    sort_vals = l;
    qsort(order, na, sizeof(int), by_value_desc);
    for (int i = 0; i < n; i++) prob[i] = 0;
    if (r->temp <= 0) {
        prob[order[0]] = 1;
    } else {
        double z = 0;
        float m = l[order[0]];
        for (int i = 0; i < na; i++) z += exp((double)l[order[i]] - m);
        float thr = -INFINITY;
        if (r->min_p > 0) thr = fmaxf(thr, m + logf(r->min_p));
        if (r->top_k > 0 && r->top_k < na) thr = fmaxf(thr, l[order[r->top_k - 1]]);
        if (r->top_p > 0 && r->top_p < 1) {
            double cum = 0;
            for (int i = 0; i < na; i++) {
                cum += exp((double)l[order[i]] - m) / z;
                if (cum >= r->top_p) {
                    thr = fmaxf(thr, l[order[i]]);
                    break;
                }
            }
        }
        double t = 0;
        for (int i = 0; i < na; i++)
            if (l[order[i]] >= thr) t += prob[order[i]] = exp(((double)l[order[i]] - m) / r->temp);
        for (int i = 0; i < n; i++) prob[i] /= t;
    }
    free(l);
    free(order);
}

static void *scratch;

// Draws DRAWS tokens (positions 0..DRAWS-1) and returns the total variation distance from the
// reference; fails if any draw has reference probability 0.
static double tv_distance(const float *raw, const mx_sample_row *r0, const mx_logit_mod *mods) {
    double ref[V], freq[V] = {0};
    reference(raw, V, r0, mods, ref);
    float l[V];
    int outside = 0;
    for (int d = 0; d < DRAWS; d++) {
        mx_sample_row r = *r0;
        r.pos = d;
        memcpy(l, raw, sizeof l);
        mx_sample_out o;
        int32_t id = mx_sample_row_host(l, V, &r, mods, scratch, &o);
        if (id < 0 || id >= V || ref[id] == 0) outside++;
        else freq[id] += 1.0 / DRAWS;
    }
    CHECK(outside == 0);
    double tv = 0;
    for (int i = 0; i < V; i++) tv += fabs(freq[i] - ref[i]) / 2;
    return tv;
}

static mx_sample_row row_of(float temp, float top_p, float min_p, int top_k) {
    return (mx_sample_row){.temp = temp, .top_p = top_p, .min_p = min_p, .top_k = top_k, .seed = 77, .n_top = -1};
}

static void filters(void) {
    float raw[V];
    fill(raw, V, 3, 6.0f);
    struct {
        mx_sample_row r;
        const char *what;
    } cases[] = {
        {row_of(1.0f, 1.0f, 0.0f, 0), "plain"},     {row_of(0.7f, 1.0f, 0.0f, 0), "temp 0.7"},
        {row_of(1.0f, 0.9f, 0.0f, 0), "top-p 0.9"}, {row_of(1.0f, 0.5f, 0.0f, 0), "top-p 0.5"},
        {row_of(1.0f, 1.0f, 0.2f, 0), "min-p 0.2"}, {row_of(1.0f, 1.0f, 0.0f, 5), "top-k 5"},
        {row_of(1.5f, 0.8f, 0.05f, 12), "all three"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        double tv = tv_distance(raw, &cases[c].r, NULL);
        if (!(tv < 0.02)) printf("  %s: total variation %.4f\n", cases[c].what, tv);
        CHECK(tv < 0.02);
    }
    // Edits and a mask together with filters.
    mx_logit_mod mods[3] = {{.id = 4, .bias = 3.0f, .rep = 1.0f}, {.id = 9, .bias = 0, .rep = 1.5f, .sub = 0.5f},
                            {.id = 20, .bias = -100.0f, .rep = 1.0f}};
    uint32_t mask[2] = {0xffff0ff0u, 0x0fffffffu};
    mx_sample_row r = row_of(0.8f, 0.95f, 0.0f, 20);
    r.n_mod = 3;
    r.allowed = mask;
    CHECK(tv_distance(raw, &r, mods) < 0.02);
}

static void greedy_and_mask(void) {
    float raw[V], l[V];
    fill(raw, V, 5, 4.0f);
    int best = 0;
    for (int i = 1; i < V; i++)
        if (raw[i] > raw[best]) best = i;
    mx_sample_row r = row_of(0.0f, 1.0f, 0.0f, 0);
    mx_sample_out o;
    memcpy(l, raw, sizeof l);
    CHECK(mx_sample_row_host(l, V, &r, NULL, scratch, &o) == best);
    uint32_t mask[2] = {0xffffffffu, 0xffffffffu};
    mask[best / 32] &= ~(1u << (best % 32));
    r.allowed = mask;
    memcpy(l, raw, sizeof l);
    int32_t id = mx_sample_row_host(l, V, &r, NULL, scratch, &o);
    CHECK(id != best && raw[id] <= raw[best]);
    // A mask with no allowed token is ignored.
    uint32_t none[2] = {0, 0};
    r.allowed = none;
    memcpy(l, raw, sizeof l);
    CHECK(mx_sample_row_host(l, V, &r, NULL, scratch, &o) == best);
    r.allowed = mask;
    // A one-token mask decides alone, sampled or not.
    uint32_t only[2] = {0, 1u << (33 % 32)};
    r.allowed = only;
    r.temp = 1.0f;
    for (int d = 0; d < 50; d++) {
        r.pos = d;
        memcpy(l, raw, sizeof l);
        CHECK(mx_sample_row_host(l, V, &r, NULL, scratch, &o) == 33);
    }
    // top-k 1 and min-p 1 are greedy.
    r = row_of(1.0f, 1.0f, 0.0f, 1);
    memcpy(l, raw, sizeof l);
    CHECK(mx_sample_row_host(l, V, &r, NULL, scratch, &o) == best);
    r = row_of(1.0f, 1.0f, 1.0f, 0);
    memcpy(l, raw, sizeof l);
    CHECK(mx_sample_row_host(l, V, &r, NULL, scratch, &o) == best);
}

// NaN logits count as -inf on the host: no mass, never chosen. Top-p 0.5 over token 3 (e^5), token
// 7 (e^4) and 56 zeros keeps token 3 alone (0.57 of the finite mass) with NaNs in the middle and in
// the tail (the last 61 % 8 logits are summed one at a time past the vector loop); a NaN first logit
// is neither the greedy choice nor drawn.
static void nan_logits(void) {
    enum { N = 61 };
    float raw[N], l[N];
    for (int i = 0; i < N; i++) raw[i] = 0.0f;
    raw[3] = 5.0f, raw[7] = 4.0f, raw[20] = NAN, raw[N - 2] = NAN, raw[N - 1] = -NAN;
    mx_sample_out o;
    mx_sample_row r = row_of(1.0f, 0.5f, 0.0f, 0);
    int outside = 0;
    for (int d = 0; d < 200; d++) {
        r.pos = d;
        memcpy(l, raw, sizeof l);
        outside += mx_sample_row_host(l, N, &r, NULL, scratch, &o) != 3;
    }
    CHECK_MSG(outside == 0, "top-p 0.5 with NaN logits: %d of 200 draws outside the kept token", outside);
    raw[0] = NAN;
    r = row_of(0.0f, 1.0f, 0.0f, 0);
    memcpy(l, raw, sizeof l);
    CHECK(mx_sample_row_host(l, N, &r, NULL, scratch, &o) == 3);
    r = row_of(1.0f, 1.0f, 0.0f, 0);
    int nan_drawn = 0;
    for (int d = 0; d < 200; d++) {
        r.pos = d;
        memcpy(l, raw, sizeof l);
        nan_drawn += isnan(raw[mx_sample_row_host(l, N, &r, NULL, scratch, &o)]);
    }
    CHECK(nan_drawn == 0);
}

// Radix selection on a full-size vocabulary of nearly equal logits: every draw must fall in the
// reference top-k / top-p set.
static void large_vocab(void) {
    enum { BIG = 151936 };
    float *raw = malloc(sizeof(float) * BIG), *l = malloc(sizeof(float) * BIG);
    double *ref = malloc(sizeof(double) * BIG);
    void *big_scratch = malloc(MX_SAMPLE_SCRATCH_BYTES(BIG));
    fill(raw, BIG, 11, 0.5f);
    mx_sample_row rs[2] = {row_of(1.0f, 1.0f, 0.0f, 1000), row_of(1.0f, 0.3f, 0.0f, 0)};
    for (int c = 0; c < 2; c++) {
        reference(raw, BIG, &rs[c], NULL, ref);
        int kept = 0;
        for (int i = 0; i < BIG; i++) kept += ref[i] > 0;
        CHECK(c == 1 || kept >= 1000);
        int bad = 0;
        for (int d = 0; d < 200; d++) {
            mx_sample_row r = rs[c];
            r.pos = d;
            memcpy(l, raw, sizeof(float) * BIG);
            mx_sample_out o;
            int32_t id = mx_sample_row_host(l, BIG, &r, NULL, big_scratch, &o);
            bad += !(id >= 0 && id < BIG && ref[id] > 0);
        }
        CHECK(bad == 0);
    }
    free(raw), free(l), free(ref), free(big_scratch);
}

static void logprobs(void) {
    float raw[V], l[V];
    fill(raw, V, 9, 5.0f);
    double m = raw[0], z = 0;
    for (int i = 0; i < V; i++) m = raw[i] > m ? raw[i] : m;
    for (int i = 0; i < V; i++) z += exp(raw[i] - m);
    double lse = m + log(z);
    mx_logit_mod mod = {.id = 7, .bias = 50.0f, .rep = 1.0f};  // forces token 7; logprobs stay raw
    mx_sample_row r = row_of(0.0f, 1.0f, 0.0f, 0);
    r.n_top = 5;
    r.n_mod = 1;
    memcpy(l, raw, sizeof l);
    mx_sample_out o;
    CHECK(mx_sample_row_host(l, V, &r, &mod, scratch, &o) == 7);
    CHECK(fabs(o.logprob - (raw[7] - lse)) < 1e-4);
    CHECK(o.n_top == 5);
    int order[V];
    for (int i = 0; i < V; i++) order[i] = i;
    sort_vals = raw;
    qsort(order, V, sizeof(int), by_value_desc);
    for (int k = 0; k < 5; k++) {
        CHECK(o.top_id[k] == order[k]);
        CHECK(fabs(o.top_logprob[k] - (raw[order[k]] - lse)) < 1e-4);
    }
}

static void penalties_and_bias(void) {
    mx_logit_bias bias[2] = {{3, 2.0f}, {5, -1.0f}};
    mx_sampling p = mx_sampling_defaults();
    p.repetition_penalty = 1.25f;
    p.repetition_context = 3;
    p.presence_penalty = 0.5f;
    p.frequency_penalty = 0.25f;
    p.logit_bias = bias;
    p.n_logit_bias = 2;
    mx_sampler *s = mx_sampler_create(&p, 16);
    mx_sampler_accept(s, 1, false);  // prompt: repetition only
    mx_sampler_accept(s, 5, true);
    mx_sampler_accept(s, 5, true);
    mx_sampler_accept(s, 8, true);
    mx_sampler_accept(s, 9, true);   // window of 3: 5, 8, 9 (1 and the first 5 fell out)
    mx_logit_mod mods[64];
    int n = 0;
    mx_sample_row r;
    mx_sampler_row(s, 10, -1, &r, mods, &n);
    CHECK(n <= mx_sampler_max_mods(s));
    CHECK(r.mod_off == 0 && r.n_mod == n && r.pos == 10 && r.seed == mx_sampler_seed(s));
    float want_bias[16] = {0}, want_rep[16], want_sub[16] = {0};
    for (int i = 0; i < 16; i++) want_rep[i] = 1.0f;
    want_bias[3] = 2.0f, want_bias[5] = -1.0f;
    want_rep[5] = want_rep[8] = want_rep[9] = 1.25f;
    want_sub[5] = 0.5f + 0.25f * 2, want_sub[8] = want_sub[9] = 0.5f + 0.25f;
    int seen[16] = {0};
    for (int k = 0; k < n; k++) {
        int id = mods[k].id;
        CHECK(id >= 0 && id < 16 && !seen[id]);
        seen[id] = 1;
        CHECK(mods[k].bias == want_bias[id] && mods[k].rep == want_rep[id] && fabsf(mods[k].sub - want_sub[id]) < 1e-6f);
    }
    for (int i = 0; i < 16; i++) CHECK(seen[i] == (want_bias[i] != 0 || want_rep[i] != 1.0f || want_sub[i] != 0));
    // A second row appends after the first.
    int before = n;
    mx_sampler_row(s, 11, -1, &r, mods, &n);
    CHECK(r.mod_off == before && r.n_mod == n - before);
    mx_sampler_free(s);
}

static void seeds_and_batch(void) {
    float raw[4][V];
    for (int r = 0; r < 4; r++) fill(raw[r], V, 20 + r, 5.0f);
    mx_sample_row rows[4];
    for (int r = 0; r < 4; r++) rows[r] = row_of(0.9f, 0.95f, 0.0f, 0), rows[r].seed = 100 + r, rows[r].pos = 7;
    float l[4][V];
    mx_sample_out one[4], batch[4];
    for (int r = 0; r < 4; r++) {
        memcpy(l[r], raw[r], sizeof raw[r]);
        mx_sample_row_host(l[r], V, &rows[r], NULL, scratch, &one[r]);
    }
    mx_pool *pool = mx_pool_create(2);
    void *sc = malloc(MX_SAMPLE_SCRATCH_BYTES(V) * (size_t)mx_pool_threads(pool));
    memcpy(l, raw, sizeof raw);
    mx_sample_rows_host(pool, &l[0][0], 4, V, rows, NULL, sc, batch);
    for (int r = 0; r < 4; r++) CHECK(one[r].id == batch[r].id);
    free(sc);
    mx_pool_free(pool);
    // Same seed, same draws; another seed, other draws.
    int same = 0, differ = 0;
    for (int d = 0; d < 200; d++) {
        mx_sample_row a = row_of(1.0f, 1.0f, 0.0f, 0), b = a;
        a.pos = b.pos = d;
        b.seed = 78;
        float la[V], lb[V], lc[V];
        memcpy(la, raw[0], sizeof la), memcpy(lb, raw[0], sizeof lb), memcpy(lc, raw[0], sizeof lc);
        mx_sample_out oa, ob, oc;
        int32_t x = mx_sample_row_host(la, V, &a, NULL, scratch, &oa);
        int32_t y = mx_sample_row_host(lc, V, &a, NULL, scratch, &oc);
        int32_t z = mx_sample_row_host(lb, V, &b, NULL, scratch, &ob);
        same += x == y;
        differ += x != z;
    }
    CHECK(same == 200 && differ > 20);
}

int main(void) {
    scratch = malloc(MX_SAMPLE_SCRATCH_BYTES(V));
    greedy_and_mask();
    filters();
    nan_logits();
    large_vocab();
    logprobs();
    penalties_and_bias();
    seeds_and_batch();
    free(scratch);
    return check_finish();
}
