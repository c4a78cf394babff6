// SPDX-License-Identifier: MIT
// Reads the Hub settings from the environment (see hub_env.h). A token file may end with a
// newline or spaces; those are not part of the token.
#include "hub/hub_env.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "io/mapped_file.h"

static const char *env_value(const char *name) {
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

static void hf_home(char *out, size_t cap) {
    const char *v;
    if ((v = env_value("HF_HOME"))) {
        snprintf(out, cap, "%s", v);
    } else if ((v = env_value("XDG_CACHE_HOME"))) {
        snprintf(out, cap, "%s/huggingface", v);
    } else {
        const char *home = env_value("HOME");
        snprintf(out, cap, "%s/.cache/huggingface", home ? home : "");
    }
}

static bool is_true(const char *v) {
    return v && (strcmp(v, "1") == 0 || strcasecmp(v, "on") == 0 || strcasecmp(v, "yes") == 0 ||
                 strcasecmp(v, "true") == 0);
}

static void trim(char *s) {
    size_t start = 0, n = strlen(s);
    while (start < n && isspace((unsigned char)s[start])) start++;
    while (n > start && isspace((unsigned char)s[n - 1])) n--;
    memmove(s, s + start, n - start);
    s[n - start] = 0;
}

void mx_hub_env_load(mx_hub_env *env) {
    memset(env, 0, sizeof *env);
    char home[3000];
    hf_home(home, sizeof home);

    const char *v = env_value("HF_ENDPOINT");
    snprintf(env->endpoint, sizeof env->endpoint, "%s", v ? v : "https://huggingface.co");
    size_t n = strlen(env->endpoint);
    while (n > 0 && env->endpoint[n - 1] == '/') env->endpoint[--n] = 0;

    if ((v = env_value("HF_HUB_CACHE")))
        snprintf(env->cache_dir, sizeof env->cache_dir, "%s", v);
    else
        snprintf(env->cache_dir, sizeof env->cache_dir, "%s/hub", home);

    env->offline = is_true(env_value("HF_HUB_OFFLINE"));

    if ((v = env_value("HF_TOKEN_PATH")))
        snprintf(env->token_file, sizeof env->token_file, "%s", v);
    else
        snprintf(env->token_file, sizeof env->token_file, "%s/token", home);
    if ((v = env_value("HF_TOKEN"))) {
        snprintf(env->token, sizeof env->token, "%s", v);
        trim(env->token);
        snprintf(env->token_source, sizeof env->token_source, "HF_TOKEN");
        return;
    }
    mx_error ignored = {{0}};
    char *text = mx_read_text_file(env->token_file, NULL, &ignored);
    if (!text) return;
    snprintf(env->token, sizeof env->token, "%s", text);
    free(text);
    trim(env->token);
    if (env->token[0]) snprintf(env->token_source, sizeof env->token_source, "%s", env->token_file);
}
