// SPDX-License-Identifier: MIT
// Recursive-descent parser from tokens to the syntax tree, with jinja2's operator precedence:
// `x if c else y` < or < and < not < comparisons < + - < ~ < * / // % < ** < unary - + < postfix
// (.attr, [index], (call)) and filters/tests. Unknown filter and test names are marked here and
// fail when reached at render time, as in jinja2. Nesting is bounded so a hostile template cannot
// exhaust the stack.
#include <stdlib.h>
#include <string.h>

#include "chat/jinja_ast.h"
#include "chat/jinja_builtins.h"
#include "chat/jinja_lexer.h"

#define JINJA_MAX_NESTING 200

typedef struct parser {
    jtok *t;
    size_t n, p;
    mx_arena *ar;
    mx_error *err;
    int depth;
    int loop_depth;
} parser;

static jtok *cur(parser *P) { return &P->t[P->p]; }
static jtok *peek(parser *P, size_t k) { return &P->t[P->p + k < P->n ? P->p + k : P->n - 1]; }

static bool tok_is(const jtok *t, jtok_kind k, const char *s) {
    if (t->kind != k) return false;
    return !s || (t->n == strlen(s) && memcmp(t->s, s, t->n) == 0);
}
static bool is_name(parser *P, const char *s) { return tok_is(cur(P), JT_NAME, s); }
static bool is_op(parser *P, const char *s) { return tok_is(cur(P), JT_OP, s); }

static const char *tok_desc(const jtok *t, char *buf, size_t size) {
    switch (t->kind) {
    case JT_TEXT: return "template text";
    case JT_VAR_BEGIN: return "'{{'";
    case JT_VAR_END: return "'}}'";
    case JT_BLOCK_BEGIN: return "'{%'";
    case JT_BLOCK_END: return "'%}'";
    case JT_STRING: return "a string";
    case JT_EOF: return "end of template";
    default: snprintf(buf, size, "'%.*s'", (int)(t->n > 40 ? 40 : t->n), t->s); return buf;
    }
}

static jnode *fail_at(parser *P, const char *what) {
    char buf[64];
    mx_fail(P->err, "line %d: %s, got %s", cur(P)->line, what, tok_desc(cur(P), buf, sizeof buf));
    return NULL;
}

static jnode *mk(parser *P, jnode_kind kind, int line) {
    jnode *n = mx_arena_alloc(P->ar, sizeof *n);
    if (!n) mx_fail(P->err, "out of memory");
    else {
        n->kind = kind;
        n->line = line;
    }
    return n;
}

static int push(parser *P, jnode ***items, size_t *n, jnode *x) {
    // Capacity is the next power of two, so growth is implicit in the count.
    if ((*n & (*n - 1)) == 0) {
        size_t cap = *n ? *n * 2 : 1;
        jnode **v = mx_arena_alloc(P->ar, cap * sizeof *v);
        if (!v) return mx_fail(P->err, "out of memory");
        if (*n) memcpy(v, *items, *n * sizeof *v);
        *items = v;
    }
    (*items)[(*n)++] = x;
    return 0;
}

static int expect_op(parser *P, const char *op) {
    if (!is_op(P, op)) {
        char what[32];
        snprintf(what, sizeof what, "expected '%s'", op);
        fail_at(P, what);
        return -1;
    }
    P->p++;
    return 0;
}

static int enter(parser *P) {
    if (++P->depth > JINJA_MAX_NESTING)
        return mx_fail(P->err, "line %d: template nested too deeply", cur(P)->line);
    return 0;
}

// Chains (a + b + c, x.a.b, x|f|g, a and b and c) nest their nodes as deeply as they are long, and
// evaluation recurses as deeply: each link counts as a level of nesting until the chain ends
// (the caller then gives back its *links levels).
static int enter_link(parser *P, int *links) {
    if (enter(P) < 0) return -1;
    ++*links;
    return 0;
}

static jnode *parse_expr(parser *P);
static jnode *parse_or(parser *P);
static jnode *parse_unary(parser *P, bool with_filter);
static jnode *parse_primary(parser *P);

// ---------------------------------------------------------------------------------------------
// Expressions

