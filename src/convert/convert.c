// SPDX-License-Identifier: MIT
// The convert driver (see convert.h): validate, plan, assign items to shards, encode every item
// into a temporary sibling folder, write the index, config and copied files, then rename the folder
// into place. Every failure after the temporary folder exists removes it.
#include "convert/convert.h"

#include <dirent.h>
#include <errno.h>
#include <glob.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "convert/encode.h"
#include "convert/fs_util.h"
#include "convert/plan.h"
#include "convert/recipe.h"
#include "convert/st_writer.h"
#include "io/folders.h"
#include "io/json_text.h"
#include "io/mapped_file.h"
#include "io/safetensors.h"
#include "models/family.h"

#define DEFAULT_MAX_SHARD_BYTES ((int64_t)5 << 30)

void mx_convert_opts_init(mx_convert_opts *o) {
    memset(o, 0, sizeof(*o));
    o->q_mode = MX_QUANT_AFFINE;
    o->experts_q_mode = MX_QUANT_NONE;
    o->dtype = -1;
}

// The quantization the options ask for, with the mode's defaults filled in.
static mx_quant resolved_quant(const mx_convert_opts *o) {
    mx_quant q = {o->q_mode, o->q_bits, o->q_group_size};
    if (q.bits == 0) q.bits = o->q_mode == MX_QUANT_MXFP8 ? 8 : 4;
    if (q.group_size == 0) q.group_size = o->q_mode == MX_QUANT_AFFINE ? 64 : 32;
    return q;
}

int mx_convert_check_opts(const mx_convert_opts *o, mx_error *err) {
    if (!o->hf_path || !*o->hf_path) return mx_fail(err, "missing --hf-path");
    if (!o->mlx_path || !*o->mlx_path) return mx_fail(err, "missing --mlx-path");
    if (o->q_mode != MX_QUANT_AFFINE && o->q_mode != MX_QUANT_MXFP4 && o->q_mode != MX_QUANT_MXFP8)
        return mx_fail(err, "--q-mode %s is not supported (affine, mxfp4 or mxfp8)",
                       mx_quant_mode_name(o->q_mode));
    char why[256];
    if (!mx_quant_valid(resolved_quant(o), why, sizeof why)) return mx_fail(err, "%s", why);
    if (o->dtype != -1 && o->dtype != MX_DTYPE_BF16 && o->dtype != MX_DTYPE_F16 && o->dtype != MX_DTYPE_F32)
        return mx_fail(err, "--dtype must be bfloat16, float16 or float32");
    if (o->recipe) {
        bool known = false;
        for (int i = 0; cv_recipe_names[i]; i++) known |= strcmp(o->recipe, cv_recipe_names[i]) == 0;
        if (!known) return mx_fail(err, "unknown --quant-predicate '%s'", o->recipe);
        if (!o->quantize) return mx_fail(err, "--quant-predicate needs -q");
        if (o->q_mode != MX_QUANT_AFFINE) return mx_fail(err, "--quant-predicate needs --q-mode affine");
    }
    if (o->experts_q_mode != MX_QUANT_NONE) {
        if (o->experts_q_mode != MX_QUANT_MXFP4 && o->experts_q_mode != MX_QUANT_MXFP8)
            return mx_fail(err, "--q-experts-mode %s is not supported (mxfp4 or mxfp8)",
                           mx_quant_mode_name(o->experts_q_mode));
        if (!o->quantize) return mx_fail(err, "--q-experts-mode needs -q");
        if (o->recipe) return mx_fail(err, "--q-experts-mode and --quant-predicate do not combine");
    }
    if (o->max_shard_bytes < 0) return mx_fail(err, "the maximum shard size must be positive");
    return 0;
}

static int dtype_from_name(const char *s) {
    if (!s) return -1;
    if (strcmp(s, "bfloat16") == 0) return MX_DTYPE_BF16;
    if (strcmp(s, "float16") == 0) return MX_DTYPE_F16;
    if (strcmp(s, "float32") == 0) return MX_DTYPE_F32;
    return -1;
}

static const char *dtype_config_name(int t) {
    return t == MX_DTYPE_BF16 ? "bfloat16" : t == MX_DTYPE_F16 ? "float16" : "float32";
}

