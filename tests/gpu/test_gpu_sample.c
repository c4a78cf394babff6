// SPDX-License-Identifier: MIT
// The sample record's two GPU forms on the device: a backend with MLXCEL_GPU_SAMPLE_BLOCKS=128
// (small batches split each row over many blocks, kernels/sample_split.cu) against one with 1 (one
// block per row, kernels/sample.cu) and the host rule (core/sample_rows.c), on batches of 1-8 random
// rows of vocabularies from 2,048 to 151,936: normal, peaked, tied and partly -inf logits; greedy
// and sampled rows with top-k, top-p and min-p; sparse edits; dense, sparse and empty masks;
// logprobs with 0-20 alternatives. The two forms must agree exactly on every token, top id and
// edited logit and within 1e-5 on logprobs; against the host, greedy rows and top ids exactly, and
// at most 2% of sampled tokens may differ (float sums in another order move a boundary). Rows with
// NaN logits: tokens and top ids of the two forms exactly, and every logprob NaN in both and the host. Then the
// split form inside a plan run four times (recorded as a graph on the second run, replayed after)
// with new logits and positions each time, against direct runs of the one-block form. Prints the
// time of the record over 1, 8, 32 and 64 rows of 151,936 in both forms, replayed as a graph (as in the
// engine's steps) and launched directly. Exit 77 (ctest: skipped) without a GPU.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../unit/check.h"
#include "backends/gpu/gpu_backend.h"
#include "backends/gpu_entry.h"
#include "backends/plan.h"
#include "core/clock.h"
#include "core/sample_rows.h"

enum { MAX_ROWS = 64, MAX_VOCAB = 151936, MAX_MODS = MAX_ROWS * 40 };

static mx_error err;
static uint64_t rs = 0x2545f4914f6cdd1dull;
static uint64_t next(void) { rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17; return rs; }
static float unit(void) { return (float)((double)(next() >> 40) / 16777216.0); }
static int below(int n) { return (int)(next() % (uint64_t)n); }

typedef struct batch {
    int vocab, n, n_mods;
    float *logits;
    mx_sample_row rows[MAX_ROWS];
    mx_logit_mod mods[MAX_MODS];
    uint32_t *masks[MAX_ROWS];  // host copies (NULL: no mask)
    bool nan[MAX_ROWS];         // rows with NaN logits (add_nan)
} batch;

typedef struct dev {  // one backend's buffers
    mx_backend *be;
    float *logits;
    mx_sample_row *rows;
    mx_sample_out *out;
    mx_logit_mod *mods;
    uint32_t *masks;  // MAX_ROWS masks of MAX_VOCAB / 32 words
} dev;

static void fill_row(float *l, int vocab, int kind) {
    for (int i = 0; i < vocab; i++) {
        float g = (unit() + unit() + unit() + unit() - 2.0f) * 3.4641f;
        l[i] = kind == 0 ? g : kind == 1 ? unit() * 2.0f : kind == 2 ? floorf(g * 2.0f) * 0.5f : unit() < 0.3f ? -INFINITY : g;
    }
    if (kind == 1)
        for (int k = 0; k < 300; k++) l[below(vocab)] = 10.0f + unit() * 4.0f;
}

