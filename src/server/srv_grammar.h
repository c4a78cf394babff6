// SPDX-License-Identifier: MIT
// Constrained decoding for the server: the request's constraint (response_format, grammar, a
// forced tool call) as GBNF text, and a small cache of compiled grammars keyed by that text, so
// requests with the same schema share one index and its cache of token masks. The vocabulary
// tables are built at the first constrained request. Thread-safe.
#ifndef MX_SERVER_SRV_GRAMMAR_H
#define MX_SERVER_SRV_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>

#include "grammar/grammar.h"
#include "server/srv_calls.h"
#include "server/srv_request.h"

typedef struct srv_grammars srv_grammars;

// stops: the ids that end a sequence (copied). The tokenizer is borrowed.
srv_grammars *srv_grammars_create(const mx_tokenizer *tok, int vocab, const int32_t *stops, int n_stop);
void srv_grammars_free(srv_grammars *g);

// The GBNF text of the request's constraint (malloc'ed), or NULL with *status 0 when it has none,
// or NULL with *status and msg set: 400 for a constraint that cannot be compiled, 500 when an
// allocation failed (never a grammar with a part left out). think_open: the output starts inside <think>, which
// must be closed before the constrained part.
// calls: the model's tool-call format, which a forced call follows.
char *srv_grammar_text(const srv_request *r, srv_call_format calls, bool think_open, unsigned *status, char *msg,
                       size_t cap);
// gpt-oss (harmony): GBNF whose root is an optional analysis message, then the final channel
// holding `answer` (defined by answer_rules, with `ws`), as the server constrains a JSON answer.
// Malloc'ed; NULL when out of memory.
char *srv_grammar_harmony_final(const char *answer_rules);
// A matcher at the start of gbnf; NULL with msg and *status on a bad grammar (400) or out of memory
// (500). markers:
// the tokenizer's special tool-call markers (srv_calls_marker_ids) match grammar text, for
// sequences whose decoded text keeps special tokens.
mx_matcher *srv_grammars_matcher(srv_grammars *g, const char *gbnf, bool markers, unsigned *status, char *msg,
                                 size_t cap);

#endif
