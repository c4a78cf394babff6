// SPDX-License-Identifier: MIT
// Methods callable on values (Python's str methods, dict.items/keys/values/get, list.count/index,
// loop.cycle) and the global functions templates call: range(), namespace(), dict(),
// raise_exception() and strftime_now() (the last two are what transformers adds). Lists and dicts
// are immutable here, as in jinja2's ImmutableSandboxedEnvironment, so there is no append/update.
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <utf8proc.h>

#include "chat/jinja_eval.h"
#include "core/clock.h"
#include "core/utf8.h"

#define JINJA_MAX_RANGE 100000 // jinja2's sandbox limit

static const char *const STR_METHODS[] = {
    "capitalize", "count", "endswith", "find", "format", "index", "isalnum", "isalpha", "isdigit",
    "islower", "isspace", "isupper", "join", "lower", "lstrip", "removeprefix", "removesuffix",
    "replace", "rfind", "rsplit", "rstrip", "split", "splitlines", "startswith", "strip", "title",
    "upper", NULL};
static const char *const DICT_METHODS[] = {"get", "items", "keys", "values", NULL};
static const char *const LIST_METHODS[] = {"count", "index", NULL};
static const char *const GLOBALS[] = {"dict", "namespace", "raise_exception", "range", "strftime_now", NULL};

static const char *find_name(const char *const *table, const char *name, size_t n) {
    for (; *table; table++)
        if (strlen(*table) == n && memcmp(*table, name, n) == 0) return *table;
    return NULL;
}

const char *jinja_method_lookup(jv obj, const char *name, size_t n) {
    switch (obj.kind) {
    case JV_STRING: return find_name(STR_METHODS, name, n);
    case JV_DICT: return obj.dict->is_namespace ? NULL : find_name(DICT_METHODS, name, n);
    case JV_LIST: return find_name(LIST_METHODS, name, n);
    default: return NULL;
    }
}

const char *jinja_global_lookup(const char *name, size_t n) { return find_name(GLOBALS, name, n); }

// ---------------------------------------------------------------------------------------------
// String helpers

static bool is_py_space(int32_t cp) {
    return (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x20) || cp == 0x85 || cp == 0xa0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 || cp == 0x202f || cp == 0x205f ||
           cp == 0x3000;
}

static bool in_chars(int32_t cp, const jv *chars) {
    if (!chars) return is_py_space(cp);
    for (size_t i = 0; i < chars->n;) {
        size_t len;
        if (jv_utf8_decode(chars->s + i, chars->n - i, &len) == cp) return true;
        i += len;
    }
    return false;
}

jv jinja_str_strip(jv s, const jv *chars, bool left, bool right) {
    size_t a = 0, b = s.n;
    while (left && a < b) {
        size_t len;
        if (!in_chars(jv_utf8_decode(s.s + a, b - a, &len), chars)) break;
        a += len;
    }
    while (right && b > a) {
        size_t p = b - 1, len;
        while (p > a && ((unsigned char)s.s[p] & 0xC0) == 0x80 && b - p < 4) p--;
        int32_t cp = jv_utf8_decode(s.s + p, b - p, &len);
        if (p + len != b) { // not a whole character: treat the last byte alone
            p = b - 1;
            cp = (unsigned char)s.s[p];
        }
        if (!in_chars(cp, chars)) break;
        b = p;
    }
    return jv_string(s.s + a, b - a);
}

static bool is_cased(int32_t cp) { return utf8proc_toupper(cp) != cp || utf8proc_tolower(cp) != cp; }

