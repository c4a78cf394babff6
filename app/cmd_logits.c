// SPDX-License-Identifier: MIT
// `mlxcel logits`: the F32 logits [n_ids, vocab] of every position of a token sequence, computed
// all at once (prefill) or one token at a time through the KV cache (decode), written to a
// safetensors file. This is how parity with reference implementations is checked.
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "commands.h"
#include "convert/st_writer.h"

static void usage(FILE *to) {
    fprintf(to,
            "usage: mlxcel logits [-m MODEL] --ids 1,2,3 [--mode prefill|decode] -o FILE.safetensors\n"
            "  --ids LIST              the token ids, comma-separated (required)\n"
            "  -o, --output FILE       the safetensors file to write: F32 logits [ids, vocab] (required)\n"
            "  --mode MODE             prefill (all positions in one forward, the default) or decode (one\n"
            "                          token at a time through the KV cache)\n"
            "%s",
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

// The logits [n, vocab] as one F32 tensor "logits" in a safetensors file, through convert's writer
// (st_writer.h), which creates its file: a regular file already there is replaced; anything else
// at that path is refused with a message naming it.
static int write_logits(const char *path, const float *data, int n, int vocab, mx_error *err) {
    cv_st_writer *w = cv_st_writer_new();
    if (!w) return mx_fail(err, "out of memory");
    int64_t shape[2] = {n, vocab};
    struct stat st;
    if (lstat(path, &st) == 0 && S_ISREG(st.st_mode)) unlink(path);
    int rc = -1;
    if (cv_st_writer_declare(w, "logits", MX_DTYPE_F32, 2, shape, err) >= 0 && cv_st_writer_open(w, path, err) == 0 &&
        cv_st_writer_put(w, 0, 0, data, (size_t)n * vocab * sizeof(float), err) == 0)
        rc = cv_st_writer_close(w, err);
    cv_st_writer_free(w);
    return rc;
}

int cmd_logits(int argc, char **argv) {
    const char *cmd = "logits", *ids_arg = NULL, *out_path = NULL, *mode = "prefill";
    cli_model_opts mo = {0};
    const cli_common_opts common = {.model = &mo, .usage = usage};
    for (int i = 1; i < argc; i++) {
        int r = cli_common_opt(cmd, argc, argv, &i, &common);
        if (r == CLI_OPT_TAKEN) continue;
        if (r != CLI_OPT_OWN) return r;
        const char *a = argv[i];
        if (cli_is(a, NULL, "--ids")) {
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
    } else if (write_logits(out_path, logits, n, V, &err) != 0) {
        cli_error(cmd, "%s", err.msg);
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
