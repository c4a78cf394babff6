// SPDX-License-Identifier: MIT
// mx_tokenizer_encode: the pipeline driver. Added tokens are found first (leftmost, then longest;
// lstrip/rstrip swallow neighbouring whitespace; single_word requires non-word neighbours): those
// with normalized = false in the raw text, the others in the normalized text of each span between.
// Each remaining span is normalized, pre-tokenized and fed piece by piece to the BPE model. All
// working memory belongs to this call (encode_ctx), so concurrent calls share only the read-only
// tokenizer.
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "tokenizer/tok_internal.h"

typedef struct encode_ctx {
    const mx_tokenizer *tok;
    mx_error *err;
    const char *text;         // the whole input (offsets of `plain` refer to it)
    const size_t *plain;      // n_plain byte ranges {begin, end} where added tokens are not matched
    size_t n_plain;
    tok_ids out;
    tok_pretok_scratch pre;
    tok_bpe_scratch bpe;
} encode_ctx;

typedef int (*span_fn)(encode_ctx *c, const char *s, size_t n, bool at_start);

static uint32_t cp_at(const char *s, size_t n) {
    utf8proc_int32_t cp = -1;
    utf8proc_iterate((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &cp);
    return cp < 0 ? 0xFFFD : (uint32_t)cp;
}

// Start of the character that ends at s[end] (exclusive), not before lo.
static size_t char_before(const char *s, size_t lo, size_t end) {
    size_t b = end - 1;
    while (b > lo && ((unsigned char)s[b] & 0xC0) == 0x80) b--;
    return b;
}

static bool is_word_char(uint32_t cp) {
    if (cp == '_') return true;
    utf8proc_category_t cat = utf8proc_category((utf8proc_int32_t)cp);
    return (cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO) ||
           (cat >= UTF8PROC_CATEGORY_ND && cat <= UTF8PROC_CATEGORY_NO);
}

// The longest added token of set starting at s[i] that is allowed there, or NULL.
static const tok_added *match_at(const tok_added_set *set, const char *s, size_t n, size_t i) {
    unsigned b = (unsigned char)s[i];
    for (uint32_t k = set->first[b]; k < set->first[b + 1]; k++) {
        const tok_added *a = &set->items[k];
        if (a->len > n - i || memcmp(s + i, a->content, a->len) != 0) continue;
        if (a->single_word) {
            if (i > 0 && is_word_char(cp_at(s + char_before(s, 0, i), n - char_before(s, 0, i)))) continue;
            if (i + a->len < n && is_word_char(cp_at(s + i + a->len, n - i - a->len))) continue;
        }
        return a;
    }
    return NULL;
}

// True when text bytes [b, e) overlap one of the plain ranges.
static bool overlaps_plain(const encode_ctx *c, size_t b, size_t e) {
    for (size_t k = 0; k < c->n_plain; k++)
        if (b < c->plain[2 * k + 1] && c->plain[2 * k] < e) return true;
    return false;
}

// Splits s on the added tokens of set: ids for the tokens, fn for each span between them.
static int split_added(encode_ctx *c, const tok_added_set *set, const char *s, size_t n, bool at_start, span_fn fn) {
    size_t gap = 0, i = 0;
    while (i < n) {
        unsigned b = (unsigned char)s[i];
        const tok_added *a = set->first[b] == set->first[b + 1] ? NULL : match_at(set, s, n, i);
        if (a && set == &c->tok->added_raw && overlaps_plain(c, (size_t)(s - c->text) + i, (size_t)(s - c->text) + i + a->len))
            a = NULL;
        if (!a) {
            i++;
            continue;
        }
        size_t ms = i, me = i + a->len;
        while (a->lstrip && ms > gap) {
            size_t p = char_before(s, gap, ms);
            if (!tok_utf8_is_space(cp_at(s + p, n - p))) break;
            ms = p;
        }
        while (a->rstrip && me < n) {
            size_t k;
            if (tok_utf8_classify((const unsigned char *)s + me, n - me, &k) != 1 || !tok_utf8_is_space(cp_at(s + me, n - me)))
                break;
            me += k;
        }
        if (ms > gap && fn(c, s + gap, ms - gap, at_start && gap == 0) != 0) return -1;
        if (tok_ids_push(&c->out, a->id) != 0) return mx_fail(c->err, "out of memory");
        gap = i = me;
    }
    if (n > gap && fn(c, s + gap, n - gap, at_start && gap == 0) != 0) return -1;
    return 0;
}

// A normalized span with no added tokens left: pre-tokenize, then BPE each piece.
static int encode_plain(encode_ctx *c, const char *s, size_t n, bool at_start) {
    const char *buf;
    const tok_piece *pieces;
    size_t n_pieces;
    if (tok_pretokenize(c->tok, &c->pre, s, n, at_start, &buf, &pieces, &n_pieces, c->err) != 0) return -1;
    for (size_t i = 0; i < n_pieces; i++)
        if (tok_bpe_encode_piece(c->tok, &c->bpe, buf + pieces[i].off, pieces[i].len, &c->out, c->err) != 0)
            return -1;
    return 0;
}

// A raw span between raw-matched added tokens: normalize, then look for normalized added tokens.
static int encode_span(encode_ctx *c, const char *s, size_t n, bool at_start) {
    // Normalized added tokens are not looked for in a span that touches a plain range (offsets in
    // normalized text no longer map to the input's).
    static const tok_added_set none;
    const tok_added_set *set = overlaps_plain(c, (size_t)(s - c->text), (size_t)(s - c->text) + n) ? &none
                                                                                                   : &c->tok->added_norm;
    if (c->tok->n_norm == 0) return split_added(c, set, s, n, at_start, encode_plain);
    size_t len;
    char *norm = tok_normalize(c->tok, s, n, &len, c->err);
    if (!norm) return -1;
    int rc = split_added(c, set, norm, len, at_start, encode_plain);
    free(norm);
    return rc;
}

static int encode(const mx_tokenizer *tok, const char *text, size_t len, const size_t *plain, size_t n_plain,
                  int32_t **ids, size_t *n_ids, mx_error *err) {
    if (!ids || !n_ids) return mx_fail(err, "tokenizer encode: ids and n_ids must not be NULL");
    *ids = NULL;
    *n_ids = 0;
    if (!tok) return mx_fail(err, "tokenizer encode: no tokenizer");
    if (!text && len) return mx_fail(err, "tokenizer encode: text is NULL but len is %zu", len);
    if (len == 0) return 0;
    char *clean = NULL;
    if (!tok_utf8_valid((const unsigned char *)text, len)) {
        if (n_plain) return mx_fail(err, "tokenizer encode: text with plain ranges must be valid UTF-8");
        if (!(clean = tok_utf8_sanitize(text, len, &len))) return mx_fail(err, "tokenizer encode: out of memory");
        text = clean;
    }
    encode_ctx c = {.tok = tok, .err = err, .text = text, .plain = plain, .n_plain = n_plain};
    int rc = split_added(&c, &tok->added_raw, text, len, true, encode_span);
    tok_pretok_scratch_free(&c.pre);
    tok_bpe_scratch_free(&c.bpe);
    free(clean);
    if (rc != 0) {
        free(c.out.v);
        return mx_fail_prefix(err, "tokenizer encode: ");
    }
    *ids = c.out.v;
    *n_ids = c.out.n;
    return 0;
}

int mx_tokenizer_encode(const mx_tokenizer *tok, const char *text, size_t len, int32_t **ids, size_t *n_ids,
                        mx_error *err) {
    return encode(tok, text, len, NULL, 0, ids, n_ids, err);
}

int mx_tokenizer_encode_guarded(const mx_tokenizer *tok, const char *text, size_t len, const size_t *plain,
                                size_t n_plain, int32_t **ids, size_t *n_ids, mx_error *err) {
    return encode(tok, text, len, plain, n_plain, ids, n_ids, err);
}

size_t mx_tokenizer_next_added(const mx_tokenizer *tok, const char *s, size_t n, size_t from, size_t *match_len) {
    for (size_t i = from; i < n; i++) {
        unsigned b = (unsigned char)s[i];
        const tok_added_set *sets[2] = {&tok->added_raw, &tok->added_norm};
        for (int k = 0; k < 2; k++) {
            const tok_added *a = sets[k]->first[b] == sets[k]->first[b + 1] ? NULL : match_at(sets[k], s, n, i);
            if (a) {
                *match_len = a->len;
                return i;
            }
        }
    }
    *match_len = 0;
    return n;
}
