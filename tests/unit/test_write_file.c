// SPDX-License-Identifier: MIT
// io/write_file.h: mx_write_all at the file position and at offsets (a 3 MiB buffer in one call,
// read back), and a device that takes no bytes (/dev/full) failing with ENOSPC instead of looping;
// mx_write_text_file replacing a file and naming the path it cannot write.
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include "check.h"
#include "io/write_file.h"

int main(void) {
    char path[] = "/tmp/mlxcel_write_file_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd < 0) return check_finish();
    size_t n = (size_t)3 << 20;
    unsigned char *a = malloc(n), *back = malloc(n + 8);
    for (size_t i = 0; i < n; i++) a[i] = (unsigned char)(i * 7 + (i >> 11));
    CHECK(mx_write_all(fd, a, n, -1) == 0);
    CHECK(mx_write_all(fd, "tail", 4, -1) == 0);   // continues at the position
    CHECK(mx_write_all(fd, "XY", 2, 10) == 0);     // at an offset, position unchanged
    CHECK(mx_write_all(fd, "end", 3, -1) == 0);
    CHECK(lseek(fd, 0, SEEK_END) == (off_t)(n + 7));
    CHECK(pread(fd, back, n + 7, 0) == (ssize_t)(n + 7));
    a[10] = 'X', a[11] = 'Y';
    CHECK(memcmp(back, a, n) == 0 && memcmp(back + n, "tailend", 7) == 0);
    close(fd);

    int full = open("/dev/full", O_WRONLY);
    if (full >= 0) {
        errno = 0;
        CHECK(mx_write_all(full, a, 100, -1) == -1 && errno == ENOSPC);
        close(full);
    }

    mx_error err = {{0}};
    CHECK(mx_write_text_file(path, "short\n", &err) == 0);
    fd = open(path, O_RDONLY);
    ssize_t got = read(fd, back, 16);
    CHECK(got == 6 && memcmp(back, "short\n", 6) == 0);
    close(fd);
    CHECK(mx_write_text_file("/nonexistent-dir/x", "y", &err) == -1 && strstr(err.msg, "/nonexistent-dir/x"));
    unlink(path);
    free(a);
    free(back);
    return check_finish();
}
