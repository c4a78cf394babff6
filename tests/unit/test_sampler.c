// SPDX-License-Identifier: MIT
// Sampler: greedy at temp 0; the same seed gives the same sequence, another seed another one;
// top-k 1 and min-p 1 reduce to greedy; top-p keeps the nucleus; penalties lower repeated tokens.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "sample/sampler.h"

#define V 1000

static void fill(float *l, unsigned seed) {
    for (int i = 0; i < V; i++) {
        seed = seed * 1103515245u + 12345u;
        l[i] = (float)((seed >> 8) % 1000) / 100.0f;
    }
}

static void draw(const mx_sampling *p, int32_t *out, int n) {
    mx_sampler *s = mx_sampler_create(p, V);
    float l[V];
    for (int i = 0; i < n; i++) {
        fill(l, 42 + i);
        out[i] = mx_sampler_sample(s, l);
        mx_sampler_accept(s, out[i], true);
    }
    mx_sampler_free(s);
}

int main(void) {
    float l[V];
    fill(l, 1);
    int best = 0;
    for (int i = 1; i < V; i++)
        if (l[i] > l[best]) best = i;
    mx_sampling p = mx_sampling_defaults();
    CHECK(!mx_sampling_needs_logits(&p));
    mx_sampler *s = mx_sampler_create(&p, V);
    float copy[V];
    memcpy(copy, l, sizeof l);
    CHECK(mx_sampler_sample(s, copy) == best);
    mx_sampler_free(s);

    int32_t a[64], b[64], c[64];
    p.temp = 1.0f;
    p.has_seed = true;
    p.seed = 1234;
    draw(&p, a, 64);
    draw(&p, b, 64);
    CHECK(memcmp(a, b, sizeof a) == 0);
    p.seed = 99;
    draw(&p, c, 64);
    CHECK(memcmp(a, c, sizeof a) != 0);

    p.seed = 5;
    p.top_k = 1;
    s = mx_sampler_create(&p, V);
    for (int i = 0; i < 20; i++) {
        memcpy(copy, l, sizeof l);
        CHECK(mx_sampler_sample(s, copy) == best);
    }
    mx_sampler_free(s);

    p.top_k = 0;
    p.min_p = 1.0f;
    s = mx_sampler_create(&p, V);
    memcpy(copy, l, sizeof l);
    CHECK(mx_sampler_sample(s, copy) == best);
    mx_sampler_free(s);

    // top-p: two dominant tokens carry ~all the mass; p = 0.5 keeps only the best.
    p.min_p = 0.0f;
    p.top_p = 0.5f;
    float two[V];
    for (int i = 0; i < V; i++) two[i] = -50.0f;
    two[3] = 10.0f;
    two[7] = 9.9f;
    s = mx_sampler_create(&p, V);
    int saw3 = 0, saw7 = 0;
    for (int i = 0; i < 200; i++) {
        memcpy(copy, two, sizeof two);
        int32_t t = mx_sampler_sample(s, copy);
        saw3 += t == 3;
        saw7 += t == 7;
    }
    CHECK(saw3 == 200 && saw7 == 0);
    mx_sampler_free(s);
    p.top_p = 0.99f;
    s = mx_sampler_create(&p, V);
    saw3 = saw7 = 0;
    for (int i = 0; i < 400; i++) {
        memcpy(copy, two, sizeof two);
        int32_t t = mx_sampler_sample(s, copy);
        saw3 += t == 3;
        saw7 += t == 7;
    }
    CHECK(saw3 + saw7 == 400 && saw3 > 100 && saw7 > 100);
    mx_sampler_free(s);

    // Repetition penalty: a recent token loses its lead under greedy decoding.
    mx_sampling r = mx_sampling_defaults();
    r.repetition_penalty = 2.0f;
    CHECK(mx_sampling_needs_logits(&r));
    s = mx_sampler_create(&r, V);
    mx_sampler_accept(s, 3, false);
    memcpy(copy, two, sizeof two);
    CHECK(mx_sampler_sample(s, copy) == 7);
    mx_sampler_free(s);
    // Presence penalty applies to generated tokens only.
    r = mx_sampling_defaults();
    r.presence_penalty = 1.0f;
    s = mx_sampler_create(&r, V);
    mx_sampler_accept(s, 3, false);
    memcpy(copy, two, sizeof two);
    CHECK(mx_sampler_sample(s, copy) == 3);
    mx_sampler_accept(s, 3, true);
    memcpy(copy, two, sizeof two);
    CHECK(mx_sampler_sample(s, copy) == 7);
    mx_sampler_free(s);
    return check_finish();
}
