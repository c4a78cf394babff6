// SPDX-License-Identifier: MIT
// Random models for `mlxcel bench` (app/bench_model.c): the named shapes (--shape), quantization
// added to a config (--q-bits, --q-group-size, --q-mode), and the folder of random weights for a
// config.json, written when missing or different, so any architecture can be timed without a
// download.
#ifndef MX_APP_BENCH_MODEL_H
#define MX_APP_BENCH_MODEL_H

#include <stdint.h>

#define BENCH_SEED 0x6d6c7863656cULL  // "mlxcel": the seed of random weights and prompts

// The config.json text of a named shape (qwen3-0.6b, ..., qwen3-30b-a3b), or NULL when unknown.
const char *bench_shape_config(const char *name);
// text (a config.json) with `"quantization"` and `"quantization_config"` of that format appended to
// its top-level object (malloc'ed), or NULL when it has none.
char *bench_config_with_quant(const char *text, int bits, int group, const char *mode);
// Makes sure dir holds the random model of config_text; 0, or -1 after printing why.
int bench_random_model(const char *dir, const char *config_text);
// The bench's 64-bit mixer (random weights and prompts) and string hash (FNV-1a: tensor names and
// config labels).
uint64_t bench_splitmix(uint64_t x);
uint64_t bench_hash_str(const char *s);

#endif