// `expr` or `expr, expr, ...` (a tuple); used in {{ }}, set values and parentheses.
// With no_cond, items are parsed without `x if c else y` (jinja2's with_condexpr=False, used for
// if/elif conditions and for-loop iterables so that `for x in xs if c` reads as a loop filter).
static jnode *parse_tuple_ex(parser *P, bool explicit_parens, bool no_cond) {
    int line = cur(P)->line;
    if (explicit_parens && is_op(P, ")")) return mk(P, JN_TUPLE, line);
    jnode *first = no_cond ? parse_or(P) : parse_expr(P);
    if (!first || !is_op(P, ",")) return first;
    jnode *t = mk(P, JN_TUPLE, line);
    if (!t || push(P, &t->args, &t->n_args, first) < 0) return NULL;
    while (is_op(P, ",")) {
        P->p++;
        if (is_op(P, ")") || cur(P)->kind == JT_VAR_END || cur(P)->kind == JT_BLOCK_END || is_name(P, "if")) break;
        jnode *x = no_cond ? parse_or(P) : parse_expr(P);
        if (!x || push(P, &t->args, &t->n_args, x) < 0) return NULL;
    }
    return t;
}

static jnode *parse_tuple(parser *P, bool explicit_parens) { return parse_tuple_ex(P, explicit_parens, false); }

// Call arguments after '(': positional then name=value; consumes ')'.
static int parse_call_args(parser *P, jnode *call) {
    if (expect_op(P, "(") < 0) return -1;
    while (!is_op(P, ")")) {
        if (call->n_args + call->n_kw > 0 && expect_op(P, ",") < 0) return -1;
        if (is_op(P, ")")) break;
        if (is_op(P, "*") || is_op(P, "**"))
            return mx_fail(P->err, "line %d: *args and **kwargs in calls are not supported", cur(P)->line);
        if (cur(P)->kind == JT_NAME && tok_is(peek(P, 1), JT_OP, "=")) {
            jtok *nt = cur(P);
            P->p += 2;
            jnode *v = parse_expr(P);
            if (!v) return -1;
            const char *name = mx_arena_strndup(P->ar, nt->s, nt->n);
            size_t k = call->n_kw;
            jnode **kw = call->kwargs;
            if (!name || push(P, &kw, &k, v) < 0) return -1;
            // kwnames grows in step with kwargs.
            const char **names = mx_arena_alloc(P->ar, k * sizeof *names);
            if (!names) return mx_fail(P->err, "out of memory");
            if (call->n_kw) memcpy(names, call->kwnames, call->n_kw * sizeof *names);
            names[k - 1] = name;
            call->kwargs = kw;
            call->kwnames = names;
            call->n_kw = k;
        } else {
            if (call->n_kw) return mx_fail(P->err, "line %d: positional argument after keyword argument", cur(P)->line);
            jnode *v = parse_expr(P);
            if (!v || push(P, &call->args, &call->n_args, v) < 0) return -1;
        }
    }
    P->p++;
    return 0;
}

static jnode *parse_subscript(parser *P, jnode *obj) {
    int line = cur(P)->line;
    if (is_op(P, ".")) {
        P->p++;
        jtok *t = cur(P);
        if (t->kind == JT_NAME) {
            jnode *n = mk(P, JN_ATTR, line);
            if (!n) return NULL;
            n->a = obj;
            n->name = mx_arena_strndup(P->ar, t->s, t->n);
            n->name_n = t->n;
            P->p++;
            return n->name ? n : NULL;
        }
        if (t->kind == JT_INT) {
            jnode *n = mk(P, JN_SUBSCRIPT, line), *k = mk(P, JN_CONST, line);
            if (!n || !k) return NULL;
            k->value = jv_int(t->i);
            n->a = obj;
            n->b = k;
            P->p++;
            return n;
        }
        return fail_at(P, "expected an attribute name after '.'");
    }
    P->p++; // '['
    jnode *parts[3] = {NULL, NULL, NULL};
    int nparts = 0;
    bool is_slice = false;
    for (;;) {
        if (is_op(P, ":")) {
            is_slice = true;
            if (++nparts > 2) return fail_at(P, "too many ':' in slice");
            P->p++;
            continue;
        }
        if (is_op(P, "]")) break;
        if (parts[nparts]) return fail_at(P, "expected ']'");
        parts[nparts] = parse_expr(P);
        if (!parts[nparts]) return NULL;
    }
    P->p++;
    jnode *n = mk(P, JN_SUBSCRIPT, line);
    if (!n) return NULL;
    n->a = obj;
    if (is_slice) {
        jnode *s = mk(P, JN_SLICE, line);
        if (!s) return NULL;
        s->a = parts[0];
        s->b = parts[1];
        s->c = parts[2];
        n->b = s;
    } else {
        if (!parts[0]) return fail_at(P, "expected an index");
        n->b = parts[0];
    }
    return n;
}

