// SPDX-License-Identifier: MIT
// The backend `sample` op (MLXCEL_TEST_BACKEND picks the backend; default cpu): top-k 1 is the
// argmax; the same seed and positions draw the same tokens; over many positions the draws follow
// softmax(logits / temp) (checked per token against the exact probabilities); top-k, top-p and
// min-p never let a filtered token through and keep the kept tokens' proportions. A backend without
// the (optional) op exits 77, which ctest reports as skipped with the reason; never a pass.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backends/plan.h"
#include "check.h"

#define V 8
#define DRAWS 40000

static mx_backend *be;
static float *d_logits;
static int32_t *d_ids, *d_pos;
static mx_sample_params *d_par;

// Draws DRAWS tokens (one per position) from the same logits row; counts[V] gets the histogram.
static void draw(const float *row, mx_sample_params p, int counts[V], int32_t *ids_out) {
    static float rows[DRAWS * V];
    static int32_t pos[DRAWS], ids[DRAWS];
    for (int t = 0; t < DRAWS; t++) {
        memcpy(rows + t * V, row, sizeof(float) * V);
        pos[t] = t;
    }
    mx_error err = {{0}};
    be->ops->upload(be, d_logits, rows, sizeof rows, &err);
    be->ops->upload(be, d_pos, pos, sizeof pos, &err);
    be->ops->upload(be, d_par, &p, sizeof p, &err);
    CHECK(mx_run_op(be, (mx_op){.kind = MX_OP_SAMPLE, .sample = {d_ids, d_logits, DRAWS, V, d_par, d_pos}}, &err) == 0);
    CHECK(be->ops->download(be, ids, d_ids, sizeof ids, &err) == 0);
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
    d_ids = be->ops->alloc(be, sizeof(int32_t) * DRAWS, &err);
    d_pos = be->ops->alloc(be, sizeof(int32_t) * DRAWS, &err);
    d_par = be->ops->alloc(be, sizeof(mx_sample_params), &err);
    const float l[V] = {2.0f, 1.0f, 0.5f, 0.0f, -1.0f, -3.0f, 1.5f, -0.5f};  // order: 0, 6, 1, 2, 3, 7, 4, 5
    bool all[V], keep[V];
    for (int i = 0; i < V; i++) all[i] = true;
    int c[V];
    int32_t *a = malloc(sizeof(int32_t) * DRAWS), *b = malloc(sizeof(int32_t) * DRAWS);

    draw(l, (mx_sample_params){.temp = 1.0f, .top_p = 1.0f, .seed = 11}, c, a);
    expect("temp 1", c, l, 1.0f, all);
    draw(l, (mx_sample_params){.temp = 1.0f, .top_p = 1.0f, .seed = 11}, c, b);
    CHECK_MSG(memcmp(a, b, sizeof(int32_t) * DRAWS) == 0, "same seed, different draws");
    draw(l, (mx_sample_params){.temp = 1.0f, .top_p = 1.0f, .seed = 12}, c, b);
    CHECK_MSG(memcmp(a, b, sizeof(int32_t) * DRAWS) != 0, "another seed, same draws");
    draw(l, (mx_sample_params){.temp = 0.5f, .top_p = 1.0f, .seed = 5}, c, NULL);
    expect("temp 0.5", c, l, 0.5f, all);
    draw(l, (mx_sample_params){.temp = 2.0f, .top_p = 1.0f, .seed = 6}, c, NULL);
    expect("temp 2", c, l, 2.0f, all);

    draw(l, (mx_sample_params){.temp = 1.0f, .top_p = 1.0f, .top_k = 1, .seed = 7}, c, NULL);
    CHECK_MSG(c[0] == DRAWS, "top-k 1 is not the argmax (%d of %d)", c[0], DRAWS);
    draw(l, (mx_sample_params){.temp = 1.0f, .top_p = 1.0f, .top_k = 3, .seed = 8}, c, NULL);
    for (int i = 0; i < V; i++) keep[i] = i == 0 || i == 6 || i == 1;
    expect("top-k 3", c, l, 1.0f, keep);

    // top-p 0.6 at temperature 1: p = .43, .26 (token 6), .16 (token 1), ...: the smallest top set
    // reaching 0.6 is {0, 6}; drawn at temp 0.7 within it.
    draw(l, (mx_sample_params){.temp = 0.7f, .top_p = 0.6f, .seed = 9}, c, NULL);
    for (int i = 0; i < V; i++) keep[i] = i == 0 || i == 6;
    expect("top-p 0.6", c, l, 0.7f, keep);

    // min-p 0.2: keep p >= 0.2 * p_max, i.e. l >= 2 + ln 0.2 = 0.39: tokens 0, 6, 1, 2.
    draw(l, (mx_sample_params){.temp = 1.0f, .top_p = 1.0f, .min_p = 0.2f, .seed = 10}, c, NULL);
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
    float *d_big = be->ops->alloc(be, sizeof(float) * BIG, &err);
    be->ops->upload(be, d_big, big, sizeof(float) * BIG, &err);
    mx_sample_params p = {.temp = 1.0f, .top_p = 1.0f, .top_k = 2, .seed = 1};
    be->ops->upload(be, d_par, &p, sizeof p, &err);
    int hits = 0;
    for (int t = 0; t < 64; t++) {
        int32_t pos = t, id = -1;
        be->ops->upload(be, d_pos, &pos, sizeof pos, &err);
        CHECK(mx_run_op(be, (mx_op){.kind = MX_OP_SAMPLE, .sample = {d_ids, d_big, 1, BIG, d_par, d_pos}}, &err) == 0);
        be->ops->download(be, &id, d_ids, sizeof id, &err);
        hits += id == 12345 || id == 777;
    }
    CHECK_MSG(hits == 64, "vocabulary row, top-k 2: %d of 64 draws in the top 2", hits);
    CHECK(be->ops->sync(be, &err) == 0);
    printf("backend %s: sampling checks done\n", be->ops->name);
    be->ops->release(be, d_big);
    be->ops->release(be, d_logits);
    be->ops->release(be, d_ids);
    be->ops->release(be, d_pos);
    be->ops->release(be, d_par);
    free(big);
    free(a);
    free(b);
    mx_backend_free(be);
    return check_finish();
}
