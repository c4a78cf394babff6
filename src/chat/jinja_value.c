// SPDX-License-Identifier: MIT
// Values of the Jinja interpreter: construction, Python truthiness/equality/ordering, str()/repr()
// text, json.dumps as transformers' `tojson` filter produces it, and conversion from jansson JSON.
// Containers live in the render arena (see jinja_value.h); only jbuf uses malloc.
#include "chat/jinja_value.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// ---------------------------------------------------------------------------------------------
// Byte buffer

int jbuf_put(jbuf *b, const char *s, size_t n) {
    if (b->failed) return -1;
    if (n > JBUF_MAX - b->n) {
        b->failed = true;
        return -1;
    }
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->failed = true;
            return -1;
        }
        b->p = p;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return 0;
}

int jbuf_puts(jbuf *b, const char *s) { return jbuf_put(b, s, strlen(s)); }

int jbuf_putc(jbuf *b, char c) { return jbuf_put(b, &c, 1); }

int jbuf_printf(jbuf *b, const char *fmt, ...) {
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) return -1;
    if ((size_t)n < sizeof tmp) return jbuf_put(b, tmp, (size_t)n);
    char *big = malloc((size_t)n + 1);
    if (!big) {
        b->failed = true;
        return -1;
    }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    int rc = jbuf_put(b, big, (size_t)n);
    free(big);
    return rc;
}

