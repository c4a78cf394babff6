// SPDX-License-Identifier: MIT
// The Jinja evaluator: walks the read-only syntax tree with per-render state (jctx) and writes
// output into a jbuf. Scoping follows jinja2: each loop iteration and each macro call gets a fresh
// scope (so `set` inside a loop does not leak out; namespace() objects are how templates carry
// state across iterations), `if` bodies share their enclosing scope, macros see the scope they
// were defined in at call time. Limits turn runaway templates into errors: a step budget, a macro
// depth limit, the arena's byte limit and the output size limit.
#include "chat/jinja_eval.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "chat/jinja.h"

#define JINJA_MAX_STEPS 20000000ULL
#define JINJA_MAX_CALL_DEPTH 100
// Evaluations in flight (expressions, statement bodies; macro calls multiply the template's own
// nesting): bounds the stack a render uses.
#define JINJA_MAX_EVAL_DEPTH 1000
#define JINJA_ARENA_LIMIT ((size_t)512 << 20)

enum { JX_OK = 0, JX_BREAK = 1, JX_CONTINUE = 2 };

struct jscope {
    jscope *parent;
    const char **names;
    size_t *lens;
    jv *vals;
    size_t n, cap;
};

struct jinja_template {
    mx_arena arena; // the syntax tree and literals
    jnode *root;
};

// ---------------------------------------------------------------------------------------------
// Errors and helpers

int jctx_fail(jctx *c, int line, const char *fmt, ...) {
    char msg[900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return mx_fail(c->err, "line %d: %s", line, msg);
}

int jctx_fail_undefined(jctx *c, int line, jv v) {
    if (v.kind == JV_UNDEFINED && v.n) return jctx_fail(c, line, "'%.*s' is undefined", (int)v.n, v.s);
    return jctx_fail(c, line, "undefined value used");
}

int jctx_check_memory(jctx *c, int line) {
    if (c->ar->exhausted)
        return jctx_fail(c, line, "out of memory (template values exceed %zu MiB)", JINJA_ARENA_LIMIT >> 20);
    return 0;
}

uint64_t jctx_string_cost(jv s) { return s.n / 16; }

int jctx_spend(jctx *c, int line, uint64_t units) {
    if (c->budget > units) {
        c->budget -= units;
        return 0;
    }
    c->budget = 0;
    return jctx_fail(c, line, "template exceeded its step limit (%llu steps)", (unsigned long long)JINJA_MAX_STEPS);
}

bool jargs_get(const jargs *a, size_t index, const char *name, jv *out) {
    if (name)
        for (size_t i = 0; i < a->n_kw; i++)
            if (strcmp(a->kwnames[i], name) == 0) {
                *out = a->kw[i];
                return true;
            }
    if (index < a->n_pos) {
        *out = a->pos[index];
        return true;
    }
    return false;
}

jv jinja_make_func(jctx *c, jfunc_kind kind, const char *name, jv self) {
    jv_func *f = mx_arena_alloc(c->ar, sizeof *f);
    if (!f) return jv_undefined("out of memory");
    f->kind = kind;
    f->name = name;
    f->self = self;
    return (jv){.kind = JV_FUNC, .func = f};
}

// ---------------------------------------------------------------------------------------------
// Scopes

static jscope *scope_push(jctx *c) {
    jscope *s = mx_arena_alloc(c->ar, sizeof *s);
    if (!s) return NULL;
    s->parent = c->scope;
    c->scope = s;
    return s;
}

static jv *scope_find(jscope *s, const char *name, size_t n) {
    for (; s; s = s->parent)
        for (size_t i = s->n; i-- > 0;)
            if (s->lens[i] == n && memcmp(s->names[i], name, n) == 0) return &s->vals[i];
    return NULL;
}

static int scope_set(jctx *c, jscope *s, const char *name, size_t n, jv v) {
    for (size_t i = 0; i < s->n; i++)
        if (s->lens[i] == n && memcmp(s->names[i], name, n) == 0) {
            s->vals[i] = v;
            return 0;
        }
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 4;
        const char **names = mx_arena_alloc(c->ar, cap * sizeof *names);
        size_t *lens = mx_arena_alloc(c->ar, cap * sizeof *lens);
        jv *vals = mx_arena_alloc(c->ar, cap * sizeof *vals);
        if (!names || !lens || !vals) return -1;
        if (s->n) {
            memcpy(names, s->names, s->n * sizeof *names);
            memcpy(lens, s->lens, s->n * sizeof *lens);
            memcpy(vals, s->vals, s->n * sizeof *vals);
        }
        s->names = names;
        s->lens = lens;
        s->vals = vals;
        s->cap = cap;
    }
    s->names[s->n] = name;
    s->lens[s->n] = n;
    s->vals[s->n] = v;
    s->n++;
    return 0;
}

// ---------------------------------------------------------------------------------------------
// Attribute, item, iteration

static int loop_attr(jctx *c, int line, jv obj, const char *name, size_t n, jv *out) {
    const jv_loop *l = obj.loop;
    size_t len = l->items->n, i = l->index0;
#define IS(s) (n == strlen(s) && memcmp(name, s, n) == 0)
    if (IS("index")) *out = jv_int((int64_t)i + 1);
    else if (IS("index0")) *out = jv_int((int64_t)i);
    else if (IS("revindex")) *out = jv_int((int64_t)(len - i));
    else if (IS("revindex0")) *out = jv_int((int64_t)(len - i - 1));
    else if (IS("first")) *out = jv_bool(i == 0);
    else if (IS("last")) *out = jv_bool(i + 1 == len);
    else if (IS("length")) *out = jv_int((int64_t)len);
    else if (IS("depth")) *out = jv_int(1);
    else if (IS("depth0")) *out = jv_int(0);
    else if (IS("previtem")) *out = i > 0 ? l->items->items[i - 1] : jv_undefined("previtem");
    else if (IS("nextitem")) *out = i + 1 < len ? l->items->items[i + 1] : jv_undefined("nextitem");
    else if (IS("cycle")) *out = jinja_make_func(c, JF_METHOD, "cycle", obj);
    else *out = jv_undefined("loop attribute");
#undef IS
    return jctx_check_memory(c, line);
}

