// SPDX-License-Identifier: MIT
// Jinja tokenizer: splits a template into text and tag tokens and lexes the expressions inside
// tags. Whitespace control follows jinja2 with trim_blocks=True and lstrip_blocks=True (the
// settings transformers uses): a block or comment tag eats the single newline after it, and the
// spaces before it when they start the line; `{%-`/`-%}` strip all whitespace on that side, `{%+`
// and `+%}` turn the automatic rules off for that side.
#include "chat/jinja_lexer.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "core/utf8.h"

typedef struct lexer {
    const char *src; // normalized source
    size_t n, p;
    int line;
    mx_arena *arena;
    jtoks *out;
    mx_error *err;
} lexer;

static int emit(lexer *lx, jtok t) {
    if (lx->out->n == lx->out->cap) {
        size_t cap = lx->out->cap ? lx->out->cap * 2 : 256;
        jtok *v = realloc(lx->out->v, cap * sizeof *v);
        if (!v) return mx_fail(lx->err, "out of memory");
        lx->out->v = v;
        lx->out->cap = cap;
    }
    lx->out->v[lx->out->n++] = t;
    return 0;
}

static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
static bool is_ident_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static bool is_digit(char c) { return c >= '0' && c <= '9'; }
static bool is_ident(char c) { return is_ident_start(c) || is_digit(c); }

static void count_lines(lexer *lx, size_t from, size_t to) {
    for (size_t i = from; i < to; i++)
        if (lx->src[i] == '\n') lx->line++;
}

static bool starts(const lexer *lx, size_t p, const char *s) {
    size_t k = strlen(s);
    return p + k <= lx->n && memcmp(lx->src + p, s, k) == 0;
}

// Emits text src[a, b) after the whitespace rules of the tag that follows it. ctrl is the tag's
// opening marker ('-', '+' or 0); lstrip says whether lstrip_blocks applies to that tag.
static int emit_text(lexer *lx, size_t a, size_t b, char ctrl, bool lstrip, bool line_starting, int line) {
    if (ctrl == '-') {
        while (b > a && is_space(lx->src[b - 1])) b--;
    } else if (ctrl != '+' && lstrip) {
        size_t l = b;
        while (l > a && lx->src[l - 1] != '\n') l--;
        if (l > a || line_starting) {
            bool all_ws = l < b;
            for (size_t i = l; i < b; i++)
                if (!is_space(lx->src[i])) all_ws = false;
            if (all_ws) b = l;
        }
    }
    if (b <= a) return 0;
    return emit(lx, (jtok){.kind = JT_TEXT, .line = line, .s = lx->src + a, .n = b - a});
}