void jbuf_free(jbuf *b) {
    free(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
}

// ---------------------------------------------------------------------------------------------
// Construction

jv jv_undefined(const char *hint) {
    jv v = {.kind = JV_UNDEFINED};
    v.s = hint ? hint : "";
    v.n = strlen(v.s);
    return v;
}
jv jv_none(void) { return (jv){.kind = JV_NONE}; }
jv jv_bool(bool b) { return (jv){.kind = JV_BOOL, .b = b}; }
jv jv_int(int64_t i) { return (jv){.kind = JV_INT, .i = i}; }
jv jv_float(double f) { return (jv){.kind = JV_FLOAT, .f = f}; }

jv jv_string(const char *s, size_t n) {
    jv v = {.kind = JV_STRING};
    v.s = s ? s : "";
    v.n = s ? n : 0;
    return v;
}

jv jv_cstring(const char *s) { return jv_string(s, strlen(s)); }

jv jv_string_copy(mx_arena *a, const char *s, size_t n) {
    char *p = mx_arena_strndup(a, s, n);
    jv v = {.kind = JV_STRING};
    v.s = p ? p : "";
    v.n = p ? n : 0;
    return v;
}

// Lists and dicts always own an array (at least one slot), so copying their n items is valid
// for every n, zero included (memcpy must never see a null pointer).
jv jv_list_new(mx_arena *a, size_t cap) {
    jv_list *l = mx_arena_alloc(a, sizeof *l);
    if (!l) return jv_undefined("out of memory");
    if (!cap) cap = 1;
    l->items = mx_arena_alloc(a, cap * sizeof(jv));
    if (!l->items) return jv_undefined("out of memory");
    l->cap = cap;
    return (jv){.kind = JV_LIST, .list = l};
}

jv jv_dict_new(mx_arena *a, size_t cap) {
    jv_dict *d = mx_arena_alloc(a, sizeof *d);
    if (!d) return jv_undefined("out of memory");
    if (!cap) cap = 1;
    d->keys = mx_arena_alloc(a, cap * sizeof(jv));
    d->vals = mx_arena_alloc(a, cap * sizeof(jv));
    if (!d->keys || !d->vals) return jv_undefined("out of memory");
    d->cap = cap;
    return (jv){.kind = JV_DICT, .dict = d};
}

static int grow(mx_arena *a, jv **items, size_t n, size_t *cap) {
    size_t ncap = *cap ? *cap * 2 : 4;
    jv *p = mx_arena_alloc(a, ncap * sizeof(jv));
    if (!p) return -1;
    if (n) memcpy(p, *items, n * sizeof(jv));
    *items = p;
    *cap = ncap;
    return 0;
}

int jv_list_push(mx_arena *a, jv_list *l, jv v) {
    if (l->n == l->cap && grow(a, &l->items, l->n, &l->cap) < 0) return -1;
    l->items[l->n++] = v;
    return 0;
}

jv *jv_dict_find(const jv_dict *d, jv key, uint64_t *budget) {
    for (size_t i = 0; i < d->n && *budget; i++)
        if (jv_equal(d->keys[i], key, budget)) return &d->vals[i];
    return NULL;
}

jv *jv_dict_find_str(const jv_dict *d, const char *s, size_t n) {
    for (size_t i = 0; i < d->n; i++) {
        const jv *k = &d->keys[i];
        if (k->kind == JV_STRING && k->n == n && memcmp(k->s, s, n) == 0) return &d->vals[i];
    }
    return NULL;
}

int jv_dict_set(mx_arena *a, jv_dict *d, jv key, jv val, uint64_t *budget) {
    jv *slot = jv_dict_find(d, key, budget);
    if (slot) {
        *slot = val;
        return 0;
    }
    if (d->n == d->cap) {
        size_t cap = d->cap, cap2 = d->cap;
        if (grow(a, &d->keys, d->n, &cap) < 0 || grow(a, &d->vals, d->n, &cap2) < 0) return -1;
        d->cap = cap;
    }
    d->keys[d->n] = key;
    d->vals[d->n] = val;
    d->n++;
    return 0;
}

// ---------------------------------------------------------------------------------------------
// Python semantics

bool jv_truthy(jv v) {
    switch (v.kind) {
    case JV_UNDEFINED:
    case JV_NONE: return false;
    case JV_BOOL: return v.b;
    case JV_INT: return v.i != 0;
    case JV_FLOAT: return v.f != 0.0;
    case JV_STRING: return v.n > 0;
    case JV_LIST: return v.list->n > 0;
    case JV_DICT: return v.dict->n > 0 || v.dict->is_namespace;
    case JV_FUNC:
    case JV_LOOP: return true;
    }
    return false;
}

bool jv_is_number(jv v) { return v.kind == JV_INT || v.kind == JV_FLOAT; }

double jv_as_double(jv v) {
    switch (v.kind) {
    case JV_BOOL: return v.b ? 1.0 : 0.0;
    case JV_INT: return (double)v.i;
    case JV_FLOAT: return v.f;
    default: return 0.0;
    }
}

static bool numeric(jv v) { return v.kind == JV_BOOL || v.kind == JV_INT || v.kind == JV_FLOAT; }

// Values can hold themselves (`set ns.x = ns`), so every walk over nested values is bounded: the
// printers show a container already being printed as Python does ([...], {...}), and every walk
// stops at JV_MAX_DEPTH levels (equality answers false, ordering "not comparable", printing fails).
#define JV_MAX_DEPTH 256

static bool equal_at(jv a, jv b, int depth, uint64_t *budget);

bool jv_equal(jv a, jv b, uint64_t *budget) { return equal_at(a, b, 0, budget); }

static bool spend(uint64_t *budget) {
    if (!*budget) return false;
    --*budget;
    return true;
}

static bool equal_at(jv a, jv b, int depth, uint64_t *budget) {
    if (!spend(budget)) return false;
    if (numeric(a) && numeric(b)) {
        if (a.kind != JV_FLOAT && b.kind != JV_FLOAT) {
            int64_t x = a.kind == JV_BOOL ? a.b : a.i, y = b.kind == JV_BOOL ? b.b : b.i;
            return x == y;
        }
        return jv_as_double(a) == jv_as_double(b);
    }
    if (a.kind != b.kind) return false;
    switch (a.kind) {
    case JV_UNDEFINED:
    case JV_NONE: return true;
    case JV_STRING: return a.n == b.n && memcmp(a.s, b.s, a.n) == 0;
    case JV_LIST:
        if (a.list == b.list) return true;
        if (a.list->n != b.list->n || depth >= JV_MAX_DEPTH) return false;
        for (size_t i = 0; i < a.list->n; i++)
            if (!equal_at(a.list->items[i], b.list->items[i], depth + 1, budget)) return false;
        return true;
    case JV_DICT:
        if (a.dict == b.dict) return true;
        if (a.dict->n != b.dict->n || a.dict->is_namespace || b.dict->is_namespace) return false;
        if (depth >= JV_MAX_DEPTH) return false;
        for (size_t i = 0; i < a.dict->n; i++) {
            jv *o = jv_dict_find(b.dict, a.dict->keys[i], budget);
            if (!o || !equal_at(a.dict->vals[i], *o, depth + 1, budget)) return false;
        }
        return true;
    case JV_FUNC: return a.func == b.func;
    case JV_LOOP: return a.loop == b.loop;
    default: return false;
    }
}

static int compare_at(jv a, jv b, int *cmp, int depth, uint64_t *budget);

int jv_compare(jv a, jv b, int *cmp, uint64_t *budget) { return compare_at(a, b, cmp, 0, budget); }

static int compare_at(jv a, jv b, int *cmp, int depth, uint64_t *budget) {
    if (!spend(budget)) return -1;
    if (numeric(a) && numeric(b)) {
        if (a.kind != JV_FLOAT && b.kind != JV_FLOAT) {
            int64_t x = a.kind == JV_BOOL ? a.b : a.i, y = b.kind == JV_BOOL ? b.b : b.i;
            *cmp = x < y ? -1 : x > y;
        } else {
            double x = jv_as_double(a), y = jv_as_double(b);
            *cmp = x < y ? -1 : x > y;
        }
        return 0;
    }
    if (a.kind == JV_STRING && b.kind == JV_STRING) {
        size_t n = a.n < b.n ? a.n : b.n;
        int c = n ? memcmp(a.s, b.s, n) : 0;
        if (c == 0) c = a.n < b.n ? -1 : a.n > b.n;
        *cmp = c < 0 ? -1 : c > 0;
        return 0;
    }
    if (a.kind == JV_LIST && b.kind == JV_LIST) {
        if (depth >= JV_MAX_DEPTH) return -1;
        size_t n = a.list->n < b.list->n ? a.list->n : b.list->n;
        for (size_t i = 0; i < n; i++) {
            if (equal_at(a.list->items[i], b.list->items[i], depth + 1, budget)) continue;
            if (!*budget) return -1;
            return compare_at(a.list->items[i], b.list->items[i], cmp, depth + 1, budget);
        }
        *cmp = a.list->n < b.list->n ? -1 : a.list->n > b.list->n;
        return 0;
    }
    return -1;
}

const char *jv_type_name(jv v) {
    switch (v.kind) {
    case JV_UNDEFINED: return "Undefined";
    case JV_NONE: return "NoneType";
    case JV_BOOL: return "bool";
    case JV_INT: return "int";
    case JV_FLOAT: return "float";
    case JV_STRING: return "str";
    case JV_LIST: return v.list->tuple ? "tuple" : "list";
    case JV_DICT: return v.dict->is_namespace ? "Namespace" : "dict";
    case JV_FUNC: return "function";
    case JV_LOOP: return "LoopContext";
    }
    return "?";
}

// ---------------------------------------------------------------------------------------------
// Text

void jv_format_float(double f, char *buf, size_t size) {
    if (isnan(f)) {
        snprintf(buf, size, "nan");
        return;
    }
    if (isinf(f)) {
        snprintf(buf, size, f < 0 ? "-inf" : "inf");
        return;
    }
    // Shortest precision that reads back to the same double, as Python's repr does.
    char tmp[40];
    int p;
    for (p = 1; p <= 17; p++) {
        snprintf(tmp, sizeof tmp, "%.*e", p - 1, f);
        if (strtod(tmp, NULL) == f) break;
    }
    if (p > 17) snprintf(tmp, sizeof tmp, "%.16e", f);
    // tmp: [-]d[.ddd]e[+-]XX
    char digits[24];
    size_t nd = 0;
    const char *c = tmp;
    bool neg = false;
    if (*c == '-') {
        neg = true;
        c++;
    }
    for (; *c && *c != 'e'; c++)
        if (*c >= '0' && *c <= '9' && nd < sizeof digits - 1) digits[nd++] = *c;
    int exp10 = *c == 'e' ? atoi(c + 1) : 0;
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    digits[nd] = 0;
    char out[64];
    size_t o = 0;
    if (neg) out[o++] = '-';
    if (exp10 >= -4 && exp10 < 16) {
        if (exp10 >= 0) {
            for (int i = 0; i <= exp10; i++) out[o++] = (size_t)i < nd ? digits[i] : '0';
            out[o++] = '.';
            if ((size_t)exp10 + 1 < nd)
                for (size_t i = (size_t)exp10 + 1; i < nd; i++) out[o++] = digits[i];
            else
                out[o++] = '0';
        } else {
            out[o++] = '0';
            out[o++] = '.';
            for (int i = 0; i < -exp10 - 1; i++) out[o++] = '0';
            for (size_t i = 0; i < nd; i++) out[o++] = digits[i];
        }
        out[o] = 0;
    } else {
        out[o++] = digits[0];
        if (nd > 1) {
            out[o++] = '.';
            for (size_t i = 1; i < nd; i++) out[o++] = digits[i];
        }
        snprintf(out + o, sizeof out - o, "e%c%02d", exp10 < 0 ? '-' : '+', abs(exp10));
    }
    snprintf(buf, size, "%s", out);
}

// Appends "\\xHH" (Python repr) or "\\u00HH" (JSON) for a control byte, without printf: a string of
// control characters can be hundreds of MiB.
static void put_hex_escape(jbuf *b, bool json, unsigned char ch) {
    static const char hex[] = "0123456789abcdef";
    char e[6] = {'\\', json ? 'u' : 'x', '0', '0', 0, 0};
    size_t n = 0;
    if (json) {
        e[4] = hex[ch >> 4], e[5] = hex[ch & 15];
        n = 6;
    } else {
        e[2] = hex[ch >> 4], e[3] = hex[ch & 15];
        n = 4;
    }
    jbuf_put(b, e, n);
}

static int write_str_repr(jbuf *b, const char *s, size_t n) {
    bool has_sq = memchr(s, '\'', n) != NULL, has_dq = memchr(s, '"', n) != NULL;
    char q = (has_sq && !has_dq) ? '"' : '\'';
    jbuf_putc(b, q);
    size_t run = 0; // start of the bytes not yet written (copied in one piece up to the next escape)
    for (size_t i = 0; i < n && !b->failed; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch != '\\' && ch != (unsigned char)q && ch >= 0x20 && ch != 0x7f) continue;
        jbuf_put(b, s + run, i - run);
        run = i + 1;
        if (ch == '\\') jbuf_puts(b, "\\\\");
        else if (ch == (unsigned char)q) {
            jbuf_putc(b, '\\');
            jbuf_putc(b, q);
        } else if (ch == '\n') jbuf_puts(b, "\\n");
        else if (ch == '\r') jbuf_puts(b, "\\r");
        else if (ch == '\t') jbuf_puts(b, "\\t");
        else put_hex_escape(b, false, ch);
    }
    jbuf_put(b, s + run, n - run);
    return jbuf_putc(b, q);
}

