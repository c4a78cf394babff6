// SPDX-License-Identifier: MIT
// Built-in filters (`x | name(args)`) and tests (`x is name`) with jinja2's semantics, plus
// transformers' `tojson` (json.dumps with ensure_ascii=False, optional indent/sort_keys). The name
// tables here are also what the parser checks names against.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "chat/jinja_builtins.h"
#include "chat/jinja_eval.h"

static const char *const FILTERS[] = {
    "abs", "attr", "capitalize", "count", "d", "default", "dictsort", "e", "escape", "first", "float",
    "indent", "int", "items", "join", "last", "length", "list", "lower", "map", "max", "min", "reject",
    "rejectattr", "replace", "reverse", "round", "safe", "select", "selectattr", "sort", "string",
    "sum", "title", "tojson", "trim", "unique", "upper", "wordcount", "format", NULL};

static const char *const TESTS[] = {
    "boolean", "callable", "defined", "divisibleby", "eq", "equalto", "escaped", "even", "false",
    "float", "ge", "gt", "in", "integer", "iterable", "le", "lower", "lt", "mapping", "ne", "none",
    "number", "odd", "sameas", "sequence", "string", "true", "undefined", "upper", "==", "!=", "<",
    "<=", ">", ">=", "greaterthan", "lessthan", NULL};

static bool in_table(const char *const *t, const char *s, size_t n) {
    for (; *t; t++)
        if (strlen(*t) == n && memcmp(*t, s, n) == 0) return true;
    return false;
}

bool jinja_filter_known(const char *s, size_t n) { return in_table(FILTERS, s, n); }
bool jinja_test_known(const char *s, size_t n) { return in_table(TESTS, s, n); }

#define F(s) (strcmp(name, s) == 0)

// ---------------------------------------------------------------------------------------------
// Helpers

static int string_value(jctx *c, int line, jv v, jv *out) {
    if (jv_to_string(c->ar, v, out, &c->budget) < 0)
        return jctx_spend(c, line, 0) < 0 ? -1 : jctx_fail(c, line, "out of memory or result too large");
    return 0;
}

static int from_buf(jctx *c, int line, jbuf *b, jv *out) {
    int rc;
    if (b->failed) rc = jctx_spend(c, line, 0) < 0 ? -1 : jctx_fail(c, line, "result too large");
    else {
        *out = jv_string_copy(c->ar, b->p ? b->p : "", b->n);
        rc = jctx_check_memory(c, line);
    }
    jbuf_free(b);
    return rc;
}

static bool bool_arg(const jargs *a, size_t i, const char *name, bool def) {
    jv v;
    return jargs_get(a, i, name, &v) ? jv_truthy(v) : def;
}

// Follows a dotted attribute path ("a.b", "0") like jinja2's make_attrgetter.
static int attr_path(jctx *c, int line, jv obj, jv path, jv *out) {
    if (path.kind == JV_INT) return jinja_get_item(c, line, obj, path, out);
    if (path.kind != JV_STRING) return jctx_fail(c, line, "attribute must be a string");
    *out = obj;
    size_t i = 0;
    while (i <= path.n) {
        const char *dot = memchr(path.s + i, '.', path.n - i);
        size_t e = dot ? (size_t)(dot - path.s) : path.n;
        jv key = jv_string(path.s + i, e - i);
        bool digits = e > i;
        for (size_t k = i; k < e; k++) digits &= path.s[k] >= '0' && path.s[k] <= '9';
        if (digits) key = jv_int(strtoll(path.s + i, NULL, 10));
        if (jinja_get_item(c, line, *out, key, out) < 0) return -1;
        if (!dot) break;
        i = e + 1;
    }
    return 0;
}

// Sort key: optional attribute, then lowercased strings unless case-sensitive.
static int sort_key(jctx *c, int line, jv v, const jv *attr, bool case_sensitive, jv *out) {
    if (attr && attr_path(c, line, v, *attr, &v) < 0) return -1;
    if (!case_sensitive && v.kind == JV_STRING) return jinja_str_case(c, line, v, JCASE_LOWER, out);
    *out = v;
    return 0;
}

