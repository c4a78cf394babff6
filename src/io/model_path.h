// SPDX-License-Identifier: MIT
// Resolves the -m argument: a model folder; else a Hugging Face repo id ("org/name") found in the
// local Hugging Face cache ($HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub) with
// a loadable snapshot of its main branch (config.json, tokenizer.json, all weights); else the repo is downloaded from the Hub into that cache
// (src/hub: only the missing files; progress on stderr). A miss names every place looked at.
#ifndef MX_IO_MODEL_PATH_H
#define MX_IO_MODEL_PATH_H

#include <stddef.h>

#include "core/error.h"

int mx_model_path_resolve(const char *arg, char *out, size_t cap, mx_error *err);

#endif
