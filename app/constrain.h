// SPDX-License-Identifier: MIT
// `--json-schema FILE` and `--grammar FILE` for the generating commands: reads the file, compiles
// it (a JSON schema through the schema compiler, GBNF directly) and binds it to the model's
// vocabulary, giving the matcher the generation loop constrains its tokens with. For a harmony model
// (gpt-oss) the grammar's text may contain the harmony markers (<|channel|>, <|message|>, ...),
// which match their special tokens, and a JSON schema is answered as the server answers
// response_format: an optional analysis message, then the JSON in the final channel.
#ifndef MX_APP_CONSTRAIN_H
#define MX_APP_CONSTRAIN_H

#include <stdint.h>

#include "grammar/grammar.h"
#include "models/model.h"
#include "tokenizer/tokenizer.h"

typedef struct cli_constraint {
    mx_gram_vocab *vocab;
    mx_matcher *matcher;  // NULL when neither flag was given
} cli_constraint;

// The ids that end a sequence: the model's eos ids and extra_eos (when >= 0). Returns how many were
// written to ids (room for cap).
int cli_stop_ids(const mx_model *m, int32_t extra_eos, int32_t *ids, int cap);
// Builds the matcher from at most one of schema_path / grammar_path (both NULL: no constraint).
// Returns 0, or -1 with the error printed (naming the file).
int cli_constraint_open(const char *cmd, const char *schema_path, const char *grammar_path, const mx_tokenizer *tok,
                        const mx_model *m, int32_t extra_eos, cli_constraint *out);
void cli_constraint_close(cli_constraint *c);

#endif
