// SPDX-License-Identifier: MIT
// Building the conversion plan (see plan.h). Two passes: first the list of output tensors with
// their shapes (stacking experts, dropping what mlx-lm drops), then the quantization choice per
// weight, which needs the whole module list for the mixed recipes.
#include "convert/plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "convert/recipe.h"
#include "models/family.h"

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}


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

// Fills an item's derived fields (rows, cols, dtype, no quantization yet) and appends it; frees
// the item's allocations on failure.
static int finish_item(cv_plan *p, size_t *cap, cv_item it, const mx_st_tensor *t, const mx_family *fam,
                       const cv_plan_opts *o, mx_error *err) {
    if (!it.name) {
        free(it.src);
        return mx_fail(err, "out of memory");
    }
    it.cols = it.ndim ? it.shape[it.ndim - 1] : 1;
    int64_t numel = 1;
    for (int d = 0; d < it.ndim; d++) numel *= it.shape[d];
    it.rows = it.cols ? numel / it.cols : 0;
    bool keep = fam->keep_dtype && ends_with(t->name, fam->keep_dtype);
    it.dtype = o->dtype >= 0 && !keep ? (mx_dtype)o->dtype : t->dtype;
    it.q.mode = MX_QUANT_NONE;
    p->total_parameters += numel;
    if (push_item(p, cap, it, err) != 0) {
        free(it.src);
        free(it.name);
        return -1;
    }
    return 0;
}

// One output tensor that is a strided view of the source tensor t (shape [d0, d1, d2] of ndim).
static int push_view(cv_plan *p, size_t *cap, const mx_st_tensor *t, const char *name, int ndim, int64_t d0,
                     int64_t d1, int64_t d2, cv_view v, const mx_family *fam, const cv_plan_opts *o, mx_error *err) {
    cv_item it = {.n_src = 1, .ndim = ndim, .view = v};
    it.view.active = true;
    it.shape[0] = d0;
    it.shape[1] = d1;
    it.shape[2] = d2;
    it.src = calloc(1, sizeof(*it.src));
    if (!it.src) return mx_fail(err, "out of memory");
    it.src[0] = t;
    it.name = strdup(name);
    return finish_item(p, cap, it, t, fam, o, err);
}

// Replaces the suffix `from` of name (which must end with it) by `to`.
static void swap_suffix(char *out, size_t cap, const char *name, const char *from, const char *to) {
    snprintf(out, cap, "%.*s%s", (int)(strlen(name) - strlen(from)), name, to);
}

// gpt_oss: mlx-lm's sanitize of the fused expert tensors. experts.gate_up_proj [E, H, 2I] holds gate
// and up interleaved along its last axis; the outputs are Linear-oriented [E, out, in].
// Returns 1 when t was one of these tensors (handled), 0 when not, -1 on error.
static int split_gate_up(cv_plan *p, size_t *cap, const mx_st_tensor *t, const mx_family *fam,
                         const cv_plan_opts *o, mx_error *err) {
    char name[512];
    const int64_t *s = t->shape;
    if (ends_with(t->name, "mlp.experts.gate_up_proj")) {
        if (t->ndim != 3 || s[2] % 2) return mx_fail(err, "tensor %s: expected [experts, hidden, 2 * intermediate]", t->name);
        int64_t E = s[0], H = s[1], I2 = s[2];
        for (int k = 0; k < 2; k++) {
            swap_suffix(name, sizeof name, t->name, "gate_up_proj", k ? "up_proj.weight" : "gate_proj.weight");
            cv_view v = {.rows_per_block = I2 / 2, .block_stride = H * I2, .row_stride = 2, .col_stride = I2, .offset = k};
            if (push_view(p, cap, t, name, 3, E, I2 / 2, H, v, fam, o, err)) return -1;
        }
        return 1;
    }
    if (ends_with(t->name, "mlp.experts.gate_up_proj_bias")) {
        if (t->ndim != 2 || s[1] % 2) return mx_fail(err, "tensor %s: expected [experts, 2 * intermediate]", t->name);
        for (int k = 0; k < 2; k++) {
            swap_suffix(name, sizeof name, t->name, "gate_up_proj_bias", k ? "up_proj.bias" : "gate_proj.bias");
            cv_view v = {.rows_per_block = 1, .block_stride = s[1], .row_stride = 0, .col_stride = 2, .offset = k};
            if (push_view(p, cap, t, name, 2, s[0], s[1] / 2, 0, v, fam, o, err)) return -1;
        }
        return 1;
    }
    if (ends_with(t->name, "mlp.experts.down_proj")) {
        if (t->ndim != 3) return mx_fail(err, "tensor %s: expected [experts, intermediate, hidden]", t->name);
        int64_t E = s[0], I = s[1], H = s[2];
        swap_suffix(name, sizeof name, t->name, "down_proj", "down_proj.weight");
        cv_view v = {.rows_per_block = H, .block_stride = I * H, .row_stride = 1, .col_stride = H};
        return push_view(p, cap, t, name, 3, E, H, I, v, fam, o, err) ? -1 : 1;
    }
    if (ends_with(t->name, "mlp.experts.down_proj_bias")) {
        swap_suffix(name, sizeof name, t->name, "down_proj_bias", "down_proj.bias");
        cv_view v = {.rows_per_block = 1, .block_stride = s[1], .col_stride = 1};
        return push_view(p, cap, t, name, 2, s[0], s[1], 0, v, fam, o, err) ? -1 : 1;
    }
    return 0;
}

