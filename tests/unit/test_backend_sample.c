// SPDX-License-Identifier: MIT
// The backend `sample` record (MLXCEL_TEST_BACKEND picks the backend; default cpu), one row per
// position: top-k 1 is the argmax; the same seed and positions draw the same tokens; over many
// positions the draws follow softmax(logits / temp) (checked per token against the exact
// probabilities); top-k, top-p and min-p never let a filtered token through and keep the kept
// tokens' proportions; every draw equals the host reference (core/sample_rows.h) on the CPU and
// nearly every one elsewhere (float sums may move a filter boundary); edits, masks and logprobs. A backend without
// the (optional) record exits 77, which ctest reports as skipped with the reason; never a pass.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backends/plan.h"
#include "check.h"
#include "core/sample_rows.h"

#define V 8
#define DRAWS 40000

static mx_backend *be;
static float *d_logits;
static mx_sample_row *d_rows;
static mx_sample_out *d_out;
static mx_logit_mod *d_mods;
static uint32_t *d_mask;
static const uint32_t *d_mask_host;  // host copy of the mask d_mask holds
static int mismatches, compared;

// Runs rows[n] on logits[n, vocab] (host) through the backend record; out[n] gets the results, and
// each row is also run by the host reference and compared.
static void run_rows(const float *logits, int n, int vocab, const mx_sample_row *rows, const mx_logit_mod *mods,
                     int n_mods, mx_sample_out *out) {
    mx_error err = {{0}};
    be->ops->upload(be, d_logits, logits, sizeof(float) * (size_t)n * vocab, &err);
    be->ops->upload(be, d_rows, rows, sizeof(mx_sample_row) * (size_t)n, &err);
    if (n_mods) be->ops->upload(be, d_mods, mods, sizeof(mx_logit_mod) * (size_t)n_mods, &err);
    CHECK(mx_run_op(be, (mx_op){.kind = MX_OP_SAMPLE, .sample = {d_out, d_logits, n, vocab, d_rows, d_mods}}, &err) == 0);
    CHECK(be->ops->download(be, out, d_out, sizeof(mx_sample_out) * (size_t)n, &err) == 0);
    float *l = malloc(sizeof(float) * vocab);
    void *scratch = malloc(MX_SAMPLE_SCRATCH_BYTES(vocab));
    for (int t = 0; t < n; t++) {
        memcpy(l, logits + (size_t)t * vocab, sizeof(float) * vocab);
        mx_sample_row r = rows[t];
        if (r.allowed) r.allowed = d_mask_host;
        mx_sample_out ref;
        mx_sample_row_host(l, vocab, &r, mods, scratch, &ref);
        compared++;
        mismatches += ref.id != out[t].id;
    }
    free(l);
    free(scratch);
}

// Draws DRAWS tokens (one per position) from the same logits row; counts[V] gets the histogram.
static void draw(const float *row, mx_sample_row p, int counts[V], int32_t *ids_out) {
    static float rows[DRAWS * V];
    static mx_sample_row prm[DRAWS];
    static mx_sample_out out[DRAWS];
    static int32_t ids[DRAWS];
    for (int t = 0; t < DRAWS; t++) {
        memcpy(rows + t * V, row, sizeof(float) * V);
        prm[t] = p;
        prm[t].pos = t;
        prm[t].n_top = -1;
    }
    run_rows(rows, DRAWS, V, prm, NULL, 0, out);
    for (int t = 0; t < DRAWS; t++) ids[t] = out[t].id;
    memset(counts, 0, sizeof(int) * V);
    for (int t = 0; t < DRAWS; t++) {
        CHECK_MSG(ids[t] >= 0 && ids[t] < V, "draw %d gave %d", t, ids[t]);
        if (ids[t] >= 0 && ids[t] < V) counts[ids[t]]++;
    }
    if (ids_out) memcpy(ids_out, ids, sizeof ids);
}