int jinja_get_attr(jctx *c, int line, jv obj, const char *name, size_t n, jv *out) {
    if (obj.kind == JV_UNDEFINED) return jctx_fail_undefined(c, line, obj);
    if (obj.kind == JV_LOOP) return loop_attr(c, line, obj, name, n, out);
    const char *method = jinja_method_lookup(obj, name, n);
    if (method) {
        *out = jinja_make_func(c, JF_METHOD, method, obj);
        return jctx_check_memory(c, line);
    }
    if (obj.kind == JV_DICT) {
        jv *v = jv_dict_find_str(obj.dict, name, n);
        if (v) {
            *out = *v;
            return 0;
        }
    }
    *out = jv_undefined(mx_arena_strndup(c->ar, name, n));
    return jctx_check_memory(c, line);
}

int jinja_get_item(jctx *c, int line, jv obj, jv key, jv *out) {
    if (obj.kind == JV_UNDEFINED) return jctx_fail_undefined(c, line, obj);
    if (obj.kind == JV_DICT) {
        jv *v = jv_dict_find(obj.dict, key, &c->budget);
        if (v) {
            *out = *v;
            return 0;
        }
        if (jctx_spend(c, line, 0) < 0) return -1;
    }
    bool int_key = key.kind == JV_INT || key.kind == JV_BOOL;
    if (int_key && obj.kind == JV_STRING && jctx_spend(c, line, jctx_string_cost(obj)) < 0) return -1;
    if (int_key && (obj.kind == JV_LIST || obj.kind == JV_STRING)) {
        int64_t i = key.kind == JV_BOOL ? key.b : key.i;
        int64_t len = obj.kind == JV_LIST ? (int64_t)obj.list->n : (int64_t)jv_utf8_len(obj.s, obj.n);
        if (i < 0) i += len;
        if (i < 0 || i >= len) {
            *out = jv_undefined("index out of range");
            return 0;
        }
        if (obj.kind == JV_LIST) *out = obj.list->items[i];
        else {
            size_t a = jv_utf8_offset(obj.s, obj.n, (size_t)i), b = jv_utf8_offset(obj.s, obj.n, (size_t)i + 1);
            *out = jv_string(obj.s + a, b - a);
        }
        return 0;
    }
    if (key.kind == JV_STRING) return jinja_get_attr(c, line, obj, key.s, key.n, out);
    *out = jv_undefined("item");
    return 0;
}

int jinja_iterate(jctx *c, int line, jv v, jv *out) {
    size_t n = v.kind == JV_LIST ? v.list->n : v.kind == JV_DICT ? v.dict->n : v.kind == JV_STRING ? v.n : 0;
    if (jctx_spend(c, line, n) < 0) return -1;
    switch (v.kind) {
    case JV_LIST: *out = v; return 0;
    case JV_UNDEFINED: *out = jv_list_new(c->ar, 0); return jctx_check_memory(c, line);
    case JV_DICT: {
        *out = jv_list_new(c->ar, v.dict->n);
        if (jctx_check_memory(c, line) < 0) return -1;
        memcpy(out->list->items, v.dict->keys, v.dict->n * sizeof(jv));
        out->list->n = v.dict->n;
        return 0;
    }
    case JV_STRING: {
        *out = jv_list_new(c->ar, v.n);
        if (jctx_check_memory(c, line) < 0) return -1;
        for (size_t i = 0; i < v.n;) {
            size_t len;
            jv_utf8_decode(v.s + i, v.n - i, &len);
            out->list->items[out->list->n++] = jv_string(v.s + i, len);
            i += len;
        }
        return 0;
    }
    default: return jctx_fail(c, line, "'%s' object is not iterable", jv_type_name(v));
    }
}

int jinja_contains(jctx *c, int line, jv needle, jv hay, bool *out) {
    switch (hay.kind) {
    case JV_UNDEFINED: *out = false; return 0;
    case JV_STRING:
        if (needle.kind != JV_STRING)
            return jctx_fail(c, line, "'in <string>' requires string as left operand, not %s", jv_type_name(needle));
        if (jctx_spend(c, line, jctx_string_cost(hay)) < 0) return -1;
        *out = needle.n == 0 || memmem(hay.s, hay.n, needle.s, needle.n) != NULL;
        return 0;
    case JV_LIST:
        *out = false;
        for (size_t i = 0; i < hay.list->n && !*out; i++) *out = jv_equal(hay.list->items[i], needle, &c->budget);
        return jctx_spend(c, line, 0);
    case JV_DICT: *out = jv_dict_find(hay.dict, needle, &c->budget) != NULL; return jctx_spend(c, line, 0);
    default: return jctx_fail(c, line, "argument of type '%s' is not iterable", jv_type_name(hay));
    }
}

// ---------------------------------------------------------------------------------------------
// Expressions

static int eval(jctx *c, const jnode *n, jv *out);
static int exec_body(jctx *c, const jnode *n, jbuf *out);

