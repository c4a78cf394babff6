// SPDX-License-Identifier: MIT
// GBNF (llama.cpp's grammar format) to the compiled form of gram_internal.h.
//
//   rule      := name '::=' alternates          (the start rule is `root`)
//   alternates:= sequence ('|' sequence)*
//   item      := '"' literal '"' | '[' '^'? class ']' | '.' | name | '(' alternates ')'
//                followed by any of  * + ? {m} {m,} {m,n}
// Whitespace, newlines and `#` comments may appear between any two tokens; a sequence ends where
// the next `name ::=` begins. Repetition of one character class is one REP element; any other
// repeated item becomes a rule (when it is not one already) under one REPREF element.
// Every error names the line and column where it was found.
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/gram_internal.h"

// Rules (named and the parser's own for groups and repetitions) in one grammar: far more than
// any JSON schema or tool-call grammar needs, and every check below stays linear in them.
#define GBNF_MAX_RULES 1000000

typedef struct elem_vec {
    gram_elem *v;
    int32_t n, cap;
} elem_vec;

typedef struct build_rule {
    char *name;
    elem_vec body;
    bool defined;
    int32_t line, col;      // where defined (or first referenced, while undefined)
} build_rule;

typedef struct parser {
    const char *src, *p;
    mx_error *err;
    bool failed;
    int failure;  // MX_GRAM_* of the failure in err: MX_GRAM_INVALID unless a bound or an allocation
    build_rule *rules;
    int32_t n_rules, cap_rules;
    gram_range *ranges;
    int32_t n_ranges, cap_ranges;
    gram_class *classes;
    int32_t n_classes, cap_classes;
    int32_t n_aux;
    int32_t *index;       // rule ids by name hash (open addressing, -1 empty, at most half full)
    int32_t cap_index;
    const char *where_at; // the last position where() counted up to, and its line and column
    int32_t where_line, where_col;
} parser;

// Line and column of `at`. Positions are asked for in increasing order while parsing (one per
// rule), so counting continues from the previous answer: a long grammar costs linear time.
static void where(parser *ps, const char *at, int32_t *line, int32_t *col) {
    if (!ps->where_at || at < ps->where_at) ps->where_at = ps->src, ps->where_line = 1, ps->where_col = 1;
    const char *q = ps->where_at;
    for (; q < at && *q; q++) {
        if (*q == '\n') ps->where_line++, ps->where_col = 1;
        else if ((*q & 0xC0) != 0x80) ps->where_col++;
    }
    ps->where_at = q;
    *line = ps->where_line, *col = ps->where_col;
}