int jinja_str_case(jctx *c, int line, jv s, jcase mode, jv *out) {
    // Case mapping code point by code point keeps lengths within 4 bytes per character.
    char *p = mx_arena_alloc(c->ar, s.n * 4 + 1);
    if (!p) return jctx_check_memory(c, line);
    size_t o = 0;
    bool word_start = true, first = true;
    for (size_t i = 0; i < s.n;) {
        size_t len;
        int32_t cp = jv_utf8_decode(s.s + i, s.n - i, &len);
        int32_t m = cp;
        switch (mode) {
        case JCASE_LOWER: m = utf8proc_tolower(cp); break;
        case JCASE_UPPER: m = utf8proc_toupper(cp); break;
        case JCASE_CAPITALIZE: m = first ? utf8proc_totitle(cp) : utf8proc_tolower(cp); break;
        case JCASE_TITLE:
            m = word_start ? utf8proc_totitle(cp) : utf8proc_tolower(cp);
            word_start = !is_cased(cp);
            break;
        case JCASE_JINJA_TITLE: {
            bool sep = is_py_space(cp) || cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<';
            m = sep ? cp : word_start ? utf8proc_toupper(cp) : utf8proc_tolower(cp);
            word_start = sep;
            break;
        }
        }
        first = false;
        if (len == 1 && (unsigned char)s.s[i] >= 0x80) {
            p[o++] = s.s[i]; // invalid byte: keep as is
        } else
            o += mx_utf8_encode((uint32_t)m, p + o);
        i += len;
    }
    *out = jv_string(p, o);
    return 0;
}

static int want_string(jctx *c, int line, const char *method, const char *arg, jv v) {
    if (v.kind == JV_STRING) return 0;
    return jctx_fail(c, line, "%s(): %s must be a string, not %s", method, arg, jv_type_name(v));
}

// Python's split/rsplit: sep NULL splits on whitespace runs and drops empty parts.
static int str_split(jctx *c, int line, jv s, const jv *sep, int64_t maxsplit, bool from_right, jv *out) {
    *out = jv_list_new(c->ar, 0);
    if (jctx_check_memory(c, line) < 0) return -1;
    jv_list *l = out->list;
    if (sep && sep->n == 0) return jctx_fail(c, line, "split(): empty separator");
    // Collect pieces left to right; for rsplit with a limit, split from the right instead.
    if (!from_right || maxsplit < 0) {
        size_t i = 0;
        int64_t splits = 0;
        if (!sep) {
            for (;;) {
                while (i < s.n) {
                    size_t len;
                    if (!is_py_space(jv_utf8_decode(s.s + i, s.n - i, &len))) break;
                    i += len;
                }
                if (i >= s.n) break;
                if (maxsplit >= 0 && splits >= maxsplit) {
                    jv rest = jinja_str_strip(jv_string(s.s + i, s.n - i), NULL, false, true);
                    if (jv_list_push(c->ar, l, rest) < 0) return jctx_check_memory(c, line);
                    break;
                }
                size_t a = i;
                while (i < s.n) {
                    size_t len;
                    if (is_py_space(jv_utf8_decode(s.s + i, s.n - i, &len))) break;
                    i += len;
                }
                if (jv_list_push(c->ar, l, jv_string(s.s + a, i - a)) < 0) return jctx_check_memory(c, line);
                splits++;
            }
            return 0;
        }
        for (;;) {
            const char *hit = (maxsplit < 0 || splits < maxsplit) ? memmem(s.s + i, s.n - i, sep->s, sep->n) : NULL;
            size_t end = hit ? (size_t)(hit - s.s) : s.n;
            if (jv_list_push(c->ar, l, jv_string(s.s + i, end - i)) < 0) return jctx_check_memory(c, line);
            if (!hit) return 0;
            i = end + sep->n;
            splits++;
        }
    }
    // rsplit with maxsplit: find separators from the right, then reverse.
    size_t end = s.n;
    int64_t splits = 0;
    if (!sep) {
        jv t = jinja_str_strip(s, NULL, false, true);
        end = t.n;
        while (end > 0) {
            if (splits >= maxsplit) {
                jv rest = jinja_str_strip(jv_string(s.s, end), NULL, true, false);
                if (rest.n && jv_list_push(c->ar, l, rest) < 0) return jctx_check_memory(c, line);
                break;
            }
            size_t a = end;
            while (a > 0 && !is_py_space((unsigned char)s.s[a - 1])) a--;
            if (jv_list_push(c->ar, l, jv_string(s.s + a, end - a)) < 0) return jctx_check_memory(c, line);
            splits++;
            end = a;
            while (end > 0 && is_py_space((unsigned char)s.s[end - 1])) end--;
        }
    } else {
        for (;;) {
            size_t hit = SIZE_MAX;
            if (splits < maxsplit && end >= sep->n)
                for (size_t k = end - sep->n + 1; k-- > 0;)
                    if (memcmp(s.s + k, sep->s, sep->n) == 0) {
                        hit = k;
                        break;
                    }
            size_t a = hit == SIZE_MAX ? 0 : hit + sep->n;
            if (jv_list_push(c->ar, l, jv_string(s.s + a, end - a)) < 0) return jctx_check_memory(c, line);
            if (hit == SIZE_MAX) break;
            end = hit;
            splits++;
        }
    }
    for (size_t i = 0, j = l->n ? l->n - 1 : 0; i < j; i++, j--) {
        jv t = l->items[i];
        l->items[i] = l->items[j];
        l->items[j] = t;
    }
    return 0;
}

