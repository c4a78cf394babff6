// SPDX-License-Identifier: MIT
// A regular expression (the subset JSON Schema's `pattern` supports here: literals, classes, `.`,
// \d \w \s and their negations, groups, `|`, quantifiers, lazy quantifiers read as greedy) as a GBNF
// sequence matching the same characters inside a JSON string: quotes and backslashes become their
// JSON escapes, and anything that would need a JSON escape the grammar cannot write (control
// characters, lookaround, backreferences) is refused with a message starting "pattern: ".
#include <stdarg.h>
#include <stdbool.h>
#include <string.h>

#include "grammar/gbnf_text.h"

typedef struct regex_in {
    const char *p;  // the next character to read
    char *why;      // the first error's message
    size_t cap;
} regex_in;

static int rx_fail(regex_in *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int rx_fail(regex_in *r, const char *fmt, ...) {
    if (r->why[0]) return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->why, r->cap, fmt, ap);
    va_end(ap);
    return -1;
}

static int regex_alt(regex_in *r, FILE *f, int depth);

// A class member or escape written as GBNF class text; JSON-unsafe characters are dropped.
static int regex_class_escape(regex_in *r, FILE *f, char e) {
    switch (e) {
    case 'd': fputs("0-9", f); return 0;
    case 'w': fputs("a-zA-Z0-9_", f); return 0;
    case 's': fputs(" ", f); return 0;  // tab and newline would need JSON escapes
    case 'n': case 't': case 'r': case 'f': case 'v':
        return rx_fail(r, "pattern: control characters are not supported");
    default:
        if (e == '"' || e == '\\') return rx_fail(r, "pattern: '\\%c' in a class is not supported", e);
        if (e == ']' || e == '[' || e == '-' || e == '^') fprintf(f, "\\%c", e);
        else fputc(e, f);
        return 0;
    }
}

static int regex_class(regex_in *r, FILE *f) {
    r->p++;  // '['
    bool neg = *r->p == '^';
    if (neg) r->p++;
    fputs(neg ? "[^\"\\\\\\x00-\\x1F" : "[", f);
    bool first = true;
    while (*r->p != ']' || first) {
        first = false;
        char ch = *r->p;
        if (!ch) return rx_fail(r, "pattern: unterminated '['");
        if (ch == '\\') {
            char e = r->p[1];
            if (!e) return rx_fail(r, "pattern: unterminated '['");  // the backslash was the last character
            r->p += 2;
            if (neg && (e == 'd' || e == 'w' || e == 's')) return rx_fail(r, "pattern: \\%c in [^...] is not supported", e);
            if (regex_class_escape(r, f, e)) return -1;
        } else if (ch == '"' || (unsigned char)ch < 0x20) {
            if (!neg) return rx_fail(r, "pattern: '\"' and control characters are not supported in a class");
            r->p++;
        } else {
            if (ch == '[' || ch == '^') fputc('\\', f);
            fputc(ch, f);
            r->p++;
        }
    }
    r->p++;
    fputc(']', f);
    return 0;
}

static int regex_atom(regex_in *r, FILE *f, int depth) {
    char ch = *r->p;
    if (ch == '(') {
        r->p++;
        if (r->p[0] == '?') {
            if (r->p[1] != ':') return rx_fail(r, "pattern: lookaround and named groups are not supported");
            r->p += 2;
        }
        fputs("( ", f);
        if (regex_alt(r, f, depth + 1)) return -1;
        if (*r->p != ')') return rx_fail(r, "pattern: '(' is not closed");
        r->p++;
        fputs(" )", f);
        return 0;
    }
    if (ch == '[') return regex_class(r, f);
    if (ch == '.') {
        r->p++;
        fputs(GBNF_JSON_STRING_CHAR, f);
        return 0;
    }
    if (ch == '\\') {
        char e = r->p[1];
        if (!e) return rx_fail(r, "pattern: a trailing '\\' escapes nothing");
        r->p += 2;
        if (e == 'd' || e == 'w' || e == 's') {
            fputc('[', f);
            regex_class_escape(r, f, e);
            fputc(']', f);
            return 0;
        }
        if (e == 'D' || e == 'W' || e == 'S') {
            fputs("[^\"\\\\\\x00-\\x1F", f);
            regex_class_escape(r, f, (char)(e + 32));
            if (e == 'S') fputs("\\t\\n\\r", f);
            fputc(']', f);
            return 0;
        }
        if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '0' && e <= '9') || !e)
            return rx_fail(r, "pattern: escape '\\%c' is not supported", e ? e : '0');
        if (e == '"') fputs("\"\\\\\\\"\"", f);        // a quote is written \" in JSON
        else if (e == '\\') fputs("\"\\\\\\\\\"", f);  // a backslash is written \\ in JSON
        else mx_gbnf_put_literal(f, &e, 1);
        return 0;
    }
    if ((unsigned char)ch < 0x20) return rx_fail(r, "pattern: control characters are not supported");
    if (ch == '"') {
        r->p++;
        fputs("\"\\\\\\\"\"", f);
        return 0;
    }
    if (ch == '*' || ch == '+' || ch == '?' || ch == '{')
        return rx_fail(r, "pattern: quantifier '%c' without anything before it", ch);
    size_t n = 1;
    while ((((unsigned char)r->p[n]) & 0xC0) == 0x80) n++;
    mx_gbnf_put_literal(f, r->p, n);
    r->p += n;
    return 0;
}

static int regex_seq(regex_in *r, FILE *f, int depth) {
    bool empty = true;
    while (*r->p && *r->p != '|' && *r->p != ')') {
        if (*r->p == '$' && (r->p[1] == 0 || r->p[1] == ')' || r->p[1] == '|'))
            return rx_fail(r, "pattern: '$' is only supported at the end");
        if (*r->p == '^') return rx_fail(r, "pattern: '^' is only supported at the start");
        if (!empty) fputc(' ', f);
        empty = false;
        if (regex_atom(r, f, depth)) return -1;
        char q = *r->p;
        if (q == '*' || q == '+' || q == '?') {
            fputc(q, f);
            r->p++;
        } else if (q == '{') {
            const char *close = strchr(r->p, '}');
            if (!close) return rx_fail(r, "pattern: '{' is not closed");
            fprintf(f, "%.*s", (int)(close - r->p + 1), r->p);
            r->p = close + 1;
        }
        if (*r->p == '?') r->p++;  // lazy: same language
    }
    if (empty) fputs("\"\"", f);
    return 0;
}

static int regex_alt(regex_in *r, FILE *f, int depth) {
    if (depth > 50) return rx_fail(r, "pattern: groups nested too deeply");
    if (regex_seq(r, f, depth)) return -1;
    while (*r->p == '|') {
        r->p++;
        fputs(" | ", f);
        if (regex_seq(r, f, depth)) return -1;
    }
    return 0;
}

int mx_gbnf_from_regex(const char *regex, FILE *f, char *why, size_t cap) {
    why[0] = 0;
    regex_in r = {regex, why, cap};
    if (regex_alt(&r, f, 0)) return -1;
    if (*r.p) return rx_fail(&r, "pattern: unexpected '%c'", *r.p);
    return 0;
}