static long config_long(const json_t *config, const char *key) {
    return (long)json_integer_value(json_object_get(config, key));
}

// deepseek_v3: mlx-lm's sanitize of self_attn.kv_b_proj [heads * (nope + v), kv_lora] into the two
// per-head matrices of absorbed attention, embed_q [heads, kv_lora, nope] and unembed_out [heads, v,
// kv_lora]. Returns 1 when handled, 0 when t is another tensor, -1 on error.
static int split_kv_b(cv_plan *p, size_t *cap, const mx_st_tensor *t, const json_t *config, const mx_family *fam,
                      const cv_plan_opts *o, mx_error *err) {
    if (!ends_with(t->name, "self_attn.kv_b_proj.weight")) return 0;
    long heads = config_long(config, "num_attention_heads"), nope = config_long(config, "qk_nope_head_dim");
    long vd = config_long(config, "v_head_dim");
    if (heads <= 0 || nope <= 0 || vd <= 0 || t->ndim != 2 || t->shape[0] != heads * (nope + vd))
        return mx_fail(err, "tensor %s: expected [num_attention_heads * (qk_nope_head_dim + v_head_dim), kv_lora_rank]",
                       t->name);
    int64_t kv = t->shape[1], block = (nope + vd) * kv;
    char name[512];
    swap_suffix(name, sizeof name, t->name, "kv_b_proj.weight", "embed_q.weight");
    cv_view q = {.rows_per_block = kv, .block_stride = block, .row_stride = 1, .col_stride = kv};
    if (push_view(p, cap, t, name, 3, heads, kv, nope, q, fam, o, err)) return -1;
    swap_suffix(name, sizeof name, t->name, "kv_b_proj.weight", "unembed_out.weight");
    cv_view v = {.rows_per_block = vd, .block_stride = block, .row_stride = kv, .col_stride = 1, .offset = nope * kv};
    return push_view(p, cap, t, name, 3, heads, vd, kv, v, fam, o, err) ? -1 : 1;
}

// Layer number of "model.layers.N.<...>", or -1.
static long layer_number(const char *name) {
    const char *pre = "model.layers.";
    if (strncmp(name, pre, strlen(pre)) != 0) return -1;
    char *end;
    long n = strtol(name + strlen(pre), &end, 10);
    return end != name + strlen(pre) && *end == '.' ? n : -1;
}

