// SPDX-License-Identifier: MIT
// The mixed-bit recipes of mlx-lm's convert (`--quant-predicate mixed_X_Y`), modelled on llama.cpp's
// Q4_K_M: every quantized module gets group size 64 and the low bit width, except v_proj and
// down_proj in the first and last eighth of the layers and in every third layer between them, and
// the embedding and lm_head, which get the high bit width. Each chosen module is recorded per layer
// in config.json's quantization.
#ifndef MX_CONVERT_RECIPE_H
#define MX_CONVERT_RECIPE_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

typedef struct cv_recipe {
    int low_bits, high_bits;
    int group_size;      // always 64
    int layer_location;  // index of the layer number in a dotted module path
    int num_layers;
} cv_recipe;

// Parses the recipe name; `modules` are the module paths of the model (the layer position is read
// from the first one containing "down_proj"). Fails on an unknown name or a model without down_proj.
int cv_recipe_init(cv_recipe *r, const char *name, const char *const *modules, size_t n_modules,
                   int num_layers, mx_error *err);

// Bits for one module, or 0 if the recipe leaves it unquantized. dim1 is the module weight's
// shape[1] (mlx-lm checks that axis, which is the output axis of stacked experts).
int cv_recipe_bits(const cv_recipe *r, const char *module, int64_t dim1);

// The recipe names, NULL-terminated (for usage text).
extern const char *const cv_recipe_names[];

#endif
