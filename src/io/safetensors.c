// SPDX-License-Identifier: MIT
// safetensors parsing and validation (see safetensors.h). The header JSON is parsed with jansson;
// names and metadata strings are copied so the JSON can be freed at once.
#include "io/safetensors.h"

#include <dirent.h>
#include <fnmatch.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "io/mapped_file.h"

#define MX_ST_MAX_HEADER 100000000ull

struct mx_safetensors {
    mx_mapped_file *files;
    int n_files;
    mx_st_tensor *tensors;  // sorted by name
    size_t n_tensors;
    char **meta;            // key, value, key, value...
    size_t n_meta;
};

static int cmp_by_begin(const void *a, const void *b) {
    const mx_st_tensor *x = *(const mx_st_tensor *const *)a, *y = *(const mx_st_tensor *const *)b;
    return x->data < y->data ? -1 : x->data > y->data;
}

static int cmp_by_name(const void *a, const void *b) {
    return strcmp(((const mx_st_tensor *)a)->name, ((const mx_st_tensor *)b)->name);
}

static void free_tensor_names(mx_st_tensor *t, size_t n) {
    for (size_t i = 0; i < n; i++) free((char *)t[i].name);
    free(t);
}

// Parses one header entry into *t; returns -1 with a message naming the tensor and field.
static int parse_entry(const char *label, const char *name, json_t *v, const uint8_t *data,
                       uint64_t data_size, mx_st_tensor *t, mx_error *err) {
    if (!json_is_object(v)) return mx_fail(err, "%s: tensor '%s': entry is not an object", label, name);
    json_t *jd = json_object_get(v, "dtype"), *js = json_object_get(v, "shape"),
           *jo = json_object_get(v, "data_offsets");
    if (!json_is_string(jd)) return mx_fail(err, "%s: tensor '%s': missing or non-string dtype", label, name);
    if (mx_dtype_parse(json_string_value(jd), &t->dtype) != 0)
        return mx_fail(err, "%s: tensor '%s': unknown dtype '%s'", label, name, json_string_value(jd));
    if (!json_is_array(js)) return mx_fail(err, "%s: tensor '%s': missing shape", label, name);
    size_t nd = json_array_size(js);
    if (nd > MX_ST_MAX_DIMS) return mx_fail(err, "%s: tensor '%s': %zu dimensions (max %d)", label, name, nd, MX_ST_MAX_DIMS);
    t->ndim = (int)nd;
    uint64_t numel = 1;
    for (size_t i = 0; i < nd; i++) {
        json_t *d = json_array_get(js, i);
        if (!json_is_integer(d) || json_integer_value(d) < 0)
            return mx_fail(err, "%s: tensor '%s': shape[%zu] is not a non-negative integer", label, name, i);
        uint64_t dim = (uint64_t)json_integer_value(d);
        if (dim != 0 && numel > UINT64_MAX / 16 / dim)
            return mx_fail(err, "%s: tensor '%s': shape product overflows", label, name);
        numel *= dim;
        t->shape[i] = (int64_t)dim;
    }
    t->numel = (int64_t)numel;
    if (!json_is_array(jo) || json_array_size(jo) != 2 || !json_is_integer(json_array_get(jo, 0)) ||
        !json_is_integer(json_array_get(jo, 1)))
        return mx_fail(err, "%s: tensor '%s': data_offsets must be [begin, end]", label, name);
    json_int_t b = json_integer_value(json_array_get(jo, 0)), e = json_integer_value(json_array_get(jo, 1));
    if (b < 0 || e < b || (uint64_t)e > data_size)
        return mx_fail(err, "%s: tensor '%s': data_offsets [%lld, %lld) outside the %llu-byte data buffer",
                       label, name, (long long)b, (long long)e, (unsigned long long)data_size);
    uint64_t want = numel * mx_dtype_size(t->dtype);
    if ((uint64_t)(e - b) != want)
        return mx_fail(err, "%s: tensor '%s': %lld bytes of data but dtype %s and shape need %llu", label,
                       name, (long long)(e - b), mx_dtype_name(t->dtype), (unsigned long long)want);
    t->data = data + b;
    t->nbytes = (size_t)(e - b);
    return 0;
}

