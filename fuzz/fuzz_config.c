// SPDX-License-Identifier: MIT
// libFuzzer target: config.json text, with its quantization block and per-module overrides, and
// optionally a generation_config.json (the input's part after the first NUL byte). The parse must
// succeed or fail with a message; on success, quantization lookups for a few module paths must
// answer without reading out of bounds.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/hf_config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = 0;
    size_t first = strlen(text);
    const char *gen = first < size ? text + first + 1 : NULL;
    mx_config c;
    mx_error err = {{0}};
    if (mx_config_parse(text, gen, "config.json", &c, &err) == 0) {
        static const char *const paths[] = {"model.layers.0.mlp.down_proj", "model.embed_tokens", "lm_head",
                                            "model.layers.1.self_attn.q_proj", ""};
        for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
            mx_quant q = mx_config_quant_for(&c, paths[i], i % 2 == 0);
            (void)q;
        }
        mx_config_free(&c);
    } else if (!err.msg[0]) {
        fprintf(stderr, "config parse failed without a message\n");
        abort();
    }
    free(text);
    return 0;
}
