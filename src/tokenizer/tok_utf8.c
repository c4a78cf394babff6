// SPDX-License-Identifier: MIT
// UTF-8 well-formedness as Unicode Table 3-7 defines it, shared by encode (sanitizing input) and
// decode (lossy output, streaming). An ill-formed sequence is replaced by one U+FFFD per maximal
// subpart, the same policy as Rust's String::from_utf8_lossy that Hugging Face decoding uses.
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"

int tok_utf8_classify(const unsigned char *p, size_t n, size_t *len) {
    unsigned c = p[0];
    if (c < 0x80) {
        *len = 1;
        return 1;
    }
    size_t need;
    unsigned lo = 0x80, hi = 0xBF; // allowed range of the second byte
    if (c >= 0xC2 && c <= 0xDF) {
        need = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        need = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else {
        *len = 1;
        return -1;
    }
    for (size_t i = 1; i < need; i++) {
        if (i >= n) return 0;
        unsigned b = p[i];
        bool ok = i == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xBF);
        if (!ok) {
            *len = i;
            return -1;
        }
    }
    *len = need;
    return 1;
}

bool tok_utf8_valid(const unsigned char *p, size_t n) {
    size_t i = 0;
    while (i < n) {
        if (p[i] < 0x80) {
            i++;
            continue;
        }
        size_t len;
        if (tok_utf8_classify(p + i, n - i, &len) != 1) return false;
        i += len;
    }
    return true;
}

char *tok_utf8_sanitize(const char *s, size_t n, size_t *out_len) {
    const unsigned char *p = (const unsigned char *)s;
    char *out = malloc(n * 3 + 1); // each bad byte becomes at most 3 bytes
    if (!out) return NULL;
    size_t i = 0, w = 0;
    while (i < n) {
        size_t len;
        int r = tok_utf8_classify(p + i, n - i, &len);
        if (r == 1) {
            memcpy(out + w, p + i, len);
            w += len;
            i += len;
            continue;
        }
        if (r == 0) len = n - i; // incomplete tail
        memcpy(out + w, "\xEF\xBF\xBD", 3);
        w += 3;
        i += len;
    }
    out[w] = '\0';
    *out_len = w;
    return out;
}