static int add_source_items(const mx_safetensors *st, const json_t *config, const cv_plan_opts *o,
                            cv_plan *p, mx_error *err) {
    const mx_family *fam = mx_family_find(json_string_value(json_object_get(config, "model_type")));
    if (!fam) return mx_fail(err, "config.json: unsupported model_type");
    bool moe = fam->moe;
    // mlx-lm's default when the key is missing is the family's.
    bool tied = config_bool(config, "tie_word_embeddings", fam->tied_default);
    long n_experts = fam->n_experts_key ? config_long(config, fam->n_experts_key) : 0;
    long n_layers = config_long(config, "num_hidden_layers");
    size_t cap = 0;
    char stacked[512];
    for (size_t i = 0; i < mx_st_count(st); i++) {
        const mx_st_tensor *t = mx_st_at(st, i);
        if (strstr(t->name, "rotary_emb.inv_freq")) continue;
        if (tied && strcmp(t->name, "lm_head.weight") == 0) continue;
        if (fam->drop_extra_layers && layer_number(t->name) >= n_layers) continue;
        if (!mx_dtype_is_float(t->dtype))
            return mx_fail(err, "tensor %s has dtype %s; only F16, BF16 and F32 can be converted",
                           t->name, mx_dtype_name(t->dtype));
        if (ends_with(t->name, ".scales") || ends_with(t->name, ".biases"))
            return mx_fail(err, "tensor %s: the checkpoint is already quantized", t->name);
        int handled = fam->split_gate_up ? split_gate_up(p, &cap, t, fam, o, err) : 0;
        if (handled == 0 && fam->split_kv_b) handled = split_kv_b(p, &cap, t, config, fam, o, err);
        if (handled < 0) return -1;
        if (handled) continue;
        cv_item it = {0};
        long e = moe ? expert_index(t->name, stacked, sizeof stacked) : -1;
        if (e > 0) {
            if (e >= n_experts)
                return mx_fail(err, "tensor %s: expert %ld but %s is %ld", t->name, e,
                               fam->n_experts_key, n_experts);
            continue;  // stacked with expert 0
        }
        if (e == 0) {
            if (n_experts <= 0) return mx_fail(err, "tensor %s: config has no %s", t->name, fam->n_experts_key);
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
            if (t->ndim > 3)
                return mx_fail(err, "tensor %s has %d dimensions (at most 3 supported)", t->name, t->ndim);
            it.src = calloc(1, sizeof(*it.src));
            if (!it.src) return mx_fail(err, "out of memory");
            it.src[0] = t;
            it.n_src = 1;
            it.name = strdup(t->name);
            it.ndim = t->ndim;
            for (int d = 0; d < t->ndim; d++) it.shape[d] = t->shape[d];
        }
        if (finish_item(p, &cap, it, t, fam, o, err)) return -1;
    }
    return 0;
}

static json_t *layer_entry(int group_size, int bits) {
    return json_pack("{s:i, s:i}", "group_size", group_size, "bits", bits);
}

// A stacked MoE expert module (3-D, under mlp.experts or mlp.switch_mlp), as mlx-lm names them.
static bool is_expert_stack(const cv_item *it, const char *module) {
    return it->ndim == 3 && (strstr(module, ".mlp.experts.") || strstr(module, ".mlp.switch_mlp."));
}

static int choose_quantization(const json_t *config, const cv_plan_opts *o, cv_plan *p,
                               mx_error *err) {
    const mx_family *fam = mx_family_find(json_string_value(json_object_get(config, "model_type")));
    if (!fam) return mx_fail(err, "config.json: unsupported model_type");
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
        if (fam->float_module && ends_with(module, fam->float_module)) continue;  // not a Linear in mlx-lm
        if (o->recipe) {
            int bits = cv_recipe_bits(&recipe, module, it->shape[1]);
            if (bits == 0) continue;
            it->q = (mx_quant){MX_QUANT_AFFINE, bits, recipe.group_size};
            json_object_set_new(p->quantization, module, layer_entry(recipe.group_size, bits));
        } else if (fam->router && ends_with(module, fam->router)) {
            it->q = (mx_quant){MX_QUANT_AFFINE, 8, 64};
            json_object_set_new(p->quantization, module, layer_entry(64, 8));
        } else if (o->experts_q.mode != MX_QUANT_NONE && is_expert_stack(it, module)) {
            it->q = o->experts_q;
            json_t *e = layer_entry(it->q.group_size, it->q.bits);
            json_object_set_new(e, "mode", json_string(mx_quant_mode_name(it->q.mode)));
            json_object_set_new(p->quantization, module, e);
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
