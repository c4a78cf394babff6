// SPDX-License-Identifier: MIT
// Item encoding (see encode.h). Threads split the rows of one block; each owns a float scratch row
// and writes disjoint parts of the block buffers, so there is no locking. After an item the pages
// of its source tensors are dropped from the mapping, so resident memory does not grow with the
// model.
#include "convert/encode.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "convert/quantize.h"

enum { BLOCK_TARGET_BYTES = 16 << 20, MAX_THREADS = 256 };

// Bytes per output row of each part.
static void row_bytes(const cv_item *it, int64_t rb[3]) {
    rb[0] = rb[1] = rb[2] = 0;
    if (it->q.mode == MX_QUANT_NONE) {
        rb[0] = it->cols * (int64_t)mx_dtype_size(it->dtype);
        return;
    }
    int64_t groups = it->cols / it->q.group_size;
    rb[0] = it->cols * it->q.bits / 8;
    if (it->q.mode == MX_QUANT_AFFINE) {
        rb[1] = rb[2] = groups * (int64_t)mx_dtype_size(it->dtype);
    } else {
        rb[1] = groups;
    }
}

int64_t cv_encode_bytes(const cv_item *it) {
    int64_t rb[3];
    row_bytes(it, rb);
    return (rb[0] + rb[1] + rb[2]) * it->rows;
}

static int suffixed(char *buf, size_t cap, const char *name, const char *suffix) {
    size_t n = strlen(name);
    const char *w = ".weight";
    size_t base = (n >= 7 && strcmp(name + n - 7, w) == 0) ? n - 7 : n;
    int k = snprintf(buf, cap, "%.*s%s", (int)base, name, suffix);
    return k > 0 && (size_t)k < cap ? 0 : -1;
}

int cv_encode_declare(const cv_item *it, cv_st_writer *w, cv_parts *parts, mx_error *err) {
    memset(parts, 0, sizeof(*parts));
    if (it->q.mode == MX_QUANT_NONE) {
        int i = cv_st_writer_declare(w, it->name, it->dtype, it->ndim, it->shape, err);
        if (i < 0) return -1;
        parts->n = 1;
        parts->index[0] = i;
        return 0;
    }
    int64_t shape[4];
    memcpy(shape, it->shape, sizeof shape);
    char name[600];
    shape[it->ndim - 1] = it->cols * it->q.bits / 32;
    int i = cv_st_writer_declare(w, it->name, MX_DTYPE_U32, it->ndim, shape, err);
    if (i < 0) return -1;
    parts->index[parts->n++] = i;
    shape[it->ndim - 1] = it->cols / it->q.group_size;
    mx_dtype sdt = it->q.mode == MX_QUANT_AFFINE ? it->dtype : MX_DTYPE_U8;
    if (suffixed(name, sizeof name, it->name, ".scales") != 0) return mx_fail(err, "%s: name too long", it->name);
    if ((i = cv_st_writer_declare(w, name, sdt, it->ndim, shape, err)) < 0) return -1;
    parts->index[parts->n++] = i;
    if (it->q.mode == MX_QUANT_AFFINE) {
        suffixed(name, sizeof name, it->name, ".biases");
        if ((i = cv_st_writer_declare(w, name, sdt, it->ndim, shape, err)) < 0) return -1;
        parts->index[parts->n++] = i;
    }
    return 0;
}

typedef struct block_job {
    const cv_item *it;
    int64_t row0, row1;  // rows of this thread (global row numbers)
    int64_t block_row0;  // first row of the block (buffer origin)
    uint8_t *out[3];
    int64_t rb[3];
    float *scratch;      // cols + 2 * groups floats
} block_job;

// Rounds x to the target float dtype and back, as MLX's astype before quantization does.
static inline float through_dtype(float x, mx_dtype t) {
    if (t == MX_DTYPE_BF16) return mx_bf16_to_f32(mx_f32_to_bf16(x));
    if (t == MX_DTYPE_F16) return mx_f16_to_f32(mx_f32_to_f16(x));
    return x;
}

