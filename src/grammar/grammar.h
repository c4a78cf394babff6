// SPDX-License-Identifier: MIT
// Constrained decoding: grammars that decide which tokens may come next.
//
//   text (GBNF, llama.cpp's grammar format) or a JSON schema (compiled to GBNF text)
//     -> mx_grammar     an immutable, compiled grammar (rules of alternatives of elements);
//   mx_gram_vocab       the tokenizer's side, built once per tokenizer: every token's bytes, a trie
//                       of them, and which ids end a sequence;
//   mx_gram_index       one grammar bound to one vocabulary: interned parser stacks and the cache of
//                       allowed-token masks per stack, shared (reference counted, locked) by every
//                       matcher of that grammar, so repeated requests with one schema stay warm;
//   mx_matcher          one sequence's position in the grammar: the allowed-token bitmask for the
//                       next step (uint32 words over the model's vocabulary, bit i % 32 of word
//                       i / 32 set when token i may come next), and advancing on the chosen token.
// The end-of-sequence ids are allowed exactly when the grammar's root is complete, and are then the
// only choice once nothing else can follow. Errors name the line and column (GBNF) or the schema
// path (JSON schema) that was wrong. A failed call also says what kind of failure it was (the
// MX_GRAM_* codes below: the input, a bound, or an allocation), set where the error is made, so a
// caller can answer bad input apart from its own failure without reading the message.
#ifndef MX_GRAMMAR_GRAMMAR_H
#define MX_GRAMMAR_GRAMMAR_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

// What a grammar call's failure was: the negative return of a mask or an accept, and *failure of
// the calls that build a grammar or a matcher (written only when they fail; failure may be NULL).
enum {
    MX_GRAM_REFUSED = -1,    // accept: the token is not allowed here
    MX_GRAM_BOUND = -2,      // the grammar needs more than a bound allows: too many rules, too deep
                             // (parse, schema), too ambiguous for the work limit (MX_GRAM_MAX_WORK)
                             // or stacks past MX_GRAM_MAX_FRAMES (matcher)
    MX_GRAM_NO_MEMORY = -3,  // an allocation failed
    MX_GRAM_INVALID = -4,    // the grammar text or schema is wrong or not supported
};

typedef struct mx_grammar mx_grammar;

// Parses GBNF text whose start rule is `root`. Errors read "grammar line L, column C: ..."; *failure:
// MX_GRAM_INVALID, MX_GRAM_BOUND or MX_GRAM_NO_MEMORY.
mx_grammar *mx_grammar_parse(const char *text, int *failure, mx_error *err);
void mx_grammar_free(mx_grammar *g);
// Writes bytes s[0..n) to f as a GBNF string literal (gbnf_literal.c), for code that writes grammars.
void mx_gbnf_put_literal(FILE *f, const char *s, size_t n);

// The GBNF text (malloc'ed) accepting exactly the JSON documents that validate against schema
// (within the documented subset; anything outside it is an error naming the keyword and path).
// schema NULL gives any JSON object (response_format json_object). *failure as mx_grammar_parse's.
char *mx_json_schema_to_gbnf(json_t *schema, int *failure, mx_error *err);
// The same rules without a root: the schema's value is the rule named `rule`, so the text can be
// embedded in a larger grammar (tool calls). The rules it defines are `rule`, r0, r1, ..., ws, value,
// object, array, string, esc, number, integer, boolean and null.
char *mx_json_schema_to_gbnf_rule(json_t *schema, const char *rule, int *failure, mx_error *err);
// Several schemas in one text: schemas[i]'s value is the rule named rules[i] (the helper rules are
// shared; each schema's $ref resolves within that schema). n == 0 gives only the helper rules.
char *mx_json_schemas_to_gbnf_rules(json_t *const *schemas, const char *const *rules, int n, int *failure,
                                    mx_error *err);

typedef struct mx_gram_vocab mx_gram_vocab;