// Stable merge sort of items by keys (parallel arrays); fails on keys Python could not compare.
static int merge_sort(jctx *c, int line, jv *items, jv *keys, size_t n, bool reverse) {
    if (n < 2) return 0;
    jv *ti = mx_arena_alloc(c->ar, n * sizeof *ti), *tk = mx_arena_alloc(c->ar, n * sizeof *tk);
    if (!ti || !tk) return jctx_check_memory(c, line);
    for (size_t width = 1; width < n; width *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * width) {
            size_t mid = lo + width < n ? lo + width : n, hi = lo + 2 * width < n ? lo + 2 * width : n;
            size_t i = lo, j = mid, o = lo;
            while (i < mid && j < hi) {
                int cmp;
                if (jv_compare(keys[j], keys[i], &cmp, &c->budget) < 0)
                    return jctx_spend(c, line, 0) < 0 ? -1 : jctx_fail(c, line, "'<' not supported between instances of '%s' and '%s'",
                                     jv_type_name(keys[j]), jv_type_name(keys[i]));
                bool take_right = reverse ? cmp > 0 : cmp < 0;
                size_t k = take_right ? j++ : i++;
                ti[o] = items[k];
                tk[o++] = keys[k];
            }
            while (i < mid) {
                ti[o] = items[i];
                tk[o++] = keys[i++];
            }
            while (j < hi) {
                ti[o] = items[j];
                tk[o++] = keys[j++];
            }
        }
        memcpy(items, ti, n * sizeof *ti);
        memcpy(keys, tk, n * sizeof *tk);
    }
    return 0;
}

static int copy_list(jctx *c, int line, jv src, jv *out) {
    *out = jv_list_new(c->ar, src.list->n);
    if (jctx_check_memory(c, line) < 0) return -1;
    memcpy(out->list->items, src.list->items, src.list->n * sizeof(jv));
    out->list->n = src.list->n;
    return 0;
}

// select/reject/selectattr/rejectattr: args are [attr,] test name, test args...
static int filter_select(jctx *c, int line, const char *name, jv self, const jargs *a, jv *out) {
    bool by_attr = strstr(name, "attr") != NULL, reject = name[0] == 'r';
    size_t k = 0;
    jv attr = jv_none(), test = jv_none();
    if (by_attr) {
        if (a->n_pos < 1) return jctx_fail(c, line, "%s() needs an attribute name", name);
        attr = a->pos[k++];
    }
    bool has_test = k < a->n_pos;
    if (has_test) {
        test = a->pos[k++];
        if (test.kind != JV_STRING || !jinja_test_known(test.s, test.n))
            return jctx_fail(c, line, "%s(): unknown test", name);
    }
    char tname[32];
    snprintf(tname, sizeof tname, "%.*s", (int)(test.n < 31 ? test.n : 31), test.kind == JV_STRING ? test.s : "");
    jargs targs = {.pos = a->pos + k, .n_pos = a->n_pos - k, .kwnames = a->kwnames, .kw = a->kw, .n_kw = a->n_kw};
    jv items;
    if (jinja_iterate(c, line, self, &items) < 0) return -1;
    *out = jv_list_new(c->ar, 0);
    if (jctx_check_memory(c, line) < 0) return -1;
    for (size_t i = 0; i < items.list->n; i++) {
        jv v = items.list->items[i];
        if (by_attr && attr_path(c, line, v, attr, &v) < 0) return -1;
        bool r;
        if (has_test) {
            if (jinja_apply_test(c, line, tname, v, &targs, &r) < 0) return -1;
        } else
            r = jv_truthy(v);
        if (r != reject && jv_list_push(c->ar, out->list, items.list->items[i]) < 0) return jctx_check_memory(c, line);
    }
    return 0;
}

