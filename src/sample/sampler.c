// SPDX-License-Identifier: MIT
// Sampler (see sampler.h). Filtering works on a candidate list: all tokens within a wide margin of
// the best logit, sorted by probability; when the mass outside that margin could matter to top-p,
// the full vocabulary is sorted instead, so the result is always exact.
#include "sample/sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CANDIDATE_MARGIN 30.0f  // logits this far below the max carry < 1e-13 of the mass each

struct mx_sampler {
    mx_sampling p;
    int vocab;
    uint64_t rng;
    int32_t *cand;        // [vocab] candidate ids
    float *prob;          // [vocab] probabilities by id
    int32_t *history;     // ring of the last repetition_context tokens
    int n_history, history_pos;
    uint32_t *counts;     // [vocab] generated-token counts (presence/frequency)
};

mx_sampling mx_sampling_defaults(void) {
    return (mx_sampling){.temp = 0.0f, .top_p = 1.0f, .min_p = 0.0f, .top_k = 0, .repetition_penalty = 1.0f,
                         .repetition_context = 20, .presence_penalty = 0.0f, .frequency_penalty = 0.0f};
}

bool mx_sampling_has_penalties(const mx_sampling *p) {
    return p->repetition_penalty != 1.0f || p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f;
}

bool mx_sampling_needs_logits(const mx_sampling *p) { return p->temp > 0.0f || mx_sampling_has_penalties(p); }

static uint64_t splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double uniform01(uint64_t *state) { return (splitmix64(state) >> 11) * (1.0 / 9007199254740992.0); }

void mx_sampler_reset(mx_sampler *s) {
    s->n_history = s->history_pos = 0;
    memset(s->counts, 0, sizeof *s->counts * s->vocab);
    if (s->p.has_seed) {
        s->rng = s->p.seed;
    } else {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        s->rng = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 32) ^ (uint64_t)(uintptr_t)s;
    }
}

mx_sampler *mx_sampler_create(const mx_sampling *p, int vocab) {
    mx_sampler *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->p = *p;
    if (s->p.repetition_context < 1) s->p.repetition_context = 1;
    s->vocab = vocab;
    s->cand = malloc(sizeof *s->cand * vocab);
    s->prob = malloc(sizeof *s->prob * vocab);
    s->counts = calloc(vocab, sizeof *s->counts);
    s->history = malloc(sizeof *s->history * s->p.repetition_context);
    if (!s->cand || !s->prob || !s->counts || !s->history) {
        mx_sampler_free(s);
        return NULL;
    }
    mx_sampler_reset(s);
    return s;
}

void mx_sampler_free(mx_sampler *s) {
    if (!s) return;
    free(s->cand);
    free(s->prob);
    free(s->counts);
    free(s->history);
    free(s);
}

void mx_sampler_accept(mx_sampler *s, int32_t id, bool generated) {
    if (id < 0 || id >= s->vocab) return;
    s->history[s->history_pos] = id;
    s->history_pos = (s->history_pos + 1) % s->p.repetition_context;
    if (s->n_history < s->p.repetition_context) s->n_history++;
    if (generated) s->counts[id]++;
}

static void apply_penalties(mx_sampler *s, float *logits) {
    if (s->p.repetition_penalty != 1.0f) {
        // Each distinct recent token once (mlx-lm indexes the logits by the token list).
        for (int i = 0; i < s->n_history; i++) {
            int32_t id = s->history[i];
            bool seen = false;
            for (int j = 0; j < i && !seen; j++) seen = s->history[j] == id;
            if (seen) continue;
            float l = logits[id];
            logits[id] = l < 0 ? l * s->p.repetition_penalty : l / s->p.repetition_penalty;
        }
    }
    if (s->p.presence_penalty != 0.0f || s->p.frequency_penalty != 0.0f) {
        for (int i = 0; i < s->vocab; i++)
            if (s->counts[i]) logits[i] -= s->p.presence_penalty + s->p.frequency_penalty * (float)s->counts[i];
    }
}

static _Thread_local const float *sort_prob;
static int by_prob_desc(const void *a, const void *b) {
    float x = sort_prob[*(const int32_t *)a], y = sort_prob[*(const int32_t *)b];
    if (x != y) return x > y ? -1 : 1;
    return *(const int32_t *)a - *(const int32_t *)b;
}

static int32_t greedy(const float *logits, int vocab) {
    int32_t best = 0;
    for (int i = 1; i < vocab; i++)
        if (logits[i] > logits[best]) best = i;
    return best;
}

int32_t mx_sampler_sample(mx_sampler *s, float *logits) {
    apply_penalties(s, logits);
    int32_t best = greedy(logits, s->vocab);
    if (s->p.temp <= 0.0f) return best;
    // Probabilities at temperature 1 decide the filters (mlx-lm filters the log-probs).
    float mx = logits[best];
    double sum = 0.0, outside = 0.0;
    int n = 0;
    for (int i = 0; i < s->vocab; i++) {
        float e = expf(logits[i] - mx);
        s->prob[i] = e;
        sum += e;
        if (logits[i] >= mx - CANDIDATE_MARGIN) s->cand[n++] = i;
        else outside += e;
    }
    for (int i = 0; i < s->vocab; i++) s->prob[i] = (float)(s->prob[i] / sum);
    if (s->p.top_p < 1.0f && outside / sum > 1e-7 && outside / sum >= 1.0 - s->p.top_p - 1e-6) {
        n = 0;  // the tail could change the top-p cut: consider everything
        for (int i = 0; i < s->vocab; i++) s->cand[n++] = i;
    }
    sort_prob = s->prob;  // qsort has no context argument in C11: a thread-local carries it
    qsort(s->cand, n, sizeof *s->cand, by_prob_desc);
    int keep = n;
    if (s->p.top_p > 0.0f && s->p.top_p < 1.0f) {
        double cum = 0.0;
        for (int i = 0; i < n; i++) {
            cum += s->prob[s->cand[i]];
            if (cum >= s->p.top_p) {
                keep = i + 1;
                break;
            }
        }
    }
    if (s->p.min_p > 0.0f) {
        float floor_p = s->p.min_p * s->prob[s->cand[0]];
        int k = 0;
        while (k < keep && s->prob[s->cand[k]] >= floor_p) k++;
        keep = k > 0 ? k : 1;
    }
    if (s->p.top_k > 0 && s->p.top_k < keep) keep = s->p.top_k;
    // Sample among the kept candidates with probabilities proportional to exp(logit / temp).
    double total = 0.0;
    for (int i = 0; i < keep; i++) {
        double w = exp((double)(logits[s->cand[i]] - mx) / s->p.temp);
        s->prob[s->cand[i]] = (float)w;
        total += w;
    }
    double r = uniform01(&s->rng) * total;
    for (int i = 0; i < keep; i++) {
        r -= s->prob[s->cand[i]];
        if (r <= 0.0) return s->cand[i];
    }
    return s->cand[keep - 1];
}
