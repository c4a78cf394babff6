// SPDX-License-Identifier: MIT
// The engine's on-demand KV blocks and preemption (generate/engine.h), on the CPU demo model: four
// sequences whose prompts fit a pool of 10 blocks but which cannot all reach their max_new tokens in
// it are admitted together, preempt each other and all finish with the tokens a large pool gives
// (greedy and seeded sampling, with and without the prefix cache, so the resume recomputes either
// from its cached blocks or from nothing); while a sequence is preempted a new one waits; releasing
// a preempted sequence (a cancelled request) gives every block back; a sequence that can never fit
// is refused with the numbers; sequences without max_new all start in a pool smaller than their
// contexts together.
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "test_demo.h"
#include "generate/engine.h"

enum { N_SEQ = 4, N_PROMPT = 20, MAX_NEW = 40, CTX = 256 };

// Sequence k: n_prompt tokens, up to max_new generated (-1: until the context is full).
static mx_seq *make_seq_n(int k, int n_prompt, int max_new, int ctx) {
    int32_t prompt[N_PROMPT];
    for (int t = 0; t < n_prompt; t++) prompt[t] = (int32_t)((37 * k + 11 * t + 5) % 3000 + 200);
    mx_seq_opts o = {.sampling = mx_sampling_defaults(), .max_new = max_new, .ignore_eos = true, .n_logprobs = -1};
    if (k % 2) {  // seeded sampling on every other sequence
        o.sampling.temp = 0.8f;
        o.sampling.top_p = 0.9f;
        o.sampling.seed = 100 + (uint64_t)k;
        o.sampling.has_seed = true;
    }
    mx_error err = {{0}};
    mx_seq *s = mx_seq_create(NULL, prompt, n_prompt, &o, ctx, &err);
    CHECK_MSG(s != NULL, "%s", err.msg);
    return s;
}

static mx_seq *make_seq(int k) { return make_seq_n(k, N_PROMPT, MAX_NEW, CTX); }

// Sequences without max_new (they may fill the context, 64 positions = 4 blocks) in a pool of 8
// blocks: all four start at once (a reservation of their whole context would admit two), and each
// fills its context with the tokens a large pool gives. out: 44 tokens per sequence.
static uint64_t run_unbounded(mx_model *m, int kv_size, int32_t out[N_SEQ][64]) {
    mx_error err = {{0}};
    mx_engine_opts eo = {.n_slots = N_SEQ, .max_ctx = 64, .prefill_chunk = 16, .prefix_reuse = true, .threads = 1,
                         .kv_size = kv_size};
    mx_engine *e = mx_engine_create(m, &eo, &err);
    CHECK_MSG(e != NULL, "%s", err.msg);
    if (!e) return 0;
    mx_seq *seqs[N_SEQ];
    for (int k = 0; k < N_SEQ; k++) {
        seqs[k] = make_seq_n(k, 12, -1, 64);
        CHECK_MSG(mx_engine_admit(e, seqs[k], &err) == 0, "sequence %d without max_new waits", k);
    }
    CHECK(mx_engine_running(e) == N_SEQ);
    CHECK_MSG(mx_engine_run(e, &err) == 0, "%s", err.msg);
    for (int k = 0; k < N_SEQ; k++) {
        int n = 0;
        const int32_t *g = mx_seq_generated(seqs[k], &n);
        CHECK_MSG(n == 64 - 12 && mx_seq_finish_reason(seqs[k]) == MX_FINISH_LENGTH, "sequence %d: %d tokens", k, n);
        memcpy(out[k], g, sizeof(int32_t) * (size_t)(n < 64 ? n : 64));
        mx_engine_release(e, seqs[k]);
        mx_seq_free(seqs[k]);
    }
    mx_engine_stats st;
    mx_engine_stats_get(e, &st);
    mx_engine_free(e);
    return st.preemptions;
}

// Runs N_SEQ sequences together on an engine with a pool of kv_size positions; their generated ids
// go to out[k]. Returns the engine's preemptions.
static uint64_t run_all(mx_model *m, int kv_size, bool prefix_reuse, int32_t out[N_SEQ][MAX_NEW]) {
    mx_error err = {{0}};
    mx_engine_opts eo = {.n_slots = N_SEQ, .max_ctx = CTX, .prefill_chunk = 16, .prefix_reuse = prefix_reuse,
                         .threads = 1, .kv_size = kv_size};
    mx_engine *e = mx_engine_create(m, &eo, &err);
    CHECK_MSG(e != NULL, "%s", err.msg);
    if (!e) return 0;
    mx_seq *seqs[N_SEQ];
    for (int k = 0; k < N_SEQ; k++) {
        seqs[k] = make_seq(k);
        CHECK_MSG(mx_engine_admit(e, seqs[k], &err) == 0, "sequence %d not admitted together", k);
    }
    CHECK_MSG(mx_engine_run(e, &err) == 0, "%s", err.msg);
    for (int k = 0; k < N_SEQ; k++) {
        int n = 0;
        const int32_t *g = mx_seq_generated(seqs[k], &n);
        CHECK_MSG(n == MAX_NEW && mx_seq_finish_reason(seqs[k]) == MX_FINISH_LENGTH, "sequence %d: %d tokens, finish %d %s", k, n,
                  (int)mx_seq_finish_reason(seqs[k]), mx_seq_error(seqs[k]));
        memcpy(out[k], g, sizeof(int32_t) * (size_t)(n < MAX_NEW ? n : MAX_NEW));
        mx_engine_release(e, seqs[k]);
        mx_seq_free(seqs[k]);
    }
    mx_engine_stats st;
    mx_engine_stats_get(e, &st);
    CHECK_MSG(st.kv_blocks_used == 0, "%d blocks still held", st.kv_blocks_used);
    // Tokens fed again are counted: none without a preemption; without the prefix cache every
    // preempted sequence had fed at least one token, and feeds it again.
    CHECK_MSG(st.preemptions > 0 || st.recomputed_tokens == 0, "%llu tokens recomputed without a preemption",
              (unsigned long long)st.recomputed_tokens);
    CHECK_MSG(prefix_reuse || st.recomputed_tokens >= st.preemptions,
              "%llu preemptions but %llu tokens recomputed", (unsigned long long)st.preemptions,
              (unsigned long long)st.recomputed_tokens);
    CHECK_MSG(st.t_forward > 0 && st.t_prepare >= 0 && st.t_finish >= 0 && st.t_host_choose >= 0,
              "step phases %g %g %g %g s", st.t_prepare, st.t_forward, st.t_host_choose, st.t_finish);
    mx_engine_free(e);
    return st.preemptions;
}

