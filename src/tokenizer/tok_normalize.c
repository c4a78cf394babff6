// SPDX-License-Identifier: MIT
// The normalizer stage: applies tok->norm (NFC/NFD/NFKC/NFKD via utf8proc, lowercase, prepend,
// replace, strip) to one span of text between added tokens. Input is valid UTF-8; the result is a
// fresh malloc'ed buffer owned by the caller. Pure ASCII input skips the Unicode forms, which
// leave it unchanged.
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "tokenizer/tok_internal.h"

bool tok_utf8_is_space(uint32_t cp) {
    if (cp == ' ' || (cp >= 9 && cp <= 13) || cp == 0x85) return true;
    if (cp < 0x80) return false;
    utf8proc_category_t cat = utf8proc_category((utf8proc_int32_t)cp);
    return cat == UTF8PROC_CATEGORY_ZS || cat == UTF8PROC_CATEGORY_ZL || cat == UTF8PROC_CATEGORY_ZP;
}

static bool all_ascii(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] >= 0x80) return false;
    return true;
}

// Each step consumes *buf (malloc'ed, *len bytes) and leaves a new malloc'ed result in its place.
static int step_unicode(char **buf, size_t *len, utf8proc_option_t opts, mx_error *err) {
    if (all_ascii(*buf, *len)) return 0;
    utf8proc_uint8_t *out = NULL;
    utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)*buf, (utf8proc_ssize_t)*len, &out, opts | UTF8PROC_STABLE);
    if (r < 0) return mx_fail(err, "normalizer: %s", utf8proc_errmsg(r));
    free(*buf);
    *buf = (char *)out;
    *len = (size_t)r;
    return 0;
}

static int step_lowercase(char **buf, size_t *len, mx_error *err) {
    char *out = malloc(*len * 2 + 1);
    if (!out) return mx_fail(err, "out of memory");
    size_t w = 0;
    for (size_t i = 0; i < *len;) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)*buf + i, (utf8proc_ssize_t)(*len - i), &cp);
        if (k <= 0) { // cannot happen on sanitized input; copy the byte through
            out[w++] = (*buf)[i++];
            continue;
        }
        w += (size_t)utf8proc_encode_char(utf8proc_tolower(cp), (utf8proc_uint8_t *)out + w);
        i += (size_t)k;
    }
    out[w] = '\0';
    free(*buf);
    *buf = out;
    *len = w;
    return 0;
}

static int step_prepend(char **buf, size_t *len, const char *prefix, mx_error *err) {
    if (*len == 0) return 0;
    size_t pl = strlen(prefix);
    char *out = malloc(pl + *len + 1);
    if (!out) return mx_fail(err, "out of memory");
    memcpy(out, prefix, pl);
    memcpy(out + pl, *buf, *len);
    out[pl + *len] = '\0';
    free(*buf);
    *buf = out;
    *len += pl;
    return 0;
}

static int step_replace(char **buf, size_t *len, const pcre2_code *re, const char *with, mx_error *err) {
    uint32_t opts = PCRE2_SUBSTITUTE_GLOBAL | PCRE2_SUBSTITUTE_LITERAL | PCRE2_SUBSTITUTE_OVERFLOW_LENGTH |
                    PCRE2_NO_UTF_CHECK;
    PCRE2_SIZE out_len = *len * 2 + 16;
    for (int attempt = 0; attempt < 2; attempt++) {
        char *out = malloc(out_len + 1);
        if (!out) return mx_fail(err, "out of memory");
        PCRE2_SIZE cap = out_len + 1;
        int rc = pcre2_substitute(re, (PCRE2_SPTR)*buf, *len, 0, opts, NULL, NULL, (PCRE2_SPTR)with,
                                  PCRE2_ZERO_TERMINATED, (PCRE2_UCHAR *)out, &cap);
        if (rc >= 0) {
            free(*buf);
            *buf = out;
            *len = cap;
            return 0;
        }
        free(out);
        if (rc != PCRE2_ERROR_NOMEMORY) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return mx_fail(err, "normalizer Replace: %s", (char *)msg);
        }
        out_len = cap; // the needed length, including the terminating zero
    }
    return mx_fail(err, "normalizer Replace: output size unstable");
}

static void step_strip(char *buf, size_t *len, bool left, bool right) {
    size_t start = 0, end = *len;
    while (left && start < end) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)buf + start, (utf8proc_ssize_t)(end - start), &cp);
        if (k <= 0 || !tok_utf8_is_space((uint32_t)cp)) break;
        start += (size_t)k;
    }
    while (right && end > start) {
        size_t b = end - 1;
        while (b > start && ((unsigned char)buf[b] & 0xC0) == 0x80) b--;
        utf8proc_int32_t cp;
        utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)buf + b, (utf8proc_ssize_t)(end - b), &cp);
        if (k <= 0 || !tok_utf8_is_space((uint32_t)cp)) break;
        end = b;
    }
    memmove(buf, buf + start, end - start);
    buf[end - start] = '\0';
    *len = end - start;
}

char *tok_normalize(const mx_tokenizer *tok, const char *s, size_t n, size_t *out_len, mx_error *err) {
    char *buf = malloc(n + 1);
    if (!buf) {
        mx_fail(err, "out of memory");
        return NULL;
    }
    memcpy(buf, s, n);
    buf[n] = '\0';
    size_t len = n;
    for (size_t i = 0; i < tok->n_norm; i++) {
        const tok_norm_step *st = &tok->norm[i];
        int rc = 0;
        switch (st->kind) {
        case TOK_NORM_NFC: rc = step_unicode(&buf, &len, UTF8PROC_COMPOSE, err); break;
        case TOK_NORM_NFD: rc = step_unicode(&buf, &len, UTF8PROC_DECOMPOSE, err); break;
        case TOK_NORM_NFKC: rc = step_unicode(&buf, &len, UTF8PROC_COMPOSE | UTF8PROC_COMPAT, err); break;
        case TOK_NORM_NFKD: rc = step_unicode(&buf, &len, UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT, err); break;
        case TOK_NORM_LOWERCASE: rc = step_lowercase(&buf, &len, err); break;
        case TOK_NORM_PREPEND: rc = step_prepend(&buf, &len, st->text, err); break;
        case TOK_NORM_REPLACE: rc = step_replace(&buf, &len, st->re, st->text, err); break;
        case TOK_NORM_STRIP: step_strip(buf, &len, st->strip_left, st->strip_right); break;
        }
        if (rc != 0) {
            free(buf);
            return NULL;
        }
    }
    *out_len = len;
    return buf;
}
