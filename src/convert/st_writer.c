// SPDX-License-Identifier: MIT
// In-place safetensors writer (see st_writer.h). Tensors are laid out in declaration order; the
// header lists them sorted by name (jansson sorts the keys), which readers do not care about.
#include "convert/st_writer.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/write_file.h"

typedef struct st_entry {
    char *name;
    mx_dtype dtype;
    int ndim;
    int64_t shape[4];
    int64_t nbytes;
    int64_t offset;  // inside the data buffer
} st_entry;

struct cv_st_writer {
    st_entry *e;
    size_t n, cap;
    int64_t data_bytes;
    int fd;
    int64_t data_start;  // 8 + header length
    char *path;
};

cv_st_writer *cv_st_writer_new(void) {
    cv_st_writer *w = calloc(1, sizeof(*w));
    if (w) w->fd = -1;
    return w;
}

void cv_st_writer_free(cv_st_writer *w) {
    if (!w) return;
    if (w->fd >= 0) close(w->fd);
    for (size_t i = 0; i < w->n; i++) free(w->e[i].name);
    free(w->e);
    free(w->path);
    free(w);
}

int cv_st_writer_declare(cv_st_writer *w, const char *name, mx_dtype dtype, int ndim,
                         const int64_t *shape, mx_error *err) {
    if (w->fd >= 0) return mx_fail(err, "safetensors writer: %s declared after open", name);
    if (ndim < 0 || ndim > 4) return mx_fail(err, "%s: %d dimensions not supported", name, ndim);
    for (size_t i = 0; i < w->n; i++)
        if (strcmp(w->e[i].name, name) == 0) return mx_fail(err, "duplicate tensor name %s", name);
    int64_t numel = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0 || (shape[d] > 0 && numel > INT64_MAX / 16 / shape[d]))
            return mx_fail(err, "%s: bad shape", name);
        numel *= shape[d];
    }
    if (w->n == w->cap) {
        size_t cap = w->cap ? w->cap * 2 : 64;
        st_entry *e = realloc(w->e, cap * sizeof(*e));
        if (!e) return mx_fail(err, "out of memory");
        w->e = e;
        w->cap = cap;
    }
    st_entry *t = &w->e[w->n];
    memset(t, 0, sizeof(*t));
    t->name = strdup(name);
    if (!t->name) return mx_fail(err, "out of memory");
    t->dtype = dtype;
    t->ndim = ndim;
    for (int d = 0; d < ndim; d++) t->shape[d] = shape[d];
    t->nbytes = numel * (int64_t)mx_dtype_size(dtype);
    t->offset = w->data_bytes;
    w->data_bytes += t->nbytes;
    return (int)w->n++;
}

size_t cv_st_writer_count(const cv_st_writer *w) { return w->n; }
const char *cv_st_writer_name(const cv_st_writer *w, size_t i) { return w->e[i].name; }
int64_t cv_st_writer_nbytes(const cv_st_writer *w, size_t i) { return w->e[i].nbytes; }
int64_t cv_st_writer_data_bytes(const cv_st_writer *w) { return w->data_bytes; }

static char *build_header(const cv_st_writer *w) {
    json_t *root = json_object();
    json_t *meta = json_object();
    json_object_set_new(meta, "format", json_string("mlx"));
    json_object_set_new(root, "__metadata__", meta);
    for (size_t i = 0; i < w->n; i++) {
        const st_entry *t = &w->e[i];
        json_t *o = json_object();
        json_object_set_new(o, "dtype", json_string(mx_dtype_name(t->dtype)));
        json_t *shape = json_array();
        for (int d = 0; d < t->ndim; d++) json_array_append_new(shape, json_integer(t->shape[d]));
        json_object_set_new(o, "shape", shape);
        json_t *off = json_array();
        json_array_append_new(off, json_integer(t->offset));
        json_array_append_new(off, json_integer(t->offset + t->nbytes));
        json_object_set_new(o, "data_offsets", off);
        json_object_set_new(root, t->name, o);
    }
    char *s = json_dumps(root, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(root);
    return s;
}

int cv_st_writer_open(cv_st_writer *w, const char *path, mx_error *err) {
    char *hdr = build_header(w);
    if (!hdr) return mx_fail(err, "%s: cannot build the header", path);
    size_t hlen = strlen(hdr);
    size_t padded = (8 + hlen + 7) / 8 * 8 - 8;
    char *buf = malloc(8 + padded);
    if (!buf) {
        free(hdr);
        return mx_fail(err, "out of memory");
    }
    uint64_t n = padded;
    for (int i = 0; i < 8; i++) buf[i] = (char)((n >> (8 * i)) & 0xff);
    memcpy(buf + 8, hdr, hlen);
    memset(buf + 8 + hlen, ' ', padded - hlen);
    free(hdr);
    w->fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (w->fd < 0) {
        free(buf);
        return mx_fail(err, "%s: cannot create: %s", path, strerror(errno));
    }
    w->path = strdup(path);
    w->data_start = 8 + (int64_t)padded;
    int rc = mx_write_all(w->fd, buf, 8 + padded, 0);
    free(buf);
    if (rc != 0 || ftruncate(w->fd, (off_t)(w->data_start + w->data_bytes)) != 0)
        return mx_fail(err, "%s: write failed: %s", path, strerror(errno));
    return 0;
}

int cv_st_writer_put(cv_st_writer *w, size_t i, int64_t at, const void *buf, size_t len,
                     mx_error *err) {
    MX_ASSERT(w->fd >= 0 && i < w->n);
    const st_entry *t = &w->e[i];
    MX_ASSERT(at >= 0 && at + (int64_t)len <= t->nbytes);
    if (mx_write_all(w->fd, buf, len, w->data_start + t->offset + at) != 0)
        return mx_fail(err, "%s: write of %s failed: %s", w->path, t->name, strerror(errno));
    return 0;
}

int cv_st_writer_close(cv_st_writer *w, mx_error *err) {
    if (w->fd < 0) return 0;
    int rc = fsync(w->fd);
    int rc2 = close(w->fd);
    w->fd = -1;
    if (rc != 0 || rc2 != 0) return mx_fail(err, "%s: flush failed: %s", w->path, strerror(errno));
    return 0;
}
