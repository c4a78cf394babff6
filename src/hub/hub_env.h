// SPDX-License-Identifier: MIT
// The Hugging Face Hub settings, read from the environment the way huggingface_hub reads them:
//   HF_ENDPOINT     the Hub's base URL (default https://huggingface.co)
//   HF_TOKEN        access token; else the file $HF_TOKEN_PATH, else $HF_HOME/token
//   HF_HUB_OFFLINE  1/ON/YES/TRUE: no network at all, only the local cache
//   HF_HUB_CACHE    the cache folder; else $HF_HOME/hub; HF_HOME defaults to
//                   $XDG_CACHE_HOME/huggingface, else ~/.cache/huggingface
#ifndef MX_HUB_ENV_H
#define MX_HUB_ENV_H

#include <stdbool.h>

typedef struct mx_hub_env {
    char endpoint[1024];      // no trailing slash
    char token[1024];         // "" when there is none
    char token_source[1100];  // "HF_TOKEN" or the token file's path, for messages
    char token_file[1100];    // where a token file is looked for (named in 401/403 messages)
    char cache_dir[4096];     // the hub cache (holds models--ORG--NAME folders)
    bool offline;
} mx_hub_env;

void mx_hub_env_load(mx_hub_env *env);

#endif