static int str_replace(jctx *c, int line, jv s, jv old, jv new, int64_t count, jv *out) {
    jbuf b = {0};
    size_t i = 0;
    int64_t done = 0;
    if (old.n == 0) {
        // Python inserts `new` between every character (and at both ends).
        for (;;) {
            if (count >= 0 && done >= count) break;
            jbuf_put(&b, new.s, new.n);
            done++;
            if (i >= s.n) break;
            size_t len;
            jv_utf8_decode(s.s + i, s.n - i, &len);
            jbuf_put(&b, s.s + i, len);
            i += len;
        }
        jbuf_put(&b, s.s + i, s.n - i);
    } else {
        while (i <= s.n) {
            const char *hit = (count < 0 || done < count) ? memmem(s.s + i, s.n - i, old.s, old.n) : NULL;
            if (!hit) break;
            jbuf_put(&b, s.s + i, (size_t)(hit - (s.s + i)));
            jbuf_put(&b, new.s, new.n);
            i = (size_t)(hit - s.s) + old.n;
            done++;
        }
        jbuf_put(&b, s.s + i, s.n - i);
    }
    int rc = 0;
    if (b.failed) rc = jctx_fail(c, line, "replace(): result too large");
    else {
        *out = jv_string_copy(c->ar, b.p ? b.p : "", b.n);
        rc = jctx_check_memory(c, line);
    }
    jbuf_free(&b);
    return rc;
}

// str.format with {} / {0} / {name} fields (no format specs).
static int str_format(jctx *c, int line, jv fmt, const jargs *a, jv *out) {
    jbuf b = {0};
    size_t auto_index = 0;
    int rc = 0;
    for (size_t i = 0; i < fmt.n && rc == 0; i++) {
        char ch = fmt.s[i];
        if ((ch == '{' || ch == '}') && i + 1 < fmt.n && fmt.s[i + 1] == ch) {
            jbuf_putc(&b, ch);
            i++;
            continue;
        }
        if (ch != '{') {
            jbuf_putc(&b, ch);
            continue;
        }
        const char *close = memchr(fmt.s + i, '}', fmt.n - i);
        if (!close) {
            rc = jctx_fail(c, line, "format(): single '{' encountered in format string");
            break;
        }
        size_t fa = i + 1, fb = (size_t)(close - fmt.s);
        jv v;
        bool found;
        if (fa == fb) found = jargs_get(a, auto_index++, NULL, &v);
        else if (fmt.s[fa] >= '0' && fmt.s[fa] <= '9') found = jargs_get(a, (size_t)strtoul(fmt.s + fa, NULL, 10), NULL, &v);
        else {
            char name[64];
            snprintf(name, sizeof name, "%.*s", (int)(fb - fa), fmt.s + fa);
            found = jargs_get(a, SIZE_MAX, name, &v);
        }
        if (!found) rc = jctx_fail(c, line, "format(): no argument for field '%.*s'", (int)(fb - fa), fmt.s + fa);
        else jv_write_str(&b, v, &c->budget);
        i = fb;
    }
    if (rc == 0) {
        *out = jv_string_copy(c->ar, b.p ? b.p : "", b.n);
        rc = b.failed ? (jctx_spend(c, line, 0) < 0 ? -1 : jctx_fail(c, line, "format(): result too large"))
                      : jctx_check_memory(c, line);
    }
    jbuf_free(&b);
    return rc;
}

