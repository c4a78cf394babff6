// SPDX-License-Identifier: MIT
// Host token choice (see sample_rows.h). Per row: one pass for the raw log-softmax and the top
// alternatives (only when logprobs are asked), the sparse edits, the mask (banned tokens' logits
// become -inf, a word of 32 tokens at a time), the best token, one vector pass for exp(l - max),
// and for top-k/top-p the tokens above max - delta (delta widened until they hold what the filters
// need: a handful for a peaked distribution) with radix selection over them; then one uniform draw
// walks the kept tokens' weights in id order. The best-token and threshold passes compare 8 logits
// at a time where the CPU has AVX2 (core/sample_passes.h; a sampled row of 151,936 logits: 1.1 -> 0.35 ms).
#include "core/sample_rows.h"

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#include "core/logsumexp.h"
#include "core/sample_noise.h"
#include "core/sample_passes.h"
#include "core/thread_pool.h"

static inline bool is_allowed(const uint32_t *mask, int i) { return !mask || ((mask[i >> 5] >> (i & 31)) & 1u); }

// Sets the logits of tokens outside mask to -inf a word of 32 tokens at a time: a word of allowed
// tokens is skipped, a banned word filled, a mixed one visits only its banned bits. Returns false,
// leaving l unchanged, when no token is allowed.
static bool mask_logits(float *l, int vocab, const uint32_t *mask) {
    int words = (vocab + 31) / 32;
    uint32_t tail = vocab % 32 ? (1u << (vocab % 32)) - 1u : ~0u, any = 0;
    for (int w = 0; w < words; w++) any |= mask[w] & (w == words - 1 ? tail : ~0u);
    if (!any) return false;
    for (int w = 0; w < words; w++) {
        uint32_t banned = ~mask[w] & (w == words - 1 ? tail : ~0u);
        float *p = l + (size_t)w * 32;
        if (banned == ~0u) {
            for (int k = 0; k < 32; k++) p[k] = -INFINITY;
        } else {
            for (; banned; banned &= banned - 1) p[__builtin_ctz(banned)] = -INFINITY;
        }
    }
    return true;
}

// The chosen token's raw logprob and the n best raw tokens (best first, first index on ties).
static void raw_logprobs(const float *l, int vocab, int n_top, mx_sample_out *out, double *lse) {
    *lse = mx_logsumexp(l, vocab);
    int cnt = 0;
    for (int i = 0; i < vocab && n_top > 0; i++) {
        float v = l[i];
        if (cnt == n_top && !(v > out->top_logprob[cnt - 1])) continue;
        int at = cnt < n_top ? cnt++ : cnt - 1;
        while (at > 0 && v > out->top_logprob[at - 1]) {
            out->top_logprob[at] = out->top_logprob[at - 1];
            out->top_id[at] = out->top_id[at - 1];
            at--;
        }
        out->top_logprob[at] = v;
        out->top_id[at] = i;
    }
    for (int k = 0; k < cnt; k++) out->top_logprob[k] = (float)(out->top_logprob[k] - *lse);
    out->n_top = cnt;
}

// The largest key t among keys[idx[0..n)] such that the weight (count, or w[] when w != NULL) of
// keys >= t reaches `want`: the want-th largest key for counts, the top-p cut for masses. Three
// histogram levels over bits 31..21, 20..10 and 9..0; each level keeps only the boundary bucket.
// idx is reordered.
static uint32_t radix_select(const uint32_t *keys, const float *w, int32_t *idx, int n, double want) {
    static const int shift[3] = {21, 10, 0}, bits[3] = {11, 11, 10};
    uint32_t prefix = 0;
    for (int level = 0; level < 3; level++) {
        double hist[2048];
        int nb = 1 << bits[level];
        memset(hist, 0, sizeof(double) * (size_t)nb);
        for (int j = 0; j < n; j++) {
            int i = idx[j];
            hist[(keys[i] >> shift[level]) & (uint32_t)(nb - 1)] += w ? (double)w[i] : 1.0;
        }
        int b = nb - 1, lowest = -1;
        double acc = 0.0;
        for (; b >= 0; b--) {
            if (hist[b] > 0) lowest = b;
            if (acc + hist[b] >= want) break;
            acc += hist[b];
        }
        if (b < 0) {  // rounding left the total short of want: keep everything
            b = lowest < 0 ? 0 : lowest;
            acc -= hist[b];
        }
        want -= acc;
        prefix |= (uint32_t)b << shift[level];
        int k = 0;
        for (int j = 0; j < n; j++)
            if (((keys[idx[j]] >> shift[level]) & (uint32_t)(nb - 1)) == (uint32_t)b) idx[k++] = idx[j];
        n = k;
        if (n == 0) break;
    }
    return prefix;
}