int mx_st_parse(const uint8_t *file, size_t file_size, const char *label, mx_st_tensor **tensors_out,
                size_t *count_out, char ***meta_out, size_t *meta_count_out, mx_error *err) {
    *tensors_out = NULL;
    *count_out = 0;
    *meta_out = NULL;
    *meta_count_out = 0;
    if (file_size < 8) return mx_fail(err, "%s: truncated: %zu bytes, too short for a safetensors header", label, file_size);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = (n << 8) | file[i];
    if (n > MX_ST_MAX_HEADER) return mx_fail(err, "%s: header length %llu exceeds the 100 MB limit", label, (unsigned long long)n);
    if (n > file_size - 8)
        return mx_fail(err, "%s: header length %llu runs past the end of the file (%zu bytes)", label,
                       (unsigned long long)n, file_size);
    json_error_t jerr;
    json_t *root = json_loadb((const char *)file + 8, (size_t)n, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) return mx_fail(err, "%s: header is not valid JSON: %s (offset %d)", label, jerr.text, jerr.position);
    if (!json_is_object(root)) {
        json_decref(root);
        return mx_fail(err, "%s: header is not a JSON object", label);
    }
    const uint8_t *data = file + 8 + n;
    uint64_t data_size = file_size - 8 - n;
    size_t cap = json_object_size(root);
    mx_st_tensor *tensors = calloc(cap ? cap : 1, sizeof *tensors);
    char **meta = NULL;
    size_t count = 0, n_meta = 0;
    int rc = tensors ? 0 : mx_fail(err, "%s: out of memory", label);
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val) {
        if (rc) break;
        if (strcmp(key, "__metadata__") == 0) {
            if (!json_is_object(val)) {
                rc = mx_fail(err, "%s: __metadata__ is not an object", label);
                break;
            }
            size_t m = json_object_size(val);
            if (!meta && !(meta = calloc(2 * m + 1, sizeof *meta))) {
                rc = mx_fail(err, "%s: out of memory", label);
                break;
            }
            const char *mk;
            json_t *mv;
            json_object_foreach(val, mk, mv) {
                if (!json_is_string(mv)) continue;  // the format says string->string; ignore others
                meta[2 * n_meta] = strdup(mk);
                meta[2 * n_meta + 1] = strdup(json_string_value(mv));
                n_meta++;
                if (!meta[2 * n_meta - 2] || !meta[2 * n_meta - 1]) {
                    rc = mx_fail(err, "%s: out of memory", label);
                    break;
                }
            }
            continue;
        }
        mx_st_tensor *t = &tensors[count];
        rc = parse_entry(label, key, val, data, data_size, t, err);
        if (rc == 0) {
            if (!(t->name = strdup(key))) rc = mx_fail(err, "%s: out of memory", label);
            else count++;
        }
    }
    json_decref(root);
    if (rc == 0 && count > 1) {  // overlap check over non-empty tensors sorted by start
        mx_st_tensor **order = malloc(count * sizeof *order);
        if (!order) rc = mx_fail(err, "%s: out of memory", label);
        for (size_t i = 0; order && i < count; i++) order[i] = &tensors[i];
        if (order) qsort(order, count, sizeof *order, cmp_by_begin);
        const mx_st_tensor *prev = NULL;
        for (size_t i = 0; i < count && rc == 0; i++) {
            if (order[i]->nbytes == 0) continue;
            if (prev && order[i]->data < prev->data + prev->nbytes)
                rc = mx_fail(err, "%s: tensors '%s' and '%s' overlap in the data buffer", label, prev->name, order[i]->name);
            prev = order[i];
        }
        free(order);
    }
    if (rc) {
        free_tensor_names(tensors, count);
        for (size_t i = 0; i < 2 * n_meta; i++) free(meta[i]);
        free(meta);
        return -1;
    }
    *tensors_out = tensors;
    *count_out = count;
    *meta_out = meta;
    *meta_count_out = n_meta;
    return 0;
}

