// SPDX-License-Identifier: MIT
// Step plans in server-like runs (generate/engine.h, models/forward.c: plans cached by step shape),
// on the CPU demo model with the GPU defaults forced (padding to 8, a step budget of several
// prompt chunks). Twelve sequences are admitted one per step, so once all decode they sit at twelve
// different positions and cross into new KV blocks at different steps (block tables edited in most
// steps). Such decode steps have one shape and must reuse its plan: no plan is built after the
// first of them, each runs exactly one plan (directly: the CPU backend records no graphs) and is
// counted as a decode step with its twelve rows. The whole run builds one plan per step shape it
// used (bounded by the padding's buckets), and its tokens are those of the same sequences run
// in lockstep (admitted together): staggering changes no result. With MLXCEL_GPU_SPLIT_MIXED=1 the
// steps with prompt chunks put the decode tokens first, with an attention record of their own
// (models/model.h), also where the oldest sequence still feeds its prompt, and the tokens are the
// same again.
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "test_demo.h"
#include "generate/engine.h"

enum { N_SEQ = 12, PROMPT = 64, MAX_NEW = 40, CTX = 128, DECODE_STEPS = 16 };

// Sequence 0 (the oldest) feeds 60 prompt tokens in four chunks while younger ones start decoding;
// the others 9..20 (more than MX_DECODE_SLOT_TOKENS in their first chunk).
static int prompt_len(int k) { return k == 0 ? 60 : 9 + (k * 5) % 12; }

static mx_seq *make_seq(int k) {
    int32_t prompt[PROMPT];
    int n_prompt = prompt_len(k);
    for (int t = 0; t < n_prompt; t++) prompt[t] = (int32_t)((71 * k + 17 * t + 3) % 3000 + 150);
    mx_seq_opts o = {.sampling = mx_sampling_defaults(), .max_new = MAX_NEW, .ignore_eos = true, .n_logprobs = -1};
    mx_error err = {{0}};
    mx_seq *s = mx_seq_create(NULL, prompt, n_prompt, &o, CTX, &err);
    CHECK_MSG(s != NULL, "%s", err.msg);
    return s;
}

static mx_engine *make_engine(mx_model *m) {
    mx_error err = {{0}};
    mx_engine_opts eo = {.n_slots = N_SEQ, .max_ctx = CTX, .prefill_chunk = 16, .prefix_reuse = true, .threads = 1,
                         .batch_padding = 8, .step_tokens = 32};
    mx_engine *e = mx_engine_create(m, &eo, &err);
    CHECK_MSG(e != NULL, "%s", err.msg);
    return e;
}

// Copies each sequence's tokens into out, then releases and frees the sequences.
static void collect(mx_engine *e, mx_seq **seqs, int32_t out[N_SEQ][MAX_NEW]) {
    for (int k = 0; k < N_SEQ; k++) {
        int n = 0;
        const int32_t *g = mx_seq_generated(seqs[k], &n);
        CHECK_MSG(n == MAX_NEW, "sequence %d made %d tokens (%s)", k, n, mx_seq_error(seqs[k]));
        memcpy(out[k], g, sizeof(int32_t) * (size_t)(n < MAX_NEW ? n : MAX_NEW));
        mx_engine_release(e, seqs[k]);
        mx_seq_free(seqs[k]);
    }
}