static void make_batch(batch *b, int vocab, int n) {
    static const float temps[] = {0.3f, 0.7f, 1.0f, 1.5f, 2.5f}, top_ps[] = {1.0f, 1.0f, 0.9f, 0.5f, 0.99f, 0.2f},
                       min_ps[] = {0.0f, 0.0f, 0.05f, 0.3f}, biases[] = {0.0f, 0.0f, 5.0f, -5.0f, 10.0f, 30.0f};
    static const int n_tops[] = {-1, -1, 0, 3, 20};
    b->vocab = vocab, b->n = n, b->n_mods = 0;
    for (int t = 0; t < n; t++) {
        b->nan[t] = false;
        fill_row(b->logits + (size_t)t * vocab, vocab, below(4));
        mx_sample_row *r = &b->rows[t];
        const int top_ks[] = {0, 0, 1, 7, 50, 1000, vocab + 5};
        *r = (mx_sample_row){.temp = below(4) == 0 ? 0.0f : temps[below(5)], .top_p = top_ps[below(6)],
                             .min_p = min_ps[below(4)], .top_k = top_ks[below(7)], .seed = next(),
                             .pos = below(100000), .mod_off = b->n_mods, .n_top = n_tops[below(5)]};
        int want = below(3) == 0 ? 0 : below(40);
        for (int k = 0; k < want; k++) {
            int32_t id = below(10) == 0 ? vocab + below(50) : below(vocab);
            bool dup = false;
            for (int j = r->mod_off; j < b->n_mods; j++) dup |= b->mods[j].id == id;
            if (!dup)
                b->mods[b->n_mods++] = (mx_logit_mod){id, biases[below(6)], below(2) ? 1.0f : 1.3f, below(2) ? 0.0f : 0.5f};
        }
        r->n_mod = b->n_mods - r->mod_off;
        int mk = below(8), words = (vocab + 31) / 32;
        b->masks[t] = NULL;
        if (mk >= 4) {
            uint32_t *m = calloc((size_t)words, sizeof *m);
            if (mk <= 5)
                for (int w = 0; w < words; w++) m[w] = (uint32_t)next();
            else if (mk == 6)
                for (int k = 0; k < 5; k++) {
                    int i = below(vocab);
                    m[i / 32] |= 1u << (i % 32);
                }
            b->masks[t] = m;  // mk == 7: nothing allowed, so the mask is ignored
        }
    }
}

// NaN logits in about half the rows: a few anywhere (negative ones, which no filter keeps, rarely a
// positive one, which both device forms take as the row's best and the host rule skips), or one NaN
// in a first half of -inf logits (the split form's slices there have no finite term). Such a row's
// log-softmax is NaN: every logprob must be NaN, in both forms and the host rule.
static void add_nan(batch *b) {
    for (int t = 0; t < b->n; t++) {
        if (!below(2)) continue;
        float *l = b->logits + (size_t)t * b->vocab;
        b->nan[t] = true;
        if (below(2) == 0) {
            for (int i = 0; i <= b->vocab / 2; i++) l[i] = -INFINITY;
            l[below(b->vocab / 2)] = -NAN;
        } else {
            for (int k = 0, c = 1 + below(20); k < c; k++) l[below(b->vocab)] = below(25) ? -NAN : NAN;
        }
    }
}

static void free_batch(batch *b) {
    for (int t = 0; t < b->n; t++) free(b->masks[t]);
}

static dev dev_make(const char *blocks) {
    setenv("MLXCEL_GPU_SAMPLE_BLOCKS", blocks, 1);
    mx_backend_options opt = {.name = mx_gpu_backend_name()};
    dev d = {mx_gpu_backend_create(&opt, &err), 0, 0, 0, 0, 0};
    unsetenv("MLXCEL_GPU_SAMPLE_BLOCKS");
    if (!d.be) return d;
    const mx_backend_ops *o = d.be->ops;
    d.logits = o->alloc(d.be, sizeof(float) * MAX_ROWS * MAX_VOCAB, &err);
    d.rows = o->alloc(d.be, sizeof(mx_sample_row) * MAX_ROWS, &err);
    d.out = o->alloc(d.be, sizeof(mx_sample_out) * MAX_ROWS, &err);
    d.mods = o->alloc(d.be, sizeof(mx_logit_mod) * MAX_MODS, &err);
    d.masks = o->alloc(d.be, sizeof(uint32_t) * MAX_ROWS * (MAX_VOCAB / 32), &err);
    if (!d.logits || !d.rows || !d.out || !d.mods || !d.masks) {
        fprintf(stderr, "alloc: %s\n", err.msg);
        exit(1);
    }
    return d;
}

static void dev_free(dev *d) {
    const mx_backend_ops *o = d->be->ops;
    o->release(d->be, d->logits);
    o->release(d->be, d->rows);
    o->release(d->be, d->out);
    o->release(d->be, d->mods);
    o->release(d->be, d->masks);
    mx_backend_free(d->be);
}