// `callee(args)` at '(': a call node, or NULL (message in P->err).
static jnode *parse_call(parser *P, jnode *callee) {
    jnode *c = mk(P, JN_CALL, cur(P)->line);
    if (!c) return NULL;
    c->a = callee;
    return parse_call_args(P, c) < 0 ? NULL : c;
}

static jnode *parse_postfix(parser *P, jnode *node) {
    int links = 0;
    while (node) {
        if ((is_op(P, ".") || is_op(P, "[") || is_op(P, "(")) && enter_link(P, &links) < 0) return NULL;
        if (is_op(P, ".") || is_op(P, "[")) node = parse_subscript(P, node);
        else if (is_op(P, "("))
            node = parse_call(P, node);
        else
            break;
    }
    P->depth -= links;
    return node;
}

// `| name(args)` (operand may be NULL for {% filter %}).
static jnode *parse_filter(parser *P, jnode *operand) {
    jtok *t = cur(P);
    if (t->kind != JT_NAME) return fail_at(P, "expected a filter name");
    jnode *f = mk(P, JN_FILTER, t->line);
    if (!f) return NULL;
    // Like jinja2, an unknown filter is an error only if it is reached when rendering.
    f->op = jinja_filter_known(t->s, t->n) ? 0 : -1;
    f->a = operand;
    f->name = mx_arena_strndup(P->ar, t->s, t->n);
    f->name_n = t->n;
    P->p++;
    if (is_op(P, "(") && parse_call_args(P, f) < 0) return NULL;
    return f->name ? f : NULL;
}

static jnode *parse_test(parser *P, jnode *operand) {
    int line = cur(P)->line;
    P->p++; // is
    bool negated = false;
    if (is_name(P, "not")) {
        negated = true;
        P->p++;
    }
    jtok *t = cur(P);
    if (t->kind != JT_NAME) return fail_at(P, "expected a test name after 'is'");
    jnode *n = mk(P, JN_TEST, line);
    if (!n) return NULL;
    n->op = jinja_test_known(t->s, t->n) ? 0 : -1;
    n->a = operand;
    n->name = mx_arena_strndup(P->ar, t->s, t->n);
    n->name_n = t->n;
    P->p++;
    jtok *c = cur(P);
    if (is_op(P, "(")) {
        if (parse_call_args(P, n) < 0) return NULL;
    } else if ((c->kind == JT_NAME || c->kind == JT_STRING || c->kind == JT_INT || c->kind == JT_FLOAT ||
                is_op(P, "[") || is_op(P, "{")) &&
               !is_name(P, "else") && !is_name(P, "or") && !is_name(P, "and") && !is_name(P, "if") &&
               !is_name(P, "in") && !is_name(P, "not") && !is_name(P, "is")) {
        jnode *arg = parse_postfix(P, parse_primary(P));
        if (!arg || push(P, &n->args, &n->n_args, arg) < 0) return NULL;
    }
    if (!negated) return n;
    jnode *x = mk(P, JN_NOT, line);
    if (x) x->a = n;
    return x;
}

static jnode *parse_filter_expr(parser *P, jnode *node) {
    int links = 0;
    while (node) {
        if ((is_op(P, "|") || is_name(P, "is") || is_op(P, "(")) && enter_link(P, &links) < 0) return NULL;
        if (is_op(P, "|")) {
            P->p++;
            node = parse_filter(P, node);
        } else if (is_name(P, "is"))
            node = parse_test(P, node);
        else if (is_op(P, "("))
            node = parse_call(P, node);
        else
            break;
    }
    P->depth -= links;
    return node;
}

