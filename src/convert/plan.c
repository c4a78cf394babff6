// SPDX-License-Identifier: MIT
// Building the conversion plan (see plan.h). Two passes: first the list of output tensors with
// their shapes (stacking experts, dropping what mlx-lm drops), then the quantization choice per
// weight, which needs the whole module list for the mixed recipes.
#include "convert/plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "convert/recipe.h"

const char *const cv_supported_archs[] = {"qwen3", "qwen2", "llama", "mistral", "qwen3_moe", NULL};

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

static bool is_float(mx_dtype t) { return t == MX_DTYPE_F16 || t == MX_DTYPE_BF16 || t == MX_DTYPE_F32; }

static int push_item(cv_plan *p, size_t *cap, cv_item it, mx_error *err) {
    if (p->n == *cap) {
        size_t nc = *cap ? *cap * 2 : 64;
        cv_item *items = realloc(p->items, nc * sizeof(*items));
        if (!items) return mx_fail(err, "out of memory");
        p->items = items;
        *cap = nc;
    }
    p->items[p->n++] = it;
    return 0;
}

// Parses "<prefix>.mlp.experts.<e>.<proj>.weight": returns e and writes the stacked name
// "<prefix>.mlp.switch_mlp.<proj>.weight", or returns -1 if the name is not an expert weight.
static long expert_index(const char *name, char *stacked, size_t cap) {
    const char *m = strstr(name, ".mlp.experts.");
    if (!m || !ends_with(name, ".weight")) return -1;
    const char *num = m + strlen(".mlp.experts.");
    char *end;
    long e = strtol(num, &end, 10);
    if (end == num || *end != '.' || e < 0) return -1;
    snprintf(stacked, cap, "%.*s.mlp.switch_mlp.%s", (int)(m - name), name, end + 1);
    return e;
}

static bool config_bool(const json_t *config, const char *key, bool dflt) {
    const json_t *v = json_object_get(config, key);
    return json_is_boolean(v) ? json_is_true(v) : dflt;
}

static int add_source_items(const mx_safetensors *st, const json_t *config, const cv_plan_opts *o,
                            cv_plan *p, mx_error *err) {
    const char *arch = json_string_value(json_object_get(config, "model_type"));
    bool moe = strcmp(arch, "qwen3_moe") == 0;
    // mlx-lm's defaults when the key is missing: tied for the dense families, untied for qwen3_moe.
    bool tied = config_bool(config, "tie_word_embeddings", !moe);
    long n_experts = (long)json_integer_value(json_object_get(config, "num_experts"));
    size_t cap = 0;
    char stacked[512];
    for (size_t i = 0; i < mx_st_count(st); i++) {
        const mx_st_tensor *t = mx_st_at(st, i);
        if (strstr(t->name, "rotary_emb.inv_freq")) continue;
        if (tied && strcmp(t->name, "lm_head.weight") == 0) continue;
        if (!is_float(t->dtype))
            return mx_fail(err, "tensor %s has dtype %s; only F16, BF16 and F32 can be converted",
                           t->name, mx_dtype_name(t->dtype));
        if (ends_with(t->name, ".scales") || ends_with(t->name, ".biases"))
            return mx_fail(err, "tensor %s: the checkpoint is already quantized", t->name);
        cv_item it = {0};
        long e = moe ? expert_index(t->name, stacked, sizeof stacked) : -1;
        if (e > 0) {
            if (e >= n_experts)
                return mx_fail(err, "tensor %s: expert %ld but num_experts is %ld", t->name, e,
                               n_experts);
            continue;  // stacked with expert 0
        }
        if (e == 0) {
            if (n_experts <= 0) return mx_fail(err, "tensor %s: config has no num_experts", t->name);
            it.src = calloc((size_t)n_experts, sizeof(*it.src));
            if (!it.src) return mx_fail(err, "out of memory");
            it.n_src = (int)n_experts;
            size_t plen = (size_t)(strstr(t->name, ".mlp.experts.") - t->name);
            const char *proj = strchr(t->name + plen + strlen(".mlp.experts."), '.') + 1;
            for (long k = 0; k < n_experts; k++) {
                char nm[512];
                snprintf(nm, sizeof nm, "%.*s.mlp.experts.%ld.%s", (int)plen, t->name, k, proj);
                const mx_st_tensor *s = mx_st_find(st, nm);
                if (!s) {
                    free(it.src);
                    return mx_fail(err, "expert tensor %s is missing", nm);
                }
                if (s->dtype != t->dtype || s->ndim != t->ndim ||
                    memcmp(s->shape, t->shape, sizeof(int64_t) * (size_t)t->ndim) != 0) {
                    free(it.src);
                    return mx_fail(err, "expert tensor %s differs in dtype or shape from expert 0", nm);
                }
                it.src[k] = s;
            }
            it.name = strdup(stacked);
            it.ndim = t->ndim + 1;
            it.shape[0] = n_experts;
            for (int d = 0; d < t->ndim; d++) it.shape[d + 1] = t->shape[d];
        } else {
            it.src = calloc(1, sizeof(*it.src));
            if (!it.src) return mx_fail(err, "out of memory");
            it.src[0] = t;
            it.n_src = 1;
            it.name = strdup(t->name);
            it.ndim = t->ndim;
            if (t->ndim > 3) {
                free(it.src);
                free(it.name);
                return mx_fail(err, "tensor %s has %d dimensions (at most 3 supported)", t->name,
                               t->ndim);
            }
            for (int d = 0; d < t->ndim; d++) it.shape[d] = t->shape[d];
        }
        if (!it.name) return mx_fail(err, "out of memory");
        it.cols = it.ndim ? it.shape[it.ndim - 1] : 1;
        int64_t numel = 1;
        for (int d = 0; d < it.ndim; d++) numel *= it.shape[d];
        it.rows = it.cols ? numel / it.cols : 0;
        it.dtype = o->dtype >= 0 ? (mx_dtype)o->dtype : t->dtype;
        it.q.mode = MX_QUANT_NONE;
        p->total_parameters += numel;
        if (push_item(p, &cap, it, err) != 0) {
            free(it.src);
            free(it.name);
            return -1;
        }
    }
    return 0;
}