static int eval_args(jctx *c, const jnode *n, jargs *a) {
    // pos always points at an array (one slot when there are no arguments): filters slice it as
    // a->pos + k, and offsetting a null pointer is undefined even by zero.
    jv *pos = mx_arena_alloc(c->ar, (n->n_args ? n->n_args : 1) * sizeof *pos), *kw = NULL;
    if (!pos) return jctx_check_memory(c, n->line);
    if (n->n_kw) {
        kw = mx_arena_alloc(c->ar, n->n_kw * sizeof *kw);
        if (!kw) return jctx_check_memory(c, n->line);
    }
    for (size_t i = 0; i < n->n_args; i++)
        if (eval(c, n->args[i], &pos[i]) < 0) return -1;
    for (size_t i = 0; i < n->n_kw; i++)
        if (eval(c, n->kwargs[i], &kw[i]) < 0) return -1;
    *a = (jargs){.pos = pos, .n_pos = n->n_args, .kwnames = n->kwnames, .kw = kw, .n_kw = n->n_kw};
    return 0;
}

static int slice_bound(jctx *c, int line, const jnode *n, int64_t *out, bool *given) {
    *given = false;
    if (!n) return 0;
    jv v;
    if (eval(c, n, &v) < 0) return -1;
    if (v.kind == JV_NONE) return 0;
    if (v.kind != JV_INT && v.kind != JV_BOOL) return jctx_fail(c, line, "slice indices must be integers or None");
    *out = v.kind == JV_BOOL ? v.b : v.i;
    *given = true;
    return 0;
}

static int eval_slice(jctx *c, int line, jv obj, const jnode *s, jv *out) {
    if (obj.kind == JV_UNDEFINED) return jctx_fail_undefined(c, line, obj);
    if (obj.kind != JV_LIST && obj.kind != JV_STRING)
        return jctx_fail(c, line, "'%s' object is not subscriptable", jv_type_name(obj));
    int64_t start = 0, stop = 0, step = 1;
    bool has_start, has_stop, has_step;
    if (slice_bound(c, line, s->a, &start, &has_start) < 0 || slice_bound(c, line, s->b, &stop, &has_stop) < 0 ||
        slice_bound(c, line, s->c, &step, &has_step) < 0)
        return -1;
    if (step == 0) return jctx_fail(c, line, "slice step cannot be zero");
    // Code point offsets for strings, so slicing counts characters like Python.
    size_t len;
    size_t *offs = NULL;
    if (obj.kind == JV_LIST) len = obj.list->n;
    else {
        len = jv_utf8_len(obj.s, obj.n);
        offs = mx_arena_alloc(c->ar, (len + 1) * sizeof *offs);
        if (!offs) return jctx_check_memory(c, line);
        size_t k = 0;
        for (size_t i = 0; i < obj.n; k++) {
            offs[k] = i;
            size_t l;
            jv_utf8_decode(obj.s + i, obj.n - i, &l);
            i += l;
        }
        offs[len] = obj.n;
    }
    int64_t L = (int64_t)len;
    if (!has_start) start = step < 0 ? L - 1 : 0;
    else if (start < 0) {
        start += L;
        if (start < 0) start = step < 0 ? -1 : 0;
    } else if (start >= L)
        start = step < 0 ? L - 1 : L;
    if (!has_stop) stop = step < 0 ? -1 : L;
    else if (stop < 0) {
        stop += L;
        if (stop < 0) stop = step < 0 ? -1 : 0;
    } else if (stop >= L)
        stop = step < 0 ? L - 1 : L;
    if (obj.kind == JV_LIST) {
        *out = jv_list_new(c->ar, 0);
        if (jctx_check_memory(c, line) < 0) return -1;
        for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step)
            if (jv_list_push(c->ar, out->list, obj.list->items[i]) < 0) return jctx_check_memory(c, line);
        return 0;
    }
    if (step == 1) {
        *out = start < stop ? jv_string(obj.s + offs[start], offs[stop] - offs[start]) : jv_string("", 0);
        return 0;
    }
    jbuf b = {0};
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) jbuf_put(&b, obj.s + offs[i], offs[i + 1] - offs[i]);
    *out = jv_string_copy(c->ar, b.p ? b.p : "", b.n);
    bool failed = b.failed;
    jbuf_free(&b);
    if (failed) return jctx_fail(c, line, "string too large");
    return jctx_check_memory(c, line);
}

static bool is_intish(jv v) { return v.kind == JV_INT || v.kind == JV_BOOL; }
static int64_t as_int(jv v) { return v.kind == JV_BOOL ? v.b : v.i; }

static int concat_strings(jctx *c, int line, jv a, jv b, jv *out) {
    if (a.n + b.n > JBUF_MAX) return jctx_fail(c, line, "string too large");
    if (jctx_spend(c, line, (a.n + b.n) / 16) < 0) return -1;
    char *p = mx_arena_alloc(c->ar, a.n + b.n + 1);
    if (!p) return jctx_check_memory(c, line);
    memcpy(p, a.s, a.n);
    memcpy(p + a.n, b.s, b.n);
    *out = jv_string(p, a.n + b.n);
    return 0;
}

static int repeat(jctx *c, int line, jv seq, int64_t times, jv *out) {
    if (times < 0) times = 0;
    if (seq.kind == JV_STRING) {
        if (seq.n && (uint64_t)times > JBUF_MAX / seq.n) return jctx_fail(c, line, "string too large");
        size_t total = seq.n * (size_t)times;
        if (jctx_spend(c, line, total / 16) < 0) return -1;
        char *p = mx_arena_alloc(c->ar, total + 1);
        if (!p) return jctx_check_memory(c, line);
        // Doubling copies: a short string repeated millions of times is a few dozen memcpy calls.
        if (total) memcpy(p, seq.s, seq.n);
        for (size_t done = seq.n; done && done < total; done *= 2) memcpy(p + done, p, done < total - done ? done : total - done);
        *out = jv_string(p, total);
        return 0;
    }
    if (seq.list->n && (uint64_t)times > (JBUF_MAX / sizeof(jv)) / seq.list->n) return jctx_fail(c, line, "list too large");
    if (jctx_spend(c, line, (uint64_t)times * seq.list->n) < 0) return -1;
    *out = jv_list_new(c->ar, seq.list->n * (size_t)times);
    if (jctx_check_memory(c, line) < 0) return -1;
    for (int64_t i = 0; i < times; i++) memcpy(out->list->items + (size_t)i * seq.list->n, seq.list->items, seq.list->n * sizeof(jv));
    out->list->n = seq.list->n * (size_t)times;
    return 0;
}

