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
//
// Then a server level as bench/server_on_device.sh runs them (64 streams of 32-token prompts, each
// stream's requests one after the other, arrivals spread over steps; shortened to 16 tokens a
// request): its plans are one per decode shape it used plus at most one per step with prompt chunks
// (such a step's token count, its decode tokens plus its chunks', rarely recurs), none evicted, and
// the mixed-step split adds no plan (the same count with MLXCEL_GPU_SPLIT_MIXED=0 and 1, the same
// tokens). And steps of one-off shapes, more than the context caches, do not push out a decode shape
// that recurs (models/forward.c: plan_for): the same decode steps afterwards build nothing.
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "test_demo.h"
#include "test_rng.h"
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

// A server level: LEVEL_STREAMS clients each send LEVEL_ROUNDS requests one after the other, the
// first arriving before step 0..5, each next one 0..2 steps after the previous finished, on an
// engine of LEVEL_STREAMS slots with the GPU defaults (padding to 8, 2048 prompt tokens a step,
// 256-token chunks).
enum { LEVEL_STREAMS = 64, LEVEL_ROUNDS = 2, LEVEL_PROMPT = 32, LEVEL_NEW = 16, LEVEL_CTX = 64 };

typedef struct level_run {
    mx_engine_stats st;
    int decode_shapes;  // distinct shapes of its decode steps (their rows padded as the engine pads them)
    int32_t tokens[LEVEL_STREAMS * LEVEL_ROUNDS][LEVEL_NEW];
} level_run;

// The decode shape of a step of `rows` rows: padded to a multiple of MX_ENGINE_PAD above it while
// that stays within MX_ENGINE_PAD_MAX (generate/engine.h), else as it is.
static int decode_shape(int rows) {
    int padded = (rows + MX_ENGINE_PAD - 1) / MX_ENGINE_PAD * MX_ENGINE_PAD;
    return rows <= MX_ENGINE_PAD || padded > MX_ENGINE_PAD_MAX ? rows : padded;
}

static void run_level(mx_model *m, level_run *out) {
    mx_error err = {{0}};
    mx_engine_opts eo = {.n_slots = LEVEL_STREAMS, .max_ctx = LEVEL_CTX, .prefill_chunk = 256, .prefix_reuse = true,
                         .threads = 1, .batch_padding = MX_ENGINE_PAD, .step_tokens = 2048};
    mx_engine *e = mx_engine_create(m, &eo, &err);
    CHECK_MSG(e != NULL, "%s", err.msg);
    if (!e) return;
    test_rng rng = {0x2545f4914f6cdd1dull};
    mx_seq *cur[LEVEL_STREAMS] = {NULL};
    int sent[LEVEL_STREAMS] = {0}, next_at[LEVEL_STREAMS], left = LEVEL_STREAMS;
    bool shape_seen[LEVEL_STREAMS + 1] = {false};
    out->decode_shapes = 0;
    for (int k = 0; k < LEVEL_STREAMS; k++) next_at[k] = (int)(test_rng_u32(&rng) % 6);
    for (int step = 0; left > 0 && step < 1000; step++) {
        for (int k = 0; k < LEVEL_STREAMS; k++) {
            if (cur[k] && mx_seq_finish_reason(cur[k]) != MX_FINISH_NONE) {
                int n = 0, req = k * LEVEL_ROUNDS + sent[k] - 1;
                const int32_t *g = mx_seq_generated(cur[k], &n);
                CHECK_MSG(n == LEVEL_NEW, "request %d made %d tokens (%s)", req, n, mx_seq_error(cur[k]));
                memcpy(out->tokens[req], g, sizeof(int32_t) * (size_t)(n < LEVEL_NEW ? n : LEVEL_NEW));
                mx_engine_release(e, cur[k]);
                mx_seq_free(cur[k]);
                cur[k] = NULL;
                left -= sent[k] == LEVEL_ROUNDS;
                next_at[k] = step + (int)(test_rng_u32(&rng) % 3);
            }
            if (cur[k] || sent[k] == LEVEL_ROUNDS || next_at[k] > step) continue;
            int32_t prompt[LEVEL_PROMPT];
            int req = k * LEVEL_ROUNDS + sent[k]++;
            for (int t = 0; t < LEVEL_PROMPT; t++) prompt[t] = (int32_t)((97 * req + 13 * t + 7) % 3000 + 150);
            mx_seq_opts o = {.sampling = mx_sampling_defaults(), .max_new = LEVEL_NEW, .ignore_eos = true,
                             .n_logprobs = -1};
            cur[k] = mx_seq_create(NULL, prompt, LEVEL_PROMPT, &o, LEVEL_CTX, &err);
            CHECK_MSG(cur[k] && mx_engine_admit(e, cur[k], &err) == 0, "request %d not admitted: %s", req, err.msg);
        }
        if (left == 0) break;
        mx_engine_stats s0, s1;
        mx_engine_stats_get(e, &s0);
        CHECK_MSG(mx_engine_step(e, &err) == 0, "%s", err.msg);
        mx_engine_stats_get(e, &s1);
        if (s1.decode_steps == s0.decode_steps) continue;
        int shape = decode_shape((int)(s1.decode_rows - s0.decode_rows));
        out->decode_shapes += !shape_seen[shape];
        shape_seen[shape] = true;
    }
    CHECK_MSG(left == 0, "the level did not finish: %d streams left", left);
    mx_engine_stats_get(e, &out->st);
    mx_engine_free(e);
}