static json_t *layer_entry(int group_size, int bits) {
    return json_pack("{s:i, s:i}", "group_size", group_size, "bits", bits);
}

static int choose_quantization(const json_t *config, const cv_plan_opts *o, cv_plan *p,
                               mx_error *err) {
    const char *arch = json_string_value(json_object_get(config, "model_type"));
    bool moe = strcmp(arch, "qwen3_moe") == 0;
    p->quantization = json_pack("{s:i, s:i, s:s}", "group_size", o->q.group_size, "bits", o->q.bits,
                                "mode", mx_quant_mode_name(o->q.mode));
    cv_recipe recipe;
    if (o->recipe) {
        const char **mods = calloc(p->n + 1, sizeof(*mods));
        if (!mods) return mx_fail(err, "out of memory");
        for (size_t i = 0; i < p->n; i++) mods[i] = p->items[i].name;
        int layers = (int)json_integer_value(json_object_get(config, "num_hidden_layers"));
        int rc = cv_recipe_init(&recipe, o->recipe, mods, p->n, layers, err);
        free(mods);
        if (rc != 0) return -1;
    }
    for (size_t i = 0; i < p->n; i++) {
        cv_item *it = &p->items[i];
        if (!ends_with(it->name, ".weight") || it->ndim < 2) continue;
        if (it->cols % o->q.group_size != 0) continue;  // MLX leaves these layers in float
        char module[512];
        snprintf(module, sizeof module, "%.*s", (int)(strlen(it->name) - strlen(".weight")), it->name);
        if (o->recipe) {
            int bits = cv_recipe_bits(&recipe, module, it->shape[1]);
            if (bits == 0) continue;
            it->q = (mx_quant){MX_QUANT_AFFINE, bits, recipe.group_size};
            json_object_set_new(p->quantization, module, layer_entry(recipe.group_size, bits));
        } else if (moe && ends_with(module, "mlp.gate")) {
            it->q = (mx_quant){MX_QUANT_AFFINE, 8, 64};
            json_object_set_new(p->quantization, module, layer_entry(64, 8));
        } else {
            it->q = o->q;
        }
        if (it->cols % it->q.group_size != 0)
            return mx_fail(err, "%s: input dimension %lld is not a multiple of group size %d",
                           it->name, (long long)it->cols, it->q.group_size);
    }
    return 0;
}

int cv_plan_build(const mx_safetensors *st, const json_t *config, const cv_plan_opts *o,
                  cv_plan *p, mx_error *err) {
    memset(p, 0, sizeof(*p));
    if (add_source_items(st, config, o, p, err) != 0 ||
        (o->quantize && choose_quantization(config, o, p, err) != 0)) {
        cv_plan_free(p);
        return -1;
    }
    return 0;
}

void cv_plan_free(cv_plan *p) {
    if (!p) return;
    for (size_t i = 0; i < p->n; i++) {
        free(p->items[i].name);
        free(p->items[i].src);
    }
    free(p->items);
    json_decref(p->quantization);
    memset(p, 0, sizeof(*p));
}
