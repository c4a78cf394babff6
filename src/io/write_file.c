// SPDX-License-Identifier: MIT
// Whole small text files written with stdio (see write_file.h).
#include "io/write_file.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

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