static jnode *parse_primary(parser *P) {
    jtok *t = cur(P);
    jnode *n;
    if (enter(P) < 0) return NULL;
    switch (t->kind) {
    case JT_NAME:
        n = mk(P, JN_CONST, t->line);
        if (!n) return NULL;
        if (tok_is(t, JT_NAME, "true") || tok_is(t, JT_NAME, "True")) n->value = jv_bool(true);
        else if (tok_is(t, JT_NAME, "false") || tok_is(t, JT_NAME, "False")) n->value = jv_bool(false);
        else if (tok_is(t, JT_NAME, "none") || tok_is(t, JT_NAME, "None")) n->value = jv_none();
        else {
            n->kind = JN_NAME;
            n->name = mx_arena_strndup(P->ar, t->s, t->n);
            n->name_n = t->n;
            if (!n->name) return NULL;
        }
        P->p++;
        break;
    case JT_STRING: {
        n = mk(P, JN_CONST, t->line);
        if (!n) return NULL;
        size_t total = 0, k = P->p;
        while (P->t[k].kind == JT_STRING) total += P->t[k++].n;
        if (k == P->p + 1) n->value = jv_string(t->s, t->n);
        else {
            char *s = mx_arena_alloc(P->ar, total + 1);
            if (!s) return mx_fail(P->err, "out of memory"), NULL;
            size_t o = 0;
            for (size_t i = P->p; i < k; i++) {
                memcpy(s + o, P->t[i].s, P->t[i].n);
                o += P->t[i].n;
            }
            n->value = jv_string(s, total);
        }
        P->p = k;
        break;
    }
    case JT_INT:
    case JT_FLOAT:
        n = mk(P, JN_CONST, t->line);
        if (!n) return NULL;
        n->value = t->kind == JT_INT ? jv_int(t->i) : jv_float(t->f);
        P->p++;
        break;
    case JT_OP:
        if (is_op(P, "(")) {
            P->p++;
            n = parse_tuple(P, true);
            if (!n || expect_op(P, ")") < 0) return NULL;
        } else if (is_op(P, "[") || is_op(P, "{")) {
            bool dict = is_op(P, "{");
            const char *close = dict ? "}" : "]";
            n = mk(P, dict ? JN_DICT : JN_LIST, t->line);
            if (!n) return NULL;
            P->p++;
            while (!is_op(P, close)) {
                if (n->n_args && expect_op(P, ",") < 0) return NULL;
                if (is_op(P, close)) break;
                jnode *x = parse_expr(P);
                if (!x || push(P, &n->args, &n->n_args, x) < 0) return NULL;
                if (dict) {
                    if (expect_op(P, ":") < 0) return NULL;
                    jnode *v = parse_expr(P);
                    if (!v || push(P, &n->args, &n->n_args, v) < 0) return NULL;
                }
            }
            P->p++;
        } else
            return fail_at(P, "expected an expression");
        break;
    default: return fail_at(P, "expected an expression");
    }
    P->depth--;
    return n;
}

static jnode *parse_unary(parser *P, bool with_filter) {
    int line = cur(P)->line;
    jnode *node;
    if (enter(P) < 0) return NULL;
    if (is_op(P, "-") || is_op(P, "+")) {
        bool neg = is_op(P, "-");
        P->p++;
        jnode *x = parse_unary(P, false);
        if (!x) return NULL;
        node = mk(P, neg ? JN_NEG : JN_POS, line);
        if (!node) return NULL;
        node->a = x;
    } else
        node = parse_primary(P);
    node = parse_postfix(P, node);
    if (with_filter) node = parse_filter_expr(P, node);
    P->depth--;
    return node;
}

static jnode *binary(parser *P, int op, jnode *a, jnode *b, int line) {
    if (!a || !b) return NULL;
    jnode *n = mk(P, JN_BINARY, line);
    if (!n) return NULL;
    n->op = op;
    n->a = a;
    n->b = b;
    return n;
}

static jnode *parse_pow(parser *P) {
    jnode *left = parse_unary(P, true);
    int links = 0;
    while (left && is_op(P, "**")) {
        if (enter_link(P, &links) < 0) return NULL;
        int line = cur(P)->line;
        P->p++;
        left = binary(P, JOP_POW, left, parse_unary(P, true), line);
    }
    P->depth -= links;
    return left;
}

