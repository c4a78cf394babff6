// SPDX-License-Identifier: MIT
// libFuzzer target: tokenizer.json text. Loading goes through a file (the loader's only entry), a
// private temporary file rewritten for each input. A tokenizer that loads must then encode and
// decode a short text without fault.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "tokenizer/tokenizer.h"

static char path[64];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!path[0]) {
        snprintf(path, sizeof path, "/tmp/mlxcel-fuzz-tok-%d.json", (int)getpid());
    }
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    fwrite(data, 1, size, f);
    fclose(f);
    mx_error err = {{0}};
    mx_tokenizer *tok = mx_tokenizer_load(path, &err);
    if (tok) {
        int32_t *ids = NULL;
        size_t n = 0;
        static const char text[] = "Hello, world! <|im_end|> 123 \xc3\xa9t\xc3\xa9";
        if (mx_tokenizer_encode(tok, text, sizeof text - 1, &ids, &n, &err) == 0) {
            char *back = mx_tokenizer_decode(tok, ids, n, false);
            free(back);
            free(ids);
        }
        mx_tokenizer_free(tok);
    } else if (!err.msg[0]) {
        fprintf(stderr, "tokenizer load failed without a message\n");
        abort();
    }
    unlink(path);
    return 0;
}
