// SPDX-License-Identifier: MIT
// Internal interface between the Jinja evaluator (jinja_eval.c) and its built-in filters, tests,
// methods and global functions (jinja_filters.c, jinja_methods.c). Not for use outside src/chat.
// A jctx is the per-render state: the value arena, the scope chain and the error buffer; nothing
// in it is shared between renders, so renders of one template can run on many threads.
#ifndef MX_CHAT_JINJA_EVAL_H
#define MX_CHAT_JINJA_EVAL_H

#include "chat/jinja_ast.h"
#include "chat/jinja_value.h"

typedef struct jscope jscope;

typedef struct jctx {
    mx_arena *ar;
    mx_error *err;
    jscope *scope;   // innermost scope
    jscope *globals; // render variables and top-level sets
    int depth;       // macro call depth
    int nesting;     // evaluations in flight (eval, exec_body)
    uint64_t budget; // work units left: statements, loop iterations, calls, values walked
} jctx;

typedef enum jfunc_kind { JF_GLOBAL, JF_METHOD, JF_MACRO } jfunc_kind;

struct jv_func {
    jfunc_kind kind;
    const char *name;     // global or method name (NUL-terminated)
    jv self;              // JF_METHOD: the bound object
    const jnode *macro;   // JF_MACRO: the definition
    jscope *closure;      // JF_MACRO: the scope it was defined in
};

struct jv_loop {
    const jv_list *items;
    size_t index0;
};

// Call arguments: positional values then keyword values.
typedef struct jargs {
    const jv *pos;
    size_t n_pos;
    const char *const *kwnames;
    const jv *kw;
    size_t n_kw;
} jargs;

// Finds argument `index` (positional) or `name` (keyword); false when absent.
bool jargs_get(const jargs *a, size_t index, const char *name, jv *out);

// Formats "line N: message" into the error and returns -1.
int jctx_fail(jctx *c, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
// Fails for an undefined value used where jinja2 raises ("'name' is undefined").
int jctx_fail_undefined(jctx *c, int line, jv v);
// Checks arena exhaustion, reporting it at `line`.
int jctx_check_memory(jctx *c, int line);
// Spends `units` of the work budget (0: only checks it); fails with the step-limit error once it
// is spent, also when a value walk (jv_equal and the like, given &c->budget) used it up.
int jctx_spend(jctx *c, int line, uint64_t units);
// The units a scan over string s costs (one per 16 bytes): indexing (code points are counted from
// the start), `in`, and every string method and filter.
uint64_t jctx_string_cost(jv s);

// obj.name and obj[key] with jinja2's rules (methods first for '.', items first for '[]').
int jinja_get_attr(jctx *c, int line, jv obj, const char *name, size_t n, jv *out);
int jinja_get_item(jctx *c, int line, jv obj, jv key, jv *out);
// Calls a function value (macro, method, global).
int jinja_call_value(jctx *c, int line, jv fn, const jargs *a, jv *out);
// Materializes an iterable as a list: lists as is, dict keys, string characters, undefined empty.
int jinja_iterate(jctx *c, int line, jv v, jv *out);
// `needle in haystack`.
int jinja_contains(jctx *c, int line, jv needle, jv hay, bool *out);
// A bound method / global function value.
jv jinja_make_func(jctx *c, jfunc_kind kind, const char *name, jv self);

// Built-ins (jinja_filters.c, jinja_methods.c).
bool jinja_filter_known(const char *s, size_t n);
bool jinja_test_known(const char *s, size_t n);
int jinja_apply_filter(jctx *c, int line, const char *name, jv self, const jargs *a, jv *out);
int jinja_apply_test(jctx *c, int line, const char *name, jv self, const jargs *a, bool *out);
// The method table name for obj.name, or NULL when obj has no such method.
const char *jinja_method_lookup(jv obj, const char *name, size_t n);
int jinja_call_method(jctx *c, int line, jv self, const char *name, const jargs *a, jv *out);
// Case mapping of a string (code point by code point): Python's lower(), upper(), capitalize(),
// title(), and jinja2's `title` filter (words start after whitespace or -([{<).
typedef enum jcase { JCASE_LOWER, JCASE_UPPER, JCASE_CAPITALIZE, JCASE_TITLE, JCASE_JINJA_TITLE } jcase;
int jinja_str_case(jctx *c, int line, jv s, jcase mode, jv *out);
// Python str.strip/lstrip/rstrip: chars is a string of code points, or NULL for whitespace.
jv jinja_str_strip(jv s, const jv *chars, bool left, bool right);
// printf-style `fmt % args`.
int jinja_format_percent(jctx *c, int line, jv fmt, jv args, jv *out);
const char *jinja_global_lookup(const char *name, size_t n);
int jinja_call_global(jctx *c, int line, const char *name, const jargs *a, jv *out);

#endif
