// SPDX-License-Identifier: MIT
// Scanning streamed model text for markers (stop strings, <think> and tool-call tags, harmony's
// <|...|> tokens): where a marker first occurs, how much of the text's end could still grow into
// one (that tail is held back until the next token decides), and the whitespace JSON allows.
#ifndef MX_SERVER_SRV_SCAN_H
#define MX_SERVER_SRV_SCAN_H

#include <stdbool.h>
#include <stddef.h>
#include <string.h>

// The first occurrence of pat in s[0..n), or NULL.
static inline const char *srv_find(const char *s, size_t n, const char *pat) {
    size_t m = strlen(pat);
    return m > n ? NULL : memmem(s, n, pat, m);
}

// Length of the longest proper suffix of s[0..n) that is a prefix of pat (pat not empty).
static inline size_t srv_partial_suffix(const char *s, size_t n, const char *pat) {
    size_t m = strlen(pat);
    size_t k = n < m - 1 ? n : m - 1;
    for (; k > 0; k--)
        if (memcmp(s + n - k, pat, k) == 0) return k;
    return 0;
}

static inline bool srv_is_space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

#endif
