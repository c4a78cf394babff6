// SPDX-License-Identifier: MIT
// The host token choice's two full passes over a row (core/sample_passes.h): the best token and the
// tokens at or above a threshold. The scalar set is checked against the rule written here from the
// header's contract (first maximum with NaN taken as -inf; the tokens with l >= t0 in id order, their
// e summed in id order); the AVX2 set, where this CPU has it, against the scalar set bit for bit on
// the same rows: the same index, the same row after the pass (NaNs become -inf, nothing else moves),
// the same candidates and the same mass to the last bit. Rows: 20,000 of 1 to 80 logits (most not a
// multiple of 8, so the vector loop's tail is exercised), at odd float offsets, plus some of a
// vocabulary's size; each random, with ties, NaNs of either sign (first logit, vector lanes, tail),
// every logit -inf or NaN, signed zeros as the maximum, +inf; thresholds on a logit of the row (ties
// with it), between, at +-0, at +-inf. The masses come from weights of very different sizes, so
// adding them in another order changes the sum's bits. The host sampler must use the AVX2 set where
// the CPU has it (what this test compares is what runs). A CPU without AVX2 checks the scalar set,
// then exits 77 (ctest: skipped) saying so.
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/sample_passes.h"
#include "test_rng.h"

static test_rng rng = {0x5a3c1e77};
static uint32_t rnd(void) { return test_rng_u32(&rng); }

#define MAX_VOCAB 151937
#define PAD 8  // rows start at float offsets 0..7

// The row kinds: random with each edge case mixed in, or a whole row of one edge case.
enum { ROW_RANDOM, ROW_TIES, ROW_NANS, ROW_ALL_NINF, ROW_ALL_NAN, ROW_ZEROS, ROW_INF, ROW_KINDS };

static float pick_value(int kind) {
    switch (kind) {
    case ROW_TIES: return (float)(int)(rnd() % 5) - 2.0f;  // five levels: many equal maxima
    case ROW_NANS: {
        uint32_t u = rnd() % 4;
        if (u == 0) return rnd() % 2 ? NAN : -NAN;
        return test_rng_unit(&rng) * 10.0f;
    }
    case ROW_ALL_NINF: return -INFINITY;
    case ROW_ALL_NAN: return rnd() % 2 ? NAN : -NAN;
    case ROW_ZEROS: {  // the maximum is a zero of either sign, often several
        uint32_t u = rnd() % 4;
        return u == 0 ? 0.0f : u == 1 ? -0.0f : u == 2 ? -INFINITY : -1.0f - (float)(rnd() % 100);
    }
    case ROW_INF: {
        uint32_t u = rnd() % 8;
        return u == 0 ? INFINITY : u == 1 ? -INFINITY : test_rng_unit(&rng) * 30.0f;
    }
    default: return test_rng_unit(&rng) * 20.0f;
    }
}

static void fill_row(float *l, int vocab, int kind) {
    for (int i = 0; i < vocab; i++) l[i] = pick_value(kind);
    if (kind == ROW_NANS && rnd() % 3 == 0) l[0] = NAN;                  // a NaN first logit is not the best
    if (kind == ROW_NANS && rnd() % 3 == 0) l[vocab - 1] = -NAN;         // nor one in the tail
    if (kind == ROW_RANDOM && vocab > 1 && rnd() % 2) l[rnd() % vocab] = l[rnd() % vocab];  // one tie
}

// Weights of very different sizes (1e-12 .. 1e12): the double sum depends on the order of additions.
static void fill_weights(float *e, int vocab) {
    for (int i = 0; i < vocab; i++) e[i] = ldexpf(1.0f + (float)(rnd() % 1000) / 1000.0f, (int)(rnd() % 80) - 40);
}

// A threshold for the row: one of its logits (its ties are in), just above one, a signed zero, or an infinity.
static float pick_threshold(const float *l, int vocab) {
    float v = l[rnd() % vocab];
    switch (rnd() % 6) {
    case 0: return isnan(v) ? 0.5f : v;
    case 1: return isnan(v) ? -0.5f : nextafterf(v, INFINITY);
    case 2: return 0.0f;
    case 3: return -0.0f;
    case 4: return rnd() % 2 ? INFINITY : -INFINITY;
    default: return test_rng_unit(&rng) * 20.0f;
    }
}

// The contract's best token: the first maximum with NaN taken as -inf (token 0 when none is above -inf).
static int32_t rule_best(const float *l, int vocab) {
    int32_t best = 0;
    float best_v = isnan(l[0]) ? -INFINITY : l[0];
    for (int i = 1; i < vocab; i++)
        if (!isnan(l[i]) && l[i] > best_v) best_v = l[i], best = i;
    return best;
}

// The contract's candidates: l >= t0 in id order, e summed in id order.
static int rule_collect(const float *l, const float *e, int vocab, float t0, int32_t *cand, double *mass) {
    int nc = 0;
    *mass = 0.0;
    for (int i = 0; i < vocab; i++)
        if (l[i] >= t0) cand[nc++] = i, *mass += e[i];
    return nc;
}

static float *row_in, *row_a, *row_b, *weights;
static int32_t *cand_a, *cand_b;