// Sequence k admitted before step k; checks the plans of the decode steps once all decode, and of
// the whole run; out gets the tokens. *oldest_steps: steps in which sequence 0 fed a prompt chunk
// while another sequence decoded; *oldest_split: those of them split (mx_ctx_split_mixed).
// Returns the engine's stats.
static mx_engine_stats run_staggered(mx_model *m, int32_t out[N_SEQ][MAX_NEW], int *oldest_steps, int *oldest_split) {
    mx_error err = {{0}};
    mx_engine_stats s0 = {0}, s1 = {0};
    mx_seq *seqs[N_SEQ];
    mx_engine *e = make_engine(m);
    if (!e) return s1;
    *oldest_steps = *oldest_split = 0;
    for (int k = 0; k < N_SEQ; k++) {
        seqs[k] = make_seq(k);
        CHECK(mx_engine_admit(e, seqs[k], &err) == 0);
        int n0 = 0, nk = 0;
        bool others = false;
        mx_seq_generated(seqs[0], &n0);
        for (int j = 1; j < k; j++) others = others || (mx_seq_generated(seqs[j], &nk), nk > 0);
        mx_engine_stats_get(e, &s0);
        CHECK_MSG(mx_engine_step(e, &err) == 0, "%s", err.msg);
        mx_engine_stats_get(e, &s1);
        *oldest_steps += n0 == 0 && others;
        *oldest_split += n0 == 0 && others && s1.split_steps > s0.split_steps;
    }
    // Steps until every prompt is in (the first decode step, whose shape may be new, included).
    for (int i = 0; i < 8; i++) {
        mx_engine_stats_get(e, &s0);
        CHECK_MSG(mx_engine_step(e, &err) == 0, "%s", err.msg);
        mx_engine_stats_get(e, &s1);
        if (s1.decode_steps > s0.decode_steps && s1.generated_tokens - s0.generated_tokens == N_SEQ) break;
    }
    mx_engine_stats_get(e, &s0);
    bool seen[MX_KV_BLOCK] = {false};
    int offsets = 0;  // distinct offsets in their KV blocks of the sequences' next positions
    for (int k = 0; k < N_SEQ; k++) {
        int n = 0;
        mx_seq_generated(seqs[k], &n);
        int at = (prompt_len(k) + n - 1) % MX_KV_BLOCK;  // prompt + generated - 1
        offsets += !seen[at];
        seen[at] = true;
    }
    CHECK_MSG(offsets >= 4, "the staggered sequences' positions have %d distinct block offsets (want 4 or more)", offsets);
    for (int i = 0; i < DECODE_STEPS; i++) CHECK_MSG(mx_engine_step(e, &err) == 0, "%s", err.msg);
    mx_engine_stats_get(e, &s1);
    CHECK_MSG(s1.plans_built == s0.plans_built && s1.plans_evicted == 0,
              "%d decode steps of twelve sequences at different positions built %llu plans (want 0)", DECODE_STEPS,
              (unsigned long long)(s1.plans_built - s0.plans_built));
    CHECK_MSG(s1.plan_direct_runs - s0.plan_direct_runs == DECODE_STEPS && s1.plan_replays == 0 && s1.plan_recordings == 0 &&
                  s1.plan_device_seconds == 0.0,
              "plan runs of %d CPU steps: %llu direct, %llu replayed, %llu recorded, %g device s", DECODE_STEPS,
              (unsigned long long)(s1.plan_direct_runs - s0.plan_direct_runs), (unsigned long long)s1.plan_replays,
              (unsigned long long)s1.plan_recordings, s1.plan_device_seconds);
    CHECK_MSG(s1.decode_steps - s0.decode_steps == DECODE_STEPS &&
                  s1.decode_rows - s0.decode_rows == (uint64_t)DECODE_STEPS * N_SEQ &&
                  s1.t_forward_decode - s0.t_forward_decode > 0.0 &&
                  s1.t_forward_decode - s0.t_forward_decode <= s1.t_forward - s0.t_forward + 1e-9 &&
                  s1.split_steps == s0.split_steps,
              "decode steps %llu (want %d), rows %llu (want %d), split steps %llu", (unsigned long long)(s1.decode_steps - s0.decode_steps),
              DECODE_STEPS, (unsigned long long)(s1.decode_rows - s0.decode_rows), DECODE_STEPS * N_SEQ,
              (unsigned long long)(s1.split_steps - s0.split_steps));
    CHECK_MSG(mx_engine_run(e, &err) == 0, "%s", err.msg);
    mx_engine_stats_get(e, &s1);
    // Shapes of the whole run: decode steps of 9-12 rows padded to 16, of 1-8 rows as they are,
    // plus the steps with prompt chunks (one per staggered admission, a few after).
    CHECK_MSG(s1.plans_built <= 9 + 2 * N_SEQ && s1.plan_direct_runs == s1.steps && s1.decode_steps < s1.steps &&
                  s1.decode_rows <= s1.generated_tokens,
              "the staggered run built %llu plans in %llu steps (%llu direct runs, %llu decode steps)",
              (unsigned long long)s1.plans_built, (unsigned long long)s1.steps,
              (unsigned long long)s1.plan_direct_runs, (unsigned long long)s1.decode_steps);
    collect(e, seqs, out);
    mx_engine_free(e);
    return s1;
}

int main(void) {
    mx_backend *be;
    mx_model *m = test_demo_model(&be);
    if (!m) return check_finish();
    static int32_t ref[N_SEQ][MAX_NEW], got[N_SEQ][MAX_NEW];
    mx_error err = {{0}};
    mx_seq *seqs[N_SEQ];

    // Lockstep: every sequence admitted before the first step.
    mx_engine *e = make_engine(m);
    if (!e) return check_finish();
    for (int k = 0; k < N_SEQ; k++) {
        seqs[k] = make_seq(k);
        CHECK(mx_engine_admit(e, seqs[k], &err) == 0);
    }
    CHECK_MSG(mx_engine_run(e, &err) == 0, "%s", err.msg);
    collect(e, seqs, ref);
    mx_engine_free(e);

    int oldest_steps, oldest_split;
    setenv("MLXCEL_GPU_SPLIT_MIXED", "0", 1);  // on by default: the plain layout first
    mx_engine_stats plain = run_staggered(m, got, &oldest_steps, &oldest_split);
    CHECK_MSG(memcmp(ref, got, sizeof ref) == 0, "staggered admission changed the tokens");
    CHECK_MSG(plain.split_steps == 0, "%llu split steps with MLXCEL_GPU_SPLIT_MIXED=0", (unsigned long long)plain.split_steps);
    // MLXCEL_GPU_SPLIT_MIXED=1: the staggered admissions' steps put the decode tokens first, with an
    // attention record of their own; the tokens stay the same.
    setenv("MLXCEL_GPU_SPLIT_MIXED", "1", 1);
    mx_engine_stats split = run_staggered(m, got, &oldest_steps, &oldest_split);
    unsetenv("MLXCEL_GPU_SPLIT_MIXED");
    CHECK_MSG(memcmp(ref, got, sizeof ref) == 0, "MLXCEL_GPU_SPLIT_MIXED=1 changed the tokens");
    CHECK_MSG(split.split_steps >= N_SEQ / 2 && split.split_steps <= split.steps - split.decode_steps,
              "MLXCEL_GPU_SPLIT_MIXED=1: %llu split steps of %llu with prompt chunks", (unsigned long long)split.split_steps,
              (unsigned long long)(split.steps - split.decode_steps));
    // The oldest sequence's chunks come first in age order: split only because the engine moved the
    // decode tokens before them.
    CHECK_MSG(oldest_steps >= 1 && oldest_split == oldest_steps,
              "MLXCEL_GPU_SPLIT_MIXED=1: %d of %d steps with the oldest sequence's prompt chunk split", oldest_split,
              oldest_steps);
    mx_model_free(m);
    mx_backend_free(be);
    return check_finish();
}
