// SPDX-License-Identifier: MIT
// Decoding ids to text. Every id's bytes were precomputed at load (tok->id_text), so decoding is
// concatenation plus lossy UTF-8 handling: complete characters pass through, each maximal invalid
// subpart becomes U+FFFD, and an incomplete trailing character is held in the mx_detok until the
// next token completes it (or flush gives up on it). The whole-sequence decode runs the same
// streaming core into a growing buffer, so the two always agree.
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"

static const char replacement_char[] = "\xEF\xBF\xBD";

typedef struct sink {
    char *buf;
    size_t len, cap; // cap includes room for the NUL
    bool grow;       // realloc when full, else drop everything once full
    bool full;
} sink;

static void sink_put(sink *k, const void *p, size_t n) {
    if (k->full) return;
    if (k->len + n + 1 > k->cap) {
        if (!k->grow) {
            k->full = true;
            return;
        }
        size_t cap = k->cap ? k->cap : 256;
        while (k->len + n + 1 > cap) cap *= 2;
        char *b = realloc(k->buf, cap);
        if (!b) {
            k->full = true;
            return;
        }
        k->buf = b;
        k->cap = cap;
    }
    memcpy(k->buf + k->len, p, n);
    k->len += n;
}

// Feeds b[0, n) after the held bytes, emitting complete characters.
static void detok_feed(mx_detok *d, const unsigned char *b, size_t n, sink *k) {
    size_t i = 0, len = 0;
    while (d->n_pending > 0) {
        int r;
        for (;;) {
            r = tok_utf8_classify(d->pending, (size_t)d->n_pending, &len);
            if (r != 0 || i >= n) break;
            d->pending[d->n_pending++] = b[i++];
        }
        if (r == 0) return; // still incomplete and b is used up
        if (r == 1) sink_put(k, d->pending, len);
        else sink_put(k, replacement_char, 3);
        memmove(d->pending, d->pending + len, (size_t)d->n_pending - len);
        d->n_pending -= (int)len;
    }
    while (i < n) {
        if (b[i] < 0x80) {
            size_t j = i + 1;
            while (j < n && b[j] < 0x80) j++;
            sink_put(k, b + i, j - i);
            i = j;
            continue;
        }
        int r = tok_utf8_classify(b + i, n - i, &len);
        if (r == 0) { // at most 3 bytes: a valid prefix of one character
            memcpy(d->pending, b + i, n - i);
            d->n_pending = (int)(n - i);
            return;
        }
        if (r == 1) sink_put(k, b + i, len);
        else sink_put(k, replacement_char, 3);
        i += len;
    }
}

static void detok_token(mx_detok *d, int32_t id, sink *k) {
    const mx_tokenizer *tok = d->tok;
    if (!tok || id < 0 || id >= tok->n_ids || !tok->id_str[id]) return;
    if (d->skip_special && (tok->id_flags[id] & TOK_ID_SPECIAL)) return;
    const unsigned char *t = (const unsigned char *)tok->id_text[id];
    size_t n = tok->id_text_len[id];
    if (tok->strip_first_space && !d->started && n > 0 && t[0] == ' ') {
        t++;
        n--;
    }
    d->started = true;
    detok_feed(d, t, n, k);
}

void mx_detok_init(mx_detok *d, const mx_tokenizer *tok, bool skip_special) {
    memset(d, 0, sizeof *d);
    d->tok = tok;
    d->skip_special = skip_special;
}

size_t mx_detok_push(mx_detok *d, int32_t id, char *out, size_t cap) {
    if (!out || cap == 0) return 0;
    sink k = {.buf = out, .cap = cap};
    detok_token(d, id, &k);
    out[k.len] = '\0';
    return k.len;
}

size_t mx_detok_flush(mx_detok *d, char *out, size_t cap) {
    if (!out || cap == 0) return 0;
    sink k = {.buf = out, .cap = cap};
    if (d->n_pending > 0) sink_put(&k, replacement_char, 3);
    d->n_pending = 0;
    out[k.len] = '\0';
    return k.len;
}

size_t mx_detok_cap(const mx_tokenizer *tok) {
    // Worst case every held and new byte is invalid and becomes a 3-byte U+FFFD.
    return 3 * ((tok ? tok->max_text_len : 0) + sizeof((mx_detok *)0)->pending) + 1;
}

char *mx_tokenizer_decode(const mx_tokenizer *tok, const int32_t *ids, size_t n, bool skip_special) {
    mx_detok d;
    mx_detok_init(&d, tok, skip_special);
    sink k = {.grow = true};
    sink_put(&k, "", 0);
    for (size_t i = 0; i < n && ids; i++) detok_token(&d, ids[i], &k);
    if (d.n_pending > 0) sink_put(&k, replacement_char, 3);
    if (k.full) {
        free(k.buf);
        return NULL;
    }
    k.buf[k.len] = '\0';
    return k.buf;
}