static int filter_map(jctx *c, int line, jv self, const jargs *a, jv *out) {
    jv items, attr, def;
    if (jinja_iterate(c, line, self, &items) < 0) return -1;
    bool by_attr = jargs_get(a, SIZE_MAX, "attribute", &attr), has_def = jargs_get(a, SIZE_MAX, "default", &def);
    if (!by_attr && (a->n_pos < 1 || a->pos[0].kind != JV_STRING))
        return jctx_fail(c, line, "map() needs attribute= or a filter name");
    char fname[32] = "";
    jargs fargs = {0};
    if (!by_attr) {
        jv f = a->pos[0];
        if (!jinja_filter_known(f.s, f.n)) return jctx_fail(c, line, "map(): unknown filter '%.*s'", (int)f.n, f.s);
        snprintf(fname, sizeof fname, "%.*s", (int)f.n, f.s);
        fargs = (jargs){.pos = a->pos + 1, .n_pos = a->n_pos - 1, .kwnames = a->kwnames, .kw = a->kw, .n_kw = a->n_kw};
    }
    *out = jv_list_new(c->ar, items.list->n);
    if (jctx_check_memory(c, line) < 0) return -1;
    for (size_t i = 0; i < items.list->n; i++) {
        jv v = items.list->items[i];
        if (by_attr) {
            if (attr_path(c, line, v, attr, &v) < 0) return -1;
            if (v.kind == JV_UNDEFINED && has_def) v = def;
        } else if (jinja_apply_filter(c, line, fname, v, &fargs, &v) < 0)
            return -1;
        out->list->items[i] = v;
    }
    out->list->n = items.list->n;
    return 0;
}

static int filter_tojson(jctx *c, int line, jv self, const jargs *a, jv *out) {
    jv v;
    int indent = -1;
    if (jargs_get(a, 0, "indent", &v) && v.kind != JV_NONE) {
        if (v.kind != JV_INT || v.i < 0 || v.i > 64) return jctx_fail(c, line, "tojson(): indent must be a small integer");
        indent = (int)v.i;
    }
    if (bool_arg(a, SIZE_MAX, "ensure_ascii", false))
        return jctx_fail(c, line, "tojson(): ensure_ascii=True is not supported");
    if (jargs_get(a, SIZE_MAX, "separators", &v) && v.kind != JV_NONE)
        return jctx_fail(c, line, "tojson(): separators= is not supported");
    jbuf b = {0};
    mx_error e = {{0}};
    if (jv_write_json(&b, self, indent, bool_arg(a, SIZE_MAX, "sort_keys", false), &c->budget, &e) < 0) {
        jbuf_free(&b);
        return jctx_fail(c, line, "tojson: %s", e.msg);
    }
    return from_buf(c, line, &b, out);
}

static int filter_indent(jctx *c, int line, jv self, const jargs *a, jv *out) {
    jv w, s;
    jbuf pad = {0}, b = {0};
    if (!jargs_get(a, 0, "width", &w)) w = jv_int(4);
    if (w.kind == JV_STRING) jbuf_put(&pad, w.s, w.n);
    else if (w.kind == JV_INT && w.i >= 0 && w.i <= 1000)
        for (int64_t i = 0; i < w.i; i++) jbuf_putc(&pad, ' ');
    else return jctx_fail(c, line, "indent(): width must be a string or a small integer");
    bool first = bool_arg(a, 1, "first", false), blank = bool_arg(a, 2, "blank", false);
    if (string_value(c, line, self, &s) < 0) {
        jbuf_free(&pad);
        return -1;
    }
    size_t i = 0;
    bool first_line = true;
    while (i <= s.n) {
        const char *nl = memchr(s.s + i, '\n', s.n - i);
        size_t e = nl ? (size_t)(nl - s.s) : s.n;
        bool is_blank = true;
        for (size_t k = i; k < e; k++) is_blank &= (s.s[k] == ' ' || s.s[k] == '\t' || s.s[k] == '\r');
        bool do_pad = first_line ? first : (blank || !is_blank);
        if (do_pad && pad.n) jbuf_put(&b, pad.p, pad.n);
        jbuf_put(&b, s.s + i, e - i);
        if (!nl) break;
        jbuf_putc(&b, '\n');
        i = e + 1;
        first_line = false;
    }
    jbuf_free(&pad);
    return from_buf(c, line, &b, out);
}