static char *path_join(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/%s", dir, name);
    return p;
}

static json_t *load_config(const char *dir, mx_error *err) {
    char *path = path_join(dir, "config.json");
    if (!path) return NULL;
    if (!cv_path_exists(path)) {
        mx_fail(err, "%s: no config.json in the model folder", dir);
        free(path);
        return NULL;
    }
    json_error_t je;
    size_t len = 0;
    char *text = mx_read_text_file(path, &len, err);
    json_t *c = text ? mx_json_loadb(text, len, 0, &je) : NULL;
    bool read_ok = text != NULL;  // else mx_read_text_file named the file
    free(text);
    if (!read_ok) {
    } else if (!c) {
        mx_fail(err, "%s: invalid JSON at line %d: %s", path, je.line, je.text);
    } else if (!json_is_object(c)) {
        mx_fail(err, "%s: not a JSON object", path);
        json_decref(c);
        c = NULL;
    }
    free(path);
    return c;
}

static int check_arch(const json_t *config, const char *dir, mx_error *err) {
    const char *arch = json_string_value(json_object_get(config, "model_type"));
    if (!arch) return mx_fail(err, "%s/config.json: missing model_type", dir);
    if (mx_family_find(arch)) return 0;
    return mx_fail(err, "%s/config.json: unknown architecture '%s' (supported: %s)", dir, arch, mx_family_names(false));
}

// One shard: its writer and file name.
typedef struct shard {
    cv_st_writer *w;
    char name[64];
} shard;

typedef struct progress_state {
    const mx_convert_opts *o;
    int64_t done, total;
} progress_state;

static void on_bytes(void *user, int64_t bytes) {
    progress_state *p = user;
    p->done += bytes;
    if (p->o->progress) p->o->progress(p->o->progress_user, p->done, p->total);
}

static int write_json(json_t *j, const char *path, mx_error *err) {
    if (json_dump_file(j, path, JSON_INDENT(4) | JSON_SORT_KEYS | JSON_REAL_PRECISION(17)) != 0)
        return mx_fail(err, "%s: cannot write", path);
    return 0;
}

static int write_index(const cv_plan *plan, shard *shards, int n_shards, const char *dir, mx_error *err) {
    json_t *map = json_object();
    int64_t total = 0;
    for (int s = 0; s < n_shards; s++) {
        for (size_t i = 0; i < cv_st_writer_count(shards[s].w); i++)
            json_object_set_new(map, cv_st_writer_name(shards[s].w, i), json_string(shards[s].name));
        total += cv_st_writer_data_bytes(shards[s].w);
    }
    json_t *idx = json_pack("{s:{s:I, s:I}, s:o}", "metadata", "total_size", (json_int_t)total,
                            "total_parameters", (json_int_t)plan->total_parameters, "weight_map", map);
    char *path = path_join(dir, "model.safetensors.index.json");
    int rc = idx && path ? write_json(idx, path, err) : mx_fail(err, "out of memory");
    json_decref(idx);
    free(path);
    return rc;
}

static int write_config(const json_t *config, const cv_plan *plan, int dtype, const char *dir,
                        mx_error *err) {
    json_t *c = json_deep_copy(config);
    if (!c) return mx_fail(err, "out of memory");
    json_object_del(c, "_name_or_path");
    json_object_del(c, "vision_config");
    if (plan->quantization) {
        json_object_set(c, "quantization", plan->quantization);
        json_object_set_new(c, "quantization_config", json_deep_copy(plan->quantization));
    }
    if (dtype >= 0) {
        json_object_set_new(c, "torch_dtype", json_string(dtype_config_name(dtype)));
        if (json_object_get(c, "dtype")) json_object_set_new(c, "dtype", json_string(dtype_config_name(dtype)));
    }
    char *path = path_join(dir, "config.json");
    int rc = path ? write_json(c, path, err) : mx_fail(err, "out of memory");
    free(path);
    json_decref(c);
    return rc;
}

