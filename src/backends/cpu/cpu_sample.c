// SPDX-License-Identifier: MIT
// On-backend sampling for the CPU (backend.h `sample`), the reference for the GPU kernel: the
// filters become one threshold on the logits (each keeps a top set of the sorted order, so their
// intersection is the largest threshold), found by bisection over the float order for top-k and
// top-p; then Gumbel-max over the kept tokens. Only candidates within 40 * max(1, temp) of the best
// logit are examined: a token further below carries under e^-40 of the mass and would need Gumbel
// noise beyond 40 to win; the others' total mass still enters the top-p normalizer.
#include <math.h>

#include "backends/cpu/cpu_internal.h"
#include "core/sample_noise.h"

static int64_t count_at_least(const float *l, const int32_t *cand, int nc, float t) {
    int64_t c = 0;
    for (int i = 0; i < nc; i++) c += l[cand[i]] >= t;
    return c;
}

// e[i] = exp(l[cand[i]] - max), computed once per row.
static double mass_at_least(const float *l, const int32_t *cand, const float *e, int nc, float t) {
    float s = 0.0f;
    for (int i = 0; i < nc; i++) s += l[cand[i]] >= t ? e[i] : 0.0f;
    return s;
}

// Largest value t (searched over the float order between lo and hi) for which OK holds; OK must be
// monotone in t and true at lo.
#define BISECT(result, lo_value, hi_value, OK)                  \
    do {                                                        \
        uint32_t lo_ = mx_order_key(lo_value), hi_ = mx_order_key(hi_value); \
        while (lo_ < hi_) {                                     \
            uint32_t mid = lo_ + (hi_ - lo_ + 1) / 2;           \
            float t = mx_order_value(mid);                      \
            if (OK) lo_ = mid;                                  \
            else hi_ = mid - 1;                                 \
        }                                                       \
        (result) = mx_order_value(lo_);                         \
    } while (0)

static int32_t sample_row(const float *l, int vocab, const mx_sample_params *p, int32_t pos, int32_t *cand, float *e) {
    float m = l[0];
    for (int i = 1; i < vocab; i++) m = l[i] > m ? l[i] : m;
    float margin = 40.0f * fmaxf(1.0f, p->temp);
    int nc = 0;
    double tail = 0.0;
    for (int i = 0; i < vocab; i++) {
        if (l[i] >= m - margin) cand[nc++] = i;
        else tail += expf(l[i] - m);
    }
    float mn = m;
    for (int i = 0; i < nc; i++) mn = l[cand[i]] < mn ? l[cand[i]] : mn;
    float thr = -INFINITY;
    if (p->min_p > 0.0f) thr = fmaxf(thr, m + logf(p->min_p));
    if (p->top_k > 0 && p->top_k < nc) {
        float tk;
        BISECT(tk, mn, m, count_at_least(l, cand, nc, t) >= p->top_k);
        thr = fmaxf(thr, tk);
    }
    if (p->top_p > 0.0f && p->top_p < 1.0f) {
        for (int i = 0; i < nc; i++) e[i] = expf(l[cand[i]] - m);
        double want = p->top_p * (mass_at_least(l, cand, e, nc, -INFINITY) + tail);
        float tp;
        BISECT(tp, mn, m, mass_at_least(l, cand, e, nc, t) >= want);
        thr = fmaxf(thr, tp);
    }
    int32_t best = -1;
    float best_key = -INFINITY;
    for (int c = 0; c < nc; c++) {
        int i = cand[c];
        if (l[i] < thr) continue;
        float k = l[i] / p->temp + mx_gumbel_noise(p->seed, pos, i);
        if (best < 0 || k > best_key) {
            best = i;
            best_key = k;
        }
    }
    return best;
}

void cpu_sample(mx_backend *be, int32_t *ids, const float *logits, int n, int vocab, const mx_sample_params *p,
                const int32_t *pos) {
    int32_t *cand = cpu_act_buf(cpu_of(be), 8 * (size_t)vocab);
    float *e = (float *)(cand + vocab);
    for (int t = 0; t < n; t++) ids[t] = sample_row(logits + (size_t)t * vocab, vocab, p, pos[t], cand, e);
}