static int filter_escape(jctx *c, int line, jv self, jv *out) {
    jv s;
    if (string_value(c, line, self, &s) < 0) return -1;
    jbuf b = {0};
    for (size_t i = 0; i < s.n; i++) {
        switch (s.s[i]) {
        case '&': jbuf_puts(&b, "&amp;"); break;
        case '<': jbuf_puts(&b, "&lt;"); break;
        case '>': jbuf_puts(&b, "&gt;"); break;
        case '"': jbuf_puts(&b, "&#34;"); break;
        case '\'': jbuf_puts(&b, "&#39;"); break;
        default: jbuf_putc(&b, s.s[i]);
        }
    }
    return from_buf(c, line, &b, out);
}

static int number_of(jctx *c, int line, jv v, bool want_float, jv def, jv *out) {
    switch (v.kind) {
    case JV_INT: *out = want_float ? jv_float((double)v.i) : v; return 0;
    case JV_BOOL: *out = want_float ? jv_float(v.b) : jv_int(v.b); return 0;
    case JV_FLOAT:
        if (want_float) *out = v;
        else if (!isfinite(v.f) || fabs(v.f) >= 9.2e18) *out = def;
        else *out = jv_int((int64_t)v.f);
        return 0;
    case JV_STRING: {
        char tmp[128];
        jv t = jinja_str_strip(v, NULL, true, true);
        if (t.n == 0 || t.n >= sizeof tmp) {
            *out = def;
            return 0;
        }
        size_t k = 0;
        for (size_t i = 0; i < t.n; i++)
            if (t.s[i] != '_') tmp[k++] = t.s[i];
        tmp[k] = 0;
        char *end;
        if (!want_float) {
            long long i = strtoll(tmp, &end, 10);
            if (*end == 0) {
                *out = jv_int(i);
                return 0;
            }
        }
        double f = strtod(tmp, &end);
        if (*end != 0) *out = def;
        else if (want_float) *out = jv_float(f);
        else if (!isfinite(f) || fabs(f) >= 9.2e18) *out = def;
        else *out = jv_int((int64_t)f);
        return 0;
    }
    default: *out = def; (void)c; (void)line; return 0;
    }
}

static int length_of(jctx *c, int line, jv v, jv *out) {
    switch (v.kind) {
    case JV_STRING: *out = jv_int((int64_t)jv_utf8_len(v.s, v.n)); return 0;
    case JV_LIST: *out = jv_int((int64_t)v.list->n); return 0;
    case JV_DICT: *out = jv_int((int64_t)v.dict->n); return 0;
    case JV_UNDEFINED: *out = jv_int(0); return 0;
    default: return jctx_fail(c, line, "object of type '%s' has no len()", jv_type_name(v));
    }
}

// ---------------------------------------------------------------------------------------------
// Filters