// printf-style `"%s" % args`, the subset templates use: %s %r %d %i %f %%.
int jinja_format_percent(jctx *c, int line, jv fmt, jv args, jv *out) {
    jbuf b = {0};
    size_t next = 0;
    int rc = 0;
    for (size_t i = 0; i < fmt.n && rc == 0; i++) {
        if (fmt.s[i] != '%') {
            jbuf_putc(&b, fmt.s[i]);
            continue;
        }
        if (++i >= fmt.n) {
            rc = jctx_fail(c, line, "incomplete format");
            break;
        }
        char spec = fmt.s[i];
        if (spec == '%') {
            jbuf_putc(&b, '%');
            continue;
        }
        jv v;
        if (args.kind == JV_LIST && args.list->tuple) {
            if (next >= args.list->n) {
                rc = jctx_fail(c, line, "not enough arguments for format string");
                break;
            }
            v = args.list->items[next++];
        } else {
            if (next++ > 0) {
                rc = jctx_fail(c, line, "not enough arguments for format string");
                break;
            }
            v = args;
        }
        if (spec == 's') jv_write_str(&b, v, &c->budget);
        else if (spec == 'r') jv_write_repr(&b, v, &c->budget);
        else if ((spec == 'd' || spec == 'i') && (is_intish(v) || v.kind == JV_FLOAT))
            jbuf_printf(&b, "%lld", (long long)(v.kind == JV_FLOAT ? (int64_t)v.f : as_int(v)));
        else if (spec == 'f' && (is_intish(v) || v.kind == JV_FLOAT)) jbuf_printf(&b, "%f", jv_as_double(v));
        else rc = jctx_fail(c, line, "unsupported format '%%%c' for %s", spec, jv_type_name(v));
    }
    bool is_tuple = args.kind == JV_LIST && args.list->tuple;
    if (rc == 0 && ((is_tuple && next < args.list->n) || (!is_tuple && args.kind != JV_DICT && next == 0)))
        rc = jctx_fail(c, line, "not all arguments converted during string formatting");
    if (rc == 0 && b.failed) rc = jctx_spend(c, line, 0) < 0 ? -1 : jctx_fail(c, line, "string too large");
    if (rc == 0) {
        *out = jv_string_copy(c->ar, b.p ? b.p : "", b.n);
        rc = jctx_check_memory(c, line);
    }
    jbuf_free(&b);
    return rc;
}

static const char *op_text(int op) {
    static const char *const t[] = {"+", "-", "*", "/", "//", "%", "**", "==", "!=", "<", "<=", ">", ">=", "in", "not in"};
    return t[op];
}

static int binary(jctx *c, int line, int op, jv a, jv b, jv *out) {
    if (a.kind == JV_UNDEFINED) return jctx_fail_undefined(c, line, a);
    if (b.kind == JV_UNDEFINED) return jctx_fail_undefined(c, line, b);
    bool ints = is_intish(a) && is_intish(b);
    bool nums = (is_intish(a) || a.kind == JV_FLOAT) && (is_intish(b) || b.kind == JV_FLOAT);
    int64_t x = ints ? as_int(a) : 0, y = ints ? as_int(b) : 0, r;
    double fx = jv_as_double(a), fy = jv_as_double(b);
    switch (op) {
    case JOP_ADD:
        if (ints) {
            if (__builtin_add_overflow(x, y, &r)) return jctx_fail(c, line, "integer overflow");
            *out = jv_int(r);
            return 0;
        }
        if (nums) return *out = jv_float(fx + fy), 0;
        if (a.kind == JV_STRING && b.kind == JV_STRING) return concat_strings(c, line, a, b, out);
        if (a.kind == JV_LIST && b.kind == JV_LIST) {
            *out = jv_list_new(c->ar, a.list->n + b.list->n);
            if (jctx_check_memory(c, line) < 0) return -1;
            memcpy(out->list->items, a.list->items, a.list->n * sizeof(jv));
            memcpy(out->list->items + a.list->n, b.list->items, b.list->n * sizeof(jv));
            out->list->n = a.list->n + b.list->n;
            out->list->tuple = a.list->tuple;
            return 0;
        }
        break;
    case JOP_SUB:
        if (ints) {
            if (__builtin_sub_overflow(x, y, &r)) return jctx_fail(c, line, "integer overflow");
            return *out = jv_int(r), 0;
        }
        if (nums) return *out = jv_float(fx - fy), 0;
        break;
    case JOP_MUL:
        if (ints) {
            if (__builtin_mul_overflow(x, y, &r)) return jctx_fail(c, line, "integer overflow");
            return *out = jv_int(r), 0;
        }
        if (nums) return *out = jv_float(fx * fy), 0;
        if ((a.kind == JV_STRING || a.kind == JV_LIST) && is_intish(b)) return repeat(c, line, a, as_int(b), out);
        if ((b.kind == JV_STRING || b.kind == JV_LIST) && is_intish(a)) return repeat(c, line, b, as_int(a), out);
        break;
    case JOP_DIV:
        if (nums) {
            if (fy == 0.0) return jctx_fail(c, line, "division by zero");
            return *out = jv_float(fx / fy), 0;
        }
        break;
    case JOP_FLOORDIV:
    case JOP_MOD:
        if (op == JOP_MOD && a.kind == JV_STRING) return jinja_format_percent(c, line, a, b, out);
        if (ints) {
            if (y == 0) return jctx_fail(c, line, "integer division or modulo by zero");
            if (x == INT64_MIN && y == -1) return jctx_fail(c, line, "integer overflow");
            int64_t q = x / y, m = x % y;
            if (m != 0 && ((m < 0) != (y < 0))) {
                q--;
                m += y;
            }
            return *out = jv_int(op == JOP_MOD ? m : q), 0;
        }
        if (nums) {
            if (fy == 0.0) return jctx_fail(c, line, "float division or modulo by zero");
            double q = __builtin_floor(fx / fy);
            return *out = jv_float(op == JOP_MOD ? fx - q * fy : q), 0;
        }
        break;
    case JOP_POW:
        if (ints && y >= 0) {
            // 0, 1 and -1 never overflow (any y); every other base does within 64 factors.
            if (x == 0 || x == 1) return *out = jv_int(y == 0 ? 1 : x), 0;
            if (x == -1) return *out = jv_int(y % 2 ? -1 : 1), 0;
            int64_t acc = 1;
            for (int64_t i = 0; i < y; i++)
                if (__builtin_mul_overflow(acc, x, &acc)) return jctx_fail(c, line, "integer overflow");
            return *out = jv_int(acc), 0;
        }
        if (nums) return *out = jv_float(__builtin_pow(fx, fy)), 0;
        break;
    }
    return jctx_fail(c, line, "unsupported operand type(s) for %s: '%s' and '%s'", op_text(op), jv_type_name(a),
                     jv_type_name(b));
}