// Checks the histogram against probabilities proportional to exp(l / temp) over `keep` (mask).
static void expect(const char *what, const int counts[V], const float *l, float temp, const bool keep[V]) {
    double z = 0.0, p[V];
    for (int i = 0; i < V; i++) z += keep[i] ? exp(l[i] / temp) : 0.0;
    for (int i = 0; i < V; i++) {
        p[i] = keep[i] ? exp(l[i] / temp) / z : 0.0;
        double f = (double)counts[i] / DRAWS, sd = sqrt(p[i] * (1 - p[i]) / DRAWS);
        CHECK_MSG(fabs(f - p[i]) <= 5 * sd + 1e-9, "%s: token %d drawn %.4f, expected %.4f", what, i, f, p[i]);
        if (!keep[i]) CHECK_MSG(counts[i] == 0, "%s: filtered token %d was drawn %d times", what, i, counts[i]);
    }
}

int main(void) {
    const char *name = getenv("MLXCEL_TEST_BACKEND");
    mx_backend_options opt = {.name = name ? name : "cpu"};
    mx_error err = {{0}};
    be = mx_backend_create(&opt, &err);
    if (!be) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    if (!be->ops->supports(be, MX_OP_SAMPLE, NULL)) {  // optional: then the engine samples on the host
        printf("skipped: backend %s has no sample op, nothing to check\n", be->ops->name);
        mx_backend_free(be);
        return 77;
    }
    d_logits = be->ops->alloc(be, sizeof(float) * DRAWS * V, &err);
    d_rows = be->ops->alloc(be, sizeof(mx_sample_row) * DRAWS, &err);
    d_out = be->ops->alloc(be, sizeof(mx_sample_out) * DRAWS, &err);
    d_mods = be->ops->alloc(be, sizeof(mx_logit_mod) * 64, &err);
    d_mask = be->ops->alloc(be, sizeof(uint32_t) * 8, &err);
    const float l[V] = {2.0f, 1.0f, 0.5f, 0.0f, -1.0f, -3.0f, 1.5f, -0.5f};  // order: 0, 6, 1, 2, 3, 7, 4, 5
    bool all[V], keep[V];
    for (int i = 0; i < V; i++) all[i] = true;
    int c[V];
    int32_t *a = malloc(sizeof(int32_t) * DRAWS), *b = malloc(sizeof(int32_t) * DRAWS);

    draw(l, (mx_sample_row){.temp = 1.0f, .top_p = 1.0f, .seed = 11, .n_top = -1}, c, a);
    expect("temp 1", c, l, 1.0f, all);
    draw(l, (mx_sample_row){.temp = 1.0f, .top_p = 1.0f, .seed = 11, .n_top = -1}, c, b);
    CHECK_MSG(memcmp(a, b, sizeof(int32_t) * DRAWS) == 0, "same seed, different draws");
    draw(l, (mx_sample_row){.temp = 1.0f, .top_p = 1.0f, .seed = 12, .n_top = -1}, c, b);
    CHECK_MSG(memcmp(a, b, sizeof(int32_t) * DRAWS) != 0, "another seed, same draws");
    draw(l, (mx_sample_row){.temp = 0.5f, .top_p = 1.0f, .seed = 5, .n_top = -1}, c, NULL);
    expect("temp 0.5", c, l, 0.5f, all);
    draw(l, (mx_sample_row){.temp = 2.0f, .top_p = 1.0f, .seed = 6, .n_top = -1}, c, NULL);
    expect("temp 2", c, l, 2.0f, all);

    draw(l, (mx_sample_row){.temp = 1.0f, .top_p = 1.0f, .top_k = 1, .seed = 7, .n_top = -1}, c, NULL);
    CHECK_MSG(c[0] == DRAWS, "top-k 1 is not the argmax (%d of %d)", c[0], DRAWS);
    draw(l, (mx_sample_row){.temp = 1.0f, .top_p = 1.0f, .top_k = 3, .seed = 8, .n_top = -1}, c, NULL);
    for (int i = 0; i < V; i++) keep[i] = i == 0 || i == 6 || i == 1;
    expect("top-k 3", c, l, 1.0f, keep);

    // top-p 0.6 at temperature 1: p = .43, .26 (token 6), .16 (token 1), ...: the smallest top set
    // reaching 0.6 is {0, 6}; drawn at temp 0.7 within it.
    draw(l, (mx_sample_row){.temp = 0.7f, .top_p = 0.6f, .seed = 9, .n_top = -1}, c, NULL);
    for (int i = 0; i < V; i++) keep[i] = i == 0 || i == 6;
    expect("top-p 0.6", c, l, 0.7f, keep);

    // min-p 0.2: keep p >= 0.2 * p_max, i.e. l >= 2 + ln 0.2 = 0.39: tokens 0, 6, 1, 2.
    draw(l, (mx_sample_row){.temp = 1.0f, .top_p = 1.0f, .min_p = 0.2f, .seed = 10, .n_top = -1}, c, NULL);
    for (int i = 0; i < V; i++) keep[i] = i == 0 || i == 6 || i == 1 || i == 2;
    expect("min-p 0.2", c, l, 1.0f, keep);

    // A vocabulary-sized row: the draw stays among the top-k of a random row.
    enum { BIG = 151936 };
    float *big = malloc(sizeof(float) * BIG);
    unsigned s = 3;
    for (int i = 0; i < BIG; i++) {
        s = s * 1664525u + 1013904223u;
        big[i] = (float)(s >> 8) / 16777216.0f * 10.0f;
    }
    big[12345] = 30.0f;
    big[777] = 29.5f;
    mx_sample_row p = {.temp = 1.0f, .top_p = 1.0f, .top_k = 2, .seed = 1, .n_top = -1};
    float *d_big = be->ops->alloc(be, sizeof(float) * BIG, &err);
    be->ops->release(be, d_logits);
    d_logits = d_big;
    int hits = 0;
    for (int t = 0; t < 64; t++) {
        mx_sample_out o;
        p.pos = t;
        run_rows(big, 1, BIG, &p, NULL, 0, &o);
        hits += o.id == 12345 || o.id == 777;
    }
    CHECK_MSG(hits == 64, "vocabulary row, top-k 2: %d of 64 draws in the top 2", hits);
    be->ops->release(be, d_big);

    // Vocabulary-sized rows with the filters the server uses (top-p, top-k, min-p, together), each
    // row its own logits: a body of small values and a few hundred boosted tokens, so the whole row
    // is scanned but the kept set is hundreds of tokens, each with enough mass that float sums in
    // another order rarely move a draw. Every row is compared with the host reference.
    enum { BIG_ROWS = 48 };
    float *rows_big = malloc(sizeof(float) * BIG * BIG_ROWS);
    mx_sample_row prm_big[BIG_ROWS];
    mx_sample_out out_big[BIG_ROWS];
    const mx_sample_row kinds[6] = {
        {.temp = 0.7f, .top_p = 0.9f}, {.temp = 1.0f, .top_p = 0.5f}, {.temp = 0.8f, .top_p = 1.0f, .top_k = 50},
        {.temp = 1.0f, .top_p = 0.95f, .top_k = 1000}, {.temp = 0.6f, .top_p = 1.0f, .min_p = 0.05f},
        {.temp = 1.3f, .top_p = 0.8f, .top_k = 200, .min_p = 0.01f}};
    for (int r = 0; r < BIG_ROWS; r++) {
        float *row = rows_big + (size_t)r * BIG;
        for (int i = 0; i < BIG; i++) {
            s = s * 1664525u + 1013904223u;
            row[i] = (float)(s >> 8) / 16777216.0f * 2.0f;
        }
        for (int k = 0; k < 300; k++) {  // ~98% of the mass, so every filter's boundary falls among them
            s = s * 1664525u + 1013904223u;
            row[(s >> 8) % BIG] = 10.0f + (float)((s >> 4) & 1023) / 256.0f;
        }
        prm_big[r] = kinds[r % 6];
        prm_big[r].seed = 100 + (uint64_t)r;
        prm_big[r].pos = 7 * r;
        prm_big[r].n_top = -1;
    }
    d_logits = be->ops->alloc(be, sizeof(float) * BIG * BIG_ROWS, &err);
    int before = mismatches;
    run_rows(rows_big, BIG_ROWS, BIG, prm_big, NULL, 0, out_big);
    int big_mismatches = mismatches - before;
    if (strcmp(be->ops->name, "cpu") == 0)
        CHECK_MSG(big_mismatches == 0, "vocabulary rows: %d of %d draws differ from the host reference", big_mismatches,
                  BIG_ROWS);
    else
        CHECK_MSG(big_mismatches * 16 <= BIG_ROWS, "vocabulary rows: %d of %d draws differ from the host reference",
                  big_mismatches, BIG_ROWS);
    be->ops->release(be, d_logits);
    free(rows_big);
    d_logits = be->ops->alloc(be, sizeof(float) * DRAWS * V, &err);

    // Edits, a mask and logprobs: token 5 forced by a bias (its logprob stays raw), token 0 masked
    // out, repetition and presence penalties on token 6; greedy and sampled rows side by side.
    mx_logit_mod mods[3] = {{.id = 5, .bias = 10.0f, .rep = 1.0f}, {.id = 6, .rep = 2.0f, .sub = 0.25f},
                            {.id = 1, .bias = -0.5f, .rep = 1.0f}};
    uint32_t mask = 0xfeu;  // tokens 1..7
    be->ops->upload(be, d_mask, &mask, sizeof mask, &err);
    mx_sample_row er[4] = {
        {.temp = 0.0f, .top_p = 1.0f, .mod_off = 0, .n_mod = 1, .n_top = 3},
        {.temp = 0.0f, .top_p = 1.0f, .mod_off = 1, .n_mod = 2, .allowed = d_mask, .n_top = 2},
        {.temp = 0.8f, .top_p = 0.9f, .seed = 4, .pos = 9, .mod_off = 1, .n_mod = 2, .allowed = d_mask, .n_top = 0},
        {.temp = 1.0f, .top_p = 1.0f, .top_k = 3, .seed = 5, .pos = 3, .n_top = -1},
    };
    float el[4 * V];
    for (int t = 0; t < 4; t++) memcpy(el + t * V, l, sizeof l);
    mx_sample_out eo[4];
    d_mask_host = &mask;
    run_rows(el, 4, V, er, mods, 3, eo);
    double lse = 0;
    for (int i = 0; i < V; i++) lse += exp(l[i]);
    lse = log(lse);
    CHECK_MSG(eo[0].id == 5, "bias +10 on token 5: chose %d", eo[0].id);
    CHECK_MSG(fabs(eo[0].logprob - (l[5] - lse)) < 1e-4, "raw logprob of token 5: %f vs %f", eo[0].logprob, l[5] - lse);
    CHECK(eo[0].n_top == 3 && eo[0].top_id[0] == 0 && eo[0].top_id[1] == 6 && eo[0].top_id[2] == 1);
    CHECK(fabs(eo[0].top_logprob[0] - (l[0] - lse)) < 1e-4);
    // Row 1: token 0 masked; 6 becomes 1.5 / 2 - 0.25 = 0.5; 1 becomes 0.5: first maximum among
    // 1 (0.5), 2 (0.5), 6 (0.5) is token 1.
    CHECK_MSG(eo[1].id == 1, "masked greedy row chose %d", eo[1].id);
    CHECK(eo[2].id != 0 && eo[2].n_top == 0);
    CHECK(eo[3].id == 0 || eo[3].id == 6 || eo[3].id == 1);
    if (strcmp(be->ops->name, "cpu") == 0)
        CHECK_MSG(mismatches == 0, "%d of %d draws differ from the host reference", mismatches, compared);
    else
        CHECK_MSG(mismatches * 200 <= compared, "%d of %d draws differ from the host reference", mismatches, compared);
    CHECK(be->ops->sync(be, &err) == 0);
    printf("backend %s: sampling checks done\n", be->ops->name);
    be->ops->release(be, d_logits);
    be->ops->release(be, d_rows);
    be->ops->release(be, d_out);
    be->ops->release(be, d_mods);
    be->ops->release(be, d_mask);
    free(big);
    free(a);
    free(b);
    mx_backend_free(be);
    return check_finish();
}
