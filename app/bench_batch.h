// SPDX-License-Identifier: MIT
// `mlxcel bench --batch B` (app/bench_batch.c): B sequences decoded together through the generation
// engine exactly as the server's scheduler runs them (one engine, its batch step, the backend's
// token choice, the paged KV pool and prefix cache, detokenization when the model has a tokenizer),
// without HTTP; prints the aggregate decode rate, the mean step time and where a step's time goes.
#ifndef MX_APP_BENCH_BATCH_H
#define MX_APP_BENCH_BATCH_H

#include <stdbool.h>
#include <stdint.h>

#include "backends/backend.h"
#include "models/model.h"
#include "sample/sampler.h"

typedef struct bench_batch_opts {
    int batch;             // sequences decoded together
    int n_pp, n_tg;        // prompt tokens of each sequence, tokens each generates
    int reps;              // measured repetitions (the median is reported), after one warm-up
    int max_ctx;           // positions per sequence
    int threads;           // host threads of the engine (0: the cores available)
    mx_sampling sampling;  // every sequence's parameters; sequence k's seed is the seed + k
    bool print_ids;        // print sequence 0's generated ids of the first measured repetition
    uint64_t prompt_seed;  // prompts: token i of prompt j is bench_prompt_token(prompt_seed, j, i)
} bench_batch_opts;

// The median of v[n] (v is sorted in place).
double bench_median(double *v, int n);
// Token i of bench prompt j (prompt 0 is the plain bench's prompt).
int32_t bench_prompt_token(uint64_t seed, uint64_t j, int i, int vocab);

// Runs the batch bench on a loaded model (dir: its folder, for the tokenizer; label: how to name
// it). Returns the process exit code (commands.h).
int bench_batch(const char *cmd, mx_backend *be, mx_model *m, const char *dir, const char *label,
                const bench_batch_opts *o);

#endif