// The containers being printed, outermost first: one met again is a cycle. Lists and dicts
// cannot change once built and namespaces can, so a cycle always passes through a namespace:
// while none is open the search is skipped (printing values that share sub-values stays linear).
typedef struct print_path {
    const void *open[JV_MAX_DEPTH];
    int depth;
    int namespaces_open;
    uint64_t *budget;
} print_path;

static bool on_path(const print_path *p, const void *container) {
    if (!p->namespaces_open) return false;
    for (int i = 0; i < p->depth; i++)
        if (p->open[i] == container) return true;
    return false;
}

static int write_text(jbuf *b, jv v, bool repr, print_path *path);

static int write_list(jbuf *b, const jv_list *l, print_path *path) {
    if (on_path(path, l)) return jbuf_puts(b, l->tuple ? "(...)" : "[...]");
    if (path->depth >= JV_MAX_DEPTH) {
        b->failed = true;
        return -1;
    }
    path->open[path->depth++] = l;
    jbuf_putc(b, l->tuple ? '(' : '[');
    for (size_t i = 0; i < l->n && !b->failed; i++) {
        if (i) jbuf_puts(b, ", ");
        write_text(b, l->items[i], true, path);
    }
    if (l->tuple && l->n == 1) jbuf_putc(b, ',');
    path->depth--;
    return jbuf_putc(b, l->tuple ? ')' : ']');
}

