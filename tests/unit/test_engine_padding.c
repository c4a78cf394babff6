// SPDX-License-Identifier: MIT
// Step padding (generate/engine.h: mx_engine_opts.batch_padding), forced on the CPU demo model:
// twelve sequences (greedy and seeded top-p, prompts of different lengths, half admitted three steps
// after the others, so steps mix prompt chunks with decode rows and the number of rows changes as
// sequences end) give exactly the tokens of the same run without padding, also in a pool small
// enough to preempt; and the padding slot's block lies outside the pool (the pool's counters are
// those of the unpadded engine). A step budget of four chunks (mx_engine_opts.step_tokens) also gives
// the same tokens, in fewer steps.
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "test_demo.h"
#include "generate/engine.h"

enum { N_SEQ = 12, MAX_PROMPT = 40, MAX_NEW = 24, CTX = 128 };

static mx_seq *make_seq(int k) {
    int32_t prompt[MAX_PROMPT];
    int n_prompt = 6 + (k * 7) % 30;
    for (int t = 0; t < n_prompt; t++) prompt[t] = (int32_t)((53 * k + 13 * t + 7) % 3000 + 200);
    mx_seq_opts o = {.sampling = mx_sampling_defaults(), .max_new = MAX_NEW - (k % 3) * 5, .ignore_eos = true,
                     .n_logprobs = -1};
    if (k % 2) {
        o.sampling.temp = 0.8f;
        o.sampling.top_p = 0.9f;
        o.sampling.seed = 300 + (uint64_t)k;
        o.sampling.has_seed = true;
    }
    mx_error err = {{0}};
    mx_seq *s = mx_seq_create(NULL, prompt, n_prompt, &o, CTX, &err);
    CHECK_MSG(s != NULL, "%s", err.msg);
    return s;
}

// Runs the twelve sequences with the given padding and pool; out[k] gets sequence k's tokens
// (zero-filled after its end). Returns the engine's stats.
static mx_engine_stats run(mx_model *m, int padding, int kv_size, int step_tokens, int32_t out[N_SEQ][MAX_NEW]) {
    mx_error err = {{0}};
    mx_engine_stats st = {0};
    mx_engine_opts eo = {.n_slots = N_SEQ, .max_ctx = CTX, .prefill_chunk = 16, .prefix_reuse = true, .threads = 1,
                         .kv_size = kv_size, .batch_padding = padding, .step_tokens = step_tokens};
    mx_engine *e = mx_engine_create(m, &eo, &err);
    CHECK_MSG(e != NULL, "%s", err.msg);
    if (!e) return st;
    mx_seq *seqs[N_SEQ];
    for (int k = 0; k < N_SEQ; k++) seqs[k] = make_seq(k);
    for (int k = 0; k < N_SEQ / 2; k++) CHECK(mx_engine_admit(e, seqs[k], &err) == 0);
    for (int i = 0; i < 3; i++) CHECK_MSG(mx_engine_step(e, &err) == 0, "%s", err.msg);
    for (int k = N_SEQ / 2; k < N_SEQ; k++) CHECK(mx_engine_admit(e, seqs[k], &err) == 0);
    CHECK_MSG(mx_engine_run(e, &err) == 0, "%s", err.msg);
    memset(out, 0, sizeof(int32_t) * N_SEQ * MAX_NEW);
    for (int k = 0; k < N_SEQ; k++) {
        int n = 0;
        const int32_t *g = mx_seq_generated(seqs[k], &n);
        CHECK_MSG(n == MAX_NEW - (k % 3) * 5 && mx_seq_finish_reason(seqs[k]) == MX_FINISH_LENGTH,
                  "padding %d: sequence %d made %d tokens (%s)", padding, k, n, mx_seq_error(seqs[k]));
        memcpy(out[k], g, sizeof(int32_t) * (size_t)(n < MAX_NEW ? n : MAX_NEW));
        mx_engine_release(e, seqs[k]);
        mx_seq_free(seqs[k]);
    }
    mx_engine_stats_get(e, &st);
    CHECK_MSG(mx_engine_kv_size(e) == (kv_size + 15) / 16 * 16, "padding %d: pool of %d positions", padding,
              mx_engine_kv_size(e));
    mx_engine_free(e);
    return st;
}

int main(void) {
    mx_backend *be;
    mx_model *m = test_demo_model(&be);
    if (!m) return check_finish();
    static int32_t ref[N_SEQ][MAX_NEW], got[N_SEQ][MAX_NEW];
    mx_engine_stats s0 = run(m, 1, 4096, 16, ref);
    mx_engine_stats s1 = run(m, 8, 4096, 16, got);
    CHECK_MSG(memcmp(ref, got, sizeof ref) == 0, "padding to 8 changed the tokens");
    CHECK_MSG(s0.padding_tokens == 0 && s1.padding_tokens > 0, "padding tokens: %llu unpadded, %llu padded",
              (unsigned long long)s0.padding_tokens, (unsigned long long)s1.padding_tokens);
    CHECK_MSG(s0.kv_blocks == s1.kv_blocks && s1.kv_blocks_used == 0 && s0.generated_tokens == s1.generated_tokens &&
                  s0.steps == s1.steps,
              "padded engine: %d blocks (unpadded %d), %d used, %llu tokens in %llu steps (unpadded %llu in %llu)",
              s1.kv_blocks, s0.kv_blocks, s1.kv_blocks_used, (unsigned long long)s1.generated_tokens,
              (unsigned long long)s1.steps, (unsigned long long)s0.generated_tokens, (unsigned long long)s0.steps);
    run(m, 16, 4096, 16, got);
    CHECK_MSG(memcmp(ref, got, sizeof ref) == 0, "padding to 16 changed the tokens");
    // A pool of 24 blocks for twelve sequences of up to 4 blocks: preemptions while padded.
    mx_engine_stats sp = run(m, 8, 24 * 16, 16, got);
    CHECK_MSG(sp.preemptions > 0, "no preemption in a pool of 24 blocks");
    CHECK_MSG(memcmp(ref, got, sizeof ref) == 0, "padding with preemptions changed the tokens");
    // Prompt chunks of several sequences in one step: same tokens, fewer steps.
    mx_engine_stats sb = run(m, 1, 4096, 64, got);
    CHECK_MSG(memcmp(ref, got, sizeof ref) == 0, "a step budget of 64 prompt tokens changed the tokens");
    CHECK_MSG(sb.steps < s0.steps, "a step budget of 64 prompt tokens took %llu steps (16: %llu)",
              (unsigned long long)sb.steps, (unsigned long long)s0.steps);
    mx_model_free(m);
    mx_backend_free(be);
    return check_finish();
}
