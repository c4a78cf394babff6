// SPDX-License-Identifier: MIT
// `mlxcel serve` / `mlxcel-server`: parses the flags, loads the model, tokenizer and chat template,
// starts the OpenAI-compatible server (src/server) and waits for SIGINT or SIGTERM. The chosen port
// is printed on stderr as "mlxcel-server: listening on http://HOST:PORT" (tests parse it).
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/chat_template.h"
#include "cli.h"
#include "commands.h"
#include "prompt.h"
#include "server/server.h"

static const char serve_usage[] =
    "usage: mlxcel serve [options]   (or: mlxcel-server [options])\n"
    "  --host ADDR             address to listen on (default 127.0.0.1)\n"
    "  --port N                port (default 8080; 0: any free port, printed on stderr)\n"
    "  --api-key KEY           require 'Authorization: Bearer KEY' (all routes but /health)\n"
    "  -np, --parallel N       sequences decoded together at most (default 4)\n"
    "  --kv-size N             positions in the KV cache pool shared by all sequences (default: what fits in\n"
    "                          half of the free device/host memory, at most 2 x parallel x ctx; printed)\n"
    "  --max-queue N           requests waiting for a slot at most (default 64; more: 503)\n"
    "  --timeout S             seconds per request (default 600; 0: none)\n"
    "  --max-body BYTES        request body size limit (default 8 MiB)\n"
    "  --prefill-chunk N       prompt tokens per sequence per step (default 256)\n"
    "  --batch-tokens N        prompt tokens per step over all sequences (default 2048 on a GPU, the\n"
    "                          prefill chunk on the CPU; at least one chunk, at most --parallel chunks)\n"
    "  --pooling mean|last     embeddings: mean of the tokens' hidden states, or the last token's\n"
    "                          (default: last when the model's 1_Pooling/config.json asks for it, else mean)\n"
    "  --max-connections N     open connections at most (default 2048; more: 503 and close)\n"
    "  --conn-timeout S        close a connection idle (or sending its request) this long (default 30)\n"
    "  --shutdown-timeout S    on SIGTERM/SIGINT, let running requests finish this long (default 10)\n"
    "  --cors-origin LIST      origins allowed cross-site, comma-separated, or '*' (default: none)\n"
    "  --no-special-in-content special tokens written in chat message content are plain text\n"
    "                          (default: recognized, as Hugging Face does; use for untrusted input)\n"

    "  --no-prefix-cache       compute every prompt in full (no reuse of cached prefixes)\n";

static void usage(FILE *to) {
    fprintf(to, "%s%s", serve_usage, cli_model_help);
    mx_sampling d = mx_sampling_defaults();
    cli_sampling_usage(to, &d);
}