// Uploads the batch (rows pointing at the device masks) and returns the record that chooses it.
static mx_op dev_load(dev *d, const batch *b) {
    const mx_backend_ops *o = d->be->ops;
    mx_sample_row rows[MAX_ROWS];
    int words = (b->vocab + 31) / 32;
    for (int t = 0; t < b->n; t++) {
        rows[t] = b->rows[t];
        rows[t].allowed = b->masks[t] ? d->masks + (size_t)t * words : NULL;
        if (b->masks[t]) CHECK(o->upload(d->be, d->masks + (size_t)t * words, b->masks[t], sizeof(uint32_t) * words, &err) == 0);
    }
    CHECK(o->upload(d->be, d->logits, b->logits, sizeof(float) * (size_t)b->n * b->vocab, &err) == 0);
    CHECK(o->upload(d->be, d->rows, rows, sizeof(mx_sample_row) * b->n, &err) == 0);
    if (b->n_mods) CHECK(o->upload(d->be, d->mods, b->mods, sizeof(mx_logit_mod) * b->n_mods, &err) == 0);
    return (mx_op){.kind = MX_OP_SAMPLE, .sample = {d->out, d->logits, b->n, b->vocab, d->rows, d->mods}};
}

static void dev_choose(dev *d, const batch *b, mx_sample_out *out, float *edited) {
    CHECK_MSG(mx_run_op(d->be, dev_load(d, b), &err) == 0, "sample: %s", err.msg);
    CHECK(d->be->ops->download(d->be, out, d->out, sizeof(mx_sample_out) * b->n, &err) == 0);
    if (edited) CHECK(d->be->ops->download(d->be, edited, d->logits, sizeof(float) * (size_t)b->n * b->vocab, &err) == 0);
}

static int host_diff, sampled, total_rows;

static bool near(float a, float b) { return a == b || fabsf(a - b) <= 1e-5f; }

static void compare(const batch *b, const mx_sample_out *one, const mx_sample_out *split, const char *label) {
    float *l = malloc(sizeof(float) * b->vocab);
    void *scratch = malloc(MX_SAMPLE_SCRATCH_BYTES(b->vocab));
    for (int t = 0; t < b->n; t++) {
        mx_sample_row r = b->rows[t];
        r.allowed = b->masks[t];
        mx_sample_out h;
        memcpy(l, b->logits + (size_t)t * b->vocab, sizeof(float) * b->vocab);
        mx_sample_row_host(l, b->vocab, &r, b->mods, scratch, &h);
        const mx_sample_out *a = &one[t], *c = &split[t];
        total_rows++;
        sampled += r.temp > 0.0f;
        CHECK_MSG(a->id == c->id, "%s vocab %d row %d: one block chose %d, split %d", label, b->vocab, t, a->id, c->id);
        if (b->nan[t]) {  // the forms' top ids against each other; every logprob NaN in all three
            if (r.n_top < 0) continue;
            bool all_nan = isnan(a->logprob) && isnan(c->logprob) && isnan(h.logprob);
            CHECK_MSG(a->n_top == c->n_top, "%s vocab %d row %d (NaN logits): n_top %d %d", label, b->vocab, t, a->n_top, c->n_top);
            for (int k = 0; k < c->n_top && k < a->n_top; k++) {
                CHECK_MSG(a->top_id[k] == c->top_id[k], "%s vocab %d row %d (NaN logits): top %d ids %d %d", label, b->vocab,
                          t, k, a->top_id[k], c->top_id[k]);
                all_nan = all_nan && isnan(a->top_logprob[k]) && isnan(c->top_logprob[k]) && (k >= h.n_top || isnan(h.top_logprob[k]));
            }
            CHECK_MSG(all_nan, "%s vocab %d row %d (NaN logits): logprob %.7f / %.7f / host %.7f: all must be NaN", label,
                      b->vocab, t, a->logprob, c->logprob, h.logprob);
            continue;
        }
        if (c->id != h.id) {
            CHECK_MSG(r.temp > 0.0f, "%s vocab %d row %d: greedy, split chose %d, host %d", label, b->vocab, t, c->id, h.id);
            host_diff++;
        }
        if (r.n_top < 0) continue;
        CHECK_MSG(a->n_top == c->n_top && c->n_top == h.n_top, "%s vocab %d row %d: n_top %d %d %d", label, b->vocab, t,
                  a->n_top, c->n_top, h.n_top);
        CHECK_MSG(near(a->logprob, c->logprob), "%s vocab %d row %d: logprob %.7f vs %.7f", label, b->vocab, t, a->logprob,
                  c->logprob);
        if (c->id == h.id)
            CHECK_MSG(near(c->logprob, h.logprob), "%s vocab %d row %d: logprob %.7f, host %.7f", label, b->vocab, t,
                      c->logprob, h.logprob);
        for (int k = 0; k < c->n_top && k < h.n_top; k++) {
            CHECK_MSG(a->top_id[k] == c->top_id[k] && c->top_id[k] == h.top_id[k], "%s vocab %d row %d: top %d ids %d %d %d",
                      label, b->vocab, t, k, a->top_id[k], c->top_id[k], h.top_id[k]);
            CHECK_MSG(near(a->top_logprob[k], c->top_logprob[k]) && near(c->top_logprob[k], h.top_logprob[k]),
                      "%s vocab %d row %d: top %d logprobs %.7f %.7f %.7f", label, b->vocab, t, k, a->top_logprob[k],
                      c->top_logprob[k], h.top_logprob[k]);
        }
    }
    free(l);
    free(scratch);
}

