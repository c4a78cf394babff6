// SPDX-License-Identifier: MIT
// A growable byte buffer, always NUL-terminated, for the server's text assembly (responses, SSE
// events, released output). Allocation failure is sticky: `oom` is set and later appends are
// dropped, so callers check once at the end.
#ifndef MX_SERVER_SRV_BUF_H
#define MX_SERVER_SRV_BUF_H

#include <stdbool.h>
#include <stddef.h>

typedef struct srv_buf {
    char *p;     // NULL until the first append
    size_t n;    // bytes used (excluding the NUL)
    size_t cap;
    bool oom;
} srv_buf;

void srv_buf_append(srv_buf *b, const char *s, size_t len);
void srv_buf_puts(srv_buf *b, const char *s);
void srv_buf_printf(srv_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
// Removes the first k bytes.
void srv_buf_consume(srv_buf *b, size_t k);
void srv_buf_free(srv_buf *b);
// The text (never NULL: "" when empty).
const char *srv_buf_str(const srv_buf *b);

#endif