// A namespace prints as jinja2's does, "<Namespace {...}>" around its attributes' dict.
static int write_dict(jbuf *b, const jv_dict *d, print_path *path) {
    if (d->is_namespace) jbuf_puts(b, "<Namespace ");
    if (on_path(path, d)) {
        jbuf_puts(b, "{...}");
    } else if (path->depth >= JV_MAX_DEPTH) {
        b->failed = true;
        return -1;
    } else {
        path->open[path->depth++] = d;
        path->namespaces_open += d->is_namespace;
        jbuf_putc(b, '{');
        for (size_t i = 0; i < d->n && !b->failed; i++) {
            if (i) jbuf_puts(b, ", ");
            write_text(b, d->keys[i], true, path);
            jbuf_puts(b, ": ");
            write_text(b, d->vals[i], true, path);
        }
        jbuf_putc(b, '}');
        path->namespaces_open -= d->is_namespace;
        path->depth--;
    }
    return d->is_namespace ? jbuf_putc(b, '>') : 0;
}

static int write_text(jbuf *b, jv v, bool repr, print_path *path) {
    char num[64];
    if (!*path->budget) {
        b->failed = true;
        return -1;
    }
    --*path->budget;
    switch (v.kind) {
    case JV_UNDEFINED: return 0;
    case JV_NONE: return jbuf_puts(b, "None");
    case JV_BOOL: return jbuf_puts(b, v.b ? "True" : "False");
    case JV_INT: return jbuf_printf(b, "%lld", (long long)v.i);
    case JV_FLOAT: jv_format_float(v.f, num, sizeof num); return jbuf_puts(b, num);
    case JV_STRING: return repr ? write_str_repr(b, v.s, v.n) : jbuf_put(b, v.s, v.n);
    case JV_LIST: return write_list(b, v.list, path);
    case JV_DICT: return write_dict(b, v.dict, path);
    case JV_FUNC: return jbuf_puts(b, "<function>");
    case JV_LOOP: return jbuf_puts(b, "<LoopContext>");
    }
    return 0;
}