static int int_arg(jctx *c, int line, const char *method, const jargs *a, size_t i, const char *name, int64_t def, int64_t *out) {
    jv v;
    *out = def;
    if (!jargs_get(a, i, name, &v) || v.kind == JV_NONE) return 0;
    if (v.kind != JV_INT && v.kind != JV_BOOL) return jctx_fail(c, line, "%s(): %s must be an integer", method, name);
    *out = v.kind == JV_BOOL ? v.b : v.i;
    return 0;
}

// Byte offsets of the optional start/end arguments of find/count/startswith (code point indices).
static void str_range(jv s, const jargs *a, size_t first, size_t *lo, size_t *hi) {
    jv v;
    int64_t len = (int64_t)jv_utf8_len(s.s, s.n), b = 0, e = len;
    if (jargs_get(a, first, NULL, &v) && (v.kind == JV_INT)) b = v.i;
    if (jargs_get(a, first + 1, NULL, &v) && (v.kind == JV_INT)) e = v.i;
    if (b < 0) b = b + len < 0 ? 0 : b + len;
    if (e < 0) e = e + len < 0 ? 0 : e + len;
    if (b > len) b = len;
    if (e > len) e = len;
    if (e < b) e = b;
    *lo = jv_utf8_offset(s.s, s.n, (size_t)b);
    *hi = jv_utf8_offset(s.s, s.n, (size_t)e);
}

static bool affix_match(jv s, jv affix, size_t lo, size_t hi, bool start) {
    if (affix.n > hi - lo) return false;
    return memcmp(s.s + (start ? lo : hi - affix.n), affix.s, affix.n) == 0;
}

#define M(s) (strcmp(name, s) == 0)

