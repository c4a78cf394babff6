// SPDX-License-Identifier: MIT
// `mlxcel logits`: the F32 logits [n_ids, vocab] of every position of a token sequence, computed
// all at once (prefill) or one token at a time through the KV cache (decode), written to a
// safetensors file. This is how parity with reference implementations is checked.
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "commands.h"

static void usage(FILE *to) {
    fprintf(to, "usage: mlxcel logits [-m MODEL] --ids 1,2,3 [--mode prefill|decode] -o FILE.safetensors\n%s",
            cli_model_help);
}

// Parses "1,2,3" into a malloc'ed array.
static int parse_ids(const char *s, int32_t **ids, int *n) {
    int cap = 16;
    *n = 0;
    *ids = malloc(sizeof **ids * cap);
    while (*ids && *s) {
        char *end;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (end == s || errno || v < 0 || v > INT32_MAX || (*end && *end != ',')) return -1;
        if (*n == cap) {
            int32_t *g = realloc(*ids, sizeof **ids * (cap *= 2));
            if (!g) return -1;
            *ids = g;
        }
        (*ids)[(*n)++] = (int32_t)v;
        s = *end ? end + 1 : end;
    }
    return *ids && *n > 0 ? 0 : -1;
}

static int write_logits(const char *path, const float *data, int n, int vocab) {
    char header[256];
    size_t bytes = (size_t)n * vocab * sizeof(float);
    int len = snprintf(header, sizeof header,
                       "{\"logits\":{\"dtype\":\"F32\",\"shape\":[%d,%d],\"data_offsets\":[0,%zu]}}", n, vocab, bytes);
    while (len % 8) header[len++] = ' ';
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    uint64_t hl = (uint64_t)len;
    unsigned char le[8];
    for (int i = 0; i < 8; i++) le[i] = (unsigned char)(hl >> (8 * i));
    int ok = fwrite(le, 1, 8, f) == 8 && fwrite(header, 1, len, f) == (size_t)len && fwrite(data, 1, bytes, f) == bytes;
    return (fclose(f) == 0 && ok) ? 0 : -1;
}

int cmd_logits(int argc, char **argv) {
    const char *cmd = "logits", *ids_arg = NULL, *out_path = NULL, *mode = "prefill";
    cli_model_opts mo = {0};
    for (int i = 1; i < argc; i++) {
        int r = cli_model_opt(cmd, argc, argv, &i, &mo);
        if (r < 0) return MX_EXIT_USAGE;
        if (r > 0) continue;
        const char *a = argv[i];
        if (cli_is(a, "-h", "--help")) {
            usage(stdout);
            return MX_EXIT_OK;
        } else if (cli_is(a, NULL, "--ids")) {
            if (!(ids_arg = cli_value(cmd, argc, argv, &i))) return MX_EXIT_USAGE;
        } else if (cli_is(a, "-o", "--output")) {
            if (!(out_path = cli_value(cmd, argc, argv, &i))) return MX_EXIT_USAGE;
        } else if (cli_is(a, NULL, "--mode")) {
            if (!(mode = cli_value(cmd, argc, argv, &i))) return MX_EXIT_USAGE;
            if (strcmp(mode, "prefill") != 0 && strcmp(mode, "decode") != 0) {
                cli_error(cmd, "--mode must be prefill or decode (got '%s')", mode);
                return MX_EXIT_USAGE;
            }
        } else {
            cli_error(cmd, "unknown option '%s'", a);
            usage(stderr);
            return MX_EXIT_USAGE;
        }
    }
    if (!ids_arg || !out_path) {
        cli_error(cmd, "--ids and -o are required");
        usage(stderr);
        return MX_EXIT_USAGE;
    }
    int32_t *ids = NULL;
    int n = 0;
    if (parse_ids(ids_arg, &ids, &n) != 0) {
        cli_error(cmd, "--ids: '%s' is not a comma-separated list of token ids", ids_arg);
        free(ids);
        return MX_EXIT_USAGE;
    }
    mx_backend *be;
    mx_model *m;
    if (cli_open_model(cmd, &mo, &be, &m, NULL) != 0) {
        free(ids);
        return MX_EXIT_RUNTIME;
    }
    int V = mx_model_config(m)->vocab_size, rc = MX_EXIT_RUNTIME;
    bool decode = strcmp(mode, "decode") == 0;
    mx_error err = {{0}};
    int32_t *pos = malloc(sizeof *pos * n), *slot = calloc(n, sizeof *slot), *rows = malloc(sizeof *rows * n);
    float *logits = malloc(sizeof(float) * (size_t)n * V);
    mx_ctx *ctx = (pos && slot && rows && logits) ? mx_ctx_create(m, 1, mo.ctx > n ? mo.ctx : n, decode ? 1 : 512, &err)
                                                  : NULL;
    if (!ctx) {
        cli_error(cmd, "%s", err.msg[0] ? err.msg : "out of memory");
        goto done;
    }
    for (int i = 0; i < n; i++) pos[i] = rows[i] = i;
    int fail = 0;
    if (decode) {
        for (int i = 0; i < n && !fail; i++) {
            int32_t zero = 0;
            mx_batch b = {1, &ids[i], &pos[i], slot, 1, &zero};
            fail = mx_ctx_forward(ctx, &b, logits + (size_t)i * V, NULL, &err);
        }
    } else {
        mx_batch b = {n, ids, pos, slot, n, rows};
        fail = mx_ctx_forward(ctx, &b, logits, NULL, &err);
    }
    if (fail) {
        cli_error(cmd, "%s", err.msg);
    } else if (write_logits(out_path, logits, n, V) != 0) {
        cli_error(cmd, "%s: cannot write: %s", out_path, strerror(errno));
    } else {
        rc = MX_EXIT_OK;
    }
done:
    mx_ctx_free(ctx);
    free(ids), free(pos), free(slot), free(rows), free(logits);
    mx_model_free(m);
    mx_backend_free(be);
    return rc;
}
