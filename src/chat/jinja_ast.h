// SPDX-License-Identifier: MIT
// Syntax tree of a parsed Jinja template. One node struct serves every construct; the comment on
// each kind says which fields it uses. Nodes live in the template's arena and are read-only after
// parsing, which is what lets many threads render one template at once.
#ifndef MX_CHAT_JINJA_AST_H
#define MX_CHAT_JINJA_AST_H

#include <stddef.h>

#include "chat/jinja_value.h"

typedef enum jnode_kind {
    // Expressions
    JN_CONST,     // value
    JN_NAME,      // name
    JN_LIST,      // args
    JN_TUPLE,     // args
    JN_DICT,      // args: key, value, key, value...
    JN_ATTR,      // a.name
    JN_SUBSCRIPT, // a[b]
    JN_SLICE,     // a:b:c inside a subscript (any may be NULL)
    JN_CALL,      // a(args, kwnames=kwargs)
    JN_FILTER,    // a | name(args, kwargs); a is NULL inside {% filter %}; op -1: unknown name
    JN_TEST,      // a is name(args, kwargs); op -1: unknown name
    JN_NOT,       // not a
    JN_NEG,       // -a
    JN_POS,       // +a
    JN_BINARY,    // a op b, op one of JOP_*
    JN_COMPARE,   // a ops[0] args[0] ops[1] args[1]...
    JN_AND,       // a and b
    JN_OR,        // a or b
    JN_COND,      // b if a else c (c may be NULL)
    JN_CONCAT,    // args joined by ~
    // Statements
    JN_BODY,         // args: statements
    JN_TEXT,         // value (a string)
    JN_OUTPUT,       // {{ a }}
    JN_IF,           // if a: b else c (c: a body, an elif JN_IF, or NULL)
    JN_FOR,          // for a (name or tuple) in b [if e]: c else d
    JN_SET,          // set a = b (a: name, tuple of names, or attr of a name)
    JN_SET_BLOCK,    // set a: body c
    JN_MACRO,        // macro name(args: JN_NAME params, kwargs: defaults or NULL): body c
    JN_BREAK,
    JN_CONTINUE,
    JN_FILTER_BLOCK, // filter a (a filter chain whose innermost operand is NULL): body c
} jnode_kind;

enum {
    JOP_ADD, JOP_SUB, JOP_MUL, JOP_DIV, JOP_FLOORDIV, JOP_MOD, JOP_POW,
    JOP_EQ, JOP_NE, JOP_LT, JOP_LE, JOP_GT, JOP_GE, JOP_IN, JOP_NOT_IN,
};

typedef struct jnode jnode;
struct jnode {
    jnode_kind kind;
    int line;
    int op;
    const char *name;
    size_t name_n;
    jv value;
    jnode *a, *b, *c, *d, *e;
    jnode **args;
    size_t n_args;
    const char **kwnames; // NUL-terminated
    jnode **kwargs;
    size_t n_kw;
    int *ops; // JN_COMPARE: one per args entry
};

// Parses a template; the tree lives in `arena`. Errors name the line and construct.
int jinja_parse(const char *src, size_t n, mx_arena *arena, jnode **root, mx_error *err);

#endif