// One row through both passes of set `a` and of `b` (b == NULL: the rule above). Returns the failures.
static int compare_row(const mx_sample_passes *a, const mx_sample_passes *b, int vocab, int kind, int off, int row) {
    int failed = check_failures;
    float *in = row_in + off, *la = row_a + off, *lb = row_b + off;
    fill_row(in, vocab, kind);
    fill_weights(weights, vocab);
    memcpy(la, in, sizeof(float) * (size_t)vocab);
    memcpy(lb, in, sizeof(float) * (size_t)vocab);
    int32_t ia = a->best_token(la, vocab);
    int32_t ib = b ? b->best_token(lb, vocab) : rule_best(lb, vocab);
    const char *nb = b ? b->name : "rule";
    CHECK_MSG(ia == ib, "row %d (kind %d, vocab %d): best token %s %d, %s %d", row, kind, vocab, a->name, ia, nb, ib);
    if (!b)  // the rule's row: NaNs set to -inf, every other logit untouched
        for (int i = 0; i < vocab; i++)
            if (isnan(lb[i])) lb[i] = -INFINITY;
    CHECK_MSG(memcmp(la, lb, sizeof(float) * (size_t)vocab) == 0,
              "row %d (kind %d, vocab %d): the row after the best-token pass differs (%s vs %s)", row, kind, vocab,
              a->name, nb);
    // The candidate pass on the row as the sampler sees it (after the best-token pass) and on the
    // raw row (NaNs in place: never at or above any threshold).
    for (int pass = 0; pass < 2; pass++) {
        const float *l = pass == 0 ? la : in;
        float t0 = pick_threshold(l, vocab);
        double ma = -1.0, mb = -2.0;
        int na = a->collect(l, weights, vocab, t0, cand_a, &ma);
        int nbc = b ? b->collect(l, weights, vocab, t0, cand_b, &mb) : rule_collect(l, weights, vocab, t0, cand_b, &mb);
        CHECK_MSG(na == nbc, "row %d (kind %d, vocab %d, t0 %g, %s row): %d candidates (%s), %d (%s)", row, kind, vocab,
                  (double)t0, pass ? "raw" : "passed", na, a->name, nbc, nb);
        CHECK_MSG(na != nbc || memcmp(cand_a, cand_b, sizeof(int32_t) * (size_t)na) == 0,
                  "row %d (kind %d, vocab %d, t0 %g): the candidates differ (%s vs %s)", row, kind, vocab, (double)t0,
                  a->name, nb);
        CHECK_MSG(memcmp(&ma, &mb, sizeof ma) == 0, "row %d (kind %d, vocab %d, t0 %g): mass %.17g (%s) vs %.17g (%s)",
                  row, kind, vocab, (double)t0, ma, a->name, mb, nb);
    }
    return check_failures - failed;
}

// Every row through set a against b (NULL: the rule); stops after a few failing rows.
static void compare_sets(const mx_sample_passes *a, const mx_sample_passes *b, uint64_t seed) {
    rng.s = seed;
    int bad = 0;
    for (int row = 0; row < 20000 && bad < 5; row++) {
        int vocab = 1 + (int)(rnd() % 80);
        bad += compare_row(a, b, vocab, row % ROW_KINDS, (int)(rnd() % PAD), row) > 0;
    }
    const int big[] = {151936, 151937, 32000, 8, 9, 7};
    for (int k = 0; k < (int)(sizeof big / sizeof big[0]) && bad < 5; k++)
        for (int kind = 0; kind < ROW_KINDS; kind++) bad += compare_row(a, b, big[k], kind, k % PAD, -1 - k) > 0;
    printf("%s against %s: %s\n", a->name, b ? b->name : "the rule", bad ? "DIFFERENT" : "identical");
}

int main(void) {
    row_in = malloc(sizeof(float) * (MAX_VOCAB + PAD));
    row_a = malloc(sizeof(float) * (MAX_VOCAB + PAD));
    row_b = malloc(sizeof(float) * (MAX_VOCAB + PAD));
    weights = malloc(sizeof(float) * MAX_VOCAB);
    cand_a = malloc(sizeof(int32_t) * MAX_VOCAB);
    cand_b = malloc(sizeof(int32_t) * MAX_VOCAB);
    if (!row_in || !row_a || !row_b || !weights || !cand_a || !cand_b) return 1;

    const mx_sample_passes *scalar = mx_sample_passes_scalar(), *avx2 = mx_sample_passes_avx2();
    compare_sets(scalar, NULL, 0x9e3779b97f4a7c15ull);
    if (avx2) {
        compare_sets(avx2, scalar, 0x9e3779b97f4a7c15ull);
        compare_sets(avx2, scalar, 0x2545f4914f6cdd1dull);
        CHECK_MSG(mx_sample_passes_host() == avx2, "the host sampler runs the %s passes on a CPU with AVX2",
                  mx_sample_passes_host()->name);
    } else {
        CHECK(mx_sample_passes_host() == scalar);
    }
    free(row_in), free(row_a), free(row_b), free(weights), free(cand_a), free(cand_b);
    int rc = check_finish();
    if (rc == 0 && !avx2) {
        printf("skipped: this CPU has no AVX2 (with FMA and F16C), so the AVX2 passes were not compared; only "
               "the scalar passes were checked against the rule\n");
        return 77;
    }
    return rc;
}
