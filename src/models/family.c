// SPDX-License-Identifier: MIT
// The family table (see family.h). Rows are in the order `info` and error messages list them.
#include "models/family.h"

#include <pthread.h>
#include <string.h>

static const mx_family families[] = {
    {.model_type = "qwen3", .runs = true, .qk_norm = true, .tied_default = true},
    {.model_type = "qwen2", .runs = true, .qkv_bias = true, .tied_default = true},
    {.model_type = "llama", .runs = true, .tied_default = true},
    {.model_type = "mistral", .runs = true, .tied_default = true},
    {.model_type = "qwen3_moe", .runs = true, .qk_norm = true, .moe = true, .n_experts_key = "num_experts",
     .router = "mlp.gate"},
    {.model_type = "gemma3_text", .runs = true, .qk_norm = true, .tied_default = true, .gemma = true},
    {.model_type = "phi3", .runs = true, .fused_qkv_gate_up = true},
    {.model_type = "gpt_oss", .runs = true, .qkv_bias = true, .moe = true, .attn_sinks = true, .o_bias = true,
     .expert_biases = true, .clamped_swiglu = true, .n_experts_key = "num_local_experts", .router = "mlp.router",
     .split_gate_up = true},
    {.model_type = "deepseek_v3", .runs = true, .moe = true, .latent_attention = true, .n_experts_key = "n_routed_experts", .float_module = "mlp.gate",
     .keep_dtype = "e_score_correction_bias", .split_kv_b = true, .drop_extra_layers = true},
};

enum { N_FAMILIES = sizeof families / sizeof families[0] };

const mx_family *mx_family_find(const char *model_type) {
    for (int i = 0; model_type && i < N_FAMILIES; i++)
        if (strcmp(families[i].model_type, model_type) == 0) return &families[i];
    return NULL;
}

static char names_all[512], names_runnable[512];
static pthread_once_t names_once = PTHREAD_ONCE_INIT;

static void append_name(char *list, size_t cap, const char *name) {
    if (list[0]) strncat(list, ", ", cap - strlen(list) - 1);
    strncat(list, name, cap - strlen(list) - 1);
}

static void build_names(void) {
    for (int i = 0; i < N_FAMILIES; i++) {
        append_name(names_all, sizeof names_all, families[i].model_type);
        if (families[i].runs) append_name(names_runnable, sizeof names_runnable, families[i].model_type);
    }
}

const char *mx_family_names(bool runnable_only) {
    pthread_once(&names_once, build_names);
    return runnable_only ? names_runnable : names_all;
}

const char *mx_family_router(const mx_family *f) { return f->router ? f->router : "mlp.gate"; }

bool mx_family_layer_is_moe(const mx_family *f, const mx_config *c, int i) {
    if (!f || !f->moe || c->num_experts <= 0) return false;
    if (i < c->first_k_dense_replace || (c->moe_layer_freq > 1 && i % c->moe_layer_freq != 0)) return false;
    for (int k = 0; k < c->n_mlp_only_layers; k++)
        if (c->mlp_only_layers[k] == i) return false;
    int step = c->decoder_sparse_step > 0 ? c->decoder_sparse_step : 1;
    return (i + 1) % step == 0;
}
