// SPDX-License-Identifier: MIT
// Whole files read without ever blocking (see mapped_file.h): regular files only, checked before and
// after opening; a read-only mapping for weights and a NUL-terminated copy for text files.
#include "io/mapped_file.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int mx_file_check_regular(const char *path, mx_error *err) {
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode))
        return mx_fail(err, "%s: not a regular file (%s)", path,
                       S_ISFIFO(st.st_mode) ? "a FIFO" : S_ISDIR(st.st_mode) ? "a directory" : "a device or socket");
    return 0;
}

// Opens for reading without ever blocking: checked before opening, and opened non-blocking so that
// a path swapped for a FIFO in between still cannot hang; the file type is checked again after.
static int open_regular(const char *path, mx_error *err) {
    if (mx_file_check_regular(path, err)) return -1;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return mx_fail(err, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return mx_fail(err, "%s: not a regular file", path);
    }
    return fd;
}

int mx_mapped_file_open(mx_mapped_file *f, const char *path, mx_error *err) {
    memset(f, 0, sizeof *f);
    int fd = open_regular(path, err);
    if (fd < 0) return -1;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        close(fd);
        return mx_fail(err, "%s: cannot stat: %s", path, strerror(errno));
    }
    f->size = (size_t)st.st_size;
    if (f->size > 0) {
        void *p = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            close(fd);
            return mx_fail(err, "%s: cannot map: %s", path, strerror(errno));
        }
        f->data = p;
    }
    close(fd);
    f->path = strdup(path);
    return 0;
}

void mx_mapped_file_close(mx_mapped_file *f) {
    if (!f) return;
    if (f->data) munmap((void *)f->data, f->size);
    free(f->path);
    memset(f, 0, sizeof *f);
}

char *mx_read_stream(FILE *fp, const char *name, size_t *len_out, mx_error *err) {
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    while (buf) {
        size_t got = fread(buf + len, 1, cap - len - 1, fp);
        len += got;
        if (got == 0) break;
        if (len + 1 == cap) {
            char *bigger = realloc(buf, cap * 2);
            if (!bigger) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = bigger;
            cap *= 2;
        }
    }
    if (!buf) {
        mx_fail(err, "%s: out of memory", name);
        return NULL;
    }
    if (ferror(fp)) {
        free(buf);
        mx_fail(err, "%s: read error", name);
        return NULL;
    }
    buf[len] = 0;
    if (len_out) *len_out = len;
    return buf;
}

char *mx_read_text_file(const char *path, size_t *len_out, mx_error *err) {
    int fd = open_regular(path, err);
    if (fd < 0) return NULL;
    FILE *fp = fdopen(fd, "rb");
    if (!fp) {
        close(fd);
        mx_fail(err, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    char *buf = mx_read_stream(fp, path, len_out, err);
    fclose(fp);
    return buf;
}