// The path lives on the stack (2 KB, once per printed value, not per level).
static int write_top(jbuf *b, jv v, bool repr, uint64_t *budget) {
    print_path path;
    path.depth = path.namespaces_open = 0;
    path.budget = budget;
    return write_text(b, v, repr, &path);
}

int jv_write_str(jbuf *b, jv v, uint64_t *budget) { return write_top(b, v, false, budget); }
int jv_write_repr(jbuf *b, jv v, uint64_t *budget) { return write_top(b, v, true, budget); }

int jv_to_string(mx_arena *a, jv v, jv *out, uint64_t *budget) {
    if (v.kind == JV_STRING) {
        *out = v;
        return 0;
    }
    jbuf b = {0};
    write_top(&b, v, false, budget);
    if (b.failed) {
        jbuf_free(&b);
        return -1;
    }
    *out = jv_string_copy(a, b.p ? b.p : "", b.n);
    jbuf_free(&b);
    return a->exhausted ? -1 : 0;
}

// ---------------------------------------------------------------------------------------------
// JSON (Python json.dumps with ensure_ascii=False)

static void write_json_string(jbuf *b, const char *s, size_t n) {
    jbuf_putc(b, '"');
    size_t run = 0;
    for (size_t i = 0; i < n && !b->failed; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch >= 0x20 && ch != '"' && ch != '\\') continue;
        jbuf_put(b, s + run, i - run);
        run = i + 1;
        switch (ch) {
        case '"': jbuf_puts(b, "\\\""); break;
        case '\\': jbuf_puts(b, "\\\\"); break;
        case '\n': jbuf_puts(b, "\\n"); break;
        case '\r': jbuf_puts(b, "\\r"); break;
        case '\t': jbuf_puts(b, "\\t"); break;
        case '\b': jbuf_puts(b, "\\b"); break;
        case '\f': jbuf_puts(b, "\\f"); break;
        default: put_hex_escape(b, true, ch); break;
        }
    }
    jbuf_put(b, s + run, n - run);
    jbuf_putc(b, '"');
}