static jnode *parse_math2(parser *P) {
    jnode *left = parse_pow(P);
    int links = 0;
    for (;;) {
        int op;
        if (is_op(P, "*")) op = JOP_MUL;
        else if (is_op(P, "/")) op = JOP_DIV;
        else if (is_op(P, "//")) op = JOP_FLOORDIV;
        else if (is_op(P, "%")) op = JOP_MOD;
        else {
            P->depth -= links;
            return left;
        }
        if (!left || enter_link(P, &links) < 0) return NULL;
        int line = cur(P)->line;
        P->p++;
        left = binary(P, op, left, parse_pow(P), line);
    }
}

static jnode *parse_concat(parser *P) {
    jnode *first = parse_math2(P);
    if (!first || !is_op(P, "~")) return first;
    jnode *n = mk(P, JN_CONCAT, cur(P)->line);
    if (!n || push(P, &n->args, &n->n_args, first) < 0) return NULL;
    while (is_op(P, "~")) {
        P->p++;
        jnode *x = parse_math2(P);
        if (!x || push(P, &n->args, &n->n_args, x) < 0) return NULL;
    }
    return n;
}

static jnode *parse_math1(parser *P) {
    jnode *left = parse_concat(P);
    int links = 0;
    while (left && (is_op(P, "+") || is_op(P, "-"))) {
        if (enter_link(P, &links) < 0) return NULL;
        int op = is_op(P, "+") ? JOP_ADD : JOP_SUB, line = cur(P)->line;
        P->p++;
        left = binary(P, op, left, parse_concat(P), line);
    }
    P->depth -= links;
    return left;
}

static jnode *parse_compare(parser *P) {
    int line = cur(P)->line;
    jnode *first = parse_math1(P);
    if (!first) return NULL;
    jnode *n = NULL;
    size_t n_ops = 0;
    for (;;) {
        int op;
        if (is_op(P, "==")) op = JOP_EQ;
        else if (is_op(P, "!=")) op = JOP_NE;
        else if (is_op(P, "<")) op = JOP_LT;
        else if (is_op(P, "<=")) op = JOP_LE;
        else if (is_op(P, ">")) op = JOP_GT;
        else if (is_op(P, ">=")) op = JOP_GE;
        else if (is_name(P, "in")) op = JOP_IN;
        else if (is_name(P, "not") && tok_is(peek(P, 1), JT_NAME, "in")) {
            op = JOP_NOT_IN;
            P->p++;
        } else
            break;
        P->p++;
        jnode *rhs = parse_math1(P);
        if (!rhs) return NULL;
        if (!n) {
            n = mk(P, JN_COMPARE, line);
            if (!n) return NULL;
            n->a = first;
        }
        if (push(P, &n->args, &n->n_args, rhs) < 0) return NULL;
        if ((n_ops & (n_ops - 1)) == 0) { // capacity: the next power of two, as in push()
            int *ops = mx_arena_alloc(P->ar, (n_ops ? n_ops * 2 : 1) * sizeof *ops);
            if (!ops) return mx_fail(P->err, "out of memory"), NULL;
            if (n_ops) memcpy(ops, n->ops, n_ops * sizeof *ops);
            n->ops = ops;
        }
        n->ops[n_ops++] = op;
    }
    return n ? n : first;
}

static jnode *parse_not(parser *P) {
    if (is_name(P, "not")) {
        int line = cur(P)->line;
        P->p++;
        if (enter(P) < 0) return NULL;
        jnode *x = parse_not(P);
        P->depth--;
        if (!x) return NULL;
        jnode *n = mk(P, JN_NOT, line);
        if (n) n->a = x;
        return n;
    }
    return parse_compare(P);
}

// A left-associative chain `operand (word operand)*` of one boolean keyword (and, or) as `kind`
// nodes, each link counted against the nesting depth.
static jnode *parse_bool_chain(parser *P, const char *word, jnode_kind kind, jnode *(*operand)(parser *)) {
    jnode *left = operand(P);
    int links = 0;
    while (left && is_name(P, word)) {
        if (enter_link(P, &links) < 0) return NULL;
        jnode *n = mk(P, kind, cur(P)->line);
        P->p++;
        if (!n) return NULL;
        n->a = left;
        n->b = operand(P);
        left = n->b ? n : NULL;
    }
    P->depth -= links;
    return left;
}