// Tokenizer, generation and other side files: what mlx-lm copies or re-saves.
static bool is_side_file(const char *name) {
    static const char *const exts[] = {".json", ".jinja", ".txt", ".model", ".tiktoken", NULL};
    if (strcmp(name, "config.json") == 0 || strcmp(name, "model.safetensors.index.json") == 0) return false;
    size_t n = strlen(name);
    for (int i = 0; exts[i]; i++) {
        size_t m = strlen(exts[i]);
        if (n > m && strcmp(name + n - m, exts[i]) == 0) return true;
    }
    return false;
}

static int copy_side_files(const char *src_dir, const char *dst_dir, mx_error *err) {
    DIR *d = opendir(src_dir);
    if (!d) return mx_fail(err, "%s: cannot list: %s", src_dir, strerror(errno));
    struct dirent *de;
    int rc = 0;
    while (rc == 0 && (de = readdir(d)) != NULL) {
        if (!is_side_file(de->d_name)) continue;
        char *s = path_join(src_dir, de->d_name), *t = path_join(dst_dir, de->d_name);
        if (!s || !t) rc = mx_fail(err, "out of memory");
        else if (!mx_is_dir(s)) rc = cv_copy_file(s, t, err);
        free(s);
        free(t);
    }
    closedir(d);
    return rc;
}

static int convert_into(const mx_convert_opts *o, mx_safetensors *st, const json_t *config,
                        const cv_plan *plan, int dtype, const char *tmp, mx_error *err) {
    int64_t max_shard = o->max_shard_bytes ? o->max_shard_bytes : DEFAULT_MAX_SHARD_BYTES;
    shard *shards = NULL;
    int n_shards = 0;
    int *item_shard = calloc(plan->n + 1, sizeof(int));
    cv_parts *parts = calloc(plan->n + 1, sizeof(cv_parts));
    int64_t cur = 0, total = 0;
    int rc = 0;
    if (!item_shard || !parts) rc = mx_fail(err, "out of memory");
    for (size_t i = 0; i < plan->n && rc == 0; i++) {
        int64_t b = cv_encode_bytes(&plan->items[i]);
        if (n_shards == 0 || (cur > 0 && cur + b > max_shard)) {
            shard *ns = realloc(shards, (size_t)(n_shards + 1) * sizeof(*ns));
            if (!ns || !(ns[n_shards].w = cv_st_writer_new())) {
                if (ns) shards = ns;
                rc = mx_fail(err, "out of memory");
                break;
            }
            shards = ns;
            n_shards++;
            cur = 0;
        }
        item_shard[i] = n_shards - 1;
        rc = cv_encode_declare(&plan->items[i], shards[n_shards - 1].w, &parts[i], err);
        cur += b;
        total += b;
    }
    for (int s = 0; s < n_shards && rc == 0; s++) {
        if (n_shards == 1) snprintf(shards[s].name, sizeof shards[s].name, "model.safetensors");
        else snprintf(shards[s].name, sizeof shards[s].name, "model-%05d-of-%05d.safetensors", s + 1, n_shards);
        char *p = path_join(tmp, shards[s].name);
        rc = p ? cv_st_writer_open(shards[s].w, p, err) : mx_fail(err, "out of memory");
        free(p);
    }
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int threads = o->threads > 0 ? o->threads : (ncpu > 0 ? (int)ncpu : 1);
    progress_state ps = {o, 0, total};
    if (rc == 0 && o->progress) o->progress(o->progress_user, 0, total);
    for (size_t i = 0; i < plan->n && rc == 0; i++)
        rc = cv_encode_item(&plan->items[i], shards[item_shard[i]].w, &parts[i], threads, on_bytes, &ps, err);
    for (int s = 0; s < n_shards; s++) {
        if (rc == 0) rc = cv_st_writer_close(shards[s].w, err);
    }
    if (rc == 0) rc = write_index(plan, shards, n_shards, tmp, err);
    if (rc == 0) rc = write_config(config, plan, dtype, tmp, err);
    if (rc == 0) rc = copy_side_files(o->hf_path, tmp, err);
    for (int s = 0; s < n_shards; s++) cv_st_writer_free(shards[s].w);
    free(shards);
    free(item_shard);
    free(parts);
    (void)st;
    return rc;
}