static int compare(jctx *c, int line, int op, jv a, jv b, bool *out) {
    int cmp = 0;
    switch (op) {
    case JOP_EQ: *out = jv_equal(a, b, &c->budget); return jctx_spend(c, line, 0);
    case JOP_NE: *out = !jv_equal(a, b, &c->budget); return jctx_spend(c, line, 0);
    case JOP_IN:
    case JOP_NOT_IN:
        if (jinja_contains(c, line, a, b, out) < 0) return -1;
        if (op == JOP_NOT_IN) *out = !*out;
        return 0;
    default:
        if (a.kind == JV_UNDEFINED) return jctx_fail_undefined(c, line, a);
        if (b.kind == JV_UNDEFINED) return jctx_fail_undefined(c, line, b);
        if (jv_compare(a, b, &cmp, &c->budget) < 0)
            return jctx_spend(c, line, 0) < 0 ? -1 : jctx_fail(c, line, "'%s' not supported between instances of '%s' and '%s'", op_text(op),
                             jv_type_name(a), jv_type_name(b));
        *out = op == JOP_LT ? cmp < 0 : op == JOP_LE ? cmp <= 0 : op == JOP_GT ? cmp > 0 : cmp >= 0;
        return 0;
    }
}

// Evaluates a filter node; inside {% filter %} and {% set x | f %} the innermost operand is *base.
static int eval_filter(jctx *c, const jnode *n, const jv *base, jv *out) {
    if (n->op < 0) return jctx_fail(c, n->line, "unknown filter '%s'", n->name);
    jv self;
    int rc = 0;
    if (!n->a) self = base ? *base : jv_undefined("");
    else if (n->a->kind == JN_FILTER && base) rc = eval_filter(c, n->a, base, &self);
    else rc = eval(c, n->a, &self);
    if (n->a && rc < 0) return -1;
    jargs a;
    if (eval_args(c, n, &a) < 0) return -1;
    return jinja_apply_filter(c, n->line, n->name, self, &a, out);
}

static int eval_node(jctx *c, const jnode *n, jv *out);

static int eval(jctx *c, const jnode *n, jv *out) {
    // Every node evaluated spends a unit: one statement can be a call with thousands of arguments.
    if (jctx_spend(c, n->line, 1) < 0) return -1;
    if (c->nesting >= JINJA_MAX_EVAL_DEPTH)
        return jctx_fail(c, n->line, "template nested too deeply when rendered (limit %d levels, macro calls included)",
                         JINJA_MAX_EVAL_DEPTH);
    c->nesting++;
    int rc = eval_node(c, n, out);
    c->nesting--;
    return rc;
}

