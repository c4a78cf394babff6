// SPDX-License-Identifier: MIT
// libFuzzer target: a safetensors file (8-byte header length, JSON header, tensor table, data) as
// the whole input. mx_st_parse must accept it or fail with a message; every tensor it accepts lies
// inside the input.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "io/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    mx_st_tensor *t = NULL;
    char **meta = NULL;
    size_t n = 0, n_meta = 0;
    mx_error err = {{0}};
    if (mx_st_parse(data, size, "fuzz", &t, &n, &meta, &n_meta, &err) == 0) {
        for (size_t i = 0; i < n; i++) {
            const uint8_t *p = t[i].data;
            if (t[i].nbytes && (p < data || p + t[i].nbytes > data + size)) {
                fprintf(stderr, "tensor '%s' outside the input\n", t[i].name);
                abort();
            }
            free((char *)t[i].name);
        }
        for (size_t i = 0; i < 2 * n_meta; i++) free(meta[i]);
        free(t);
        free(meta);
    } else if (!err.msg[0]) {
        fprintf(stderr, "parse failed without a message\n");
        abort();
    }
    return 0;
}