// A preempted sequence is released (its request cancelled) while another waits to be admitted.
static void cancel_preempted(mx_model *m) {
    mx_error err = {{0}};
    mx_engine_opts eo = {.n_slots = N_SEQ + 1, .max_ctx = CTX, .prefill_chunk = 16, .prefix_reuse = true,
                         .threads = 1, .kv_size = 10 * 16};
    mx_engine *e = mx_engine_create(m, &eo, &err);
    CHECK_MSG(e != NULL, "%s", err.msg);
    if (!e) return;
    mx_seq *seqs[N_SEQ + 1];
    for (int k = 0; k <= N_SEQ; k++) seqs[k] = make_seq(k);
    for (int k = 0; k < N_SEQ; k++) CHECK(mx_engine_admit(e, seqs[k], &err) == 0);
    mx_engine_stats st = {0};
    for (int i = 0; i < 4 * CTX && st.preemptions == 0 && mx_engine_running(e) > 0; i++) {
        CHECK(mx_engine_step(e, &err) == 0);
        mx_engine_stats_get(e, &st);
    }
    CHECK_MSG(st.preemptions > 0, "no preemption in a pool of 10 blocks");
    // the sequence preempted in that step waits until the next step; a new one queues behind it
    CHECK_MSG(mx_engine_admit(e, seqs[N_SEQ], &err) == 1, "admitted ahead of a preempted sequence");
    for (int k = 0; k < N_SEQ; k++) mx_engine_release(e, seqs[k]);
    mx_engine_stats_get(e, &st);
    CHECK_MSG(st.kv_blocks_used == 0 && mx_engine_running(e) == 0, "%d blocks held, %d running after release",
              st.kv_blocks_used, mx_engine_running(e));
    CHECK(mx_engine_admit(e, seqs[N_SEQ], &err) == 0);
    CHECK(mx_engine_run(e, &err) == 0);
    int n = 0;
    mx_seq_generated(seqs[N_SEQ], &n);
    CHECK(n == MAX_NEW);
    mx_engine_release(e, seqs[N_SEQ]);
    for (int k = 0; k <= N_SEQ; k++) mx_seq_free(seqs[k]);
    mx_engine_free(e);
}

int main(void) {
    mx_error err = {{0}};
    mx_backend *be;
    mx_model *m = test_demo_model(&be);
    if (!m) return check_finish();
    static int32_t ref[N_SEQ][MAX_NEW], got[N_SEQ][MAX_NEW];
    // 60 positions (4 blocks) per sequence: 16 blocks for all, 2 for each prompt.
    CHECK(run_all(m, 4096, true, ref) == 0);
    uint64_t p1 = run_all(m, 10 * 16, true, got);
    CHECK_MSG(p1 > 0, "no preemption in a pool of 10 blocks");
    CHECK_MSG(memcmp(ref, got, sizeof ref) == 0, "outputs differ after preemption (prefix cache)");
    memset(got, 0, sizeof got);
    uint64_t p2 = run_all(m, 10 * 16, false, got);
    CHECK_MSG(p2 > 0, "no preemption without the prefix cache");
    CHECK_MSG(memcmp(ref, got, sizeof ref) == 0, "outputs differ after preemption (full recompute)");
    cancel_preempted(m);
    static int32_t uref[N_SEQ][64], ugot[N_SEQ][64];
    CHECK(run_unbounded(m, 4096, uref) == 0);
    CHECK_MSG(run_unbounded(m, 8 * 16, ugot) > 0, "no preemption for sequences without max_new");
    CHECK_MSG(memcmp(uref, ugot, sizeof uref) == 0, "outputs without max_new differ after preemption");

    // A sequence that could never reach max_new in the pool is refused with the numbers.
    mx_engine_opts eo = {.n_slots = 1, .max_ctx = CTX, .prefix_reuse = true, .threads = 1, .kv_size = 2 * 16};
    mx_engine *e = mx_engine_create(m, &eo, &err);
    CHECK_MSG(e != NULL, "%s", err.msg);
    mx_seq *s = make_seq(0);
    if (e && s) {
        CHECK(mx_engine_admit(e, s, &err) == -1);
        CHECK_MSG(strstr(err.msg, "60 positions") && strstr(err.msg, "holds 32 positions"), "%s", err.msg);
    }
    mx_seq_free(s);
    mx_engine_free(e);
    mx_model_free(m);
    mx_backend_free(be);
    return check_finish();
}