int32_t mx_sample_row_host(float *l, int vocab, const mx_sample_row *row, const mx_logit_mod *mods, void *scratch,
                           mx_sample_out *out) {
    int32_t *cand = scratch;                         // [vocab] candidate ids, ascending
    uint32_t *keys = (uint32_t *)(cand + vocab);     // [vocab] order keys, by candidate
    float *e = (float *)(keys + vocab);              // [vocab] exp(l - max), by token id
    float *w = e + vocab;                            // [vocab] weights, by candidate
    int32_t *idx = (int32_t *)(w + vocab);           // [vocab] selection work list
    float *raw_mod = (float *)(idx + vocab);         // [n_mod] logits before the edits
    const mx_logit_mod *md = mods ? mods + row->mod_off : NULL;
    int n_mod = md ? row->n_mod : 0;
    const uint32_t *mask = row->allowed;
    const mx_sample_passes *passes = mx_sample_passes_host();

    double lse = 0.0;
    out->n_top = 0;
    if (row->n_top >= 0) raw_logprobs(l, vocab, row->n_top > MX_SAMPLE_MAX_TOP ? MX_SAMPLE_MAX_TOP : row->n_top, out, &lse);
    for (int k = 0; k < n_mod; k++) {
        int32_t id = md[k].id;
        if (id < 0 || id >= vocab) continue;
        raw_mod[k] = l[id];
        float x = l[id] + md[k].bias;
        x = x > 0.0f ? x / md[k].rep : x * md[k].rep;
        l[id] = x - md[k].sub;
    }

    // Tokens outside the mask leave the row as -inf logits (one pass over the mask's words), so the
    // rest is the unmasked rule; without any allowed token the mask is ignored.
    if (mask && !mask_logits(l, vocab, mask)) mask = NULL;
    // Best token (first maximum); an allowed one even if every allowed logit is -inf. A NaN logit
    // becomes -inf here (no mass, never kept): the sums below stay finite wherever it stands, so
    // top-p weighs the other tokens, and a NaN first logit is not taken as the best.
    int32_t best = passes->best_token(l, vocab);
    if (mask && !is_allowed(mask, best))
        for (best = 0; !is_allowed(mask, best); best++) {}
    int32_t chosen = best;
    float m = l[best];
    if (row->temp > 0.0f && isfinite(m)) {
        float thr = m - 40.0f * fmaxf(1.0f, row->temp);  // the margin: nothing below is kept
        double z = mx_exp_sum(l, vocab, m, 1.0f, e);
        if (row->min_p > 0.0f) thr = fmaxf(thr, m + logf(row->min_p));
        bool by_k = row->top_k > 0, by_p = row->top_p > 0.0f && row->top_p < 1.0f;
        int nc = -1;  // >= 0: the kept tokens are among cand[0..nc)
        if (by_k || by_p) {
            // Collect the tokens above m - delta, widening until they hold what the filters need:
            // for peaked distributions a few tokens, never the whole vocabulary.
            double want = by_p ? row->top_p * z : 0.0;
            for (float delta = 8.0f;; delta *= 4.0f) {
                float t0 = fmaxf(m - delta, thr);
                double mass;
                nc = passes->collect(l, e, vocab, t0, cand, &mass);
                if (((!by_k || nc >= row->top_k) && (!by_p || mass >= want)) || t0 <= thr) break;
            }
            for (int j = 0; j < nc; j++) keys[j] = mx_order_key(l[cand[j]]), w[j] = e[cand[j]];
            if (by_k && row->top_k < nc) {
                for (int j = 0; j < nc; j++) idx[j] = j;
                thr = fmaxf(thr, mx_order_value(radix_select(keys, NULL, idx, nc, (double)row->top_k)));
            }
            if (by_p) {
                for (int j = 0; j < nc; j++) idx[j] = j;
                thr = fmaxf(thr, mx_order_value(radix_select(keys, w, idx, nc, want)));
            }
        }
        // Inverse CDF over the kept tokens in id order, weights exp((l - m) / temp).
        float inv_t = 1.0f / row->temp;
        double target = 0.0, acc = 0.0, total = 0.0;
        if (nc >= 0) {
            for (int j = 0; j < nc; j++) w[j] = l[cand[j]];
            mx_exp_sum(w, nc, m, inv_t, w);
            for (int j = 0; j < nc; j++) total += l[cand[j]] >= thr ? w[j] : (w[j] = 0.0f);
            target = mx_uniform_noise(row->seed, row->pos) * total;
            for (int j = 0; j < nc; j++) {
                if (w[j] == 0.0f) continue;
                chosen = cand[j];
                if ((acc += w[j]) > target) break;
            }
        } else {
            mx_exp_sum(l, vocab, m, inv_t, e);
            for (int i = 0; i < vocab; i++) total += l[i] >= thr ? e[i] : (e[i] = 0.0f);
            target = mx_uniform_noise(row->seed, row->pos) * total;
            for (int i = 0; i < vocab; i++) {
                if (e[i] == 0.0f) continue;
                chosen = i;
                if ((acc += e[i]) > target) break;
            }
        }
    }
    out->id = chosen;
    if (row->n_top >= 0) {
        float raw = l[chosen];
        for (int k = 0; k < n_mod; k++)
            if (md[k].id == chosen) raw = raw_mod[k];
        out->logprob = (float)(raw - lse);
    }
    return chosen;
}

typedef struct rows_job {
    float *logits;
    int vocab;
    const mx_sample_row *rows;
    const mx_logit_mod *mods;
    char *scratch;
    mx_sample_out *out;
} rows_job;

static void rows_task(void *arg, int r, int thread) {
    rows_job *j = arg;
    mx_sample_row_host(j->logits + (size_t)r * j->vocab, j->vocab, &j->rows[r], j->mods,
                       j->scratch + (size_t)thread * MX_SAMPLE_SCRATCH_BYTES(j->vocab), &j->out[r]);
}

void mx_sample_rows_host(mx_pool *pool, float *logits, int n, int vocab, const mx_sample_row *rows,
                         const mx_logit_mod *mods, void *scratch, mx_sample_out *out) {
    rows_job j = {logits, vocab, rows, mods, scratch, out};
    if (!pool || n == 1) {
        for (int r = 0; r < n; r++) rows_task(&j, r, 0);
        return;
    }
    mx_pool_run(pool, n, rows_task, &j);
}