static inline void store_float(uint8_t *dst, int64_t j, float x, mx_dtype t) {
    if (t == MX_DTYPE_F32) {
        memcpy(dst + 4 * j, &x, 4);
        return;
    }
    uint16_t h = t == MX_DTYPE_BF16 ? mx_f32_to_bf16(x) : mx_f32_to_f16(x);
    memcpy(dst + 2 * j, &h, 2);
}

// Output row r of a viewed item (see cv_view), as the source's float values.
static void gather_row(const cv_item *it, int64_t r, float *row) {
    const cv_view *v = &it->view;
    const mx_st_tensor *src = it->src[0];
    int64_t base = (r / v->rows_per_block) * v->block_stride + (r % v->rows_per_block) * v->row_stride + v->offset;
    for (int64_t j = 0; j < it->cols; j++) row[j] = mx_load_float(src->data, src->dtype, base + j * v->col_stride);
}

static void *run_block(void *arg) {
    block_job *b = arg;
    const cv_item *it = b->it;
    int64_t rows_per_src = it->rows / it->n_src;
    int64_t cols = it->cols;
    float *row = b->scratch;
    int64_t groups = it->q.mode == MX_QUANT_NONE ? 0 : cols / it->q.group_size;
    float *sc = row + cols, *bi = sc + groups;
    for (int64_t r = b->row0; r < b->row1; r++) {
        int64_t lr = r - b->block_row0;
        if (it->view.active) gather_row(it, r, row);
        if (it->q.mode == MX_QUANT_NONE) {
            uint8_t *dst = b->out[0] + lr * b->rb[0];
            if (it->view.active) {
                for (int64_t j = 0; j < cols; j++) store_float(dst, j, row[j], it->dtype);
                continue;
            }
            const mx_st_tensor *src = it->src[r / rows_per_src];
            const uint8_t *p = src->data + (r % rows_per_src) * cols * (int64_t)mx_dtype_size(src->dtype);
            if (src->dtype == it->dtype) {
                memcpy(dst, p, (size_t)b->rb[0]);
            } else {
                for (int64_t j = 0; j < cols; j++) store_float(dst, j, mx_load_float(p, src->dtype, j), it->dtype);
            }
            continue;
        }
        if (!it->view.active) {
            const mx_st_tensor *src = it->src[r / rows_per_src];
            const uint8_t *p = src->data + (r % rows_per_src) * cols * (int64_t)mx_dtype_size(src->dtype);
            for (int64_t j = 0; j < cols; j++) row[j] = mx_load_float(p, src->dtype, j);
        }
        for (int64_t j = 0; j < cols; j++) row[j] = through_dtype(row[j], it->dtype);
        uint8_t *packed = b->out[0] + lr * b->rb[0];
        if (it->q.mode == MX_QUANT_AFFINE) {
            cv_quantize_affine_row(row, cols, it->q.bits, it->q.group_size, packed, sc, bi);
            for (int64_t g = 0; g < groups; g++) {
                store_float(b->out[1] + lr * b->rb[1], g, sc[g], it->dtype);
                store_float(b->out[2] + lr * b->rb[2], g, bi[g], it->dtype);
            }
        } else {
            cv_quantize_mx_row(row, cols, it->q.bits, packed, b->out[1] + lr * b->rb[1]);
        }
    }
    return NULL;
}

// Tells the kernel the source pages of rows [r0, r1) are no longer needed. They are file-backed and
// read-only, so dropping them only costs a re-read if touched again (a page shared with the next
// rows is kept); this keeps resident memory near one block even for the largest tensor.
static void drop_source_rows(const cv_item *it, int64_t r0, int64_t r1) {
    long page = sysconf(_SC_PAGESIZE);
    if (page <= 0 || it->view.active) return;  // a view's rows are not contiguous in the source
    int64_t rows_per_src = it->rows / it->n_src;
    for (int s = 0; s < it->n_src; s++) {
        int64_t a = r0 > s * rows_per_src ? r0 - s * rows_per_src : 0;
        int64_t b = r1 < (s + 1) * rows_per_src ? r1 - s * rows_per_src : rows_per_src;
        if (a >= b) continue;
        int64_t row_bytes = it->cols * (int64_t)mx_dtype_size(it->src[s]->dtype);
        uintptr_t base = (uintptr_t)it->src[s]->data;
        uintptr_t start = (base + (uintptr_t)(a * row_bytes) + (uintptr_t)page - 1) / (uintptr_t)page * (uintptr_t)page;
        uintptr_t end = (base + (uintptr_t)(b * row_bytes)) / (uintptr_t)page * (uintptr_t)page;
        if (end > start) madvise((void *)start, end - start, MADV_DONTNEED);
    }
}

