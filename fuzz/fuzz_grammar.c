// SPDX-License-Identifier: MIT
// libFuzzer target: constrained-decoding grammars as requests give them. An input starting with
// '{' is a JSON schema (response_format, tool parameters): it must compile to GBNF that the GBNF
// parser accepts, or fail with a message naming the problem. Any other input is GBNF text
// (`grammar`): it must parse or fail with a message.
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = 0;
    mx_error err = {{0}};
    if (size && data[0] == '{') {
        json_t *schema = json_loadb(text, size, 0, NULL);
        if (schema) {
            char *gbnf = mx_json_schema_to_gbnf(schema, NULL, &err);
            if (gbnf) {
                mx_grammar *g = mx_grammar_parse(gbnf, NULL, &err);
                if (!g) {
                    fprintf(stderr, "a compiled schema is not valid GBNF: %s\n%s\n", err.msg, gbnf);
                    abort();
                }
                mx_grammar_free(g);
                free(gbnf);
            } else if (!err.msg[0]) {
                fprintf(stderr, "schema refused without a message\n");
                abort();
            }
            json_decref(schema);
        }
    } else {
        mx_grammar *g = mx_grammar_parse(text, NULL, &err);
        if (!g && !err.msg[0]) {
            fprintf(stderr, "grammar refused without a message\n");
            abort();
        }
        mx_grammar_free(g);
    }
    free(text);
    return 0;
}
