// SPDX-License-Identifier: MIT
// A narrow, fast reader for the two members that make up almost all of a tokenizer.json:
// model.vocab (an object of string -> id) and model.merges (an array of "a b" strings or [a, b]
// pairs). Building a jansson tree for them costs most of a second for Qwen's 11 MB file, so
// tok_load.c reads these two members here with callbacks, cuts their spans out of the document and hands
// the small remainder to jansson. Anything this reader does not understand makes
// tok_json_scan_model decline (or fail), and the caller falls back to jansson for the whole
// document.
#include <stdlib.h>
#include <string.h>

#include "core/utf8.h"
#include "tokenizer/tok_internal.h"

typedef struct scan {
    const char *s;
    size_t i, n;
} scan;

static void skip_ws(scan *c) {
    while (c->i < c->n) {
        char ch = c->s[c->i];
        if (ch != ' ' && ch != '\n' && ch != '\r' && ch != '\t') break;
        c->i++;
    }
}

// Position just past the closing quote of the string starting at c->i (a '"'); 0 if unterminated.
static size_t string_end(const scan *c) {
    size_t i = c->i + 1;
    while (i < c->n) {
        char ch = c->s[i];
        if (ch == '\\') {
            i += 2;
            continue;
        }
        if (ch == '"') return i + 1;
        i++;
    }
    return 0;
}

static int hex4(const char *p, uint32_t *v) {
    uint32_t x = 0;
    for (int k = 0; k < 4; k++) {
        char h = p[k];
        x <<= 4;
        if (h >= '0' && h <= '9') x |= (uint32_t)(h - '0');
        else if (h >= 'a' && h <= 'f') x |= (uint32_t)(h - 'a' + 10);
        else if (h >= 'A' && h <= 'F') x |= (uint32_t)(h - 'A' + 10);
        else return -1;
    }
    *v = x;
    return 0;
}

// Decodes the JSON string at c->i into out (capacity >= raw length) and advances past it.
static int read_string(scan *c, char *out, size_t *out_len) {
    size_t end = string_end(c);
    if (c->i >= c->n || c->s[c->i] != '"' || end == 0) return -1;
    size_t w = 0;
    for (size_t i = c->i + 1; i < end - 1;) {
        char ch = c->s[i];
        if ((unsigned char)ch < 0x20) return -1;
        if (ch != '\\') {
            out[w++] = ch;
            i++;
            continue;
        }
        char e = c->s[i + 1];
        i += 2;
        switch (e) {
        case '"': out[w++] = '"'; break;
        case '\\': out[w++] = '\\'; break;
        case '/': out[w++] = '/'; break;
        case 'b': out[w++] = '\b'; break;
        case 'f': out[w++] = '\f'; break;
        case 'n': out[w++] = '\n'; break;
        case 'r': out[w++] = '\r'; break;
        case 't': out[w++] = '\t'; break;
        case 'u': {
            uint32_t cp, lo;
            if (i + 4 > end - 1 || hex4(c->s + i, &cp) != 0) return -1;
            i += 4;
            if (cp >= 0xD800 && cp <= 0xDBFF && i + 6 <= end - 1 && c->s[i] == '\\' &&
                c->s[i + 1] == 'u' && hex4(c->s + i + 2, &lo) == 0 && lo >= 0xDC00 && lo <= 0xDFFF) {
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                i += 6;
            } else if (cp >= 0xD800 && cp <= 0xDFFF) {
                cp = 0xFFFD; // lone surrogate
            }
            w += mx_utf8_encode(cp, out + w); // never longer than the 6-byte escape it came from
            break;
        }
        default: return -1;
        }
    }
    c->i = end;
    *out_len = w;
    return 0;
}

static int skip_value(scan *c) {
    skip_ws(c);
    if (c->i >= c->n) return -1;
    char ch = c->s[c->i];
    if (ch == '"') {
        size_t end = string_end(c);
        if (!end) return -1;
        c->i = end;
        return 0;
    }
    if (ch == '{' || ch == '[') {
        int depth = 0;
        while (c->i < c->n) {
            ch = c->s[c->i];
            if (ch == '"') {
                size_t end = string_end(c);
                if (!end) return -1;
                c->i = end;
                continue;
            }
            if (ch == '{' || ch == '[') depth++;
            if (ch == '}' || ch == ']') depth--;
            c->i++;
            if (depth == 0) return 0;
        }
        return -1;
    }
    size_t start = c->i;
    while (c->i < c->n && !strchr(",}] \t\r\n", c->s[c->i])) c->i++;
    return c->i > start ? 0 : -1;
}