static void check_level(mx_model *m) {
    static level_run plain, split;
    setenv("MLXCEL_GPU_SPLIT_MIXED", "0", 1);
    run_level(m, &plain);
    setenv("MLXCEL_GPU_SPLIT_MIXED", "1", 1);
    run_level(m, &split);
    unsetenv("MLXCEL_GPU_SPLIT_MIXED");
    const level_run *runs[2] = {&plain, &split};
    for (int i = 0; i < 2; i++) {
        const mx_engine_stats *st = &runs[i]->st;
        uint64_t mixed = st->steps - st->decode_steps;  // steps with prompt chunks
        printf("64-stream level, split %s: %llu steps, %llu with prompt chunks (%llu split), %d decode shapes, "
               "%llu plans built, %llu evicted\n",
               i ? "on" : "off", (unsigned long long)st->steps, (unsigned long long)mixed,
               (unsigned long long)st->split_steps, runs[i]->decode_shapes, (unsigned long long)st->plans_built,
               (unsigned long long)st->plans_evicted);
        CHECK_MSG(st->plans_built >= (uint64_t)runs[i]->decode_shapes + 1 &&
                      st->plans_built <= (uint64_t)runs[i]->decode_shapes + mixed && st->plans_evicted == 0,
                  "split %s: %llu plans built (want %d decode shapes + at most one per each of %llu steps with "
                  "prompt chunks), %llu evicted (want 0)",
                  i ? "on" : "off", (unsigned long long)st->plans_built, runs[i]->decode_shapes,
                  (unsigned long long)mixed, (unsigned long long)st->plans_evicted);
    }
    CHECK_MSG(split.st.split_steps >= 8, "the level split %llu steps", (unsigned long long)split.st.split_steps);
    CHECK_MSG(split.st.plans_built == plain.st.plans_built,
              "the mixed-step split changed the level's plans: %llu built with it, %llu without",
              (unsigned long long)split.st.plans_built, (unsigned long long)plain.st.plans_built);
    CHECK_MSG(memcmp(plain.tokens, split.tokens, sizeof plain.tokens) == 0, "the split changed the level's tokens");
}

// DECODE_SEQS sequences decode together (one decode shape, run REUSE_NEW - 1 times), then ONE_OFFS
// steps of one prompt each, of lengths 57.. (above MX_ENGINE_PAD_MAX: not padded, so each a shape of
// its own that runs once; more of them than the context's 64 cached plans), then the same sequences
// again: their decode steps find their plan (a least-recently-used cache would have dropped it).
enum { DECODE_SEQS = 12, REUSE_NEW = 8, ONE_OFFS = 72, ONE_OFF_CTX = 160 };

