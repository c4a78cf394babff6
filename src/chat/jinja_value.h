// SPDX-License-Identifier: MIT
// The value model of the Jinja interpreter: a small tagged union (jv) passed by value, with lists,
// dicts, functions and loop objects living in the render's arena. Strings are byte slices (UTF-8,
// not NUL-terminated in general) that may point into the template, the caller's JSON or the arena;
// nothing is freed one value at a time. Semantics follow Python as jinja2 uses it: truthiness,
// equality (1 == 1.0 == True), ordering, str()/repr() text and json.dumps for `tojson`. Dicts keep
// insertion order so `tojson` matches Python byte for byte.
#ifndef MX_CHAT_JINJA_VALUE_H
#define MX_CHAT_JINJA_VALUE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/arena.h"
#include "core/error.h"

typedef enum jv_kind {
    JV_UNDEFINED, // s/n: the missing name, for messages (may be empty)
    JV_NONE,
    JV_BOOL,
    JV_INT,
    JV_FLOAT,
    JV_STRING,
    JV_LIST,
    JV_DICT,
    JV_FUNC,
    JV_LOOP,
} jv_kind;

typedef struct jv_list jv_list;
typedef struct jv_dict jv_dict;
typedef struct jv_func jv_func;
typedef struct jv_loop jv_loop;

typedef struct jv {
    jv_kind kind;
    union {
        bool b;
        int64_t i;
        double f;
        struct {
            const char *s;
            size_t n;
        };
        jv_list *list;
        jv_dict *dict;
        jv_func *func;
        jv_loop *loop;
    };
} jv;

struct jv_list {
    jv *items;
    size_t n, cap;
    bool tuple; // printed as (a, b)
};

struct jv_dict {
    jv *keys;
    jv *vals;
    size_t n, cap;
    bool is_namespace; // made by namespace(): the only dict `set ns.attr = ...` may change
};

// A growable malloc'ed byte buffer with a size cap; `failed` is set when a write would pass it or
// memory runs out, and later writes are ignored.
typedef struct jbuf {
    char *p;
    size_t n, cap;
    bool failed;
} jbuf;

#define JBUF_MAX ((size_t)64 << 20) // output and every string; prompts are far smaller (1M tokens ~ 6 MiB)

int jbuf_put(jbuf *b, const char *s, size_t n);
int jbuf_puts(jbuf *b, const char *s);
int jbuf_putc(jbuf *b, char c);
int jbuf_printf(jbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void jbuf_free(jbuf *b);

// Constructors. jv_string does not copy; jv_string_copy copies into the arena (s/n NULL on failure).
jv jv_undefined(const char *hint);
jv jv_none(void);
jv jv_bool(bool b);
jv jv_int(int64_t i);
jv jv_float(double f);
jv jv_string(const char *s, size_t n);
jv jv_cstring(const char *s);
jv jv_string_copy(mx_arena *a, const char *s, size_t n);
// Containers: on arena exhaustion these return an undefined value and a->exhausted is set.
jv jv_list_new(mx_arena *a, size_t cap);
jv jv_dict_new(mx_arena *a, size_t cap);
int jv_list_push(mx_arena *a, jv_list *l, jv v);

// Walks that compare values (equality, ordering, dict key lookup) spend one unit of the render's
// work budget per value visited: values can share sub-values (forty times `set a = [a, a]` makes
// 2^40 paths through a few hundred bytes), and a template can repeat a linear lookup millions of
// times. A walk that finds *budget at zero stops at once with a meaningless answer (not equal,
// not comparable, not found); the evaluator checks the budget and fails the render.
// Sets key (replacing an equal key in place, else appending).
int jv_dict_set(mx_arena *a, jv_dict *d, jv key, jv val, uint64_t *budget);
jv *jv_dict_find(const jv_dict *d, jv key, uint64_t *budget);
jv *jv_dict_find_str(const jv_dict *d, const char *s, size_t n);

bool jv_truthy(jv v);
bool jv_equal(jv a, jv b, uint64_t *budget);
// Python ordering for numbers, strings and lists: sets *cmp to -1/0/1; -1 when not comparable.
int jv_compare(jv a, jv b, int *cmp, uint64_t *budget);
const char *jv_type_name(jv v);
bool jv_is_number(jv v); // int or float, not bool
double jv_as_double(jv v);

// Python str() (strings as is) and repr() appended to a buffer.
// Each value printed spends one unit of *budget (shared sub-values can make the text
// exponentially long); a spent budget fails the buffer like its size cap does.
int jv_write_str(jbuf *b, jv v, uint64_t *budget);
int jv_write_repr(jbuf *b, jv v, uint64_t *budget);
// str() as a value: strings are returned as is, others are formatted into the arena.
int jv_to_string(mx_arena *a, jv v, jv *out, uint64_t *budget);
// Python float repr ("1.0", "1e+20", "0.1") into buf (at least 32 bytes).
void jv_format_float(double f, char *buf, size_t size);

// json.dumps(v, ensure_ascii=False, indent=indent (<0: None), sort_keys=sort_keys), as transformers'
// tojson filter calls it. Fails (message in err) on undefined values or functions, and when sorting
// keys exhausts *budget.
int jv_write_json(jbuf *b, jv v, int indent, bool sort_keys, uint64_t *budget, mx_error *err);
// Converts JSON (borrowing its strings, which must outlive the render) into a value.
int jv_from_json(mx_arena *a, json_t *j, jv *out, int depth);

// UTF-8 helpers: code points in s[0..n), and the byte offset of code point `index` (clamped to n).
size_t jv_utf8_len(const char *s, size_t n);
size_t jv_utf8_offset(const char *s, size_t n, size_t index);
// Decodes one code point at s (n > 0); sets *len to its byte length (1 for invalid bytes).
int32_t jv_utf8_decode(const char *s, size_t n, size_t *len);

#endif