static int eval_node(jctx *c, const jnode *n, jv *out) {
    jv a, b;
    switch (n->kind) {
    case JN_CONST: *out = n->value; return 0;
    case JN_NAME: {
        jv *v = scope_find(c->scope, n->name, n->name_n);
        if (v) {
            *out = *v;
            return 0;
        }
        const char *g = jinja_global_lookup(n->name, n->name_n);
        *out = g ? jinja_make_func(c, JF_GLOBAL, g, jv_none()) : jv_undefined(n->name);
        return jctx_check_memory(c, n->line);
    }
    case JN_LIST:
    case JN_TUPLE:
        *out = jv_list_new(c->ar, n->n_args);
        if (jctx_check_memory(c, n->line) < 0) return -1;
        for (size_t i = 0; i < n->n_args; i++)
            if (eval(c, n->args[i], &out->list->items[i]) < 0) return -1;
        out->list->n = n->n_args;
        out->list->tuple = n->kind == JN_TUPLE;
        return 0;
    case JN_DICT:
        *out = jv_dict_new(c->ar, n->n_args / 2);
        if (jctx_check_memory(c, n->line) < 0) return -1;
        for (size_t i = 0; i + 1 < n->n_args; i += 2) {
            if (eval(c, n->args[i], &a) < 0 || eval(c, n->args[i + 1], &b) < 0) return -1;
            if (jv_dict_set(c->ar, out->dict, a, b, &c->budget) < 0) return jctx_check_memory(c, n->line);
            if (jctx_spend(c, n->line, 0) < 0) return -1;
        }
        return 0;
    case JN_ATTR:
        if (eval(c, n->a, &a) < 0) return -1;
        return jinja_get_attr(c, n->line, a, n->name, n->name_n, out);
    case JN_SUBSCRIPT:
        if (eval(c, n->a, &a) < 0) return -1;
        if (n->b->kind == JN_SLICE) return eval_slice(c, n->line, a, n->b, out);
        if (eval(c, n->b, &b) < 0) return -1;
        return jinja_get_item(c, n->line, a, b, out);
    case JN_CALL: {
        jargs args;
        if (eval(c, n->a, &a) < 0 || eval_args(c, n, &args) < 0) return -1;
        return jinja_call_value(c, n->line, a, &args, out);
    }
    case JN_FILTER: return eval_filter(c, n, NULL, out);
    case JN_TEST: {
        jargs args;
        bool r;
        if (n->op < 0) return jctx_fail(c, n->line, "unknown test '%s'", n->name);
        if (eval(c, n->a, &a) < 0 || eval_args(c, n, &args) < 0) return -1;
        if (jinja_apply_test(c, n->line, n->name, a, &args, &r) < 0) return -1;
        *out = jv_bool(r);
        return 0;
    }
    case JN_NOT:
        if (eval(c, n->a, &a) < 0) return -1;
        *out = jv_bool(!jv_truthy(a));
        return 0;
    case JN_NEG:
    case JN_POS:
        if (eval(c, n->a, &a) < 0) return -1;
        if (a.kind == JV_UNDEFINED) return jctx_fail_undefined(c, n->line, a);
        if (is_intish(a)) {
            if (n->kind == JN_NEG && as_int(a) == INT64_MIN) return jctx_fail(c, n->line, "integer overflow");
            *out = jv_int(n->kind == JN_NEG ? -as_int(a) : as_int(a));
        } else if (a.kind == JV_FLOAT)
            *out = jv_float(n->kind == JN_NEG ? -a.f : a.f);
        else
            return jctx_fail(c, n->line, "bad operand type for unary %s: '%s'", n->kind == JN_NEG ? "-" : "+",
                             jv_type_name(a));
        return 0;
    case JN_BINARY:
        if (eval(c, n->a, &a) < 0 || eval(c, n->b, &b) < 0) return -1;
        return binary(c, n->line, n->op, a, b, out);
    case JN_COMPARE: {
        if (eval(c, n->a, &a) < 0) return -1;
        bool r = true;
        for (size_t i = 0; i < n->n_args && r; i++) {
            if (eval(c, n->args[i], &b) < 0 || compare(c, n->line, n->ops[i], a, b, &r) < 0) return -1;
            a = b;
        }
        *out = jv_bool(r);
        return 0;
    }
    case JN_AND:
    case JN_OR:
        if (eval(c, n->a, &a) < 0) return -1;
        if (jv_truthy(a) == (n->kind == JN_OR)) {
            *out = a;
            return 0;
        }
        return eval(c, n->b, out);
    case JN_COND:
        if (eval(c, n->a, &a) < 0) return -1;
        if (jv_truthy(a)) return eval(c, n->b, out);
        if (n->c) return eval(c, n->c, out);
        *out = jv_undefined("");
        return 0;
    case JN_CONCAT: {
        jbuf buf = {0};
        for (size_t i = 0; i < n->n_args; i++) {
            if (eval(c, n->args[i], &a) < 0) {
                jbuf_free(&buf);
                return -1;
            }
            jv_write_str(&buf, a, &c->budget);
        }
        bool failed = buf.failed;
        *out = jv_string_copy(c->ar, buf.p ? buf.p : "", buf.n);
        jbuf_free(&buf);
        if (failed) return jctx_spend(c, n->line, 0) < 0 ? -1 : jctx_fail(c, n->line, "string too large");
        return jctx_check_memory(c, n->line);
    }
    default: return jctx_fail(c, n->line, "internal error: statement used as expression");
    }
}

// ---------------------------------------------------------------------------------------------
// Calls

static int call_macro(jctx *c, int line, const jv_func *f, const jargs *a, jv *out) {
    const jnode *m = f->macro;
    if (c->depth >= JINJA_MAX_CALL_DEPTH)
        return jctx_fail(c, line, "macro '%s' recursion too deep (limit %d)", m->name, JINJA_MAX_CALL_DEPTH);
    if (a->n_pos > m->n_args)
        return jctx_fail(c, line, "macro '%s' takes not more than %zu argument(s)", m->name, m->n_args);
    // Matching keywords to parameters compares each pair.
    if (jctx_spend(c, line, (uint64_t)(a->n_kw + 1) * m->n_args) < 0) return -1;
    for (size_t k = 0; k < a->n_kw; k++) {
        bool found = false;
        for (size_t i = 0; i < m->n_args; i++) found |= strcmp(m->args[i]->name, a->kwnames[k]) == 0;
        if (!found) return jctx_fail(c, line, "macro '%s' got an unexpected keyword argument '%s'", m->name, a->kwnames[k]);
    }
    jscope *saved = c->scope;
    c->scope = f->closure;
    jscope *s = scope_push(c);
    int rc = s ? 0 : jctx_check_memory(c, line);
    for (size_t i = 0; i < m->n_args && rc == 0; i++) {
        jv v;
        const jnode *p = m->args[i];
        if (!jargs_get(a, i, p->name, &v)) {
            if (m->kwargs[i]) rc = eval(c, m->kwargs[i], &v);
            else v = jv_undefined(p->name);
        }
        if (rc == 0 && scope_set(c, s, p->name, p->name_n, v) < 0) rc = jctx_check_memory(c, line);
    }
    jbuf body = {0};
    c->depth++;
    if (rc == 0) rc = exec_body(c, m->c, &body) < 0 ? -1 : 0;
    c->depth--;
    c->scope = saved;
    if (rc == 0 && body.failed) rc = jctx_fail(c, line, "output too large");
    if (rc == 0) {
        *out = jv_string_copy(c->ar, body.p ? body.p : "", body.n);
        rc = jctx_check_memory(c, line);
    }
    jbuf_free(&body);
    return rc;
}