int jinja_apply_filter(jctx *c, int line, const char *name, jv self, const jargs *a, jv *out) {
    jv x, y, items;
    bool has_x = jargs_get(a, 0, NULL, &x);
    if (self.kind == JV_STRING && jctx_spend(c, line, jctx_string_cost(self)) < 0) return -1;
    if (F("default") || F("d")) {
        jv def = jv_string("", 0);
        jargs_get(a, 0, "default_value", &def);
        bool boolean = bool_arg(a, 1, "boolean", false);
        *out = (self.kind == JV_UNDEFINED || (boolean && !jv_truthy(self))) ? def : self;
        return 0;
    }
    if (F("safe")) {
        *out = self;
        return 0;
    }
    if (F("length") || F("count")) return length_of(c, line, self, out);
    if (F("tojson")) return filter_tojson(c, line, self, a, out);
    if (F("string")) return string_value(c, line, self, out);
    if (F("e") || F("escape")) return filter_escape(c, line, self, out);
    if (F("int") || F("float")) {
        jv def = F("int") ? jv_int(0) : jv_float(0.0);
        jargs_get(a, 0, "default", &def);
        return number_of(c, line, self, F("float"), def, out);
    }
    if (F("list")) {
        if (jinja_iterate(c, line, self, &items) < 0) return -1;
        return items.list == self.list ? copy_list(c, line, items, out) : (*out = items, 0);
    }
    if (F("first") || F("last")) {
        if (self.kind == JV_UNDEFINED) return jctx_fail_undefined(c, line, self);
        if (jinja_iterate(c, line, self, &items) < 0) return -1;
        if (items.list->n == 0) *out = jv_undefined(F("first") ? "first" : "last");
        else *out = items.list->items[F("first") ? 0 : items.list->n - 1];
        return 0;
    }
    if (F("items")) {
        if (self.kind == JV_UNDEFINED) {
            *out = jv_list_new(c->ar, 0);
            return jctx_check_memory(c, line);
        }
        if (self.kind != JV_DICT) return jctx_fail(c, line, "items filter: can only get item pairs from a mapping");
        return jinja_call_method(c, line, self, "items", &(jargs){0}, out);
    }
    if (F("dictsort")) {
        if (self.kind != JV_DICT) return jctx_fail(c, line, "dictsort filter: expected a mapping, got %s", jv_type_name(self));
        if (jinja_call_method(c, line, self, "items", &(jargs){0}, &items) < 0) return -1;
        bool cs = bool_arg(a, 0, "case_sensitive", false), rev = bool_arg(a, 2, "reverse", false);
        jv by = jv_cstring("key");
        jargs_get(a, 1, "by", &by);
        bool by_value = by.kind == JV_STRING && by.n == 5 && memcmp(by.s, "value", 5) == 0;
        jv *keys = mx_arena_alloc(c->ar, (items.list->n + 1) * sizeof *keys);
        if (!keys) return jctx_check_memory(c, line);
        for (size_t i = 0; i < items.list->n; i++)
            if (sort_key(c, line, items.list->items[i].list->items[by_value ? 1 : 0], NULL, cs, &keys[i]) < 0) return -1;
        if (merge_sort(c, line, items.list->items, keys, items.list->n, rev) < 0) return -1;
        *out = items;
        return 0;
    }
    if (F("sort")) {
        if (jinja_iterate(c, line, self, &items) < 0 || copy_list(c, line, items, &items) < 0) return -1;
        bool rev = bool_arg(a, 0, "reverse", false), cs = bool_arg(a, 1, "case_sensitive", false);
        jv attr;
        bool has_attr = jargs_get(a, 2, "attribute", &attr) && attr.kind != JV_NONE;
        jv *keys = mx_arena_alloc(c->ar, (items.list->n + 1) * sizeof *keys);
        if (!keys) return jctx_check_memory(c, line);
        for (size_t i = 0; i < items.list->n; i++)
            if (sort_key(c, line, items.list->items[i], has_attr ? &attr : NULL, cs, &keys[i]) < 0) return -1;
        if (merge_sort(c, line, items.list->items, keys, items.list->n, rev) < 0) return -1;
        *out = items;
        return 0;
    }
    if (F("unique") || F("min") || F("max")) {
        if (jinja_iterate(c, line, self, &items) < 0) return -1;
        bool cs = bool_arg(a, 0, "case_sensitive", false);
        jv attr;
        bool has_attr = jargs_get(a, 1, "attribute", &attr) && attr.kind != JV_NONE;
        if (F("unique")) {
            *out = jv_list_new(c->ar, 0);
            jv seen = jv_list_new(c->ar, 0);
            if (jctx_check_memory(c, line) < 0) return -1;
            for (size_t i = 0; i < items.list->n; i++) {
                jv k;
                bool dup = false;
                if (sort_key(c, line, items.list->items[i], has_attr ? &attr : NULL, cs, &k) < 0) return -1;
                for (size_t j = 0; j < seen.list->n && !dup; j++) dup = jv_equal(seen.list->items[j], k, &c->budget);
                if (jctx_spend(c, line, 0) < 0) return -1;
                if (dup) continue;
                if (jv_list_push(c->ar, seen.list, k) < 0 || jv_list_push(c->ar, out->list, items.list->items[i]) < 0)
                    return jctx_check_memory(c, line);
            }
            return 0;
        }
        if (items.list->n == 0) {
            *out = jv_undefined(name);
            return 0;
        }
        size_t best = 0;
        jv best_key;
        if (sort_key(c, line, items.list->items[0], has_attr ? &attr : NULL, cs, &best_key) < 0) return -1;
        for (size_t i = 1; i < items.list->n; i++) {
            jv k;
            int cmp;
            if (sort_key(c, line, items.list->items[i], has_attr ? &attr : NULL, cs, &k) < 0) return -1;
            if (jv_compare(k, best_key, &cmp, &c->budget) < 0)
                return jctx_spend(c, line, 0) < 0 ? -1 : jctx_fail(c, line, "%s(): values are not comparable", name);
            if (F("min") ? cmp < 0 : cmp > 0) {
                best = i;
                best_key = k;
            }
        }
        *out = items.list->items[best];
        return 0;
    }
    if (F("join")) {
        jv sep = jv_string("", 0), attr;
        jargs_get(a, 0, "d", &sep);
        bool has_attr = jargs_get(a, 1, "attribute", &attr) && attr.kind != JV_NONE;
        if (jinja_iterate(c, line, self, &items) < 0) return -1;
        jbuf b = {0};
        for (size_t i = 0; i < items.list->n; i++) {
            jv v = items.list->items[i];
            if (has_attr && attr_path(c, line, v, attr, &v) < 0) {
                jbuf_free(&b);
                return -1;
            }
            if (i) jv_write_str(&b, sep, &c->budget);
            jv_write_str(&b, v, &c->budget);
        }
        return from_buf(c, line, &b, out);
    }
    if (F("map")) return filter_map(c, line, self, a, out);
    if (F("select") || F("reject") || F("selectattr") || F("rejectattr")) return filter_select(c, line, name, self, a, out);
    if (F("sum")) {
        jv attr, acc = jv_int(0);
        bool has_attr = jargs_get(a, 0, "attribute", &attr) && attr.kind != JV_NONE;
        jargs_get(a, 1, "start", &acc);
        if (jinja_iterate(c, line, self, &items) < 0) return -1;
        for (size_t i = 0; i < items.list->n; i++) {
            jv v = items.list->items[i];
            if (has_attr && attr_path(c, line, v, attr, &v) < 0) return -1;
            if (!jv_is_number(v) && v.kind != JV_BOOL) return jctx_fail(c, line, "sum(): cannot add %s", jv_type_name(v));
            if (acc.kind == JV_FLOAT || v.kind == JV_FLOAT) acc = jv_float(jv_as_double(acc) + jv_as_double(v));
            else if (__builtin_add_overflow(acc.kind == JV_BOOL ? acc.b : acc.i, v.kind == JV_BOOL ? v.b : v.i, &acc.i))
                return jctx_fail(c, line, "integer overflow");
            else acc.kind = JV_INT;
        }
        *out = acc;
        return 0;
    }
    if (F("abs")) {
        if (self.kind == JV_INT) *out = self.i == INT64_MIN ? self : jv_int(self.i < 0 ? -self.i : self.i);
        else if (self.kind == JV_FLOAT) *out = jv_float(fabs(self.f));
        else if (self.kind == JV_BOOL) *out = jv_int(self.b);
        else return jctx_fail(c, line, "bad operand type for abs(): '%s'", jv_type_name(self));
        return 0;
    }
    if (F("round")) {
        int64_t prec = 0;
        if (has_x && x.kind == JV_INT) prec = x.i;
        jv method = jv_cstring("common");
        jargs_get(a, 1, "method", &method);
        if (!jv_is_number(self) && self.kind != JV_BOOL) return jctx_fail(c, line, "round(): expected a number");
        double v = jv_as_double(self), m = pow(10.0, (double)prec);
        double r = v * m;
        if (method.n == 4 && memcmp(method.s, "ceil", 4) == 0) r = ceil(r);
        else if (method.n == 5 && memcmp(method.s, "floor", 5) == 0) r = floor(r);
        else r = nearbyint(r); // Python rounds half to even
        *out = jv_float(r / m);
        return 0;
    }
    if (F("attr")) {
        if (!has_x || x.kind != JV_STRING) return jctx_fail(c, line, "attr(): needs an attribute name");
        return jinja_get_attr(c, line, self, x.s, x.n, out);
    }
    if (F("reverse")) {
        if (self.kind == JV_STRING) {
            jv chars;
            if (jinja_iterate(c, line, self, &chars) < 0) return -1;
            jbuf b = {0};
            for (size_t i = chars.list->n; i-- > 0;) jbuf_put(&b, chars.list->items[i].s, chars.list->items[i].n);
            return from_buf(c, line, &b, out);
        }
        if (jinja_iterate(c, line, self, &items) < 0 || copy_list(c, line, items, out) < 0) return -1;
        for (size_t i = 0, j = out->list->n ? out->list->n - 1 : 0; i < j; i++, j--) {
            jv t = out->list->items[i];
            out->list->items[i] = out->list->items[j];
            out->list->items[j] = t;
        }
        return 0;
    }
    if (F("indent")) return filter_indent(c, line, self, a, out);
    if (F("format")) {
        jv s, args = jv_list_new(c->ar, a->n_pos);
        if (string_value(c, line, self, &s) < 0 || jctx_check_memory(c, line) < 0) return -1;
        if (a->n_pos) memcpy(args.list->items, a->pos, a->n_pos * sizeof(jv));
        args.list->n = a->n_pos;
        args.list->tuple = true;
        return jinja_format_percent(c, line, s, args, out);
    }
    // The rest work on the string form of the value.
    jv s;
    if (string_value(c, line, self, &s) < 0) return -1;
    if (F("upper")) return jinja_str_case(c, line, s, JCASE_UPPER, out);
    if (F("lower")) return jinja_str_case(c, line, s, JCASE_LOWER, out);
    if (F("capitalize")) return jinja_str_case(c, line, s, JCASE_CAPITALIZE, out);
    if (F("title")) return jinja_str_case(c, line, s, JCASE_JINJA_TITLE, out);
    if (F("trim")) {
        bool chars = jargs_get(a, 0, "chars", &x) && x.kind == JV_STRING;
        *out = jinja_str_strip(s, chars ? &x : NULL, true, true);
        return 0;
    }
    if (F("replace")) {
        if (!jargs_get(a, 0, "old", &x) || !jargs_get(a, 1, "new", &y))
            return jctx_fail(c, line, "replace filter takes 2 arguments");
        jv count;
        jv sx, sy;
        if (string_value(c, line, x, &sx) < 0 || string_value(c, line, y, &sy) < 0) return -1;
        jv argv[3] = {sx, sy, jv_int(-1)};
        if (jargs_get(a, 2, "count", &count) && count.kind == JV_INT) argv[2] = count;
        jargs ra = {.pos = argv, .n_pos = 3};
        return jinja_call_method(c, line, s, "replace", &ra, out);
    }
    if (F("wordcount")) {
        jv words;
        if (jinja_call_method(c, line, s, "split", &(jargs){0}, &words) < 0) return -1;
        *out = jv_int((int64_t)words.list->n);
        return 0;
    }
    return jctx_fail(c, line, "unknown filter '%s'", name);
}