static int call_str_method(jctx *c, int line, jv s, const char *name, const jargs *a, jv *out) {
    jv x, y;
    bool has_x = jargs_get(a, 0, NULL, &x);
    if (M("lower")) return jinja_str_case(c, line, s, JCASE_LOWER, out);
    if (M("upper")) return jinja_str_case(c, line, s, JCASE_UPPER, out);
    if (M("title")) return jinja_str_case(c, line, s, JCASE_TITLE, out);
    if (M("capitalize")) return jinja_str_case(c, line, s, JCASE_CAPITALIZE, out);
    if (M("strip") || M("lstrip") || M("rstrip")) {
        if (has_x && x.kind != JV_NONE && want_string(c, line, name, "chars", x) < 0) return -1;
        const jv *chars = has_x && x.kind == JV_STRING ? &x : NULL;
        *out = jinja_str_strip(s, chars, name[0] != 'r', name[0] != 'l');
        return 0;
    }
    if (M("startswith") || M("endswith")) {
        if (!has_x) return jctx_fail(c, line, "%s() takes at least 1 argument", name);
        size_t lo, hi;
        str_range(s, a, 1, &lo, &hi);
        bool start = name[0] == 's', r = false;
        if (x.kind == JV_LIST) {
            for (size_t i = 0; i < x.list->n; i++) {
                if (want_string(c, line, name, "prefix", x.list->items[i]) < 0) return -1;
                r |= affix_match(s, x.list->items[i], lo, hi, start);
            }
        } else {
            if (want_string(c, line, name, "prefix", x) < 0) return -1;
            r = affix_match(s, x, lo, hi, start);
        }
        *out = jv_bool(r);
        return 0;
    }
    if (M("split") || M("rsplit")) {
        jv sep;
        bool has_sep = jargs_get(a, 0, "sep", &sep) && sep.kind != JV_NONE;
        if (has_sep && want_string(c, line, name, "sep", sep) < 0) return -1;
        int64_t maxsplit;
        if (int_arg(c, line, name, a, 1, "maxsplit", -1, &maxsplit) < 0) return -1;
        return str_split(c, line, s, has_sep ? &sep : NULL, maxsplit, name[0] == 'r', out);
    }
    if (M("splitlines")) {
        *out = jv_list_new(c->ar, 0);
        if (jctx_check_memory(c, line) < 0) return -1;
        size_t i = 0;
        while (i < s.n) {
            size_t e = i;
            while (e < s.n && s.s[e] != '\n' && s.s[e] != '\r') e++;
            if (jv_list_push(c->ar, out->list, jv_string(s.s + i, e - i)) < 0) return jctx_check_memory(c, line);
            if (e < s.n && s.s[e] == '\r' && e + 1 < s.n && s.s[e + 1] == '\n') e++;
            i = e + 1;
        }
        return 0;
    }
    if (M("replace")) {
        if (!jargs_get(a, 0, NULL, &x) || !jargs_get(a, 1, NULL, &y))
            return jctx_fail(c, line, "replace() takes at least 2 arguments");
        if (want_string(c, line, name, "old", x) < 0 || want_string(c, line, name, "new", y) < 0) return -1;
        int64_t count;
        if (int_arg(c, line, name, a, 2, "count", -1, &count) < 0) return -1;
        return str_replace(c, line, s, x, y, count, out);
    }
    if (M("find") || M("rfind") || M("index") || M("count")) {
        if (!has_x || want_string(c, line, name, "sub", x) < 0) return has_x ? -1 : jctx_fail(c, line, "%s() takes at least 1 argument", name);
        size_t lo, hi;
        str_range(s, a, 1, &lo, &hi);
        if (M("count")) {
            int64_t n = 0;
            if (x.n == 0) n = (int64_t)jv_utf8_len(s.s + lo, hi - lo) + 1;
            else
                for (size_t i = lo; i + x.n <= hi;) {
                    const char *h = memmem(s.s + i, hi - i, x.s, x.n);
                    if (!h) break;
                    n++;
                    i = (size_t)(h - s.s) + x.n;
                }
            *out = jv_int(n);
            return 0;
        }
        int64_t pos = -1;
        if (x.n <= hi - lo) {
            if (M("rfind")) {
                for (size_t k = hi - x.n + 1; k-- > lo;)
                    if (memcmp(s.s + k, x.s, x.n) == 0) {
                        pos = (int64_t)k;
                        break;
                    }
            } else {
                const char *h = x.n ? memmem(s.s + lo, hi - lo, x.s, x.n) : s.s + lo;
                if (h) pos = h - s.s;
            }
        }
        if (pos >= 0) pos = (int64_t)jv_utf8_len(s.s, (size_t)pos);
        if (pos < 0 && M("index")) return jctx_fail(c, line, "index(): substring not found");
        *out = jv_int(pos);
        return 0;
    }
    if (M("join")) {
        jv items;
        if (!has_x || jinja_iterate(c, line, x, &items) < 0) return has_x ? -1 : jctx_fail(c, line, "join() takes 1 argument");
        jbuf b = {0};
        for (size_t i = 0; i < items.list->n; i++) {
            if (i) jbuf_put(&b, s.s, s.n);
            jv it = items.list->items[i];
            if (it.kind != JV_STRING) {
                jbuf_free(&b);
                return jctx_fail(c, line, "join(): sequence item %zu: expected str instance, %s found", i, jv_type_name(it));
            }
            jbuf_put(&b, it.s, it.n);
        }
        int rc = b.failed ? jctx_fail(c, line, "join(): result too large") : 0;
        if (rc == 0) {
            *out = jv_string_copy(c->ar, b.p ? b.p : "", b.n);
            rc = jctx_check_memory(c, line);
        }
        jbuf_free(&b);
        return rc;
    }
    if (M("removeprefix") || M("removesuffix")) {
        if (!has_x || want_string(c, line, name, "affix", x) < 0) return has_x ? -1 : jctx_fail(c, line, "%s() takes 1 argument", name);
        bool pre = name[6] == 'p';
        *out = s;
        if (affix_match(s, x, 0, s.n, pre)) *out = jv_string(s.s + (pre ? x.n : 0), s.n - x.n);
        return 0;
    }
    if (M("format")) return str_format(c, line, s, a, out);
    // is*() predicates
    bool r = s.n > 0, any_cased = false;
    for (size_t i = 0; i < s.n;) {
        size_t len;
        int32_t cp = jv_utf8_decode(s.s + i, s.n - i, &len);
        utf8proc_category_t cat = utf8proc_category(cp);
        bool alpha = cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO;
        bool digit = cat == UTF8PROC_CATEGORY_ND;
        if (M("isalpha")) r &= alpha;
        else if (M("isdigit")) r &= digit;
        else if (M("isalnum")) r &= alpha || digit || cat == UTF8PROC_CATEGORY_NL || cat == UTF8PROC_CATEGORY_NO;
        else if (M("isspace")) r &= is_py_space(cp);
        else if (M("islower")) {
            if (utf8proc_tolower(cp) != cp) r = false;
            any_cased |= is_cased(cp);
        } else if (M("isupper")) {
            if (utf8proc_toupper(cp) != cp) r = false;
            any_cased |= is_cased(cp);
        }
        i += len;
    }
    if (M("islower") || M("isupper")) r = r && any_cased;
    *out = jv_bool(r);
    return 0;
}

