// SPDX-License-Identifier: MIT
// mx_error helpers: formatting a message into the caller's buffer.
#include "core/error.h"

#include <stdarg.h>
#include <string.h>

int mx_fail(mx_error *err, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return -1;
}

int mx_fail_prefix(mx_error *err, const char *fmt, ...) {
    if (err) {
        char prefix[512], old[sizeof err->msg];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(prefix, sizeof prefix, fmt, ap);
        va_end(ap);
        memcpy(old, err->msg, sizeof old);
        size_t plen = strlen(prefix);
        if (plen >= sizeof err->msg) plen = sizeof err->msg - 1;
        memcpy(err->msg, prefix, plen);
        size_t room = sizeof err->msg - 1 - plen, olen = strnlen(old, sizeof old - 1);
        if (olen > room) olen = room;
        memcpy(err->msg + plen, old, olen);
        err->msg[plen + olen] = 0;
    }
    return -1;
}
