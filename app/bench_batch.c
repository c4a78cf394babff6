// SPDX-License-Identifier: MIT
// `mlxcel bench --batch B` (see bench_batch.h). One engine is created as the server's scheduler
// creates it (B slots, prefill chunks of 256, prefix cache on, the default KV pool) and kept for
// every repetition, so plans and recorded graphs persist as in a running server. A repetition admits
// B sequences with distinct random prompts of -p tokens (and end-of-sequence ignored, so each makes
// exactly -n tokens), steps until every one has its first token (the prefill), then steps until all
// finish (the decode, which is what is measured). The warm-up repetition uses other prompts, so the
// prefix cache never shortens a measured prefill.
//
// Per decode step it reports the engine's phases (mx_engine_stats, measured with core/clock.h; the
// forward phase ends at the backend's sync when the chosen ids are downloaded): host preparation,
// forward pass with the backend's token choice, host token choice (only when the backend cannot
// choose), and the sequences taking their tokens (stop rules, detokenization, callbacks); and how
// the step plans ran (graph replays, recordings, direct runs; device time with MLXCEL_GPU_PLAN_TIMES=1). The
// backend's token choice runs inside the forward phase's plan, so its cost is also measured alone:
// the `sample` record (or `argmax` for greedy) over B rows of normally distributed logits, timed
// from the first launch to the backend's sync.
#include "bench_batch.h"
#include "bench_model.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/plan.h"
#include "cli.h"
#include "commands.h"
#include "core/clock.h"
#include "generate/engine.h"
#include "prompt.h"

#define CHOOSE_RUNS 20  // launches of the token-choice record timed together

int32_t bench_prompt_token(uint64_t seed, uint64_t j, int i, int vocab) {
    return (int32_t)(bench_splitmix(seed + (j << 24) + (uint64_t)i) % (uint64_t)vocab);
}

// What one repetition measured over its decode steps.
typedef struct rep_result {
    double tok_s, step_ms, prepare_ms, forward_ms, host_choose_ms, finish_ms, padding, device_ms;
    uint64_t steps, tokens, replays, recordings, direct;  // plan runs by outcome (mx_engine_stats)
} rep_result;

static bool count_token(void *user, const mx_token_event *ev) {
    if (ev->id >= 0) (*(uint64_t *)user)++;  // id -1: the detokenizer's held bytes at the end
    return true;
}

// Steps until `done` holds for every sequence; returns 0 or -1 (err set).
static int step_until(mx_engine *e, mx_seq **seqs, int n, bool first_token_only, mx_error *err) {
    for (;;) {
        bool all = true;
        for (int k = 0; k < n && all; k++) {
            int n_gen = 0;
            mx_seq_generated(seqs[k], &n_gen);
            all = first_token_only ? n_gen > 0 || mx_seq_finish_reason(seqs[k]) != MX_FINISH_NONE
                                   : mx_seq_finish_reason(seqs[k]) != MX_FINISH_NONE;
        }
        if (all) return 0;
        if (mx_engine_step(e, err)) return -1;
    }
}

