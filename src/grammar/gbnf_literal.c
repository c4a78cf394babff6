// SPDX-License-Identifier: MIT
// GBNF string literals: bytes between double quotes with `"` and `\` escaped and control bytes as
// \xHH, for every writer of GBNF text (the schema compiler, the server's tool-call grammars).
#include <stdio.h>

#include "grammar/grammar.h"

// Writes s as a GBNF string literal (with quotes).
void mx_gbnf_put_literal(FILE *f, const char *s, size_t n) {
    fputc('"', f);
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '"' || ch == '\\') fprintf(f, "\\%c", ch);
        else if (ch < 0x20 || ch == 0x7F) fprintf(f, "\\x%02X", ch);
        else fputc(ch, f);
    }
    fputc('"', f);
}