// ---------------------------------------------------------------------------------------------
// Tests

int jinja_apply_test(jctx *c, int line, const char *name, jv v, const jargs *a, bool *out) {
    jv x;
    bool has_x = jargs_get(a, 0, NULL, &x);
    if (F("defined")) *out = v.kind != JV_UNDEFINED;
    else if (F("undefined")) *out = v.kind == JV_UNDEFINED;
    else if (F("none")) *out = v.kind == JV_NONE;
    else if (F("true")) *out = v.kind == JV_BOOL && v.b;
    else if (F("false")) *out = v.kind == JV_BOOL && !v.b;
    else if (F("boolean")) *out = v.kind == JV_BOOL;
    else if (F("string")) *out = v.kind == JV_STRING;
    else if (F("number")) *out = v.kind == JV_INT || v.kind == JV_FLOAT || v.kind == JV_BOOL;
    else if (F("integer")) *out = v.kind == JV_INT;
    else if (F("float")) *out = v.kind == JV_FLOAT;
    else if (F("mapping")) *out = v.kind == JV_DICT && !v.dict->is_namespace;
    else if (F("iterable")) *out = v.kind == JV_STRING || v.kind == JV_LIST || v.kind == JV_DICT || v.kind == JV_UNDEFINED;
    else if (F("sequence")) *out = v.kind == JV_STRING || v.kind == JV_LIST || v.kind == JV_DICT;
    else if (F("callable")) *out = v.kind == JV_FUNC;
    else if (F("escaped")) *out = false;
    else if (F("lower") || F("upper")) {
        jv r;
        if (v.kind != JV_STRING) *out = false;
        else if (jinja_str_case(c, line, v, F("lower") ? JCASE_LOWER : JCASE_UPPER, &r) < 0) return -1;
        else *out = jv_equal(r, v, &c->budget);
    } else if (F("odd") || F("even") || F("divisibleby")) {
        if (v.kind != JV_INT && v.kind != JV_BOOL) return jctx_fail(c, line, "test '%s' needs an integer, got %s", name, jv_type_name(v));
        int64_t i = v.kind == JV_BOOL ? v.b : v.i;
        if (F("divisibleby")) {
            if (!has_x || x.kind != JV_INT || x.i == 0) return jctx_fail(c, line, "divisibleby needs a non-zero integer");
            *out = x.i == -1 || i % x.i == 0;
        } else
            *out = (i % 2 != 0) == (name[0] == 'o');
    } else {
        if (!has_x) return jctx_fail(c, line, "test '%s' needs an argument", name);
        if (F("eq") || F("equalto") || F("==")) *out = jv_equal(v, x, &c->budget);
        else if (F("ne") || F("!=")) *out = !jv_equal(v, x, &c->budget);
        else if (F("sameas")) *out = jv_equal(v, x, &c->budget) && v.kind == x.kind;
        else if (F("in")) return jinja_contains(c, line, v, x, out);
        else {
            int cmp;
            if (jv_compare(v, x, &cmp, &c->budget) < 0)
                return jctx_spend(c, line, 0) < 0 ? -1 : jctx_fail(c, line, "test '%s': cannot compare %s and %s", name, jv_type_name(v), jv_type_name(x));
            if (F("lt") || F("<") || F("lessthan")) *out = cmp < 0;
            else if (F("le") || F("<=")) *out = cmp <= 0;
            else if (F("gt") || F(">") || F("greaterthan")) *out = cmp > 0;
            else if (F("ge") || F(">=")) *out = cmp >= 0;
            else return jctx_fail(c, line, "unknown test '%s'", name);
        }
    }
    return jctx_spend(c, line, 0);
}