// One repetition with prompts j0 .. j0 + batch - 1 and n_tg tokens per sequence.
static int run_rep(mx_engine *e, const mx_tokenizer *tok, const bench_batch_opts *o, int vocab, uint64_t j0, int n_tg,
                   rep_result *res, bool print_ids, mx_error *err) {
    int B = o->batch, rc = -1;
    mx_seq **seqs = calloc((size_t)B, sizeof *seqs);
    int32_t *prompt = malloc(sizeof(int32_t) * (size_t)o->n_pp);
    uint64_t events = 0;
    if (!seqs || !prompt) {
        mx_fail(err, "out of memory");
        goto done;
    }
    for (int k = 0; k < B; k++) {
        for (int i = 0; i < o->n_pp; i++) prompt[i] = bench_prompt_token(o->prompt_seed, j0 + (uint64_t)k, i, vocab);
        mx_seq_opts so = {.sampling = o->sampling, .max_new = n_tg, .ignore_eos = true, .n_logprobs = -1,
                          .skip_special = true, .on_token = count_token, .user = &events};
        so.sampling.seed = (o->sampling.has_seed ? o->sampling.seed : o->prompt_seed) + (uint64_t)k;
        so.sampling.has_seed = true;
        if (!(seqs[k] = mx_seq_create(tok, prompt, o->n_pp, &so, o->max_ctx, err))) goto done;
        int a = mx_engine_admit(e, seqs[k], err);
        if (a != 0) {
            if (a > 0) mx_fail(err, "sequence %d of %d was not admitted (KV pool of %d positions)", k + 1, B,
                               mx_engine_kv_size(e));
            mx_seq_free(seqs[k]);
            seqs[k] = NULL;
            goto done;
        }
    }
    if (step_until(e, seqs, B, true, err)) goto done;
    mx_engine_stats s0, s1;
    mx_engine_stats_get(e, &s0);
    double t0 = mx_now();
    if (step_until(e, seqs, B, false, err)) goto done;
    double wall = mx_now() - t0;
    mx_engine_stats_get(e, &s1);
    for (int k = 0; k < B; k++)
        if (mx_seq_finish_reason(seqs[k]) == MX_FINISH_ERROR) {
            mx_fail(err, "sequence %d: %s", k + 1, mx_seq_error(seqs[k]));
            goto done;
        }
    uint64_t steps = s1.steps - s0.steps;
    double per = steps ? 1e3 / (double)steps : 0.0;
    *res = (rep_result){.tok_s = wall > 0 ? (double)(s1.generated_tokens - s0.generated_tokens) / wall : 0.0,
                        .step_ms = wall * per,
                        .prepare_ms = (s1.t_prepare - s0.t_prepare) * per,
                        .forward_ms = (s1.t_forward - s0.t_forward) * per,
                        .host_choose_ms = (s1.t_host_choose - s0.t_host_choose) * per,
                        .finish_ms = (s1.t_finish - s0.t_finish) * per,
                        .padding = (double)(s1.padding_tokens - s0.padding_tokens) * per / 1e3,
                        .device_ms = (s1.plan_device_seconds - s0.plan_device_seconds) * per,
                        .steps = steps,
                        .tokens = s1.generated_tokens - s0.generated_tokens,
                        .replays = s1.plan_replays - s0.plan_replays,
                        .recordings = s1.plan_recordings - s0.plan_recordings,
                        .direct = s1.plan_direct_runs - s0.plan_direct_runs};
    if (print_ids) {
        int n = 0;
        const int32_t *g = mx_seq_generated(seqs[0], &n);
        printf("ids:");
        for (int i = 0; i < n; i++) printf(" %d", g[i]);
        printf("\n");
    }
    rc = events == (uint64_t)B * (uint64_t)n_tg ? 0 : mx_fail(err, "%llu tokens reached the callbacks, expected %llu",
                                                              (unsigned long long)events,
                                                              (unsigned long long)B * (unsigned long long)n_tg);
done:
    for (int k = 0; seqs && k < B; k++) {
        if (!seqs[k]) continue;
        mx_engine_release(e, seqs[k]);
        mx_seq_free(seqs[k]);
    }
    free(seqs);
    free(prompt);
    return rc;
}

