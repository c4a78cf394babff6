// SPDX-License-Identifier: MIT
// Grammar constraints for the CLI (see constrain.h): `--json-schema` and `--grammar` files compiled
// into one matcher over the model's vocabulary, with the stop ids that end a constrained answer.
#include "constrain.h"

#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "io/mapped_file.h"
#include "server/srv_calls.h"
#include "server/srv_grammar.h"

int cli_stop_ids(const mx_model *m, int32_t extra_eos, int32_t *ids, int cap) {
    int n = 0, V = mx_model_config(m)->vocab_size;
    for (int32_t id = 0; id < V && n < cap; id++)
        if (mx_model_is_eos(m, id) || id == extra_eos) ids[n++] = id;
    return n;
}

int cli_constraint_open(const char *cmd, const char *schema_path, const char *grammar_path, const mx_tokenizer *tok,
                        const mx_model *m, int32_t extra_eos, cli_constraint *out) {
    *out = (cli_constraint){0};
    if (!schema_path && !grammar_path) return 0;
    if (schema_path && grammar_path) {
        cli_error(cmd, "--json-schema and --grammar cannot be used together");
        return -1;
    }
    const char *path = schema_path ? schema_path : grammar_path;
    mx_error err = {{0}};
    size_t len = 0;
    char *text = mx_read_text_file(path, &len, &err);
    if (!text) {
        cli_error(cmd, "%s", err.msg);
        return -1;
    }
    char *gbnf = text;
    if (schema_path) {
        json_error_t je;
        json_t *schema = json_loadb(text, len, 0, &je);
        free(text);
        if (!schema) {
            cli_error(cmd, "%s: not valid JSON (line %d, column %d): %s", path, je.line, je.column, je.text);
            return -1;
        }
        // A harmony model (gpt-oss) may reason first and answers in its final channel, as the server's.
        bool harmony = srv_calls_harmony_tokenizer(tok);
        gbnf = harmony ? mx_json_schema_to_gbnf_rule(schema, "answer", NULL, &err)
                       : mx_json_schema_to_gbnf(schema, NULL, &err);
        json_decref(schema);
        if (gbnf && harmony) {
            char *wrapped = srv_grammar_harmony_final(gbnf);
            free(gbnf);
            if (!(gbnf = wrapped)) mx_fail(&err, "out of memory");
        }
        if (!gbnf) {
            cli_error(cmd, "%s: %s", path, err.msg);
            return -1;
        }
    }
    mx_grammar *g = mx_grammar_parse(gbnf, NULL, &err);
    free(gbnf);
    if (!g) {
        cli_error(cmd, "%s: %s", path, err.msg);
        return -1;
    }
    int32_t stops[64];
    int n_stop = cli_stop_ids(m, extra_eos, stops, 64);
    // A harmony model (gpt-oss) writes its channels in special tokens: its grammars may write them.
    int32_t markers[SRV_MAX_MARKERS];
    int n_markers = srv_calls_harmony_tokenizer(tok) ? srv_calls_marker_ids(tok, markers) : 0;
    if (!(out->vocab = mx_gram_vocab_create_with_specials(tok, mx_model_config(m)->vocab_size, stops, n_stop, markers,
                                                          n_markers, &err))) {
        mx_grammar_free(g);
        cli_error(cmd, "%s", err.msg);
        return -1;
    }
    mx_gram_index *ix = mx_gram_index_create(g, out->vocab, &err);  // takes g
    if (ix) out->matcher = mx_matcher_create(ix, NULL, &err);
    if (!out->matcher) {
        mx_gram_index_release(ix);
        cli_constraint_close(out);
        cli_error(cmd, "%s", err.msg);
        return -1;
    }
    mx_gram_index_release(ix);  // the matcher holds it
    return 0;
}

void cli_constraint_close(cli_constraint *c) {
    mx_matcher_free(c->matcher);
    mx_gram_vocab_free(c->vocab);
    *c = (cli_constraint){0};
}