// The first failure of a parse, at `at`, of the given kind (MX_GRAM_*); later ones are dropped.
static int fail_kind_at(parser *ps, int failure, const char *at, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail_kind_at(parser *ps, int failure, const char *at, const char *fmt, ...) {
    if (ps->failed) return -1;
    ps->failed = true;
    ps->failure = failure;
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    int32_t line, col;
    where(ps, at, &line, &col);
    return mx_fail(ps->err, "grammar line %d, column %d: %s", line, col, msg);
}
#define fail_at(ps, at, ...) fail_kind_at(ps, MX_GRAM_INVALID, at, __VA_ARGS__)
#define fail_oom_at(ps, at) fail_kind_at(ps, MX_GRAM_NO_MEMORY, at, "out of memory")
#define fail_bound_at(ps, at, ...) fail_kind_at(ps, MX_GRAM_BOUND, at, __VA_ARGS__)

static int grow(void **p, int32_t *cap, int32_t need, size_t size) {
    if (need <= *cap) return 0;
    int32_t c = *cap ? *cap : 16;
    while (c < need) c *= 2;
    void *q = realloc(*p, (size_t)c * size);
    if (!q) return -1;
    *p = q;
    *cap = c;
    return 0;
}

static int push_elem(parser *ps, elem_vec *ev, gram_elem e) {
    if (grow((void **)&ev->v, &ev->cap, ev->n + 1, sizeof *ev->v)) return fail_oom_at(ps, ps->p);
    ev->v[ev->n++] = e;
    return 0;
}

// ---- character classes

static int cmp_range(const void *a, const void *b) {
    const gram_range *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

// Adds the class made of tmp[0..n) (negated when asked); returns its id, reusing an equal class.
static int32_t add_class(parser *ps, gram_range *tmp, int32_t n, bool negate) {
    qsort(tmp, (size_t)n, sizeof *tmp, cmp_range);
    int32_t m = 0;
    for (int32_t i = 0; i < n; i++) {
        if (m > 0 && tmp[i].lo <= tmp[m - 1].hi + 1) {
            if (tmp[i].hi > tmp[m - 1].hi) tmp[m - 1].hi = tmp[i].hi;
        } else {
            tmp[m++] = tmp[i];
        }
    }
    if (negate) {
        gram_range inv[m + 1];
        int32_t k = 0;
        uint32_t next = 0;
        for (int32_t i = 0; i < m; i++) {
            if (tmp[i].lo > next) inv[k++] = (gram_range){next, tmp[i].lo - 1};
            next = tmp[i].hi + 1;
        }
        if (next <= 0x10FFFF) inv[k++] = (gram_range){next, 0x10FFFF};
        memcpy(tmp, inv, sizeof(gram_range) * (size_t)k);
        m = k;
    }
    for (int32_t c = 0; c < ps->n_classes; c++)
        if (ps->classes[c].n == m && memcmp(ps->ranges + ps->classes[c].first, tmp, sizeof *tmp * (size_t)m) == 0)
            return c;
    if (grow((void **)&ps->ranges, &ps->cap_ranges, ps->n_ranges + m, sizeof *ps->ranges) ||
        grow((void **)&ps->classes, &ps->cap_classes, ps->n_classes + 1, sizeof *ps->classes))
        return fail_oom_at(ps, ps->p);
    gram_class k = {.first = ps->n_ranges, .n = m};
    for (int32_t i = 0; i < m; i++)
        for (uint32_t cp = tmp[i].lo; cp <= tmp[i].hi && cp < 128; cp++) k.ascii[cp >> 5] |= 1u << (cp & 31);
    memcpy(ps->ranges + ps->n_ranges, tmp, sizeof *tmp * (size_t)m);
    ps->n_ranges += m;
    ps->classes[ps->n_classes] = k;
    return ps->n_classes++;
}

// ---- lexical pieces

static void skip_space(parser *ps) {
    for (;;) {
        char c = *ps->p;
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
            ps->p++;
        } else if (c == '#') {
            while (*ps->p && *ps->p != '\n') ps->p++;
        } else {
            return;
        }
    }
}

static bool is_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

static int hex_value(parser *ps, int digits, uint32_t *out) {
    uint32_t v = 0;
    for (int i = 0; i < digits; i++) {
        char c = ps->p[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return fail_at(ps, ps->p + i, "expected %d hex digits in an escape", digits);
        v = v * 16 + (uint32_t)d;
    }
    ps->p += digits;
    *out = v;
    return 0;
}

// Reads one code point of a literal or class (escapes and UTF-8 decoded).
static int read_char(parser *ps, uint32_t *cp) {
    const char *at = ps->p;
    unsigned char c = (unsigned char)*ps->p;
    if (c == 0) return fail_at(ps, at, "unexpected end of the grammar");
    if (c == '\\') {
        ps->p++;
        char e = *ps->p++;
        switch (e) {
        case 'n': *cp = '\n'; return 0;
        case 'r': *cp = '\r'; return 0;
        case 't': *cp = '\t'; return 0;
        case '\\': case '"': case '[': case ']': case '-': case '/': case '\'': case '^':
            *cp = (uint32_t)e;
            return 0;
        case 'x': return hex_value(ps, 2, cp);
        case 'u': return hex_value(ps, 4, cp);
        case 'U': return hex_value(ps, 8, cp);
        default: return fail_at(ps, at, "unknown escape '\\%c'", e ? e : '0');
        }
    }
    gram_utf8 u = {0};
    for (;;) {
        int r = gram_utf8_feed(&u, (uint8_t)*ps->p, cp);
        if (r < 0 || *ps->p == 0) return fail_at(ps, at, "invalid UTF-8 in the grammar");
        ps->p++;
        if (r == 1) return 0;
    }
}

// ---- rules

// Rule names are looked up through a hash index (grammars may have a great many rules).
static uint32_t name_hash(const char *s, size_t n) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 16777619u;
    return h;
}

static int32_t find_rule(parser *ps, const char *name, size_t len) {
    if (!ps->cap_index) return -1;
    uint32_t mask = (uint32_t)ps->cap_index - 1;
    for (uint32_t i = name_hash(name, len) & mask;; i = (i + 1) & mask) {
        int32_t id = ps->index[i];
        if (id < 0) return -1;
        if (strlen(ps->rules[id].name) == len && memcmp(ps->rules[id].name, name, len) == 0) return id;
    }
}

static void index_put(parser *ps, int32_t id) {
    uint32_t mask = (uint32_t)ps->cap_index - 1;
    uint32_t i = name_hash(ps->rules[id].name, strlen(ps->rules[id].name)) & mask;
    while (ps->index[i] >= 0) i = (i + 1) & mask;
    ps->index[i] = id;
}

// Adds rule `id` (the newest) to the index, doubling it when it would be more than half full.
static int index_rule(parser *ps, int32_t id) {
    if (2 * (int64_t)(id + 1) <= ps->cap_index) {
        index_put(ps, id);
        return 0;
    }
    int32_t cap = ps->cap_index ? ps->cap_index * 2 : 64;
    int32_t *index = malloc(sizeof *index * (size_t)cap);
    if (!index) return -1;
    memset(index, 0xff, sizeof *index * (size_t)cap);
    free(ps->index);
    ps->index = index;
    ps->cap_index = cap;
    for (int32_t r = 0; r <= id; r++) index_put(ps, r);
    return 0;
}

static int32_t new_rule(parser *ps, const char *name, size_t len, const char *at) {
    if (ps->n_rules >= GBNF_MAX_RULES) return fail_bound_at(ps, at, "too many rules (limit %d)", GBNF_MAX_RULES);
    if (grow((void **)&ps->rules, &ps->cap_rules, ps->n_rules + 1, sizeof *ps->rules))
        return fail_oom_at(ps, at);
    build_rule *r = &ps->rules[ps->n_rules];
    memset(r, 0, sizeof *r);
    r->name = strndup(name, len);
    if (!r->name) return fail_oom_at(ps, at);
    where(ps, at, &r->line, &r->col);
    if (index_rule(ps, ps->n_rules) < 0) {
        free(r->name);
        return fail_oom_at(ps, at);
    }
    return ps->n_rules++;
}

static int32_t rule_ref(parser *ps, const char *name, size_t len, const char *at) {
    int32_t id = find_rule(ps, name, len);
    return id >= 0 ? id : new_rule(ps, name, len, at);
}

static int32_t aux_rule(parser *ps, const char *at) {
    char name[64];
    int n = snprintf(name, sizeof name, "aux-%d", ps->n_aux++);
    int32_t id = new_rule(ps, name, (size_t)n, at);
    if (id >= 0) ps->rules[id].defined = true;
    return id;
}

static int parse_alternates(parser *ps, int32_t rule, int depth);

// True when the text at p is `name ::=` (the start of the next rule).
static bool at_rule_start(const char *p) {
    if (!is_name_char(*p)) return false;
    while (is_name_char(*p)) p++;
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
    return strncmp(p, "::=", 3) == 0;
}

static int parse_class(parser *ps, int32_t *cls) {
    const char *start = ps->p;
    ps->p++;  // '['
    bool negate = false;
    if (*ps->p == '^') negate = true, ps->p++;
    gram_range tmp[512];
    int32_t n = 0;
    while (*ps->p != ']') {
        if (!*ps->p) return fail_at(ps, start, "unterminated character class");
        uint32_t lo, hi;
        if (read_char(ps, &lo)) return -1;
        hi = lo;
        if (ps->p[0] == '-' && ps->p[1] != ']' && ps->p[1]) {
            ps->p++;
            const char *at = ps->p;
            if (read_char(ps, &hi)) return -1;
            if (hi < lo) return fail_at(ps, at, "character range is backwards");
        }
        if (n >= 511) return fail_bound_at(ps, start, "character class has too many ranges");
        tmp[n++] = (gram_range){lo, hi};
    }
    ps->p++;
    if (n == 0 && !negate) return fail_at(ps, start, "empty character class");
    *cls = add_class(ps, tmp, n, negate);
    return *cls < 0 ? -1 : 0;
}

// Wraps the elements ev[from..] into a new auxiliary rule and leaves one REF in their place.
static int wrap_tail(parser *ps, elem_vec *ev, int32_t from, const char *at) {
    int32_t aux = aux_rule(ps, at);
    if (aux < 0) return -1;
    for (int32_t i = from; i < ev->n; i++)
        if (push_elem(ps, &ps->rules[aux].body, ev->v[i])) return -1;
    if (push_elem(ps, &ps->rules[aux].body, (gram_elem){.type = GRAM_END})) return -1;
    ev->n = from;
    return push_elem(ps, ev, (gram_elem){.type = GRAM_REF, .arg = aux});
}

// Applies {min, max} (max -1: unbounded) to the item at ev[from..].
static int apply_repeat(parser *ps, elem_vec *ev, int32_t from, int32_t min, int32_t max, const char *at) {
    if (ev->n - from == 1 && ev->v[from].type == GRAM_CHAR) {
        ev->v[from] = (gram_elem){.type = GRAM_REP, .arg = ev->v[from].arg, .min = min, .max = max};
        return 0;
    }
    if (ev->n - from != 1 || ev->v[from].type != GRAM_REF) {
        if (wrap_tail(ps, ev, from, at)) return -1;
    }
    ev->v[from] = (gram_elem){.type = GRAM_REPREF, .arg = ev->v[from].arg, .min = min, .max = max};
    return 0;
}

static int parse_int(parser *ps, int32_t *out) {
    const char *at = ps->p;
    long v = 0;
    if (*ps->p < '0' || *ps->p > '9') return fail_at(ps, at, "expected a number in a {m,n} repetition");
    while (*ps->p >= '0' && *ps->p <= '9') {
        v = v * 10 + (*ps->p++ - '0');
        if (v > 1000000) return fail_bound_at(ps, at, "repetition count too large");
    }
    *out = (int32_t)v;
    return 0;
}

static int parse_postfix(parser *ps, elem_vec *ev, int32_t from) {
    for (;;) {
        skip_space(ps);
        const char *at = ps->p;
        int32_t min = 0, max = 0;
        if (*ps->p == '*') {
            min = 0, max = -1, ps->p++;
        } else if (*ps->p == '+') {
            min = 1, max = -1, ps->p++;
        } else if (*ps->p == '?') {
            min = 0, max = 1, ps->p++;
        } else if (*ps->p == '{') {
            ps->p++;
            skip_space(ps);
            if (parse_int(ps, &min)) return -1;
            skip_space(ps);
            max = min;
            if (*ps->p == ',') {
                ps->p++;
                skip_space(ps);
                max = -1;
                if (*ps->p != '}' && parse_int(ps, &max)) return -1;
                skip_space(ps);
            }
            if (*ps->p != '}') return fail_at(ps, ps->p, "expected '}' to close the repetition");
            ps->p++;
            if (max >= 0 && max < min) return fail_at(ps, at, "repetition {%d,%d} has max below min", min, max);
        } else {
            return 0;
        }
        if (ev->n == from) return fail_at(ps, at, "a repetition operator needs something before it");
        // A second operator applies to the already repeated item.
        if (ev->n - from != 1 || ev->v[from].type == GRAM_REP || ev->v[from].type == GRAM_REPREF)
            if (wrap_tail(ps, ev, from, at)) return -1;
        if (apply_repeat(ps, ev, from, min, max, at)) return -1;
    }
}

static int parse_sequence(parser *ps, elem_vec *ev, int depth) {
    for (;;) {
        skip_space(ps);
        char c = *ps->p;
        int32_t from = ev->n;
        const char *at = ps->p;
        if (c == 0 || c == '|' || c == ')') return 0;
        if (c == '"') {
            ps->p++;
            while (*ps->p != '"') {
                if (!*ps->p) return fail_at(ps, at, "unterminated string literal");
                uint32_t cp;
                if (read_char(ps, &cp)) return -1;
                gram_range r = {cp, cp};
                int32_t k = add_class(ps, &r, 1, false);
                if (k < 0 || push_elem(ps, ev, (gram_elem){.type = GRAM_CHAR, .arg = k})) return -1;
            }
            ps->p++;
            if (ev->n == from) {  // "" matches nothing: leave no element, but allow no postfix either
                skip_space(ps);
                if (*ps->p == '*' || *ps->p == '+' || *ps->p == '?' || *ps->p == '{')
                    return fail_at(ps, ps->p, "a repetition of the empty string");
                continue;
            }
        } else if (c == '[') {
            int32_t k;
            if (parse_class(ps, &k) || push_elem(ps, ev, (gram_elem){.type = GRAM_CHAR, .arg = k})) return -1;
        } else if (c == '.') {
            ps->p++;
            gram_range r = {0, 0x10FFFF};
            int32_t k = add_class(ps, &r, 1, false);
            if (k < 0 || push_elem(ps, ev, (gram_elem){.type = GRAM_CHAR, .arg = k})) return -1;
        } else if (c == '(') {
            ps->p++;
            int32_t aux = aux_rule(ps, at);
            if (aux < 0 || parse_alternates(ps, aux, depth + 1)) return -1;
            skip_space(ps);
            if (*ps->p != ')') return fail_at(ps, at, "'(' is not closed");
            ps->p++;
            if (push_elem(ps, ev, (gram_elem){.type = GRAM_REF, .arg = aux})) return -1;
        } else if (is_name_char(c)) {
            if (depth == 0 && at_rule_start(ps->p)) return 0;
            const char *name = ps->p;
            while (is_name_char(*ps->p)) ps->p++;
            int32_t id = rule_ref(ps, name, (size_t)(ps->p - name), name);
            if (id < 0 || push_elem(ps, ev, (gram_elem){.type = GRAM_REF, .arg = id})) return -1;
        } else {
            return fail_at(ps, at, "unexpected character '%c'", c);
        }
        if (parse_postfix(ps, ev, from)) return -1;
    }
}

// Parses alternatives into rule's body (which must be empty).
static int parse_alternates(parser *ps, int32_t rule, int depth) {
    if (depth > 200) return fail_bound_at(ps, ps->p, "parentheses nested too deeply");
    elem_vec ev = {0};
    for (;;) {
        if (parse_sequence(ps, &ev, depth)) break;
        skip_space(ps);
        if (*ps->p != '|') {
            if (push_elem(ps, &ev, (gram_elem){.type = GRAM_END})) break;
            free(ps->rules[rule].body.v);
            ps->rules[rule].body = ev;
            return 0;
        }
        ps->p++;
        if (push_elem(ps, &ev, (gram_elem){.type = GRAM_ALT})) break;
    }
    free(ev.v);
    return -1;
}

static int parse_rules(parser *ps) {
    for (;;) {
        skip_space(ps);
        if (!*ps->p) return 0;
        const char *at = ps->p;
        if (!is_name_char(*ps->p)) return fail_at(ps, at, "expected a rule name");
        while (is_name_char(*ps->p)) ps->p++;
        size_t len = (size_t)(ps->p - at);
        skip_space(ps);
        if (strncmp(ps->p, "::=", 3) != 0) return fail_at(ps, ps->p, "expected '::=' after rule name '%.*s'", (int)len, at);
        ps->p += 3;
        int32_t id = rule_ref(ps, at, len, at);
        if (id < 0) return -1;
        if (ps->rules[id].defined) return fail_at(ps, at, "rule '%.*s' is defined twice", (int)len, at);
        ps->rules[id].defined = true;
        where(ps, at, &ps->rules[id].line, &ps->rules[id].col);
        if (parse_alternates(ps, id, 0)) return -1;
        skip_space(ps);
        if (*ps->p == ')') return fail_at(ps, ps->p, "')' without a matching '('");
    }
}

// ---- checks after parsing

static bool elem_nullable(const gram_elem *e, const bool *nullable) {
    return ((e->type == GRAM_REP || e->type == GRAM_REPREF) && e->min == 0) ||
           ((e->type == GRAM_REF || e->type == GRAM_REPREF) && nullable[e->arg]);
}

// Which rules can match the empty string: an alternative is empty-capable when each of its
// elements is (a repetition with min 0, or a reference to such a rule). Worklist form: each
// alternative counts the references still unresolved, and each rule that becomes nullable
// resolves the alternatives that refer to it, so this is linear in the grammar's size.
static int compute_nullable(const parser *ps, bool *nullable) {
    int32_t n_alts = 0, n_refs = 0;
    for (int32_t r = 0; r < ps->n_rules; r++)
        for (int32_t i = 0; i < ps->rules[r].body.n; i++) {
            gram_elem e = ps->rules[r].body.v[i];
            n_alts += e.type == GRAM_ALT || e.type == GRAM_END;
            n_refs += (e.type == GRAM_REF || e.type == GRAM_REPREF) && !(e.type == GRAM_REPREF && e.min == 0);
        }
    int32_t *alt_rule = malloc(sizeof(int32_t) * (size_t)(n_alts + 1)), *pending = malloc(sizeof(int32_t) * (size_t)(n_alts + 1));
    int32_t *first_user = calloc((size_t)ps->n_rules + 1, sizeof(int32_t)), *users = malloc(sizeof(int32_t) * (size_t)(n_refs + 1));
    int32_t *queue = malloc(sizeof(int32_t) * (size_t)(ps->n_rules + 1));
    int rc = alt_rule && pending && first_user && users && queue ? 0 : -1;
    int32_t head = 0, tail = 0;
    for (int pass = 0; pass < 2 && rc == 0; pass++) {
        // Pass 0 counts each rule's referring alternatives (first_user becomes offsets), pass 1
        // records them and the alternatives already empty-capable.
        int32_t a = 0;
        for (int32_t r = 0; r < ps->n_rules; r++) {
            const elem_vec *b = &ps->rules[r].body;
            bool dead = false;
            int32_t refs = 0;
            for (int32_t i = 0; i < b->n; i++) {
                gram_elem e = b->v[i];
                if (e.type == GRAM_ALT || e.type == GRAM_END) {
                    if (pass == 1) {
                        alt_rule[a] = r;
                        pending[a] = dead ? -1 : refs;
                        if (!dead && refs == 0 && !nullable[r]) nullable[r] = true, queue[tail++] = r;
                    }
                    a++, dead = false, refs = 0;
                } else if ((e.type == GRAM_REP || e.type == GRAM_REPREF) && e.min == 0) {
                    continue;
                } else if (e.type == GRAM_REF || e.type == GRAM_REPREF) {
                    refs++;
                    if (pass == 0) first_user[e.arg + 1]++;
                    else users[first_user[e.arg]++] = a;
                } else {
                    dead = true;
                }
            }
        }
        if (pass == 0)
            for (int32_t r = 0; r < ps->n_rules; r++) first_user[r + 1] += first_user[r];
        else // pass 1 advanced each start to the next rule's: shift back
            for (int32_t r = ps->n_rules; r > 0; r--) first_user[r] = first_user[r - 1];
        if (pass == 1) first_user[0] = 0;
    }
    while (rc == 0 && head < tail) {
        int32_t s = queue[head++];
        for (int32_t k = first_user[s]; k < first_user[s + 1]; k++) {
            int32_t a = users[k];
            if (pending[a] <= 0 || --pending[a] > 0 || nullable[alt_rule[a]]) continue;
            nullable[alt_rule[a]] = true;
            queue[tail++] = alt_rule[a];
        }
    }
    free(alt_rule), free(pending), free(first_user), free(users), free(queue);
    return rc;
}

// Depth-first search over "r can start with s" edges (state 1 = on the path, 2 = done), with an
// explicit stack: a chain of rules may be as long as the grammar.
typedef struct dfs_frame {
    int32_t rule, next;
    bool leading;
} dfs_frame;

static int32_t find_left_cycle(const parser *ps, int32_t start, const bool *nullable, uint8_t *state, dfs_frame *stack) {
    if (state[start]) return -1;
    int32_t top = 0;
    stack[0] = (dfs_frame){start, 0, true};
    state[start] = 1;
    while (top >= 0) {
        dfs_frame *f = &stack[top];
        const elem_vec *b = &ps->rules[f->rule].body;
        if (f->next >= b->n) {
            state[f->rule] = 2;
            top--;
            continue;
        }
        gram_elem e = b->v[f->next++];
        if (e.type == GRAM_ALT || e.type == GRAM_END) {
            f->leading = true;
            continue;
        }
        if (!f->leading) continue;
        f->leading = elem_nullable(&e, nullable);
        if (e.type != GRAM_REF && e.type != GRAM_REPREF) continue;
        if (state[e.arg] == 1) return e.arg;
        if (state[e.arg] == 0) {
            state[e.arg] = 1;
            stack[++top] = (dfs_frame){e.arg, 0, true};
        }
    }
    return -1;
}

static int check_rules(parser *ps, int32_t *root) {
    for (int32_t r = 0; r < ps->n_rules; r++) {
        if (ps->rules[r].defined) continue;
        ps->failed = false;
        mx_fail(ps->err, "grammar line %d, column %d: rule '%s' is used but not defined", ps->rules[r].line,
                ps->rules[r].col, ps->rules[r].name);
        return -1;
    }
    *root = find_rule(ps, "root", 4);
    if (*root < 0) return mx_fail(ps->err, "grammar: no 'root' rule (the start rule must be named root)");
    bool *nullable = calloc((size_t)ps->n_rules, sizeof *nullable);
    uint8_t *state = calloc((size_t)ps->n_rules, 1);
    dfs_frame *stack = malloc(sizeof *stack * (size_t)ps->n_rules);
    int rc = 0;
    if (!nullable || !state || !stack || compute_nullable(ps, nullable) < 0) {
        ps->failure = MX_GRAM_NO_MEMORY;
        rc = mx_fail(ps->err, "out of memory");
    } else {
        for (int32_t r = 0; r < ps->n_rules && rc == 0; r++) {
            const elem_vec *b = &ps->rules[r].body;
            for (int32_t i = 0; i < b->n && rc == 0; i++) {
                if (b->v[i].type != GRAM_REPREF || !nullable[b->v[i].arg]) continue;
                const build_rule *x = &ps->rules[b->v[i].arg];
                rc = mx_fail(ps->err, "grammar line %d, column %d: a repeated %s can match the empty string", x->line,
                             x->col, strncmp(x->name, "aux-", 4) == 0 ? "group" : "rule");
            }
        }
        for (int32_t r = 0; r < ps->n_rules && rc == 0; r++) {
            int32_t c = find_left_cycle(ps, r, nullable, state, stack);
            if (c < 0) continue;
            const build_rule *b = &ps->rules[c];
            if (strncmp(b->name, "aux-", 4) == 0)
                rc = mx_fail(ps->err, "grammar line %d, column %d: this group or repetition can reach itself without "
                             "consuming input (a repetition of something that can be empty, or left recursion)",
                             b->line, b->col);
            else
                rc = mx_fail(ps->err, "grammar line %d, column %d: rule '%s' is left-recursive (it can reach itself "
                             "without consuming input)", b->line, b->col, b->name);
        }
    }
    free(nullable);
    free(state);
    free(stack);
    return rc;
}

static mx_grammar *flatten(parser *ps, int32_t root) {
    mx_grammar *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    int32_t total = 0;
    for (int32_t r = 0; r < ps->n_rules; r++) total += ps->rules[r].body.n;
    g->elems = malloc(sizeof *g->elems * (size_t)(total ? total : 1));
    g->rule_start = malloc(sizeof *g->rule_start * (size_t)ps->n_rules);
    g->rule_names = calloc((size_t)ps->n_rules, sizeof *g->rule_names);
    if (!g->elems || !g->rule_start || !g->rule_names) {
        mx_grammar_free(g);
        return NULL;
    }
    g->n_rules = ps->n_rules;
    for (int32_t r = 0, at = 0; r < ps->n_rules; r++) {
        g->rule_start[r] = at;
        memcpy(g->elems + at, ps->rules[r].body.v, sizeof *g->elems * (size_t)ps->rules[r].body.n);
        at += ps->rules[r].body.n;
        g->rule_names[r] = ps->rules[r].name;
        ps->rules[r].name = NULL;
    }
    g->n_elems = total;
    g->root = root;
    g->classes = ps->classes, g->n_classes = ps->n_classes;
    g->ranges = ps->ranges, g->n_ranges = ps->n_ranges;
    ps->classes = NULL, ps->ranges = NULL;
    return g;
}

mx_grammar *mx_grammar_parse(const char *text, int *failure, mx_error *err) {
    parser ps = {.src = text ? text : "", .p = text ? text : "", .err = err, .failure = MX_GRAM_INVALID};
    mx_grammar *g = NULL;
    int32_t root = -1;
    if (parse_rules(&ps) == 0 && check_rules(&ps, &root) == 0) {
        g = flatten(&ps, root);
        if (!g) ps.failure = MX_GRAM_NO_MEMORY, mx_fail(err, "out of memory");
    }
    if (!g && failure) *failure = ps.failure;
    for (int32_t r = 0; r < ps.n_rules; r++) {
        free(ps.rules[r].name);
        free(ps.rules[r].body.v);
    }
    free(ps.rules);
    free(ps.index);
    free(ps.classes);
    free(ps.ranges);
    return g;
}

void mx_grammar_free(mx_grammar *g) {
    if (!g) return;
    for (int32_t r = 0; r < g->n_rules && g->rule_names; r++) free(g->rule_names[r]);
    free(g->rule_names);
    free(g->rule_start);
    free(g->elems);
    free(g->classes);
    free(g->ranges);
    free(g);
}