int jinja_call_value(jctx *c, int line, jv fn, const jargs *a, jv *out) {
    if (fn.kind == JV_UNDEFINED) return jctx_fail_undefined(c, line, fn);
    if (fn.kind != JV_FUNC) return jctx_fail(c, line, "'%s' object is not callable", jv_type_name(fn));
    if (jctx_spend(c, line, 1) < 0) return -1;
    switch (fn.func->kind) {
    case JF_GLOBAL: return jinja_call_global(c, line, fn.func->name, a, out);
    case JF_METHOD: return jinja_call_method(c, line, fn.func->self, fn.func->name, a, out);
    case JF_MACRO: return call_macro(c, line, fn.func, a, out);
    }
    return -1;
}

// ---------------------------------------------------------------------------------------------
// Statements

static int assign(jctx *c, int line, const jnode *target, jv v) {
    if (target->kind == JN_NAME) {
        if (scope_set(c, c->scope, target->name, target->name_n, v) < 0) return jctx_check_memory(c, line);
        return 0;
    }
    if (target->kind == JN_TUPLE) {
        if (v.kind != JV_LIST) {
            jv items;
            if (jinja_iterate(c, line, v, &items) < 0) return -1;
            v = items;
        }
        if (v.list->n != target->n_args)
            return jctx_fail(c, line, "cannot unpack %zu value(s) into %zu name(s)", v.list->n, target->n_args);
        for (size_t i = 0; i < target->n_args; i++)
            if (assign(c, line, target->args[i], v.list->items[i]) < 0) return -1;
        return 0;
    }
    // ns.attr = v
    jv *ns = scope_find(c->scope, target->a->name, target->a->name_n);
    if (!ns) return jctx_fail(c, line, "'%s' is undefined", target->a->name);
    if (ns->kind != JV_DICT || !ns->dict->is_namespace)
        return jctx_fail(c, line, "cannot assign attribute on non-namespace object '%s'", target->a->name);
    if (jv_dict_set(c->ar, ns->dict, jv_string(target->name, target->name_n), v, &c->budget) < 0)
        return jctx_check_memory(c, line);
    return jctx_spend(c, line, 0);
}

static int exec_stmt(jctx *c, const jnode *n, jbuf *out);

static int exec_for(jctx *c, const jnode *n, jbuf *out) {
    jv seq, items;
    if (eval(c, n->b, &seq) < 0 || jinja_iterate(c, n->line, seq, &items) < 0) return -1;
    jscope *saved = c->scope;
    if (n->e) {
        // `for x in xs if cond`: filter first so loop.length and loop.last see the filtered list.
        jv kept = jv_list_new(c->ar, 0);
        jscope *fs = scope_push(c);
        c->scope = saved;
        if (!fs || jctx_check_memory(c, n->line) < 0) return jctx_check_memory(c, n->line);
        for (size_t i = 0; i < items.list->n; i++) {
            jv cond;
            fs->n = 0;
            c->scope = fs;
            int rc = assign(c, n->line, n->a, items.list->items[i]);
            if (rc == 0) rc = eval(c, n->e, &cond);
            c->scope = saved;
            if (rc < 0) return -1;
            if (jv_truthy(cond) && jv_list_push(c->ar, kept.list, items.list->items[i]) < 0)
                return jctx_check_memory(c, n->line);
        }
        items = kept;
    }
    jv_loop *loop = mx_arena_alloc(c->ar, sizeof *loop);
    if (!loop) return jctx_check_memory(c, n->line);
    loop->items = items.list;
    // One scope serves every iteration, emptied each time: iterations do not see each other's
    // variables (as in jinja2) and a long loop does not grow the arena.
    jscope *iter = scope_push(c);
    c->scope = saved;
    if (!iter) return jctx_check_memory(c, n->line);
    int rc = 0;
    for (size_t i = 0; i < items.list->n; i++) {
        if (jctx_spend(c, n->line, 1) < 0) {
            rc = -1;
            break;
        }
        iter->n = 0;
        c->scope = iter;
        loop->index0 = i;
        if (scope_set(c, c->scope, "loop", 4, (jv){.kind = JV_LOOP, .loop = loop}) < 0) {
            rc = jctx_check_memory(c, n->line);
            break;
        }
        rc = assign(c, n->line, n->a, items.list->items[i]);
        if (rc == 0) rc = exec_body(c, n->c, out);
        if (rc == JX_CONTINUE) rc = 0;
        if (rc != 0) break;
    }
    c->scope = saved;
    if (rc == JX_BREAK) rc = 0;
    if (rc == 0 && items.list->n == 0 && n->d) rc = exec_body(c, n->d, out);
    return rc;
}

// Renders a body into a fresh buffer and returns it as a string value.
static int capture(jctx *c, const jnode *body, int line, jv *out) {
    jbuf b = {0};
    int rc = exec_body(c, body, &b);
    if (rc == 0 && b.failed) rc = jctx_fail(c, line, "output too large");
    if (rc == 0) {
        *out = jv_string_copy(c->ar, b.p ? b.p : "", b.n);
        rc = jctx_check_memory(c, line);
    }
    jbuf_free(&b);
    return rc;
}

