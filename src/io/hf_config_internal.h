// SPDX-License-Identifier: MIT
// Shared by the files that parse config.json (hf_config*.c), private to src/io/: the typed field
// readers and the readers of each part of the config. Every function returns 0, or -1 with err
// naming `label` (the file) and the field that was wrong.
#ifndef MX_IO_HF_CONFIG_INTERNAL_H
#define MX_IO_HF_CONFIG_INTERNAL_H

#include <jansson.h>

#include "io/hf_config.h"

// Typed fields (hf_config_fields.c): absent or null -> def. Integers must lie in [lo, 2^30];
// `present` (may be NULL) tells whether the boolean was given.
int mx_config_get_int(json_t *o, const char *key, int def, int lo, int *out, const char *label, mx_error *err);
int mx_config_get_num(json_t *o, const char *key, double def, double *out, const char *label, mx_error *err);
int mx_config_get_bool(json_t *o, const char *key, bool def, bool *out, bool *present, const char *label,
                       mx_error *err);

// rope_theta and rope_scaling / rope_parameters (hf_config_rope.c); needs head_dim and rope_dim set.
int mx_config_read_rope(json_t *root, mx_config *cfg, const char *label, mx_error *err);
// `quantization` / `quantization_config` (hf_config_quant.c); needs model_type set.
int mx_config_read_quantization(json_t *root, mx_config *cfg, const char *label, mx_error *err);
// Family fields (hf_config_family.c); they need the common sizes set.
int mx_config_read_gemma(json_t *root, mx_config *cfg, const char *label, mx_error *err);
int mx_config_read_gpt_oss(json_t *root, mx_config *cfg, const char *label, mx_error *err);
int mx_config_read_deepseek(json_t *root, mx_config *cfg, const char *label, mx_error *err);
int mx_config_read_phi3_window(json_t *root, mx_config *cfg, const char *label, mx_error *err);

#endif