static jnode *parse_and(parser *P) { return parse_bool_chain(P, "and", JN_AND, parse_not); }
static jnode *parse_or(parser *P) { return parse_bool_chain(P, "or", JN_OR, parse_and); }

static jnode *parse_expr(parser *P) {
    if (enter(P) < 0) return NULL;
    jnode *expr = parse_or(P);
    int links = 0;
    while (expr && is_name(P, "if")) {
        if (enter_link(P, &links) < 0) return NULL;
        jnode *n = mk(P, JN_COND, cur(P)->line);
        P->p++;
        if (!n) return NULL;
        n->b = expr;
        n->a = parse_or(P);
        if (!n->a) return NULL;
        if (is_name(P, "else")) {
            P->p++;
            n->c = parse_expr(P);
            if (!n->c) return NULL;
        }
        expr = n;
    }
    P->depth -= links + 1;
    return expr;
}

// ---------------------------------------------------------------------------------------------
// Statements

static jnode *parse_name_node(parser *P) {
    jtok *t = cur(P);
    if (t->kind != JT_NAME) return fail_at(P, "expected a name");
    jnode *n = mk(P, JN_NAME, t->line);
    if (!n) return NULL;
    n->name = mx_arena_strndup(P->ar, t->s, t->n);
    n->name_n = t->n;
    P->p++;
    return n->name ? n : NULL;
}

// Targets of for/set: `name`, `a, b`, `(a, b)`, or (set only) `ns.attr`.
static jnode *parse_target(parser *P, bool allow_attr) {
    int line = cur(P)->line;
    bool parens = is_op(P, "(");
    if (parens) P->p++;
    jnode *first = parse_name_node(P);
    if (!first) return NULL;
    if (allow_attr && !parens && is_op(P, ".")) {
        P->p++;
        jnode *attr = parse_name_node(P);
        if (!attr) return NULL;
        jnode *n = mk(P, JN_ATTR, line);
        if (!n) return NULL;
        n->a = first;
        n->name = attr->name;
        n->name_n = attr->name_n;
        return n;
    }
    if (!is_op(P, ",")) {
        if (parens && expect_op(P, ")") < 0) return NULL;
        return first;
    }
    jnode *t = mk(P, JN_TUPLE, line);
    if (!t || push(P, &t->args, &t->n_args, first) < 0) return NULL;
    while (is_op(P, ",")) {
        P->p++;
        if (cur(P)->kind != JT_NAME) break;
        jnode *x = parse_name_node(P);
        if (!x || push(P, &t->args, &t->n_args, x) < 0) return NULL;
    }
    if (parens && expect_op(P, ")") < 0) return NULL;
    return t;
}

static int expect_block_end(parser *P) {
    if (cur(P)->kind != JT_BLOCK_END) {
        fail_at(P, "expected '%}'");
        return -1;
    }
    P->p++;
    return 0;
}

// Parses statements until `{% stop %}` for one of the stop words (NULL-terminated list) and leaves
// the parser on that word's token. `opener` names the block for the unclosed-block message.
static jnode *parse_body(parser *P, const char *const *stops, const char *opener, int opener_line);

static bool is_stop(parser *P, const char *const *stops) {
    for (; stops && *stops; stops++)
        if (is_name(P, *stops)) return true;
    return false;
}

static jnode *parse_if(parser *P, int line) {
    static const char *const stops[] = {"elif", "else", "endif", NULL};
    jnode *n = mk(P, JN_IF, line);
    if (!n || !(n->a = parse_tuple_ex(P, false, true)) || expect_block_end(P) < 0) return NULL;
    if (!(n->b = parse_body(P, stops, "if", line))) return NULL;
    if (is_name(P, "elif")) {
        int l2 = cur(P)->line;
        P->p++;
        n->c = parse_if(P, l2);
        return n->c ? n : NULL;
    }
    if (is_name(P, "else")) {
        static const char *const end[] = {"endif", NULL};
        P->p++;
        if (expect_block_end(P) < 0 || !(n->c = parse_body(P, end, "if", line))) return NULL;
    }
    P->p++; // endif
    return expect_block_end(P) < 0 ? NULL : n;
}

