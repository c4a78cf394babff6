// SPDX-License-Identifier: MIT
// A growable NUL-terminated byte buffer for building replies and stream chunks (see srv_buf.h):
// append, printf, and consume from the front; an allocation failure marks it failed, never crashes.
#include "server/srv_buf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool buf_reserve(srv_buf *b, size_t extra) {
    if (b->oom) return false;
    if (b->n + extra + 1 <= b->cap) return true;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < b->n + extra + 1) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) {
        b->oom = true;
        return false;
    }
    b->p = p;
    b->cap = cap;
    return true;
}

void srv_buf_append(srv_buf *b, const char *s, size_t len) {
    if (!buf_reserve(b, len)) return;
    if (len) memcpy(b->p + b->n, s, len);
    b->n += len;
    b->p[b->n] = 0;
}

void srv_buf_puts(srv_buf *b, const char *s) { srv_buf_append(b, s, strlen(s)); }

void srv_buf_printf(srv_buf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (k < 0 || !buf_reserve(b, (size_t)k)) return;
    va_start(ap, fmt);
    vsnprintf(b->p + b->n, (size_t)k + 1, fmt, ap);
    va_end(ap);
    b->n += (size_t)k;
}

void srv_buf_consume(srv_buf *b, size_t k) {
    if (!b->p) return;
    if (k > b->n) k = b->n;
    memmove(b->p, b->p + k, b->n - k);
    b->n -= k;
    b->p[b->n] = 0;
}

void srv_buf_free(srv_buf *b) {
    free(b->p);
    *b = (srv_buf){0};
}

const char *srv_buf_str(const srv_buf *b) { return b->p ? b->p : ""; }