// Milliseconds per record over the batch's rows (a batch without edits: every run sees the same
// logits): launched directly (*direct) and replayed as a recorded graph, as the engine's steps run.
static double time_record(dev *d, const batch *b, double *direct) {
    mx_op op = dev_load(d, b);
    CHECK(mx_run_op(d->be, op, &err) == 0 && d->be->ops->sync(d->be, &err) == 0);
    double t0 = mx_now();
    for (int i = 0; i < 200; i++) CHECK(mx_run_op(d->be, op, &err) == 0);
    CHECK(d->be->ops->sync(d->be, &err) == 0);
    *direct = (mx_now() - t0) * 1e3 / 200;
    mx_plan *p = mx_plan_create(&err);
    CHECK(p != NULL);
    mx_plan_add(p, op);
    for (int i = 0; i < 2; i++) CHECK(mx_plan_run(d->be, p, &err) == 0);  // the second run records the graph
    CHECK(d->be->ops->sync(d->be, &err) == 0);
    t0 = mx_now();
    for (int i = 0; i < 200; i++) CHECK(mx_plan_run(d->be, p, &err) == 0);
    CHECK(d->be->ops->sync(d->be, &err) == 0);
    double ms = (mx_now() - t0) * 1e3 / 200;
    mx_plan_free(d->be, p);
    return ms;
}

