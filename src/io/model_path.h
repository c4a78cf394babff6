// SPDX-License-Identifier: MIT
// Resolves the -m argument: a model folder, or a Hugging Face repo id ("org/name") looked up in the
// local Hugging Face cache ($HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub). Nothing
// is downloaded; a miss names every place that was looked at.
#ifndef MX_IO_MODEL_PATH_H
#define MX_IO_MODEL_PATH_H

#include <stddef.h>

#include "core/error.h"

int mx_model_path_resolve(const char *arg, char *out, size_t cap, mx_error *err);

#endif