static void json_newline(jbuf *b, int indent, int level) {
    jbuf_putc(b, '\n');
    for (int i = 0; i < indent * level; i++) jbuf_putc(b, ' ');
}

static int json_key(jbuf *b, jv k, mx_error *err) {
    char num[64];
    switch (k.kind) {
    case JV_STRING: write_json_string(b, k.s, k.n); return 0;
    case JV_INT: jbuf_printf(b, "\"%lld\"", (long long)k.i); return 0;
    case JV_FLOAT: jv_format_float(k.f, num, sizeof num); jbuf_printf(b, "\"%s\"", num); return 0;
    case JV_BOOL: jbuf_puts(b, k.b ? "\"true\"" : "\"false\""); return 0;
    case JV_NONE: jbuf_puts(b, "\"null\""); return 0;
    default: return mx_fail(err, "keys must be str, int, float, bool or None, not %s", jv_type_name(k));
    }
}

static int write_json(jbuf *b, jv v, int indent, bool sort_keys, int level, uint64_t *budget, mx_error *err) {
    char num[64];
    if (level > 256) return mx_fail(err, "tojson: value nested too deeply");
    // Shared sub-values can make the text exponentially long: each value printed spends a unit.
    if (!*budget) return mx_fail(err, "exceeded the template's step limit");
    --*budget;
    if (b->failed) return mx_fail(err, "result too large (limit %zu MiB)", JBUF_MAX >> 20);
    switch (v.kind) {
    case JV_NONE: jbuf_puts(b, "null"); return 0;
    case JV_BOOL: jbuf_puts(b, v.b ? "true" : "false"); return 0;
    case JV_INT: jbuf_printf(b, "%lld", (long long)v.i); return 0;
    case JV_FLOAT:
        if (isnan(v.f)) jbuf_puts(b, "NaN");
        else if (isinf(v.f)) jbuf_puts(b, v.f < 0 ? "-Infinity" : "Infinity");
        else {
            jv_format_float(v.f, num, sizeof num);
            jbuf_puts(b, num);
        }
        return 0;
    case JV_STRING: write_json_string(b, v.s, v.n); return 0;
    case JV_LIST:
        if (v.list->n == 0) {
            jbuf_puts(b, "[]");
            return 0;
        }
        jbuf_putc(b, '[');
        for (size_t i = 0; i < v.list->n; i++) {
            if (i) jbuf_puts(b, indent >= 0 ? "," : ", ");
            if (indent >= 0) json_newline(b, indent, level + 1);
            if (write_json(b, v.list->items[i], indent, sort_keys, level + 1, budget, err) < 0) return -1;
        }
        if (indent >= 0) json_newline(b, indent, level);
        jbuf_putc(b, ']');
        return 0;
    case JV_DICT: {
        const jv_dict *d = v.dict;
        if (d->n == 0) {
            jbuf_puts(b, "{}");
            return 0;
        }
        // Order of keys: insertion order, or sorted (strings only, like Python) with sort_keys.
        size_t order_small[64];
        size_t *order = d->n <= 64 ? order_small : malloc(d->n * sizeof *order);
        if (!order) return mx_fail(err, "out of memory");
        for (size_t i = 0; i < d->n; i++) order[i] = i;
        if (sort_keys) {
            for (size_t i = 1; i < d->n; i++) {
                size_t x = order[i], j = i;
                while (j > 0) {
                    int c = 0;
                    if (jv_compare(d->keys[order[j - 1]], d->keys[x], &c, budget) < 0) {
                        if (order != order_small) free(order);
                        if (!*budget) return mx_fail(err, "tojson: sorting keys exceeded the template's step limit");
                        return mx_fail(err, "tojson: cannot sort keys of different types");
                    }
                    if (c <= 0) break;
                    order[j] = order[j - 1];
                    j--;
                }
                order[j] = x;
            }
        }
        jbuf_putc(b, '{');
        int rc = 0;
        for (size_t i = 0; i < d->n && rc == 0; i++) {
            if (i) jbuf_puts(b, indent >= 0 ? "," : ", ");
            if (indent >= 0) json_newline(b, indent, level + 1);
            rc = json_key(b, d->keys[order[i]], err);
            if (rc == 0) {
                jbuf_puts(b, ": ");
                rc = write_json(b, d->vals[order[i]], indent, sort_keys, level + 1, budget, err);
            }
        }
        if (order != order_small) free(order);
        if (rc < 0) return -1;
        if (indent >= 0) json_newline(b, indent, level);
        jbuf_putc(b, '}');
        return 0;
    }
    default: return mx_fail(err, "Object of type %s is not JSON serializable", jv_type_name(v));
    }
}