// vocab: the model's vocabulary size (mask width; ids the tokenizer lacks are never allowed).
// stop_ids: the ids that end a sequence (eos and the template's end of turn). Fails only when out
// of memory.
mx_gram_vocab *mx_gram_vocab_create(const mx_tokenizer *tok, int vocab, const int32_t *stop_ids, int n_stop,
                                    mx_error *err);
// The same, except that the special tokens listed in `specials` match grammar text as their content
// (tool-call markers that are special tokens, such as Mistral's [TOOL_CALLS]: a grammar that writes
// the marker then lets the model emit its own token). Their text is then part of the output only
// where the decoder keeps special tokens, so use such a vocabulary for those sequences alone.
mx_gram_vocab *mx_gram_vocab_create_with_specials(const mx_tokenizer *tok, int vocab, const int32_t *stop_ids,
                                                  int n_stop, const int32_t *specials, int n_specials, mx_error *err);
void mx_gram_vocab_free(mx_gram_vocab *v);
int mx_gram_vocab_size(const mx_gram_vocab *v);
// uint32 words of one mask: ceil(vocab / 32).
int mx_gram_vocab_mask_words(const mx_gram_vocab *v);

typedef struct mx_gram_index mx_gram_index;

// Takes ownership of g. The vocabulary is borrowed and must outlive the index. refs = 1. Fails only
// when out of memory.
mx_gram_index *mx_gram_index_create(mx_grammar *g, const mx_gram_vocab *v, mx_error *err);
void mx_gram_index_retain(mx_gram_index *ix);
void mx_gram_index_release(mx_gram_index *ix);
// Bytes the index holds (parser stacks and cached masks); they grow with the distinct states seen.
size_t mx_gram_index_bytes(mx_gram_index *ix);

typedef struct mx_matcher mx_matcher;

// A matcher at the start of the grammar; holds a reference to ix. *failure: MX_GRAM_BOUND or
// MX_GRAM_NO_MEMORY.
mx_matcher *mx_matcher_create(mx_gram_index *ix, int *failure, mx_error *err);
void mx_matcher_free(mx_matcher *m);
// Writes the allowed tokens of the next step into mask[mx_gram_vocab_mask_words]. Returns how
// many tokens are allowed (0: the grammar is complete and cannot go on; the caller ends the
// sequence normally), or MX_GRAM_BOUND or MX_GRAM_NO_MEMORY with err set: an error of the
// sequence, never its normal end.
int mx_matcher_mask(mx_matcher *m, uint32_t *mask, mx_error *err);
// Steps (a stack advanced by one character) one mask or one accepted token may take: grammars
// whose sets of stacks are large everywhere (`root ::= [a-z]* [0-9]* [a-z]* ...` two hundred
// times) would otherwise take minutes per step.
#define MX_GRAM_MAX_WORK 100000000ULL
// Parser stacks (48-byte frames) an index may hold, about 0.9 GB with their hash table: a
// recursive grammar can reach new stacks at every token, and within the work limit one step could
// make 10^8 of them. The server drops a cached index past 512 MB, so legitimate use stays below.
#define MX_GRAM_MAX_FRAMES ((size_t)1 << 24)
// Lowers (or raises) ix's work limit per step and its frame limit, for tests of those bounds.
void mx_gram_index_set_limits(mx_gram_index *ix, uint64_t max_work, size_t max_frames);
// Advances over token id. Returns 0, or (err set) MX_GRAM_REFUSED when the token is not allowed
// here, MX_GRAM_BOUND or MX_GRAM_NO_MEMORY as for mx_matcher_mask; the matcher is then unchanged.
int mx_matcher_accept(mx_matcher *m, int32_t id, mx_error *err);
// True when the text so far is a complete sentence of the grammar.
bool mx_matcher_complete(const mx_matcher *m);

// Sets logits[i] to -infinity for every token i outside mask (host-side constrained sampling).
void mx_mask_logits(const uint32_t *mask, float *logits, int vocab);

#endif
