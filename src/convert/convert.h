// SPDX-License-Identifier: MIT
// `mlxcel convert` as a library call: reads a Hugging Face checkpoint folder (config.json plus
// model*.safetensors), optionally quantizes it the way mlx-lm does (affine 2-8 bit, mxfp4, mxfp8,
// mixed recipes), and writes an MLX model folder: config.json with `quantization` and
// `quantization_config`, safetensors shards of at most 5 GiB with {"format": "mlx"} metadata,
// model.safetensors.index.json, and the tokenizer/generation files copied over.
//
// Streaming: tensors are processed one at a time, in blocks of rows split across threads, and
// written in place into pre-sized shard files, so memory stays near one block, not the model.
// Atomic-ish: everything is written into a sibling temporary folder that is renamed into place
// only when complete; on failure it is removed. The call never prints; progress goes through an
// optional callback.
#ifndef MX_CONVERT_CONVERT_H
#define MX_CONVERT_CONVERT_H

#include <stdbool.h>
#include <stdint.h>

#include "core/error.h"
#include "core/quant.h"

typedef void (*mx_convert_progress_fn)(void *user, int64_t done_bytes, int64_t total_bytes);

typedef struct mx_convert_opts {
    const char *hf_path;      // source folder
    const char *mlx_path;     // output folder (must not exist unless force)
    bool quantize;
    mx_quant_mode q_mode;     // AFFINE (default), MXFP4 or MXFP8
    int q_bits;               // 0: the mode's default (affine 4, mxfp4 4, mxfp8 8)
    int q_group_size;         // 0: the mode's default (affine 64, mx 32)
    int dtype;                // mx_dtype BF16/F16/F32, or -1: config torch_dtype, else keep
    const char *recipe;       // "mixed_3_6"... or NULL
    // Stacked MoE experts in this mode instead (MXFP4 or MXFP8 with the mode's bits and group
    // size; NONE: as everything else), each expert module with its override in config.json:
    // mlx-community's gpt-oss layout is experts mxfp4, the rest affine 8-bit.
    mx_quant_mode experts_q_mode;
    bool force;               // replace an existing output folder
    int threads;              // 0: all online cores
    int64_t max_shard_bytes;  // 0: 5 GiB
    mx_convert_progress_fn progress;
    void *progress_user;
} mx_convert_opts;

void mx_convert_opts_init(mx_convert_opts *o);

// Checks the options alone (flag values), before touching any file. Returns 0 or -1 with a message.
int mx_convert_check_opts(const mx_convert_opts *o, mx_error *err);

// Runs the conversion. Returns 0, or -1 with a message naming the file, tensor or option at fault.
int mx_convert(const mx_convert_opts *o, mx_error *err);

#endif
