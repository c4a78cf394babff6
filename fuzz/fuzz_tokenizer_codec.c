// SPDX-License-Identifier: MIT
// libFuzzer target: the demo model's tokenizer (Qwen3 byte-level BPE with added and special
// tokens) encoding arbitrary bytes, and decoding the input read as token ids (whole and through
// the streaming decoder). Encode must succeed or fail with a message, its ids must decode, and the
// streaming decode must equal the whole decode.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer.h"

static mx_tokenizer *tok;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    const char *path = getenv("MLXCEL_FUZZ_TOKENIZER");
    mx_error err = {{0}};
    tok = mx_tokenizer_load(path ? path : "models/qwen3-demo-44m-4bit/tokenizer.json", &err);
    if (!tok) {
        fprintf(stderr, "fuzz_tokenizer_codec: %s (run from the repository root or set MLXCEL_FUZZ_TOKENIZER)\n",
                err.msg);
        exit(1);
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    int32_t *ids = NULL;
    size_t n = 0;
    mx_error err = {{0}};
    if (mx_tokenizer_encode(tok, (const char *)data, size, &ids, &n, &err) == 0) {
        char *back = mx_tokenizer_decode(tok, ids, n, false);
        if (!back) abort();
        free(back);
        free(ids);
    } else if (!err.msg[0]) {
        fprintf(stderr, "encode failed without a message\n");
        abort();
    }
    // The bytes as token ids (any value, in range or not).
    size_t n_ids = size / 4;
    int32_t *raw = malloc(sizeof(int32_t) * (n_ids ? n_ids : 1));
    if (!raw) return 0;
    memcpy(raw, data, n_ids * 4);
    char *whole = mx_tokenizer_decode(tok, raw, n_ids, size % 2 == 1);
    mx_detok d;
    mx_detok_init(&d, tok, size % 2 == 1);
    size_t cap = mx_detok_cap(tok), len = 0;
    char *piece = malloc(cap);
    char *stream = malloc(n_ids * cap + cap + 1);
    if (whole && piece && stream) {
        for (size_t i = 0; i < n_ids; i++) {
            size_t k = mx_detok_push(&d, raw[i], piece, cap);
            memcpy(stream + len, piece, k);
            len += k;
        }
        size_t k = mx_detok_flush(&d, piece, cap);
        memcpy(stream + len, piece, k);
        len += k;
        stream[len] = 0;
        if (strcmp(stream, whole) != 0) {
            fprintf(stderr, "streaming decode differs from the whole decode\n");
            abort();
        }
    }
    free(whole);
    free(piece);
    free(stream);
    free(raw);
    return 0;
}
