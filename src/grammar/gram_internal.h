// SPDX-License-Identifier: MIT
// Private to src/grammar: the compiled grammar shared by the parser (gbnf_parse.c), the vocabulary
// tables (gram_vocab.c) and the matcher (gram_match.c).
//
// A grammar is one array of elements. Rule r's alternatives start at rule_start[r]; each is a run
// of CHAR / REP / REF elements ended by ALT (another alternative follows) or END (the rule's last).
// Repetition of a single character class is one REP element with bounds, so `[a-z]{0,64}` is one
// element whose parser frame counts characters instead of 64 nested rules; repetition of anything
// else is one REPREF element (the repeated part made a rule) whose frame counts matches. No rule is
// left-recursive and no repeated rule can match the empty string (both checked at parse).
#ifndef MX_GRAMMAR_GRAM_INTERNAL_H
#define MX_GRAMMAR_GRAM_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "grammar/grammar.h"

typedef enum gram_etype {
    GRAM_END,   // end of the rule's last alternative
    GRAM_ALT,   // end of an alternative; the next one starts after it
    GRAM_REF,   // arg: rule id
    GRAM_CHAR,  // arg: class id; one code point of the class
    GRAM_REP,   // arg: class id; min..max code points of the class (max -1: unbounded)
    GRAM_REPREF,  // arg: rule id; min..max matches of the rule, which cannot match the empty string
} gram_etype;

typedef struct gram_elem {
    uint8_t type;
    int32_t arg;
    int32_t min, max;
} gram_elem;

typedef struct gram_range {
    uint32_t lo, hi;  // inclusive code points
} gram_range;

// A set of code points: sorted, disjoint, non-adjacent ranges (negation applied at compile time).
typedef struct gram_class {
    int32_t first, n;   // ranges[first .. first + n)
    uint32_t ascii[4];  // bit c set: code point c < 128 is in the class
} gram_class;

struct mx_grammar {
    gram_elem *elems;
    int32_t n_elems;
    int32_t *rule_start;   // [n_rules]
    char **rule_names;     // [n_rules] for messages
    int32_t n_rules;
    int32_t root;
    gram_class *classes;
    int32_t n_classes;
    gram_range *ranges;
    int32_t n_ranges;
};

static inline bool gram_class_has(const mx_grammar *g, int32_t c, uint32_t cp) {
    const gram_class *k = &g->classes[c];
    if (cp < 128) return (k->ascii[cp >> 5] >> (cp & 31)) & 1;
    const gram_range *r = g->ranges + k->first;
    for (int32_t i = 0; i < k->n; i++)
        if (cp >= r[i].lo && cp <= r[i].hi) return true;
    return false;
}

// True when some code point in [lo, hi] is in the class.
static inline bool gram_class_meets(const mx_grammar *g, int32_t c, uint32_t lo, uint32_t hi) {
    const gram_class *k = &g->classes[c];
    const gram_range *r = g->ranges + k->first;
    for (int32_t i = 0; i < k->n; i++)
        if (r[i].lo <= hi && r[i].hi >= lo) return true;
    return false;
}

// ---- UTF-8 as the matcher reads it: a code point, or a prefix of one (a range of code points).
typedef struct gram_utf8 {
    uint32_t value;  // bits gathered so far
    uint8_t need;    // continuation bytes still missing (0: no character in progress)
    uint8_t have;    // bytes of the character so far
} gram_utf8;

// Feeds one byte. Returns 1 with *cp set when a character completed, 0 when one is in progress
// (gram_utf8_range gives what it can still become), -1 for bytes that cannot be UTF-8.
int gram_utf8_feed(gram_utf8 *u, uint8_t b, uint32_t *cp);
// The code points a character in progress can still become.
void gram_utf8_range(const gram_utf8 *u, uint32_t *lo, uint32_t *hi);

// ---- vocabulary (gram_vocab.c)
typedef struct gram_trie_node {
    int32_t first_child, next_sibling;
    int32_t token;      // a token ending here, or -1
    uint8_t byte;
} gram_trie_node;

struct mx_gram_vocab {
    int vocab;                // mask width in tokens
    int words;                // ceil(vocab / 32)
    const uint8_t **bytes;    // [vocab] token bytes (borrowed from the tokenizer), NULL: never allowed
    uint32_t *len;            // [vocab]
    int32_t *dup_next;        // [vocab] next token with identical bytes, or -1
    gram_trie_node *nodes;    // [n_nodes]; node 0 is the root
    int32_t n_nodes;
    int32_t *stop_ids;
    int n_stop;
    int32_t max_chars;        // most code points in any token
};

#endif