static mx_seq *seq_of(int first_token, int n_prompt, int max_new) {
    int32_t prompt[ONE_OFF_CTX];
    for (int t = 0; t < n_prompt; t++) prompt[t] = (int32_t)((first_token + 13 * t) % 3000 + 150);
    mx_seq_opts o = {.sampling = mx_sampling_defaults(), .max_new = max_new, .ignore_eos = true, .n_logprobs = -1};
    mx_error err = {{0}};
    mx_seq *s = mx_seq_create(NULL, prompt, n_prompt, &o, ONE_OFF_CTX, &err);
    CHECK_MSG(s != NULL, "%s", err.msg);
    return s;
}

// The decode group: admitted together, one prefill step, then decode steps; returns the plans built
// during its decode steps.
static uint64_t decode_group(mx_engine *e, int round) {
    mx_error err = {{0}};
    mx_seq *seqs[DECODE_SEQS];
    mx_engine_stats s0, s1;
    for (int k = 0; k < DECODE_SEQS; k++) {
        seqs[k] = seq_of(1000 * round + 37 * k, 20, REUSE_NEW);
        CHECK(seqs[k] && mx_engine_admit(e, seqs[k], &err) == 0);
    }
    CHECK_MSG(mx_engine_step(e, &err) == 0, "%s", err.msg);  // the prompts
    mx_engine_stats_get(e, &s0);
    CHECK_MSG(mx_engine_run(e, &err) == 0, "%s", err.msg);
    mx_engine_stats_get(e, &s1);
    CHECK_MSG(s1.decode_steps - s0.decode_steps == REUSE_NEW - 1, "%llu decode steps (want %d)",
              (unsigned long long)(s1.decode_steps - s0.decode_steps), REUSE_NEW - 1);
    for (int k = 0; k < DECODE_SEQS; k++) {
        mx_engine_release(e, seqs[k]);
        mx_seq_free(seqs[k]);
    }
    return s1.plans_built - s0.plans_built;
}

static void check_one_offs(mx_model *m) {
    mx_error err = {{0}};
    mx_engine_opts eo = {.n_slots = DECODE_SEQS, .max_ctx = ONE_OFF_CTX, .prefill_chunk = 256, .prefix_reuse = true,
                         .threads = 1, .batch_padding = MX_ENGINE_PAD, .step_tokens = 2048};
    mx_engine *e = mx_engine_create(m, &eo, &err);
    CHECK_MSG(e != NULL, "%s", err.msg);
    if (!e) return;
    CHECK_MSG(decode_group(e, 0) == 1, "the first decode group built other than its one decode shape");
    mx_engine_stats s0, s1;
    mx_engine_stats_get(e, &s0);
    for (int j = 0; j < ONE_OFFS; j++) {
        mx_seq *s = seq_of(500 + 7 * j, MX_ENGINE_PAD_MAX + 1 + j, 1);
        CHECK(s && mx_engine_admit(e, s, &err) == 0);
        CHECK_MSG(mx_engine_step(e, &err) == 0, "%s", err.msg);
        mx_engine_release(e, s);
        mx_seq_free(s);
    }
    mx_engine_stats_get(e, &s1);
    CHECK_MSG(s1.plans_built - s0.plans_built == ONE_OFFS && s1.plans_evicted > 0,
              "%d one-off steps built %llu plans and evicted %llu (want %d built, some evicted)", ONE_OFFS,
              (unsigned long long)(s1.plans_built - s0.plans_built), (unsigned long long)s1.plans_evicted, ONE_OFFS);
    uint64_t rebuilt = decode_group(e, 1);
    CHECK_MSG(rebuilt == 0, "after %d one-off steps the recurring decode shape's plan was built again (%llu plans)",
              ONE_OFFS, (unsigned long long)rebuilt);
    printf("one-off steps: %d built, %llu evicted; the decode shape afterwards: %llu built\n", ONE_OFFS,
           (unsigned long long)s1.plans_evicted, (unsigned long long)rebuilt);
    mx_engine_free(e);
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
    check_level(m);
    check_one_offs(m);
    mx_model_free(m);
    mx_backend_free(be);
    return check_finish();
}