static jnode *parse_for(parser *P, int line) {
    static const char *const stops[] = {"else", "endfor", NULL};
    static const char *const end[] = {"endfor", NULL};
    jnode *n = mk(P, JN_FOR, line);
    if (!n || !(n->a = parse_target(P, false))) return NULL;
    if (!is_name(P, "in")) return fail_at(P, "expected 'in' in for loop");
    P->p++;
    if (!(n->b = parse_tuple_ex(P, false, true))) return NULL;
    if (is_name(P, "if")) {
        P->p++;
        if (!(n->e = parse_expr(P))) return NULL;
    }
    if (is_name(P, "recursive"))
        return mx_fail(P->err, "line %d: recursive for loops are not supported", line), NULL;
    if (expect_block_end(P) < 0) return NULL;
    P->loop_depth++;
    n->c = parse_body(P, stops, "for", line);
    P->loop_depth--;
    if (!n->c) return NULL;
    if (is_name(P, "else")) {
        P->p++;
        if (expect_block_end(P) < 0 || !(n->d = parse_body(P, end, "for", line))) return NULL;
    }
    P->p++;
    return expect_block_end(P) < 0 ? NULL : n;
}

static jnode *parse_set(parser *P, int line) {
    jnode *n = mk(P, JN_SET, line);
    if (!n || !(n->a = parse_target(P, true))) return NULL;
    if (is_op(P, "=")) {
        P->p++;
        if (!(n->b = parse_tuple(P, false))) return NULL;
        return expect_block_end(P) < 0 ? NULL : n;
    }
    static const char *const end[] = {"endset", NULL};
    if (n->a->kind != JN_NAME) return fail_at(P, "expected '=' in set");
    n->kind = JN_SET_BLOCK;
    if (is_op(P, "|")) {
        // {% set x | filter %}: the filters apply to the captured body.
        jnode *f = NULL;
        while (is_op(P, "|")) {
            P->p++;
            if (!(f = parse_filter(P, f))) return NULL;
        }
        n->b = f;
    }
    if (expect_block_end(P) < 0 || !(n->c = parse_body(P, end, "set", line))) return NULL;
    P->p++;
    return expect_block_end(P) < 0 ? NULL : n;
}

static jnode *parse_macro(parser *P, int line) {
    static const char *const end[] = {"endmacro", NULL};
    jnode *n = mk(P, JN_MACRO, line);
    jnode *name = n ? parse_name_node(P) : NULL;
    if (!name) return NULL;
    n->name = name->name;
    n->name_n = name->name_n;
    if (expect_op(P, "(") < 0) return NULL;
    while (!is_op(P, ")")) {
        if (n->n_args && expect_op(P, ",") < 0) return NULL;
        jnode *param = parse_name_node(P);
        if (!param) return NULL;
        jnode *def = NULL;
        if (is_op(P, "=")) {
            P->p++;
            if (!(def = parse_expr(P))) return NULL;
        } else if (n->n_kw && n->kwargs[n->n_kw - 1])
            return mx_fail(P->err, "line %d: macro parameter without default after one with a default", line), NULL;
        size_t k = n->n_kw;
        if (push(P, &n->args, &n->n_args, param) < 0 || push(P, &n->kwargs, &k, def) < 0) return NULL;
        n->n_kw = k;
    }
    P->p++;
    int saved = P->loop_depth;
    P->loop_depth = 0;
    if (expect_block_end(P) < 0 || !(n->c = parse_body(P, end, "macro", line))) return NULL;
    P->loop_depth = saved;
    P->p++;
    return expect_block_end(P) < 0 ? NULL : n;
}