int cmd_serve(int argc, char **argv) {
    const char *cmd = "serve";
    cli_model_opts mo = {0};
    mx_sampling sp = mx_sampling_defaults();
    mx_server_opts so = {.host = "127.0.0.1", .port = 8080, .parallel = 4, .max_queue = 64, .timeout = 600,
                         .max_body = 8u << 20, .prefill_chunk = 256, .conn_timeout = 30};
    float shutdown_timeout = 10;
    const cli_common_opts common = {.model = &mo, .sampling = &sp, .usage = usage};
    for (int i = 1; i < argc; i++) {
        int r = cli_common_opt(cmd, argc, argv, &i, &common);
        if (r == CLI_OPT_TAKEN) continue;
        if (r != CLI_OPT_OWN) return r;
        const char *a = argv[i], *v;
        int iv;
        float fv;
        if (cli_is(a, NULL, "--host")) {
            if (!(v = cli_value(cmd, argc, argv, &i))) return MX_EXIT_USAGE;
            so.host = v;
        } else if (cli_is(a, NULL, "--api-key")) {
            if (!(v = cli_value(cmd, argc, argv, &i))) return MX_EXIT_USAGE;
            so.api_key = v;
        } else if (cli_is(a, NULL, "--port")) {
            if (!(v = cli_value(cmd, argc, argv, &i)) || cli_int(cmd, a, v, 0, 65535, &so.port)) return MX_EXIT_USAGE;
        } else if (cli_is(a, "-np", "--parallel")) {
            if (!(v = cli_value(cmd, argc, argv, &i)) || cli_int(cmd, a, v, 1, 256, &so.parallel)) return MX_EXIT_USAGE;
        } else if (cli_is(a, NULL, "--max-queue")) {
            if (!(v = cli_value(cmd, argc, argv, &i)) || cli_int(cmd, a, v, 1, 1 << 20, &so.max_queue))
                return MX_EXIT_USAGE;
        } else if (cli_is(a, NULL, "--prefill-chunk")) {
            if (!(v = cli_value(cmd, argc, argv, &i)) || cli_int(cmd, a, v, 1, 1 << 16, &so.prefill_chunk))
                return MX_EXIT_USAGE;
        } else if (cli_is(a, NULL, "--batch-tokens")) {
            if (!(v = cli_value(cmd, argc, argv, &i)) || cli_int(cmd, a, v, 1, 1 << 16, &so.batch_tokens))
                return MX_EXIT_USAGE;
        } else if (cli_is(a, NULL, "--no-prefix-cache")) {
            so.no_prefix_cache = true;
        } else if (cli_is(a, NULL, "--kv-size")) {
            if (!(v = cli_value(cmd, argc, argv, &i)) || cli_int(cmd, a, v, 1, 1 << 30, &so.kv_size)) return MX_EXIT_USAGE;
        } else if (cli_is(a, NULL, "--timeout")) {
            if (!(v = cli_value(cmd, argc, argv, &i)) || cli_float(cmd, a, v, 0, 1e7, &fv)) return MX_EXIT_USAGE;
            so.timeout = fv;
        } else if (cli_is(a, NULL, "--pooling")) {
            if (!(v = cli_value(cmd, argc, argv, &i))) return MX_EXIT_USAGE;
            if (strcmp(v, "mean") != 0 && strcmp(v, "last") != 0) {
                cli_error(cmd, "--pooling must be mean or last, not '%s'", v);
                return MX_EXIT_USAGE;
            }
            so.pooling = v;
        } else if (cli_is(a, NULL, "--max-connections")) {
            if (!(v = cli_value(cmd, argc, argv, &i)) || cli_int(cmd, a, v, 1, 1 << 20, &so.max_connections))
                return MX_EXIT_USAGE;
        } else if (cli_is(a, NULL, "--conn-timeout")) {
            if (!(v = cli_value(cmd, argc, argv, &i)) || cli_float(cmd, a, v, 1, 86400, &fv)) return MX_EXIT_USAGE;
            so.conn_timeout = fv;
        } else if (cli_is(a, NULL, "--shutdown-timeout")) {
            if (!(v = cli_value(cmd, argc, argv, &i)) || cli_float(cmd, a, v, 0, 86400, &shutdown_timeout))
                return MX_EXIT_USAGE;
        } else if (cli_is(a, NULL, "--cors-origin")) {
            if (!(v = cli_value(cmd, argc, argv, &i))) return MX_EXIT_USAGE;
            so.cors_origins = v;
        } else if (cli_is(a, NULL, "--no-special-in-content")) {
            so.no_special_in_content = true;
        } else if (cli_is(a, NULL, "--max-body")) {
            if (!(v = cli_value(cmd, argc, argv, &i)) || cli_int(cmd, a, v, 16, 1 << 30, &iv)) return MX_EXIT_USAGE;
            so.max_body = (size_t)iv;
        } else {
            cli_error(cmd, "unknown option '%s' (see --help)", a);
            return MX_EXIT_USAGE;
        }
    }
    so.sampling = sp;

    // Signals are taken by sigwait below; block them before any thread starts so threads inherit it.
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    mx_backend *be = NULL;
    mx_model *m = NULL;
    char *dir = NULL;
    if (cli_open_model(cmd, &mo, &be, &m, &dir)) return MX_EXIT_RUNTIME;
    int rc = MX_EXIT_RUNTIME;
    mx_error err = {{0}};
    mx_tokenizer *tok = prompt_load_tokenizer(cmd, dir);
    mx_chat_template *tmpl = NULL;
    mx_server *srv = NULL;
    if (!tok) goto done;
    tmpl = mx_chat_template_load(dir, &err);
    if (!tmpl && err.msg[0]) {
        cli_error(cmd, "%s", err.msg);
        goto done;
    }
    int max_pos = mx_model_config(m)->max_position_embeddings;
    so.ctx = mo.ctx ? mo.ctx : (max_pos > 0 && max_pos < 4096 ? max_pos : 4096);
    const char *base = strrchr(dir, '/');
    base = base && base[1] ? base + 1 : dir;
    so.model_id = base;
    srv = mx_server_start(m, tok, tmpl, &so, &err);
    if (!srv) {
        cli_error(cmd, "%s", err.msg);
        goto done;
    }
    const char *host = so.host;
    bool v6 = strchr(host, ':') != NULL;
    int kv_size = mx_server_kv_size(srv);
    fprintf(stderr, "mlxcel-server: model %s, up to %d sequences of up to %d tokens, KV pool %d tokens (%.1f MiB of %s%s)%s\n",
            dir, so.parallel, so.ctx, kv_size,
            (double)mx_model_kv_block_bytes(m) * (kv_size / MX_KV_BLOCK) / (1024.0 * 1024.0), mx_dtype_name(be->kv_dtype),
            so.kv_size ? "" : ", default: half of free memory, at most 2 x parallel x ctx",
            tmpl ? "" : " (no chat template: /v1/chat/completions answers 400)");
    fprintf(stderr, "mlxcel-server: listening on http://%s%s%s:%d\n", v6 ? "[" : "", host, v6 ? "]" : "",
            mx_server_port(srv));
    fflush(stderr);
    int sig = 0;
    sigwait(&sigs, &sig);
    fprintf(stderr, "mlxcel-server: stopping (signal %d): no new requests; running ones get up to %g s\n", sig,
            shutdown_timeout);
    int left = mx_server_drain(srv, shutdown_timeout);
    if (left) fprintf(stderr, "mlxcel-server: ending %d running request(s) with an error\n", left);
    rc = MX_EXIT_OK;
done:
    mx_server_stop(srv);
    mx_chat_template_free(tmpl);
    mx_tokenizer_free(tok);
    mx_model_free(m);
    mx_backend_free(be);
    free(dir);
    return rc;
}
