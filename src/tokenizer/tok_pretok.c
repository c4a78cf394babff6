// SPDX-License-Identifier: MIT
// The pre-tokenizer stage: runs tok->pre over one normalized span and yields the pieces the BPE
// model sees. Regex splits follow Hugging Face's SplitDelimiterBehavior (Isolated, Removed,
// MergedWithPrevious, MergedWithNext, Contiguous, optionally inverted); each piece is matched as
// its own subject, as HF does. Metaspace and ByteLevel's add_prefix_space rewrite the text into a
// scratch buffer. All storage is the caller's per-call scratch, so this is thread-safe.
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"

typedef struct tok_interval {
    size_t start, end;
    bool is_match;
} tok_interval;

void tok_pretok_scratch_free(tok_pretok_scratch *s) {
    if (s->md) pcre2_match_data_free(s->md);
    if (s->mctx) pcre2_match_context_free(s->mctx);
    if (s->jit) pcre2_jit_stack_free(s->jit);
    for (int k = 0; k < 2; k++) {
        free(s->pieces[k]);
        free(s->bufs[k]);
    }
    free(s->iv);
    memset(s, 0, sizeof *s);
}

static int push_piece(tok_pretok_scratch *s, int k, size_t *n, tok_piece p) {
    if (p.len == 0) return 0;
    if (tok_reserve((void **)&s->pieces[k], &s->piece_cap[k], *n + 1, sizeof(tok_piece)) != 0) return -1;
    s->pieces[k][(*n)++] = p;
    return 0;
}

static int push_interval(tok_pretok_scratch *s, size_t *n, size_t start, size_t end, bool is_match) {
    if (end <= start) return 0;
    if (tok_reserve((void **)&s->iv, &s->iv_cap, *n + 1, sizeof(tok_interval)) != 0) return -1;
    s->iv[(*n)++] = (tok_interval){start, end, is_match};
    return 0;
}

// Matches of re over buf[off, off+len) as intervals covering the whole piece.
static int find_intervals(tok_pretok_scratch *s, const pcre2_code *re, const char *buf, tok_piece p, size_t *n_iv,
                          mx_error *err) {
    const PCRE2_SPTR subject = (PCRE2_SPTR)(buf + p.off);
    size_t start = 0, prev_end = 0;
    *n_iv = 0;
    while (start <= p.len) {
        int rc = pcre2_match(re, subject, p.len, start, PCRE2_NO_UTF_CHECK, s->md, s->mctx);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return mx_fail(err, "pre_tokenizer regex failed: %s", (char *)msg);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(s->md);
        size_t ms = ov[0], me = ov[1];
        if (me <= ms) { // empty match: step over one character
            if (ms >= p.len) break;
            size_t k = 1;
            while (ms + k < p.len && ((unsigned char)subject[ms + k] & 0xC0) == 0x80) k++;
            start = ms + k;
            continue;
        }
        if (push_interval(s, n_iv, prev_end, ms, false) != 0 || push_interval(s, n_iv, ms, me, true) != 0)
            return mx_fail(err, "out of memory");
        prev_end = start = me;
    }
    if (push_interval(s, n_iv, prev_end, p.len, false) != 0) return mx_fail(err, "out of memory");
    return 0;
}

// Applies one Split step to every piece of pieces[k], writing pieces[1-k].
static int apply_split(tok_pretok_scratch *s, const tok_pre_step *st, const char *buf, int k, size_t n_in,
                       size_t *n_out, mx_error *err) {
    int o = 1 - k;
    *n_out = 0;
    for (size_t i = 0; i < n_in; i++) {
        tok_piece p = s->pieces[k][i];
        size_t n_iv;
        if (find_intervals(s, st->re, buf, p, &n_iv, err) != 0) return -1;
        tok_interval *iv = s->iv;
        if (st->invert)
            for (size_t j = 0; j < n_iv; j++) iv[j].is_match = !iv[j].is_match;
        // Merge intervals per the behavior, in place: w is the number kept.
        size_t w = 0;
        bool prev_match = false;
        switch (st->behavior) {
        case TOK_SPLIT_ISOLATED: w = n_iv; break;
        case TOK_SPLIT_REMOVED:
            for (size_t j = 0; j < n_iv; j++)
                if (!iv[j].is_match) iv[w++] = iv[j];
            break;
        case TOK_SPLIT_MERGED_PREV:
            for (size_t j = 0; j < n_iv; j++) {
                if (iv[j].is_match && !prev_match && w > 0) iv[w - 1].end = iv[j].end;
                else iv[w++] = iv[j];
                prev_match = iv[j].is_match;
            }
            break;
        case TOK_SPLIT_CONTIGUOUS:
            for (size_t j = 0; j < n_iv; j++) {
                if (iv[j].is_match == prev_match && w > 0) iv[w - 1].end = iv[j].end;
                else iv[w++] = iv[j];
                prev_match = iv[j].is_match;
            }
            break;
        case TOK_SPLIT_MERGED_NEXT: { // walk backwards, keeping survivors at the end
            size_t r = n_iv;
            for (size_t j = n_iv; j-- > 0;) {
                tok_interval cur = iv[j];
                if (cur.is_match && !prev_match && r < n_iv) iv[r].start = cur.start;
                else iv[--r] = cur;
                prev_match = cur.is_match;
            }
            w = n_iv - r;
            memmove(iv, iv + r, w * sizeof *iv);
            break;
        }
        }
        for (size_t j = 0; j < w; j++) {
            tok_piece q = {p.off + iv[j].start, iv[j].end - iv[j].start, p.first && iv[j].start == 0};
            if (push_piece(s, o, n_out, q) != 0) return mx_fail(err, "out of memory");
        }
    }
    return 0;
}