// Finds member `key` of the object starting at c->i, skipping the values of other members.
// out is the value's span; with want_end false out->end is left 0 and c->i stays at the value's
// start (saves a pass over a big value the caller walks itself).
static int find_member(scan *c, const char *key, bool want_end, tok_span *out) {
    out->start = out->end = 0;
    skip_ws(c);
    if (c->i >= c->n || c->s[c->i] != '{') return -1;
    c->i++;
    for (;;) {
        skip_ws(c);
        if (c->i < c->n && c->s[c->i] == '}') return 0; // absent
        size_t end = string_end(c);
        if (c->i >= c->n || c->s[c->i] != '"' || !end) return -1;
        char name[64];
        size_t name_len = 0;
        bool is_key = false;
        if (end - c->i - 2 < sizeof name) {
            if (read_string(c, name, &name_len) != 0) return -1;
            is_key = name_len == strlen(key) && memcmp(name, key, name_len) == 0;
        }
        c->i = end;
        skip_ws(c);
        if (c->i >= c->n || c->s[c->i] != ':') return -1;
        c->i++;
        skip_ws(c);
        size_t vstart = c->i;
        if (is_key && !want_end) {
            out->start = vstart;
            return 0;
        }
        if (skip_value(c) != 0) return -1;
        if (is_key) {
            out->start = vstart;
            out->end = c->i;
            return 0;
        }
        skip_ws(c);
        if (c->i < c->n && c->s[c->i] == ',') {
            c->i++;
            continue;
        }
        if (c->i < c->n && c->s[c->i] == '}') return 0;
        return -1;
    }
}

// Grows *buf to hold at least need bytes.
static int reserve(char **buf, size_t *cap, size_t need) {
    if (need <= *cap) return 0;
    size_t cap2 = *cap ? *cap : 256;
    while (cap2 < need) cap2 *= 2;
    char *p = realloc(*buf, cap2);
    if (!p) return -1;
    *buf = p;
    *cap = cap2;
    return 0;
}

// Reads one string into the growable scratch buffer.
static int read_string_buf(scan *c, char **buf, size_t *cap, size_t *len) {
    size_t end = string_end(c);
    if (c->i >= c->n || c->s[c->i] != '"' || !end) return -1;
    if (reserve(buf, cap, end - c->i + 1) != 0) return -1;
    return read_string(c, *buf, len);
}

static size_t line_of(const char *doc, size_t pos) {
    size_t line = 1;
    for (size_t i = 0; i < pos; i++) line += doc[i] == '\n';
    return line;
}

int tok_json_scan_vocab(const char *doc, size_t n, size_t start, size_t *end, tok_vocab_fn fn, void *ctx,
                        mx_error *err) {
    scan c = {doc, start, n};
    char *buf = NULL;
    size_t cap = 0;
    int rc = -1;
    skip_ws(&c);
    if (c.i >= c.n || doc[c.i] != '{') {
        mx_fail(err, "model.vocab is not an object");
        goto done;
    }
    c.i++;
    skip_ws(&c);
    if (c.i < c.n && doc[c.i] == '}') {
        *end = ++c.i;
        rc = 0;
        goto done;
    }
    for (;;) {
        size_t len;
        skip_ws(&c);
        if (read_string_buf(&c, &buf, &cap, &len) != 0) break;
        skip_ws(&c);
        if (c.i >= c.n || doc[c.i] != ':') break;
        c.i++;
        skip_ws(&c);
        bool neg = c.i < c.n && doc[c.i] == '-';
        if (neg) c.i++;
        size_t digits = c.i;
        int64_t v = 0;
        while (c.i < c.n && doc[c.i] >= '0' && doc[c.i] <= '9' && v < ((int64_t)1 << 40))
            v = v * 10 + (doc[c.i++] - '0');
        if (c.i == digits || (c.i < c.n && (doc[c.i] == '.' || doc[c.i] == 'e' || doc[c.i] == 'E'))) {
            mx_fail(err, "model.vocab: id of \"%.*s\" is not an integer (line %zu)", (int)len, buf,
                    line_of(doc, c.i));
            goto done;
        }
        if (fn(ctx, buf, len, neg ? -v : v) != 0) goto done;
        skip_ws(&c);
        if (c.i < c.n && doc[c.i] == ',') {
            c.i++;
            continue;
        }
        if (c.i < c.n && doc[c.i] == '}') {
            *end = ++c.i;
            rc = 0;
            goto done;
        }
        break;
    }
    mx_fail(err, "malformed JSON in model.vocab near line %zu", line_of(doc, c.i < c.n ? c.i : c.n));
done:
    free(buf);
    return rc;
}