// After a block/comment close at p: `-` strips all whitespace, `+` nothing, else one newline.
static size_t after_close(lexer *lx, size_t p, char ctrl, bool trim) {
    if (ctrl == '-') {
        while (p < lx->n && is_space(lx->src[p])) {
            if (lx->src[p] == '\n') lx->line++;
            p++;
        }
    } else if (ctrl != '+' && trim && p < lx->n && lx->src[p] == '\n') {
        lx->line++;
        p++;
    }
    return p;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

// Lexes a quoted string at lx->p, decoding Python escapes into the arena.
static int lex_string(lexer *lx) {
    int line = lx->line;
    char q = lx->src[lx->p];
    size_t start = ++lx->p;
    size_t end = start;
    while (end < lx->n && lx->src[end] != q) {
        if (lx->src[end] == '\\' && end + 1 < lx->n) end++;
        end++;
    }
    if (end >= lx->n) return mx_fail(lx->err, "line %d: unterminated string literal", line);
    char *buf = mx_arena_alloc(lx->arena, end - start + 1);
    if (!buf) return mx_fail(lx->err, "out of memory");
    size_t o = 0;
    for (size_t i = start; i < end; i++) {
        char c = lx->src[i];
        if (c == '\n') lx->line++;
        if (c != '\\') {
            buf[o++] = c;
            continue;
        }
        char e = lx->src[++i];
        int digits = 0;
        switch (e) {
        case 'n': buf[o++] = '\n'; break;
        case 't': buf[o++] = '\t'; break;
        case 'r': buf[o++] = '\r'; break;
        case '\\': buf[o++] = '\\'; break;
        case '\'': buf[o++] = '\''; break;
        case '"': buf[o++] = '"'; break;
        case 'a': buf[o++] = '\a'; break;
        case 'b': buf[o++] = '\b'; break;
        case 'f': buf[o++] = '\f'; break;
        case 'v': buf[o++] = '\v'; break;
        case '\n': lx->line++; break;
        case 'x': digits = 2; break;
        case 'u': digits = 4; break;
        case 'U': digits = 8; break;
        default:
            if (e >= '0' && e <= '7') {
                int v = 0, k = 0;
                while (k < 3 && i < end && lx->src[i] >= '0' && lx->src[i] <= '7') {
                    v = v * 8 + (lx->src[i] - '0');
                    i++;
                    k++;
                }
                i--;
                // Octal escapes above 0x7f are code points, like Python.
                o += mx_utf8_encode((uint32_t)v, buf + o);
            } else {
                buf[o++] = '\\';
                buf[o++] = e;
            }
        }
        if (digits) {
            uint32_t cp = 0;  // 8 hex digits may pass INT32_MAX before the range check
            for (int k = 0; k < digits; k++) {
                int h = i + 1 + (size_t)k < end ? hexval(lx->src[i + 1 + k]) : -1;
                if (h < 0) return mx_fail(lx->err, "line %d: bad \\%c escape in string literal", line, e);
                cp = cp * 16 + (uint32_t)h;
            }
            if (cp > 0x10FFFF) return mx_fail(lx->err, "line %d: bad \\%c escape in string literal", line, e);
            i += (size_t)digits;
            // Each escape is at most 10 source bytes and encodes to at most 4.
            o += mx_utf8_encode(cp, buf + o);
        }
    }
    buf[o] = 0;
    lx->p = end + 1;
    return emit(lx, (jtok){.kind = JT_STRING, .line = line, .s = buf, .n = o});
}

static int lex_number(lexer *lx) {
    size_t a = lx->p, p = lx->p;
    bool is_float = false;
    while (p < lx->n && (is_digit(lx->src[p]) || (lx->src[p] == '_' && p + 1 < lx->n && is_digit(lx->src[p + 1])))) p++;
    if (p + 1 < lx->n && lx->src[p] == '.' && is_digit(lx->src[p + 1])) {
        is_float = true;
        p++;
        while (p < lx->n && (is_digit(lx->src[p]) || lx->src[p] == '_')) p++;
    }
    if (p < lx->n && (lx->src[p] == 'e' || lx->src[p] == 'E')) {
        size_t q = p + 1;
        if (q < lx->n && (lx->src[q] == '+' || lx->src[q] == '-')) q++;
        if (q < lx->n && is_digit(lx->src[q])) {
            is_float = true;
            p = q;
            while (p < lx->n && is_digit(lx->src[p])) p++;
        }
    }
    char tmp[128];
    size_t k = 0;
    for (size_t i = a; i < p && k < sizeof tmp - 1; i++)
        if (lx->src[i] != '_') tmp[k++] = lx->src[i];
    tmp[k] = 0;
    jtok t = {.kind = is_float ? JT_FLOAT : JT_INT, .line = lx->line, .s = lx->src + a, .n = p - a};
    errno = 0;
    if (is_float) t.f = strtod(tmp, NULL);
    else {
        t.i = strtoll(tmp, NULL, 10);
        if (errno == ERANGE) return mx_fail(lx->err, "line %d: integer literal too large", lx->line);
    }
    lx->p = p;
    return emit(lx, t);
}

static const char *const OPS2[] = {"//", "**", "==", "!=", "<=", ">="};
static const char OPS1[] = "+-*/%~()[]{},.:|=<>";

// Lexes the inside of a tag opened at line `line` until its closer; returns the closer's marker
// ('-', '+' or 0) in *ctrl.
static int lex_tag(lexer *lx, bool block, int line, char *ctrl) {
    int depth = 0;
    for (;;) {
        while (lx->p < lx->n && is_space(lx->src[lx->p])) {
            if (lx->src[lx->p] == '\n') lx->line++;
            lx->p++;
        }
        if (lx->p >= lx->n)
            return mx_fail(lx->err, "line %d: unclosed '%s' tag", line, block ? "{%" : "{{");
        size_t p = lx->p;
        if (depth == 0) {
            const char *close = block ? "%}" : "}}";
            char c = lx->src[p];
            if ((c == '-' || c == '+') && starts(lx, p + 1, close) && (block || c == '-')) {
                *ctrl = c;
                lx->p = p + 3;
                return emit(lx, (jtok){.kind = block ? JT_BLOCK_END : JT_VAR_END, .line = lx->line});
            }
            if (starts(lx, p, close)) {
                *ctrl = 0;
                lx->p = p + 2;
                return emit(lx, (jtok){.kind = block ? JT_BLOCK_END : JT_VAR_END, .line = lx->line});
            }
        }
        char c = lx->src[p];
        int rc;
        if (c == '\'' || c == '"') rc = lex_string(lx);
        else if (is_digit(c)) rc = lex_number(lx);
        else if (is_ident_start(c)) {
            size_t q = p;
            while (q < lx->n && is_ident(lx->src[q])) q++;
            rc = emit(lx, (jtok){.kind = JT_NAME, .line = lx->line, .s = lx->src + p, .n = q - p});
            lx->p = q;
        } else {
            size_t len = 0;
            for (size_t k = 0; k < sizeof OPS2 / sizeof *OPS2; k++)
                if (starts(lx, p, OPS2[k])) len = 2;
            if (!len && strchr(OPS1, c) && c) len = 1;
            if (!len) {
                if ((unsigned char)c >= 0x20 && (unsigned char)c < 0x7f)
                    return mx_fail(lx->err, "line %d: unexpected character '%c'", lx->line, c);
                return mx_fail(lx->err, "line %d: unexpected character 0x%02x", lx->line, (unsigned char)c);
            }
            if (c == '(' || c == '[' || c == '{') depth++;
            if ((c == ')' || c == ']' || c == '}') && depth > 0) depth--;
            rc = emit(lx, (jtok){.kind = JT_OP, .line = lx->line, .s = lx->src + p, .n = len});
            lx->p = p + len;
        }
        if (rc < 0) return -1;
    }
}

// Matches `{%[-+]? \s* word \s* [-+]? %}` at p; on success sets the markers and the end offset.
static bool match_word_tag(const lexer *lx, size_t p, const char *word, char *open, char *close, size_t *end) {
    if (!starts(lx, p, "{%")) return false;
    p += 2;
    *open = 0;
    if (p < lx->n && (lx->src[p] == '-' || lx->src[p] == '+')) *open = lx->src[p++];
    while (p < lx->n && is_space(lx->src[p])) p++;
    if (!starts(lx, p, word)) return false;
    p += strlen(word);
    while (p < lx->n && is_space(lx->src[p])) p++;
    *close = 0;
    if (p < lx->n && (lx->src[p] == '-' || lx->src[p] == '+')) *close = lx->src[p++];
    if (!starts(lx, p, "%}")) return false;
    *end = p + 2;
    return true;
}

int jinja_lex(const char *src_in, size_t n_in, mx_arena *arena, jtoks *out, mx_error *err) {
    // Normalize newlines and drop one trailing newline, as jinja2 does.
    char *src = mx_arena_alloc(arena, n_in + 1);
    if (!src) return mx_fail(err, "out of memory");
    size_t n = 0;
    for (size_t i = 0; i < n_in; i++) {
        if (src_in[i] == '\r') {
            src[n++] = '\n';
            if (i + 1 < n_in && src_in[i + 1] == '\n') i++;
        } else
            src[n++] = src_in[i];
    }
    if (n && src[n - 1] == '\n') n--;
    src[n] = 0;

    lexer lx = {.src = src, .n = n, .p = 0, .line = 1, .arena = arena, .out = out, .err = err};
    bool line_starting = true;
    while (lx.p < n) {
        size_t k = lx.p;
        while (k + 1 < n && !(src[k] == '{' && (src[k + 1] == '{' || src[k + 1] == '%' || src[k + 1] == '#'))) k++;
        if (k + 1 >= n) {
            if (emit_text(&lx, lx.p, n, 0, false, false, lx.line) < 0) return -1;
            count_lines(&lx, lx.p, n);
            lx.p = n;
            break;
        }
        char kind = src[k + 1];
        char open = (k + 2 < n && (src[k + 2] == '-' || src[k + 2] == '+')) ? src[k + 2] : 0;
        if (kind == '{' && open == '+') open = 0;
        int text_line = lx.line;
        count_lines(&lx, lx.p, k);
        int tag_line = lx.line;
        char close = 0;
        size_t raw_end;
        if (kind == '%' && match_word_tag(&lx, k, "raw", &open, &close, &raw_end)) {
            if (emit_text(&lx, lx.p, k, open, true, line_starting, text_line) < 0) return -1;
            size_t body = after_close(&lx, raw_end, close, true);
            size_t q = body, end = 0;
            char eo = 0, ec = 0;
            while (q < n && !match_word_tag(&lx, q, "endraw", &eo, &ec, &end)) q++;
            if (q >= n) return mx_fail(err, "line %d: unclosed 'raw' block (expected 'endraw')", tag_line);
            if (emit_text(&lx, body, q, eo, true, body > 0 && src[body - 1] == '\n', lx.line) < 0) return -1;
            count_lines(&lx, body, end);
            lx.p = after_close(&lx, end, ec, true);
            line_starting = lx.p > 0 && src[lx.p - 1] == '\n';
            continue;
        }
        if (emit_text(&lx, lx.p, k, open, kind != '{', line_starting, text_line) < 0) return -1;
        size_t p = k + 2 + (open ? 1 : 0);
        if (kind == '#') {
            size_t q = p;
            while (q + 1 < n && !(src[q] == '#' && src[q + 1] == '}')) q++;
            if (q + 1 >= n) return mx_fail(err, "line %d: unclosed comment", tag_line);
            char c = (q > p && (src[q - 1] == '-' || src[q - 1] == '+')) ? src[q - 1] : 0;
            count_lines(&lx, p, q + 2);
            lx.p = after_close(&lx, q + 2, c, true);
        } else {
            lx.p = p;
            if (emit(&lx, (jtok){.kind = kind == '%' ? JT_BLOCK_BEGIN : JT_VAR_BEGIN, .line = tag_line}) < 0)
                return -1;
            if (lex_tag(&lx, kind == '%', tag_line, &close) < 0) return -1;
            lx.p = after_close(&lx, lx.p, close, kind == '%');
        }
        line_starting = lx.p > 0 && src[lx.p - 1] == '\n';
    }
    return emit(&lx, (jtok){.kind = JT_EOF, .line = lx.line});
}