// Rewrites pieces of pieces[k] (text in buf) into bufs[bk] / pieces[1-k].
static int apply_rewrite(tok_pretok_scratch *s, const tok_pre_step *st, const char *buf, int k, size_t n_in, int bk,
                         size_t *n_out, mx_error *err) {
    int o = 1 - k;
    size_t rl = st->kind == TOK_PRE_METASPACE ? strlen(st->replacement) : 1, total = 0;
    for (size_t i = 0; i < n_in; i++) total += s->pieces[k][i].len * rl + rl;
    if (tok_reserve((void **)&s->bufs[bk], &s->buf_cap[bk], total + 1, 1) != 0) return mx_fail(err, "out of memory");
    char *out = s->bufs[bk];
    size_t w = 0;
    *n_out = 0;
    for (size_t i = 0; i < n_in; i++) {
        tok_piece p = s->pieces[k][i];
        const char *src = buf + p.off;
        size_t start = w;
        if (st->kind == TOK_PRE_PREFIX_SPACE) {
            if (src[0] != ' ') out[w++] = ' ';
            memcpy(out + w, src, p.len);
            w += p.len;
            if (push_piece(s, o, n_out, (tok_piece){start, w - start, p.first}) != 0) return mx_fail(err, "out of memory");
            continue;
        }
        // Metaspace: ' ' -> replacement, maybe prepend one, maybe cut before each replacement.
        bool starts = p.len >= rl ? memcmp(src, st->replacement, rl) == 0 : false;
        if (p.len && src[0] == ' ') starts = true;
        if (!starts && (st->prepend == TOK_PREPEND_ALWAYS || (st->prepend == TOK_PREPEND_FIRST && p.first))) {
            memcpy(out + w, st->replacement, rl);
            w += rl;
        }
        for (size_t j = 0; j < p.len; j++) {
            if (src[j] == ' ') {
                memcpy(out + w, st->replacement, rl);
                w += rl;
            } else {
                out[w++] = src[j];
            }
        }
        if (!st->split) {
            if (push_piece(s, o, n_out, (tok_piece){start, w - start, p.first}) != 0) return mx_fail(err, "out of memory");
            continue;
        }
        size_t cut = start;
        for (size_t j = start + 1; j + rl <= w; j++) {
            if (memcmp(out + j, st->replacement, rl) != 0) continue;
            if (push_piece(s, o, n_out, (tok_piece){cut, j - cut, p.first && cut == start}) != 0)
                return mx_fail(err, "out of memory");
            cut = j;
        }
        if (push_piece(s, o, n_out, (tok_piece){cut, w - cut, p.first && cut == start}) != 0)
            return mx_fail(err, "out of memory");
    }
    return 0;
}

int tok_pretokenize(const mx_tokenizer *tok, tok_pretok_scratch *s, const char *text, size_t n, bool at_start,
                    const char **buf_out, const tok_piece **pieces, size_t *n_pieces, mx_error *err) {
    if (!s->md && tok->n_pre) {
        s->md = pcre2_match_data_create(1, NULL);
        s->mctx = pcre2_match_context_create(NULL);
        s->jit = pcre2_jit_stack_create(32 * 1024, 4 * 1024 * 1024, NULL);
        if (!s->md || !s->mctx) return mx_fail(err, "out of memory");
        if (s->jit) pcre2_jit_stack_assign(s->mctx, NULL, s->jit);
    }
    int k = 0, bk = 0;
    size_t n_cur = 0;
    const char *buf = text;
    if (push_piece(s, k, &n_cur, (tok_piece){0, n, at_start}) != 0) return mx_fail(err, "out of memory");
    for (size_t i = 0; i < tok->n_pre; i++) {
        const tok_pre_step *st = &tok->pre[i];
        size_t n_next = 0;
        if (st->kind == TOK_PRE_SPLIT) {
            if (apply_split(s, st, buf, k, n_cur, &n_next, err) != 0) return -1;
        } else {
            if (apply_rewrite(s, st, buf, k, n_cur, bk, &n_next, err) != 0) return -1;
            buf = s->bufs[bk];
            bk = 1 - bk;
        }
        k = 1 - k;
        n_cur = n_next;
    }
    *buf_out = buf;
    *pieces = s->pieces[k];
    *n_pieces = n_cur;
    return 0;
}
