// SPDX-License-Identifier: MIT
// `mlxcel perplexity`: perplexity of a text file. The file is split on newlines; blank lines are
// dropped; each line is encoded as it is and followed by the end-of-text token; the ids are scored
// in windows of ctx+1 tokens starting every ctx tokens, each window a fresh context, so every id
// after the first is predicted exactly once from the ids before it in its window.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "core/clock.h"
#include "core/logsumexp.h"
#include "commands.h"
#include "io/mapped_file.h"
#include "prompt.h"

static void usage(FILE *to) {
    fprintf(to,
            "usage: mlxcel perplexity [-m MODEL] -f TEXT_FILE [--ctx 512]\n"
            "  -f, --file PATH         the text to score: each non-blank line, then the end-of-text token\n"
            "                          (required); -c, --ctx sets the window (default 512 tokens)\n"
            "%s",
            cli_model_help);
}

// Encodes the file as described above into a malloc'ed id stream.
static int encode_file(const char *cmd, const mx_tokenizer *tok, int32_t eot, const char *path, int32_t **out,
                       size_t *n_out) {
    mx_error err = {{0}};
    size_t len;
    char *text = mx_read_text_file(path, &len, &err);
    if (!text) {
        cli_error(cmd, "%s", err.msg);
        return -1;
    }
    size_t cap = len / 2 + 16, n = 0;
    int32_t *all = malloc(sizeof *all * cap);
    int rc = all ? 0 : -1;
    char *line = text;
    while (rc == 0 && line && *line) {
        char *nl = strchr(line, '\n');
        size_t ll = nl ? (size_t)(nl - line) : strlen(line);
        bool blank = true;
        for (size_t i = 0; i < ll && blank; i++) blank = strchr(" \t\r\v\f", line[i]) != NULL;
        if (!blank) {
            int32_t *ids;
            size_t k;
            if (mx_tokenizer_encode(tok, line, ll, &ids, &k, &err) != 0) {
                cli_error(cmd, "%s", err.msg);
                rc = -1;
                break;
            }
            if (n + k + 1 > cap) {
                cap = 2 * (n + k + 1);
                int32_t *g = realloc(all, sizeof *all * cap);
                if (!g) rc = -1;
                else all = g;
            }
            if (rc == 0) {
                memcpy(all + n, ids, sizeof *ids * k);
                n += k;
                all[n++] = eot;
            }
            free(ids);
        }
        line = nl ? nl + 1 : NULL;
    }
    free(text);
    if (rc) {
        free(all);
        return -1;
    }
    *out = all;
    *n_out = n;
    return 0;
}

int cmd_perplexity(int argc, char **argv) {
    const char *cmd = "perplexity", *file = NULL;
    cli_model_opts mo = {0};
    const cli_common_opts common = {.model = &mo, .usage = usage};
    for (int i = 1; i < argc; i++) {
        int r = cli_common_opt(cmd, argc, argv, &i, &common);
        if (r == CLI_OPT_TAKEN) continue;
        if (r != CLI_OPT_OWN) return r;
        if (cli_is(argv[i], "-f", "--file")) {
            if (!(file = cli_value(cmd, argc, argv, &i))) return MX_EXIT_USAGE;
        } else {
            cli_error(cmd, "unknown option '%s'", argv[i]);
            usage(stderr);
            return MX_EXIT_USAGE;
        }
    }
    if (!file) {
        cli_error(cmd, "-f TEXT_FILE is required");
        return MX_EXIT_USAGE;
    }
    int win = mo.ctx ? mo.ctx : 512, rc = MX_EXIT_RUNTIME;
    mx_backend *be = NULL;
    mx_model *m = NULL;
    char *dir = NULL;
    mx_tokenizer *tok = NULL;
    mx_ctx *ctx = NULL;
    int32_t *ids = NULL, *pos = NULL, *slot = NULL, *rows = NULL;
    float *logits = NULL;
    size_t n = 0;
    mx_error err = {{0}};
    if (cli_open_model(cmd, &mo, &be, &m, &dir) != 0 || !(tok = prompt_load_tokenizer(cmd, dir))) goto done;
    int32_t eot = mx_tokenizer_token_id(tok, "<|endoftext|>");
    if (eot < 0) eot = mx_model_config(m)->n_eos ? mx_model_config(m)->eos_ids[0] : -1;
    if (eot < 0) {
        cli_error(cmd, "the tokenizer has no <|endoftext|> token and the config no eos_token_id");
        goto done;
    }
    if (encode_file(cmd, tok, eot, file, &ids, &n) != 0) goto done;
    if (n < 2) {
        cli_error(cmd, "%s: fewer than two tokens to score", file);
        goto done;
    }
    int V = mx_model_config(m)->vocab_size;
    pos = malloc(sizeof *pos * (win + 1));
    slot = calloc(win + 1, sizeof *slot);
    rows = malloc(sizeof *rows * (win + 1));
    logits = malloc(sizeof *logits * (size_t)(win + 1) * V);
    if (!pos || !slot || !rows || !logits || !(ctx = mx_ctx_create(m, 1, win + 1, 512, &err))) {
        cli_error(cmd, "%s", err.msg[0] ? err.msg : "out of memory");
        goto done;
    }
    double nll = 0.0, t0 = mx_now();
    size_t scored = 0;
    for (size_t start = 0; start + 1 < n; start += win) {
        int len = (int)(n - start < (size_t)win + 1 ? n - start : (size_t)win + 1);
        for (int i = 0; i < len; i++) pos[i] = rows[i] = i;
        mx_batch b = {len, ids + start, pos, slot, len - 1, rows};
        if (mx_ctx_forward(ctx, &b, logits, NULL, &err) != 0) {
            cli_error(cmd, "%s", err.msg);
            goto done;
        }
        for (int i = 0; i + 1 < len; i++) {
            const float *l = logits + (size_t)i * V;
            nll += mx_logsumexp(l, V) - l[ids[start + i + 1]];
            scored++;
        }
    }
    double secs = mx_now() - t0;
    printf("Perplexity: %.4f over %zu tokens (%zu ids, windows of %d)\n", exp(nll / scored), scored, n, win + 1);
    fprintf(stderr, "Scored in %.2f s (%.1f tokens-per-sec) on %s\n", secs, (scored + n / win) / secs, be->ops->name);
    rc = MX_EXIT_OK;
done:
    free(ids), free(pos), free(slot), free(rows), free(logits), free(dir);
    mx_ctx_free(ctx);
    mx_tokenizer_free(tok);
    mx_model_free(m);
    mx_backend_free(be);
    return rc;
}