int mx_convert(const mx_convert_opts *o, mx_error *err) {
    if (mx_convert_check_opts(o, err) != 0) return -1;
    if (!mx_is_dir(o->hf_path)) return mx_fail(err, "%s: not a folder", o->hf_path);

    // The output path without trailing slashes, so that "<out>.tmp-PID" is a sibling.
    char out[PATH_MAX];
    if (snprintf(out, sizeof out, "%s", o->mlx_path) >= (int)sizeof out - 32)
        return mx_fail(err, "%s: path too long", o->mlx_path);
    for (size_t n = strlen(out); n > 1 && out[n - 1] == '/'; n--) out[n - 1] = '\0';
    if (cv_path_exists(out) && !o->force)
        return mx_fail(err, "%s already exists (use --force to replace it)", out);
    char rin[PATH_MAX], rout[PATH_MAX];
    if (realpath(o->hf_path, rin) && realpath(out, rout) && strcmp(rin, rout) == 0)
        return mx_fail(err, "%s: the output folder is the input folder", out);

    json_t *config = load_config(o->hf_path, err);
    if (!config) return -1;
    int rc = check_arch(config, o->hf_path, err);
    if (rc == 0 && json_object_get(config, "quantization"))
        rc = mx_fail(err, "%s/config.json: the model is already quantized", o->hf_path);
    mx_safetensors *st = NULL;
    if (rc == 0) {
        char *pattern = path_join(o->hf_path, "model*.safetensors");
        glob_t g;
        int grc = pattern ? glob(pattern, 0, NULL, &g) : GLOB_NOSPACE;
        if (grc == 0) globfree(&g);
        free(pattern);
        if (grc != 0) rc = mx_fail(err, "%s: no model*.safetensors files in the model folder", o->hf_path);
    }
    if (rc == 0 && !(st = mx_st_open_dir(o->hf_path, err))) rc = -1;

    int dtype = o->dtype;
    if (dtype < 0) {
        dtype = dtype_from_name(json_string_value(json_object_get(config, "torch_dtype")));
        if (dtype < 0) dtype = dtype_from_name(json_string_value(json_object_get(config, "dtype")));
    }
    cv_plan plan;
    memset(&plan, 0, sizeof plan);
    cv_plan_opts po = {o->quantize, resolved_quant(o), dtype, o->recipe, {MX_QUANT_NONE, 0, 0}};
    if (o->experts_q_mode != MX_QUANT_NONE)
        po.experts_q = (mx_quant){o->experts_q_mode, o->experts_q_mode == MX_QUANT_MXFP8 ? 8 : 4, 32};
    if (rc == 0) rc = cv_plan_build(st, config, &po, &plan, err);

    char tmp[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s.tmp-%ld", out, (long)getpid());
    bool made_tmp = false;
    if (rc == 0) rc = mx_make_parent_dirs(out, 0755, err);
    if (rc == 0) {
        cv_remove_tree(tmp, NULL);  // a leftover of an earlier run with our pid
        if (mkdir(tmp, 0755) != 0) rc = mx_fail(err, "%s: cannot create: %s", tmp, strerror(errno));
        else made_tmp = true;
    }
    if (rc == 0) rc = convert_into(o, st, config, &plan, dtype, tmp, err);
    if (rc == 0 && cv_path_exists(out)) {
        // --force: move the old folder aside, put the new one in place, then delete the old one.
        char old[PATH_MAX];
        snprintf(old, sizeof old, "%s.old-%ld", out, (long)getpid());
        if (rename(out, old) != 0) rc = mx_fail(err, "%s: cannot replace: %s", out, strerror(errno));
        else if (rename(tmp, out) != 0) {
            rc = mx_fail(err, "%s: cannot rename into place: %s", out, strerror(errno));
            rename(old, out);
        } else {
            made_tmp = false;
            cv_remove_tree(old, NULL);
        }
    } else if (rc == 0) {
        if (rename(tmp, out) != 0) rc = mx_fail(err, "%s: cannot rename into place: %s", out, strerror(errno));
        else made_tmp = false;
    }
    if (made_tmp) cv_remove_tree(tmp, NULL);
    cv_plan_free(&plan);
    mx_st_close(st);
    json_decref(config);
    return rc;
}