static int exec_stmt(jctx *c, const jnode *n, jbuf *out) {
    jv v;
    if (jctx_spend(c, n->line, 1) < 0) return -1;
    switch (n->kind) {
    case JN_TEXT: jbuf_put(out, n->value.s, n->value.n); break;
    case JN_OUTPUT:
        if (eval(c, n->a, &v) < 0) return -1;
        jv_write_str(out, v, &c->budget);
        break;
    case JN_IF:
        if (eval(c, n->a, &v) < 0) return -1;
        if (jv_truthy(v)) return exec_body(c, n->b, out);
        if (n->c) return n->c->kind == JN_IF ? exec_stmt(c, n->c, out) : exec_body(c, n->c, out);
        break;
    case JN_FOR: return exec_for(c, n, out);
    case JN_SET:
        if (eval(c, n->b, &v) < 0) return -1;
        return assign(c, n->line, n->a, v);
    case JN_SET_BLOCK:
        if (capture(c, n->c, n->line, &v) < 0) return -1;
        if (n->b && eval_filter(c, n->b, &v, &v) < 0) return -1;
        return assign(c, n->line, n->a, v);
    case JN_MACRO:
        v = jinja_make_func(c, JF_MACRO, n->name, jv_none());
        if (jctx_check_memory(c, n->line) < 0) return -1;
        v.func->macro = n;
        v.func->closure = c->scope;
        return assign(c, n->line, &(jnode){.kind = JN_NAME, .name = n->name, .name_n = n->name_n}, v);
    case JN_BREAK: return JX_BREAK;
    case JN_CONTINUE: return JX_CONTINUE;
    case JN_FILTER_BLOCK:
        if (capture(c, n->c, n->line, &v) < 0 || eval_filter(c, n->a, &v, &v) < 0) return -1;
        jv_write_str(out, v, &c->budget);
        break;
    case JN_BODY: return exec_body(c, n, out);
    default: return jctx_fail(c, n->line, "internal error: expression used as statement");
    }
    if (out->failed && jctx_spend(c, n->line, 0) == 0)
        return jctx_fail(c, n->line, "output too large (limit %zu MiB)", JBUF_MAX >> 20);
    if (out->failed) return -1;
    return 0;
}

static int exec_body(jctx *c, const jnode *n, jbuf *out) {
    if (c->nesting >= JINJA_MAX_EVAL_DEPTH)
        return jctx_fail(c, n->line, "template nested too deeply when rendered (limit %d levels, macro calls included)",
                         JINJA_MAX_EVAL_DEPTH);
    c->nesting++;
    int rc = 0;
    for (size_t i = 0; i < n->n_args && rc == 0; i++) rc = exec_stmt(c, n->args[i], out);
    c->nesting--;
    return rc;
}

// ---------------------------------------------------------------------------------------------
// Public entry points

jinja_template *jinja_template_parse(const char *src, size_t n, mx_error *err) {
    jinja_template *t = calloc(1, sizeof *t);
    if (!t) {
        mx_fail(err, "out of memory");
        return NULL;
    }
    mx_arena_init(&t->arena, (size_t)256 << 20);
    if (jinja_parse(src, n, &t->arena, &t->root, err) < 0) {
        jinja_template_free(t);
        return NULL;
    }
    return t;
}

void jinja_template_free(jinja_template *t) {
    if (!t) return;
    mx_arena_free(&t->arena);
    free(t);
}

char *jinja_template_render_vars(const jinja_template *t, const char *const *names, json_t *const *values,
                                 size_t n_vars, mx_error *err) {
    mx_arena arena;
    mx_arena_init(&arena, JINJA_ARENA_LIMIT);
    jctx c = {.ar = &arena, .err = err, .budget = JINJA_MAX_STEPS};
    jbuf out = {0};
    char *result = NULL;
    c.globals = scope_push(&c);
    if (!c.globals) {
        mx_fail(err, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < n_vars; i++) {
        jv v;
        if (!values[i]) continue;
        if (jv_from_json(&arena, values[i], &v, 0) < 0) {
            mx_fail(err, "variable '%s': JSON too deeply nested or out of memory", names[i]);
            goto done;
        }
        if (scope_set(&c, c.globals, names[i], strlen(names[i]), v) < 0) {
            mx_fail(err, "out of memory");
            goto done;
        }
    }
    int rc = exec_body(&c, t->root, &out);
    if (rc > 0) rc = 0; // break/continue are rejected by the parser outside loops
    if (rc == 0) rc = jctx_spend(&c, 0, 0);
    if (rc == 0 && out.failed) rc = mx_fail(err, "output too large (limit %zu MiB)", JBUF_MAX >> 20);
    if (rc == 0) {
        result = out.p ? out.p : strdup("");
        out.p = NULL;
        if (!result) mx_fail(err, "out of memory");
    }
done:
    jbuf_free(&out);
    mx_arena_free(&arena);
    return result;
}

char *jinja_template_render(const jinja_template *t, json_t *vars, mx_error *err) {
    size_t n = vars && json_is_object(vars) ? json_object_size(vars) : 0, i = 0;
    const char **names = calloc(n + 1, sizeof *names);
    json_t **values = calloc(n + 1, sizeof *values);
    char *result = NULL;
    if (!names || !values) mx_fail(err, "out of memory");
    else {
        const char *key;
        json_t *val;
        if (n) json_object_foreach(vars, key, val) {
            names[i] = key;
            values[i++] = val;
        }
        result = jinja_template_render_vars(t, names, values, i, err);
    }
    free(names);
    free(values);
    return result;
}