// The backend's token choice alone over B rows: the sample record with the bench's parameters, or
// argmax for plain greedy rows (what the engine's plan ends with). Returns milliseconds per launch,
// or -1 (err set).
static double time_choice(mx_backend *be, const bench_batch_opts *o, int vocab, mx_error *err) {
    const mx_backend_ops *ops = be->ops;
    int B = o->batch;
    bool greedy = o->sampling.temp <= 0.0f;
    if (!greedy && !ops->supports(be, MX_OP_SAMPLE, NULL)) return mx_fail(err, "the backend has no sample record");
    size_t n_logits = (size_t)B * (size_t)vocab;
    float *host = malloc(sizeof(float) * n_logits);
    mx_sample_row *rows = malloc(sizeof *rows * (size_t)B);
    mx_sampler *sampler = mx_sampler_create(&o->sampling, 1);
    int max_mods = sampler ? mx_sampler_max_mods(sampler) : 0, n_mods = 0;
    mx_logit_mod *mods = malloc(sizeof *mods * (size_t)(max_mods > 0 ? max_mods * B : 1));
    float *d_logits = ops->alloc(be, sizeof(float) * n_logits, err);
    void *d_rows = ops->alloc(be, sizeof *rows * (size_t)B, err);
    void *d_out = ops->alloc(be, (greedy ? sizeof(int32_t) : sizeof(mx_sample_out)) * (size_t)B, err);
    void *d_mods = ops->alloc(be, sizeof *mods * (size_t)(max_mods > 0 ? max_mods * B : 1), err);
    double ms = -1.0;
    if (!host || !rows || !sampler || !mods) mx_fail(err, "out of memory");
    if (!host || !rows || !sampler || !mods || !d_logits || !d_rows || !d_out || !d_mods) goto done;
    // Normal logits (standard deviation 2) from a sum of four uniforms.
    for (size_t i = 0; i < n_logits; i++) {
        double sum = 0.0;
        for (int k = 0; k < 4; k++) sum += (double)(bench_splitmix(o->prompt_seed ^ (i * 4 + (size_t)k)) >> 11) / 9007199254740992.0;
        host[i] = (float)((sum - 2.0) * 2.0 * sqrt(3.0));
    }
    for (int k = 0; k < B; k++) mx_sampler_row(sampler, o->n_pp + k, -1, &rows[k], mods, &n_mods);
    if ((n_mods > 0 && ops->upload(be, d_mods, mods, sizeof *mods * (size_t)n_mods, err)) ||
        ops->upload(be, d_logits, host, sizeof(float) * n_logits, err) ||
        ops->upload(be, d_rows, rows, sizeof *rows * (size_t)B, err) || ops->sync(be, err))
        goto done;
    mx_op op = greedy ? (mx_op){.kind = MX_OP_ARGMAX, .argmax = {d_out, d_logits, B, vocab}}
                      : (mx_op){.kind = MX_OP_SAMPLE, .sample = {d_out, d_logits, B, vocab, d_rows, d_mods}};
    if (mx_run_op(be, op, err) || ops->sync(be, err)) goto done;  // first launch (module load, caches)
    double t0 = mx_now();
    for (int r = 0; r < CHOOSE_RUNS; r++)
        if (mx_run_op(be, op, err)) goto done;
    if (ops->sync(be, err)) goto done;
    ms = (mx_now() - t0) * 1e3 / CHOOSE_RUNS;
done:
    if (d_logits) ops->release(be, d_logits);
    if (d_rows) ops->release(be, d_rows);
    if (d_out) ops->release(be, d_out);
    if (d_mods) ops->release(be, d_mods);
    mx_sampler_free(sampler);
    free(host);
    free(rows);
    free(mods);
    return ms;
}

// Median of field `off` (a double in rep_result) over n results.
static double median_of(const rep_result *r, int n, size_t off) {
    double v[64];
    int m = n < 64 ? n : 64;
    for (int i = 0; i < m; i++) memcpy(&v[i], (const char *)&r[i] + off, sizeof(double));
    return bench_median(v, m);
}

