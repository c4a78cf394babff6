// SPDX-License-Identifier: MIT
// Private to src/grammar: the pieces of GBNF text the JSON schema compiler (json_schema.c) writes
// with help: the character class of a JSON string's unescaped characters, integer ranges
// (gbnf_int_range.c) and regular expressions (gbnf_regex.c). String literals are grammar.h's
// mx_gbnf_put_literal.
#ifndef MX_GRAMMAR_GBNF_TEXT_H
#define MX_GRAMMAR_GBNF_TEXT_H

#include <stddef.h>
#include <stdio.h>

#include "grammar/grammar.h"

// One character of a JSON string that needs no escape.
#define GBNF_JSON_STRING_CHAR "[^\"\\\\\\x00-\\x1F]"

// The non-negative integers in [a, b] (b < 0: no upper bound, at most 16 digits) as one
// parenthesized GBNF alternative.
void mx_gbnf_nonneg_range(FILE *f, long long a, long long b);
// The regex as a GBNF sequence over a JSON string's content; 0, or -1 with the reason in why.
int mx_gbnf_from_regex(const char *regex, FILE *f, char *why, size_t cap);

#endif