static jnode *parse_statement(parser *P) {
    jtok *t = cur(P);
    int line = t->line;
    if (t->kind != JT_NAME) return fail_at(P, "expected a tag name");
    P->p++;
    if (tok_is(t, JT_NAME, "if")) return parse_if(P, line);
    if (tok_is(t, JT_NAME, "for")) return parse_for(P, line);
    if (tok_is(t, JT_NAME, "set")) return parse_set(P, line);
    if (tok_is(t, JT_NAME, "macro")) return parse_macro(P, line);
    if (tok_is(t, JT_NAME, "break") || tok_is(t, JT_NAME, "continue")) {
        if (P->loop_depth == 0)
            return mx_fail(P->err, "line %d: '%.*s' outside of a loop", line, (int)t->n, t->s), NULL;
        jnode *n = mk(P, tok_is(t, JT_NAME, "break") ? JN_BREAK : JN_CONTINUE, line);
        return n && expect_block_end(P) == 0 ? n : NULL;
    }
    if (tok_is(t, JT_NAME, "filter")) {
        static const char *const end[] = {"endfilter", NULL};
        jnode *n = mk(P, JN_FILTER_BLOCK, line);
        if (!n) return NULL;
        jnode *f = NULL;
        do {
            if (f) P->p++;
            if (!(f = parse_filter(P, f))) return NULL;
        } while (is_op(P, "|"));
        n->a = f;
        if (expect_block_end(P) < 0 || !(n->c = parse_body(P, end, "filter", line))) return NULL;
        P->p++;
        return expect_block_end(P) < 0 ? NULL : n;
    }
    if (tok_is(t, JT_NAME, "generation")) {
        // transformers' {% generation %} marks assistant text for masks; it renders its body.
        static const char *const end[] = {"endgeneration", NULL};
        jnode *body;
        if (expect_block_end(P) < 0 || !(body = parse_body(P, end, "generation", line))) return NULL;
        P->p++;
        return expect_block_end(P) < 0 ? NULL : body;
    }
    static const char *const unsupported[] = {"include", "import", "from", "extends", "block", "call", "do", "with", "autoescape", NULL};
    for (const char *const *u = unsupported; *u; u++)
        if (tok_is(t, JT_NAME, *u))
            return mx_fail(P->err, "line %d: unsupported tag '%s'", line, *u), NULL;
    if (t->n > 3 && memcmp(t->s, "end", 3) == 0)
        return mx_fail(P->err, "line %d: unexpected '%.*s'", line, (int)t->n, t->s), NULL;
    if (tok_is(t, JT_NAME, "elif") || tok_is(t, JT_NAME, "else"))
        return mx_fail(P->err, "line %d: unexpected '%.*s' outside of a block", line, (int)t->n, t->s), NULL;
    return mx_fail(P->err, "line %d: unknown tag '%.*s'", line, (int)(t->n > 40 ? 40 : t->n), t->s), NULL;
}

static jnode *parse_body(parser *P, const char *const *stops, const char *opener, int opener_line) {
    jnode *body = mk(P, JN_BODY, cur(P)->line);
    if (!body || enter(P) < 0) return NULL;
    for (;;) {
        jtok *t = cur(P);
        jnode *x = NULL;
        if (t->kind == JT_EOF) {
            if (!stops) break;
            const char *end = stops[0];
            for (const char *const *s = stops; *s; s++)
                if (strncmp(*s, "end", 3) == 0) end = *s;
            return mx_fail(P->err, "line %d: unclosed '%s' block (expected '%s')", opener_line, opener, end), NULL;
        }
        if (t->kind == JT_TEXT) {
            x = mk(P, JN_TEXT, t->line);
            if (!x) return NULL;
            x->value = jv_string(t->s, t->n);
            P->p++;
        } else if (t->kind == JT_VAR_BEGIN) {
            P->p++;
            x = mk(P, JN_OUTPUT, t->line);
            if (!x || !(x->a = parse_tuple(P, false))) return NULL;
            if (cur(P)->kind != JT_VAR_END) return fail_at(P, "expected '}}'");
            P->p++;
        } else if (t->kind == JT_BLOCK_BEGIN) {
            P->p++;
            if (is_stop(P, stops)) break;
            if (!(x = parse_statement(P))) return NULL;
        } else
            return fail_at(P, "unexpected token");
        if (push(P, &body->args, &body->n_args, x) < 0) return NULL;
    }
    P->depth--;
    return body;
}

int jinja_parse(const char *src, size_t n, mx_arena *arena, jnode **root, mx_error *err) {
    jtoks toks = {0};
    if (jinja_lex(src, n, arena, &toks, err) < 0) {
        free(toks.v);
        return -1;
    }
    parser P = {.t = toks.v, .n = toks.n, .p = 0, .ar = arena, .err = err};
    *root = parse_body(&P, NULL, NULL, 0);
    free(toks.v);
    return *root ? 0 : -1;
}