int jv_write_json(jbuf *b, jv v, int indent, bool sort_keys, uint64_t *budget, mx_error *err) {
    return write_json(b, v, indent, sort_keys, 0, budget, err);
}

int jv_from_json(mx_arena *a, json_t *j, jv *out, int depth) {
    if (depth > 256) return -1;
    switch (json_typeof(j)) {
    case JSON_NULL: *out = jv_none(); return 0;
    case JSON_TRUE: *out = jv_bool(true); return 0;
    case JSON_FALSE: *out = jv_bool(false); return 0;
    case JSON_INTEGER: *out = jv_int((int64_t)json_integer_value(j)); return 0;
    case JSON_REAL: *out = jv_float(json_real_value(j)); return 0;
    case JSON_STRING: *out = jv_string(json_string_value(j), json_string_length(j)); return 0;
    case JSON_ARRAY: {
        size_t n = json_array_size(j);
        jv l = jv_list_new(a, n);
        if (l.kind != JV_LIST) return -1;
        for (size_t i = 0; i < n; i++) {
            if (jv_from_json(a, json_array_get(j, i), &l.list->items[i], depth + 1) < 0) return -1;
        }
        l.list->n = n;
        *out = l;
        return 0;
    }
    case JSON_OBJECT: {
        jv d = jv_dict_new(a, json_object_size(j));
        if (d.kind != JV_DICT) return -1;
        const char *key;
        json_t *val;
        json_object_foreach(j, key, val) {
            size_t i = d.dict->n;
            if (i >= d.dict->cap) return -1;
            d.dict->keys[i] = jv_cstring(key);
            if (jv_from_json(a, val, &d.dict->vals[i], depth + 1) < 0) return -1;
            d.dict->n++;
        }
        *out = d;
        return 0;
    }
    }
    return -1;
}

// ---------------------------------------------------------------------------------------------
// UTF-8

int32_t jv_utf8_decode(const char *s, size_t n, size_t *len) {
    const unsigned char *u = (const unsigned char *)s;
    size_t need;
    int32_t cp;
    if (u[0] < 0x80) {
        *len = 1;
        return u[0];
    } else if ((u[0] & 0xE0) == 0xC0) {
        need = 2;
        cp = u[0] & 0x1F;
    } else if ((u[0] & 0xF0) == 0xE0) {
        need = 3;
        cp = u[0] & 0x0F;
    } else if ((u[0] & 0xF8) == 0xF0) {
        need = 4;
        cp = u[0] & 0x07;
    } else {
        *len = 1;
        return u[0];
    }
    if (need > n) {
        *len = 1;
        return u[0];
    }
    for (size_t i = 1; i < need; i++) {
        if ((u[i] & 0xC0) != 0x80) {
            *len = 1;
            return u[0];
        }
        cp = (cp << 6) | (u[i] & 0x3F);
    }
    *len = need;
    return cp;
}

size_t jv_utf8_len(const char *s, size_t n) {
    size_t count = 0;
    for (size_t i = 0; i < n;) {
        size_t len;
        jv_utf8_decode(s + i, n - i, &len);
        i += len;
        count++;
    }
    return count;
}

size_t jv_utf8_offset(const char *s, size_t n, size_t index) {
    size_t i = 0;
    for (size_t k = 0; k < index && i < n; k++) {
        size_t len;
        jv_utf8_decode(s + i, n - i, &len);
        i += len;
    }
    return i;
}
