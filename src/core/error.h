// SPDX-License-Identifier: MIT
// Error reporting for the library. Functions that can fail return an int status (0 ok, -1 failed)
// and write a message naming what was wrong into a caller-owned mx_error. The library never exits
// and never prints to stdout. MX_ASSERT is for broken internal invariants only (always on): bad
// input from files, flags or requests must go through mx_fail instead.
#ifndef MX_CORE_ERROR_H
#define MX_CORE_ERROR_H

#include <stdio.h>
#include <stdlib.h>

typedef struct mx_error {
    char msg[1024];
} mx_error;

// Formats the message into err (if not NULL) and returns -1, so callers can `return mx_fail(...)`.
int mx_fail(mx_error *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

// Prefixes an existing message with more context ("loading X: " + old message); returns -1.
int mx_fail_prefix(mx_error *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define MX_ASSERT(cond)                                                                     \
    do {                                                                                    \
        if (!(cond)) {                                                                      \
            fprintf(stderr, "mlxcel: internal error: %s (%s:%d)\n", #cond, __FILE__, __LINE__); \
            abort();                                                                        \
        }                                                                                   \
    } while (0)

#endif