int main(void) {
    dev one = dev_make("1"), split = dev_make("128");
    if (!one.be || !split.be) {
        printf("skipped: %s\n", err.msg);
        return strstr(err.msg, "GPU found") ? 77 : 1;
    }
    printf("device: %s\n", one.be->device_name);
    batch b;
    b.logits = malloc(sizeof(float) * MAX_ROWS * MAX_VOCAB);
    float *e1 = malloc(sizeof(float) * MAX_ROWS * MAX_VOCAB), *e2 = malloc(sizeof(float) * MAX_ROWS * MAX_VOCAB);
    mx_sample_out o1[MAX_ROWS], o2[MAX_ROWS];
    static const struct { int vocab, n, reps; } plan[] = {{151936, 1, 24}, {151936, 2, 8}, {151936, 8, 6}, {32000, 1, 16},
                                                           {32000, 5, 8}, {100003, 4, 4}, {5003, 5, 12}, {4096, 3, 12},
                                                           {2048, 1, 16}, {2049, 7, 8}};
    for (size_t p = 0; p < sizeof plan / sizeof plan[0]; p++) {
        for (int k = 0; k < plan[p].reps; k++) {
            make_batch(&b, plan[p].vocab, plan[p].n);
            dev_choose(&one, &b, o1, e1);
            dev_choose(&split, &b, o2, e2);
            CHECK_MSG(memcmp(e1, e2, sizeof(float) * (size_t)b.n * b.vocab) == 0, "vocab %d: edited logits differ", b.vocab);
            compare(&b, o1, o2, "direct");
            free_batch(&b);
        }
        printf("vocab %6d, %d rows: %d batches compared\n", plan[p].vocab, plan[p].n, plan[p].reps);
    }
    // Rows with NaN logits (add_nan).
    static const struct { int vocab, n, reps; } nan_plan[] = {{151936, 8, 4}, {32000, 5, 4}, {5003, 6, 6}};
    for (size_t p = 0; p < sizeof nan_plan / sizeof nan_plan[0]; p++) {
        for (int k = 0; k < nan_plan[p].reps; k++) {
            make_batch(&b, nan_plan[p].vocab, nan_plan[p].n);
            add_nan(&b);
            dev_choose(&one, &b, o1, e1);
            dev_choose(&split, &b, o2, e2);
            CHECK_MSG(memcmp(e1, e2, sizeof(float) * (size_t)b.n * b.vocab) == 0, "vocab %d (NaN logits): edited logits differ",
                      b.vocab);
            compare(&b, o1, o2, "NaN logits");
            free_batch(&b);
        }
        printf("vocab %6d, %d rows with NaN logits: %d batches compared\n", nan_plan[p].vocab, nan_plan[p].n, nan_plan[p].reps);
    }

    // The split form recorded as a graph: one plan, four runs with new logits and positions.
    make_batch(&b, MAX_VOCAB, 3);
    mx_plan *plan_g = mx_plan_create(&err);
    CHECK(plan_g != NULL);
    mx_plan_add(plan_g, dev_load(&split, &b));
    for (int run = 0; run < 4; run++) {
        if (run > 0) {
            free_batch(&b);
            make_batch(&b, MAX_VOCAB, 3);
            dev_load(&split, &b);
        }
        CHECK_MSG(mx_plan_run(split.be, plan_g, &err) == 0, "plan run %d: %s", run, err.msg);
        CHECK(split.be->ops->download(split.be, o2, split.out, sizeof(mx_sample_out) * b.n, &err) == 0);
        dev_choose(&one, &b, o1, NULL);
        compare(&b, o1, o2, run < 2 ? "plan, direct run" : "plan, graph replay");
    }
    printf("graphs recorded by the split backend: %d\n", mx_gpu_graph_count(split.be));
    CHECK(mx_gpu_graph_count(split.be) >= 1);
    mx_plan_free(split.be, plan_g);
    free_batch(&b);

    printf("%d rows (%d sampled): %d sampled tokens differ from the host rule\n", total_rows, sampled, host_diff);
    CHECK_MSG(host_diff * 50 <= sampled, "%d of %d sampled tokens differ from the host rule", host_diff, sampled);

    // Time of the record over 1, 8, 32 and 64 rows of 151,936 logits (temp 0.7, top-p 0.9), both
    // forms; then 64 rows of normal logits only (sd 2, as the random-weight bench model's: top-p keeps
    // about a third of the vocabulary). The split backend says which split form it runs.
    const bool fast = mx_gpu_sample_fast(split.be);
    static const int time_rows[] = {1, 8, 32, 64, -64};
    for (size_t q = 0; q < sizeof time_rows / sizeof time_rows[0]; q++) {
        const int n = abs(time_rows[q]);
        make_batch(&b, MAX_VOCAB, n);
        if (time_rows[q] < 0)
            for (int t = 0; t < n; t++) fill_row(b.logits + (size_t)t * MAX_VOCAB, MAX_VOCAB, 0);
        for (int t = 0; t < n; t++) {
            free(b.masks[t]);
            b.masks[t] = NULL;
            b.rows[t] = (mx_sample_row){.temp = 0.7f, .top_p = 0.9f, .seed = 7, .pos = t, .n_top = -1};
        }
        b.n_mods = 0;
        double d1, d2, t1 = time_record(&one, &b, &d1), t2 = time_record(&split, &b, &d2);
        printf("sample record, %d row%s of 151936%s, temp 0.7 top-p 0.9, graph replay (direct launches): one block per row "
               "%.4f ms (%.4f), split%s %.4f ms (%.4f)\n", n, n > 1 ? "s" : "", time_rows[q] < 0 ? " (normal logits)" : "", t1,
               d1, fast ? " (fast form)" : " (radix passes)", t2, d2);
    }
    free(b.logits);
    free(e1);
    free(e2);
    dev_free(&one);
    dev_free(&split);
    return check_finish();
}