int jinja_call_method(jctx *c, int line, jv self, const char *name, const jargs *a, jv *out) {
    jv x;
    bool has_x = jargs_get(a, 0, NULL, &x);
    if (self.kind == JV_STRING)
        return jctx_spend(c, line, jctx_string_cost(self)) < 0 ? -1 : call_str_method(c, line, self, name, a, out);
    if (self.kind == JV_LOOP && M("cycle")) {
        if (a->n_pos == 0) return jctx_fail(c, line, "loop.cycle() needs at least one argument");
        *out = a->pos[self.loop->index0 % a->n_pos];
        return 0;
    }
    if (self.kind == JV_DICT) {
        const jv_dict *d = self.dict;
        if (M("get")) {
            if (!has_x) return jctx_fail(c, line, "get() takes at least 1 argument");
            jv *v = jv_dict_find(d, x, &c->budget);
            if (jctx_spend(c, line, 0) < 0) return -1;
            if (v) *out = *v;
            else if (!jargs_get(a, 1, "default", out)) *out = jv_none();
            return 0;
        }
        *out = jv_list_new(c->ar, d->n);
        if (jctx_check_memory(c, line) < 0) return -1;
        for (size_t i = 0; i < d->n; i++) {
            if (M("keys")) out->list->items[i] = d->keys[i];
            else if (M("values")) out->list->items[i] = d->vals[i];
            else {
                jv pair = jv_list_new(c->ar, 2);
                if (jctx_check_memory(c, line) < 0) return -1;
                pair.list->items[0] = d->keys[i];
                pair.list->items[1] = d->vals[i];
                pair.list->n = 2;
                pair.list->tuple = true;
                out->list->items[i] = pair;
            }
        }
        out->list->n = d->n;
        return 0;
    }
    if (self.kind == JV_LIST && has_x) {
        int64_t n = 0, first = -1;
        for (size_t i = 0; i < self.list->n; i++)
            if (jv_equal(self.list->items[i], x, &c->budget)) {
                if (first < 0) first = (int64_t)i;
                n++;
            }
        if (jctx_spend(c, line, 0) < 0) return -1;
        if (M("index") && first < 0) return jctx_fail(c, line, "index(): value is not in list");
        *out = jv_int(M("count") ? n : first);
        return 0;
    }
    return jctx_fail(c, line, "%s(): bad arguments for '%s' object", name, jv_type_name(self));
}

// ---------------------------------------------------------------------------------------------
// Globals

