// SPDX-License-Identifier: MIT
// Whole small text files written with stdio, and the loop that writes a buffer to a descriptor
// (see write_file.h).
#include "io/write_file.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int mx_write_text_file(const char *path, const char *text, mx_error *err) {
    FILE *f = fopen(path, "wb");
    if (!f) return mx_fail(err, "cannot write %s: %s", path, strerror(errno));
    size_t n = strlen(text);
    bool bad = fwrite(text, 1, n, f) != n;
    int e = errno;
    if (fclose(f) != 0 && !bad) {
        bad = true;
        e = errno;
    }
    return bad ? mx_fail(err, "cannot write %s: %s", path, strerror(e)) : 0;
}

int mx_write_all(int fd, const void *buf, size_t len, int64_t at) {
    const uint8_t *p = buf;
    while (len > 0) {
        ssize_t k = at < 0 ? write(fd, p, len) : pwrite(fd, p, len, (off_t)at);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            if (k == 0) errno = ENOSPC;
            return -1;
        }
        p += k;
        len -= (size_t)k;
        if (at >= 0) at += k;
    }
    return 0;
}