int cv_encode_item(const cv_item *it, cv_st_writer *w, const cv_parts *parts, int threads,
                   cv_bytes_done_fn done, void *user, mx_error *err) {
    int64_t rb[3];
    row_bytes(it, rb);
    int64_t per_row = rb[0] + rb[1] + rb[2];
    if (it->rows == 0 || per_row == 0) return 0;
    int64_t block_rows = BLOCK_TARGET_BYTES / per_row;
    if (block_rows < 1) block_rows = 1;
    if (block_rows > it->rows) block_rows = it->rows;
    if (threads < 1) threads = 1;
    if (threads > MAX_THREADS) threads = MAX_THREADS;
    if (threads > block_rows) threads = (int)block_rows;
    // Small tensors are not worth a thread each.
    if ((int64_t)threads * 4096 > it->rows * it->cols) threads = 1;

    int rc = 0;
    uint8_t *out[3] = {NULL, NULL, NULL};
    int64_t groups = it->q.mode == MX_QUANT_NONE ? 0 : it->cols / it->q.group_size;
    size_t scratch_floats = (size_t)(it->cols + 2 * groups);
    float *scratch = malloc(scratch_floats * sizeof(float) * (size_t)threads);
    block_job *jobs = calloc((size_t)threads, sizeof(*jobs));
    pthread_t *tids = calloc((size_t)threads, sizeof(*tids));
    for (int k = 0; k < parts->n; k++) out[k] = malloc((size_t)(rb[k] * block_rows));
    if (!scratch || !jobs || !tids || !out[0] || (parts->n > 1 && !out[1]) || (parts->n > 2 && !out[2])) {
        rc = mx_fail(err, "%s: out of memory", it->name);
        goto done_all;
    }
    for (int64_t r0 = 0; r0 < it->rows && rc == 0; r0 += block_rows) {
        int64_t r1 = r0 + block_rows < it->rows ? r0 + block_rows : it->rows;
        int64_t n = r1 - r0;
        int nt = threads < n ? threads : (int)n;
        bool spawned[MAX_THREADS];
        for (int t = 0; t < nt; t++) {
            block_job *b = &jobs[t];
            b->it = it;
            b->row0 = r0 + n * t / nt;
            b->row1 = r0 + n * (t + 1) / nt;
            b->block_row0 = r0;
            memcpy(b->out, out, sizeof out);
            memcpy(b->rb, rb, sizeof rb);
            b->scratch = scratch + scratch_floats * (size_t)t;
            // The calling thread takes the last share; a thread that cannot start runs inline.
            spawned[t] = t < nt - 1 && pthread_create(&tids[t], NULL, run_block, b) == 0;
        }
        for (int t = 0; t < nt; t++)
            if (!spawned[t]) run_block(&jobs[t]);
        for (int t = 0; t < nt; t++)
            if (spawned[t]) pthread_join(tids[t], NULL);
        for (int k = 0; k < parts->n && rc == 0; k++)
            rc = cv_st_writer_put(w, (size_t)parts->index[k], r0 * rb[k], out[k], (size_t)(n * rb[k]), err);
        drop_source_rows(it, r0, r1);
        if (done) done(user, n * per_row);
    }
done_all:
    for (int k = 0; k < 3; k++) free(out[k]);
    free(scratch);
    free(jobs);
    free(tids);
    return rc;
}