static int global_range(jctx *c, int line, const jargs *a, jv *out) {
    int64_t v[3] = {0, 0, 1};
    if (a->n_pos < 1 || a->n_pos > 3 || a->n_kw) return jctx_fail(c, line, "range() takes 1 to 3 positional arguments");
    for (size_t i = 0; i < a->n_pos; i++) {
        jv x = a->pos[i];
        if (x.kind != JV_INT && x.kind != JV_BOOL)
            return jctx_fail(c, line, "range(): '%s' object cannot be interpreted as an integer", jv_type_name(x));
    }
    if (a->n_pos == 1) v[1] = a->pos[0].kind == JV_BOOL ? a->pos[0].b : a->pos[0].i;
    else
        for (size_t i = 0; i < a->n_pos; i++) v[i] = a->pos[i].kind == JV_BOOL ? a->pos[i].b : a->pos[i].i;
    if (v[2] == 0) return jctx_fail(c, line, "range() arg 3 must not be zero");
    // Count without overflow: ceil((stop - start) / step) when positive.
    double count = ((double)v[1] - (double)v[0]) / (double)v[2];
    if (count > JINJA_MAX_RANGE) return jctx_fail(c, line, "range() too big (more than %d items)", JINJA_MAX_RANGE);
    *out = jv_list_new(c->ar, 0);
    if (jctx_check_memory(c, line) < 0) return -1;
    for (int64_t i = v[0]; v[2] > 0 ? i < v[1] : i > v[1]; i += v[2]) {
        if (jv_list_push(c->ar, out->list, jv_int(i)) < 0) return jctx_check_memory(c, line);
        if ((v[2] > 0 && i > INT64_MAX - v[2]) || (v[2] < 0 && i < INT64_MIN - v[2])) break;
    }
    return 0;
}

int jinja_call_global(jctx *c, int line, const char *name, const jargs *a, jv *out) {
    if (M("range")) return global_range(c, line, a, out);
    if (M("namespace") || M("dict")) {
        *out = jv_dict_new(c->ar, a->n_kw);
        if (jctx_check_memory(c, line) < 0) return -1;
        out->dict->is_namespace = M("namespace");
        // A positional dict argument seeds the values, as in namespace(d) / dict(d).
        for (size_t i = 0; i < a->n_pos; i++) {
            if (a->pos[i].kind != JV_DICT) return jctx_fail(c, line, "%s() positional argument must be a dict", name);
            const jv_dict *d = a->pos[i].dict;
            for (size_t k = 0; k < d->n; k++)
                if (jv_dict_set(c->ar, out->dict, d->keys[k], d->vals[k], &c->budget) < 0) return jctx_check_memory(c, line);
        }
        for (size_t i = 0; i < a->n_kw; i++)
            if (jv_dict_set(c->ar, out->dict, jv_cstring(a->kwnames[i]), a->kw[i], &c->budget) < 0)
                return jctx_check_memory(c, line);
        return jctx_spend(c, line, 0);
    }
    if (M("raise_exception")) {
        jv msg;
        if (!jargs_get(a, 0, "message", &msg)) msg = jv_cstring("(no message)");
        jbuf b = {0};
        jv_write_str(&b, msg, &c->budget);
        int rc = jctx_fail(c, line, "raise_exception: %s", b.p ? b.p : "");
        jbuf_free(&b);
        return rc;
    }
    if (M("strftime_now")) {
        jv fmt;
        if (!jargs_get(a, 0, "format", &fmt) || fmt.kind != JV_STRING)
            return jctx_fail(c, line, "strftime_now() takes a format string");
        char f[256], buf[512];
        if (fmt.n >= sizeof f) return jctx_fail(c, line, "strftime_now(): format too long");
        memcpy(f, fmt.s, fmt.n);
        f[fmt.n] = 0;
        time_t now = (time_t)mx_wall_now();
        struct tm tm;
        localtime_r(&now, &tm);
        size_t n = strftime(buf, sizeof buf, f, &tm);
        if (n == 0 && fmt.n > 0) return jctx_fail(c, line, "strftime_now(): bad or too long format");
        *out = jv_string_copy(c->ar, buf, n);
        return jctx_check_memory(c, line);
    }
    return jctx_fail(c, line, "unknown function '%s'", name);
}