static int st_add_file(mx_safetensors *st, const char *path, mx_error *err) {
    mx_mapped_file *files = realloc(st->files, (st->n_files + 1) * sizeof *files);
    if (!files) return mx_fail(err, "out of memory");
    st->files = files;
    mx_mapped_file *f = &st->files[st->n_files];
    if (mx_mapped_file_open(f, path, err) != 0) return -1;
    st->n_files++;
    mx_st_tensor *t;
    size_t n, n_meta;
    char **meta;
    if (mx_st_parse(f->data, f->size, path, &t, &n, &meta, &n_meta, err) != 0) return -1;
    mx_st_tensor *all = realloc(st->tensors, (st->n_tensors + n + 1) * sizeof *all);
    char **all_meta = realloc(st->meta, (2 * (st->n_meta + n_meta) + 1) * sizeof *all_meta);
    if (all) st->tensors = all;
    if (all_meta) st->meta = all_meta;
    if (!all || !all_meta) {
        free_tensor_names(t, n);
        for (size_t i = 0; i < 2 * n_meta; i++) free(meta[i]);
        free(meta);
        return mx_fail(err, "out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        t[i].file_index = st->n_files - 1;
        st->tensors[st->n_tensors++] = t[i];
    }
    if (n_meta) memcpy(st->meta + 2 * st->n_meta, meta, 2 * n_meta * sizeof *meta);
    st->n_meta += n_meta;
    free(meta);
    free(t);
    return 0;
}

static int st_finish(mx_safetensors *st, mx_error *err) {
    qsort(st->tensors, st->n_tensors, sizeof *st->tensors, cmp_by_name);
    for (size_t i = 1; i < st->n_tensors; i++) {
        if (strcmp(st->tensors[i - 1].name, st->tensors[i].name) == 0)
            return mx_fail(err, "tensor '%s' appears in both %s and %s", st->tensors[i].name,
                           st->files[st->tensors[i - 1].file_index].path, st->files[st->tensors[i].file_index].path);
    }
    return 0;
}

mx_safetensors *mx_st_open_file(const char *path, mx_error *err) {
    mx_safetensors *st = calloc(1, sizeof *st);
    if (!st) {
        mx_fail(err, "out of memory");
        return NULL;
    }
    if (st_add_file(st, path, err) != 0 || st_finish(st, err) != 0) {
        mx_st_close(st);
        return NULL;
    }
    return st;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

mx_safetensors *mx_st_open_dir(const char *dir, mx_error *err) {
    DIR *d = opendir(dir);
    if (!d) {
        mx_fail(err, "%s: cannot open model folder", dir);
        return NULL;
    }
    char **names = NULL;
    size_t n = 0;
    bool oom = false;
    struct dirent *e;
    while (!oom && (e = readdir(d)) != NULL) {
        if (fnmatch("model*.safetensors", e->d_name, 0) != 0) continue;
        char **grown = realloc(names, (n + 1) * sizeof *names);
        if (grown) names = grown;
        if (!grown || !(names[n++] = strdup(e->d_name))) oom = true;
    }
    closedir(d);
    mx_safetensors *st = NULL;
    if (oom) {
        mx_fail(err, "%s: out of memory listing the folder", dir);
    } else if (n == 0) {
        mx_fail(err, "%s: no model*.safetensors files in the folder", dir);
    } else {
        qsort(names, n, sizeof *names, cmp_str);
        st = calloc(1, sizeof *st);
        if (!st) mx_fail(err, "out of memory");
        for (size_t i = 0; st && i < n; i++) {
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", dir, names[i]);
            if (st_add_file(st, path, err) != 0) {
                mx_st_close(st);
                st = NULL;
            }
        }
        if (st && st_finish(st, err) != 0) {
            mx_st_close(st);
            st = NULL;
        }
    }
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
    return st;
}

void mx_st_close(mx_safetensors *st) {
    if (!st) return;
    for (int i = 0; i < st->n_files; i++) mx_mapped_file_close(&st->files[i]);
    free(st->files);
    for (size_t i = 0; i < st->n_tensors; i++) free((char *)st->tensors[i].name);
    free(st->tensors);
    for (size_t i = 0; i < 2 * st->n_meta; i++) free(st->meta[i]);
    free(st->meta);
    free(st);
}

size_t mx_st_count(const mx_safetensors *st) { return st->n_tensors; }

const mx_st_tensor *mx_st_at(const mx_safetensors *st, size_t i) { return i < st->n_tensors ? &st->tensors[i] : NULL; }

const mx_st_tensor *mx_st_find(const mx_safetensors *st, const char *name) {
    mx_st_tensor key = {.name = name};
    return bsearch(&key, st->tensors, st->n_tensors, sizeof key, cmp_by_name);
}

const char *mx_st_file_path(const mx_safetensors *st, int file_index) {
    return file_index >= 0 && file_index < st->n_files ? st->files[file_index].path : NULL;
}