int bench_batch(const char *cmd, mx_backend *be, mx_model *m, const char *dir, const char *label,
                const bench_batch_opts *o) {
    int rc = MX_EXIT_RUNTIME, vocab = mx_model_config(m)->vocab_size;
    mx_error err = {{0}};
    mx_tokenizer *tok = NULL;
    mx_engine *e = NULL;
    rep_result res[64];
    int reps = o->reps < 64 ? o->reps : 64;
    char path[4200];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    if (access(path, R_OK) == 0 && !(tok = prompt_load_tokenizer(cmd, dir))) return MX_EXIT_RUNTIME;
    mx_engine_opts eo = {.n_slots = o->batch, .max_ctx = o->max_ctx, .prefill_chunk = 256, .prefix_reuse = true,
                         .threads = o->threads};
    if (!(e = mx_engine_create(m, &eo, &err))) {
        cli_error(cmd, "%s", err.msg);
        goto done;
    }
    const mx_sampling *sp = &o->sampling;
    fprintf(stderr, "model: %s\nbackend: %s, %s\n", label, be->ops->name, be->device_name);
    fprintf(stderr, "engine: %d sequences x (%d prompt + %d generated tokens), KV pool %d positions, detokenizer %s\n",
            o->batch, o->n_pp, o->n_tg, mx_engine_kv_size(e), tok ? "on" : "off (no tokenizer.json)");
    rep_result warm;
    if (run_rep(e, tok, o, vocab, (uint64_t)(reps + 1) * (uint64_t)o->batch, o->n_tg < 4 ? o->n_tg : 4, &warm, false,
                &err)) {
        cli_error(cmd, "%s", err.msg);
        goto done;
    }
    for (int r = 0; r < reps; r++) {
        if (run_rep(e, tok, o, vocab, (uint64_t)r * (uint64_t)o->batch, o->n_tg, &res[r], o->print_ids && r == 0, &err)) {
            cli_error(cmd, "%s", err.msg);
            goto done;
        }
        fprintf(stderr,
                "rep %d: %llu decode steps, %llu tokens, %.2f tok/s, step %.3f ms, %.1f padding tokens per step; plans: "
                "%llu graph replays, %llu recordings, %llu direct runs, device %.3f ms per step (MLXCEL_GPU_PLAN_TIMES=1)\n",
                r + 1, (unsigned long long)res[r].steps, (unsigned long long)res[r].tokens, res[r].tok_s, res[r].step_ms,
                res[r].padding, (unsigned long long)res[r].replays, (unsigned long long)res[r].recordings,
                (unsigned long long)res[r].direct, res[r].device_ms);
    }
    double choose_ms = time_choice(be, o, vocab, &err);
    if (choose_ms < 0) {
        cli_error(cmd, "%s", err.msg);
        goto done;
    }
    double tok_s = median_of(res, reps, offsetof(rep_result, tok_s)),
           step_ms = median_of(res, reps, offsetof(rep_result, step_ms)),
           prep_ms = median_of(res, reps, offsetof(rep_result, prepare_ms)),
           fwd_ms = median_of(res, reps, offsetof(rep_result, forward_ms)),
           host_ms = median_of(res, reps, offsetof(rep_result, host_choose_ms)),
           fin_ms = median_of(res, reps, offsetof(rep_result, finish_ms));
    char params[160];
    snprintf(params, sizeof params, "temp %.2f top-p %.2f top-k %d min-p %.2f", sp->temp, sp->top_p, sp->top_k, sp->min_p);
    printf("batch %d, %s: decode %.2f tok/s (median of %d), step %.3f ms\n", o->batch, params, tok_s, reps, step_ms);
    printf("  per step: prepare %.3f ms, forward + backend choice %.3f ms, host choice %.3f ms, finish %.3f ms; "
           "%s alone over %d rows: %.3f ms\n",
           prep_ms, fwd_ms, host_ms, fin_ms, sp->temp <= 0.0f ? "argmax" : "sample record", o->batch, choose_ms);
    printf("bench: batch=%d temp=%.2f top_p=%.2f top_k=%d min_p=%.2f backend=%s tok_s=%.2f step_ms=%.3f prepare_ms=%.3f "
           "forward_ms=%.3f host_choose_ms=%.3f finish_ms=%.3f choose_alone_ms=%.3f\n",
           o->batch, sp->temp, sp->top_p, sp->top_k, sp->min_p, be->ops->name, tok_s, step_ms, prep_ms, fwd_ms, host_ms,
           fin_ms, choose_ms);
    rc = MX_EXIT_OK;
done:
    mx_engine_free(e);
    mx_tokenizer_free(tok);
    return rc;
}