int tok_json_scan_merges(const char *doc, size_t n, size_t start, size_t *end, tok_merge_fn fn, void *ctx,
                         mx_error *err) {
    scan c = {doc, start, n};
    char *a = NULL, *b = NULL;
    size_t acap = 0, bcap = 0;
    int rc = -1;
    skip_ws(&c);
    if (c.i >= c.n || doc[c.i] != '[') {
        mx_fail(err, "model.merges is not an array");
        goto done;
    }
    c.i++;
    skip_ws(&c);
    if (c.i < c.n && doc[c.i] == ']') {
        *end = ++c.i;
        rc = 0;
        goto done;
    }
    for (size_t index = 0;; index++) {
        size_t alen, blen;
        skip_ws(&c);
        if (c.i < c.n && doc[c.i] == '"') { // "a b"
            if (read_string_buf(&c, &a, &acap, &alen) != 0) break;
            char *sp = memchr(a, ' ', alen);
            if (!sp) {
                mx_fail(err, "model.merges[%zu]: \"%.*s\" is not two tokens separated by a space",
                        index, (int)alen, a);
                goto done;
            }
            if (fn(ctx, a, (size_t)(sp - a), sp + 1, alen - (size_t)(sp - a) - 1) != 0) goto done;
        } else if (c.i < c.n && doc[c.i] == '[') { // ["a", "b"]
            c.i++;
            skip_ws(&c);
            if (read_string_buf(&c, &a, &acap, &alen) != 0) break;
            skip_ws(&c);
            if (c.i >= c.n || doc[c.i] != ',') break;
            c.i++;
            skip_ws(&c);
            if (read_string_buf(&c, &b, &bcap, &blen) != 0) break;
            skip_ws(&c);
            if (c.i >= c.n || doc[c.i] != ']') break;
            c.i++;
            if (fn(ctx, a, alen, b, blen) != 0) goto done;
        } else {
            break;
        }
        skip_ws(&c);
        if (c.i < c.n && doc[c.i] == ',') {
            c.i++;
            continue;
        }
        if (c.i < c.n && doc[c.i] == ']') {
            *end = ++c.i;
            rc = 0;
            goto done;
        }
        break;
    }
    mx_fail(err, "malformed JSON in model.merges near line %zu", line_of(doc, c.i < c.n ? c.i : c.n));
done:
    free(a);
    free(b);
    return rc;
}

int tok_json_scan_model(const char *doc, size_t n, tok_vocab_fn on_vocab, tok_merge_fn on_merge, void *ctx,
                        tok_span *vocab, tok_span *merges, mx_error *err) {
    scan c = {doc, 0, n};
    tok_span model;
    *vocab = *merges = (tok_span){0, 0};
    if (find_member(&c, "model", false, &model) != 0 || model.start == 0) return 1;
    c.i = model.start + 1; // just inside the model object's '{'
    for (;;) {
        skip_ws(&c);
        if (c.i < c.n && doc[c.i] == '}') return vocab->end ? 0 : 1;
        size_t end = string_end(&c);
        char name[16];
        size_t name_len = 0;
        if (c.i >= c.n || doc[c.i] != '"' || !end) return 1;
        if (end - c.i - 2 < sizeof name && read_string(&c, name, &name_len) != 0) return 1;
        c.i = end;
        skip_ws(&c);
        if (c.i >= c.n || doc[c.i] != ':') return 1;
        c.i++;
        skip_ws(&c);
        size_t vstart = c.i;
        bool is_vocab = name_len == 5 && memcmp(name, "vocab", 5) == 0;
        bool is_merges = name_len == 6 && memcmp(name, "merges", 6) == 0;
        bool is_type = name_len == 4 && memcmp(name, "type", 4) == 0;
        if (is_type) { // only BPE has this layout; let the caller report anything else
            if (c.i + 5 > c.n || memcmp(doc + c.i, "\"BPE\"", 5) != 0) return 1;
        }
        if (is_vocab && doc[c.i] == '{') {
            if (tok_json_scan_vocab(doc, n, vstart, &c.i, on_vocab, ctx, err) != 0) return -1;
            *vocab = (tok_span){vstart, c.i};
        } else if (is_merges && vocab->end && doc[c.i] == '[') {
            if (tok_json_scan_merges(doc, n, vstart, &c.i, on_merge, ctx, err) != 0) return -1;
            *merges = (tok_span){vstart, c.i};
        } else if (is_vocab || is_merges) {
            return 1; // unexpected order or type
        } else if (skip_value(&c) != 0) {
            return 1;
        }
        skip_ws(&c);
        if (c.i < c.n && doc[c.i] == ',') c.i++;
        else if (!(c.i < c.n && doc[c.i] == '}')) return 1;
    }
}
