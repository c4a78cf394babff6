// SPDX-License-Identifier: MIT
// `mlxcel generate`: text from a prompt, streamed to stdout as it is produced, with a stats line on
// stderr. When the model has a chat template the prompt is sent as a user message (as mlx-lm
// does); --no-chat-template sends the raw text. A harmony model's (gpt-oss) channels are shown as
// answer.h describes.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "answer.h"
#include "cli.h"
#include "constrain.h"
#include "commands.h"
#include "core/clock.h"
#include "generate/engine.h"
#include "prompt.h"

static void usage(FILE *to) {
    fprintf(to,
            "usage: mlxcel generate [-m MODEL] -p PROMPT [-n N] [options]\n"
            "  -p, --prompt TEXT       the prompt; '-' reads it from standard input\n"
            "  -n, --max-tokens N      tokens to generate; -1 runs to EOS or the context limit (default 100)\n"
            "  --system TEXT           system message (chat template)\n"
            "  --no-chat-template      send the prompt as raw text\n"
            "  --ignore-eos            keep generating past end-of-sequence tokens\n"
            "  --json-schema FILE      output is JSON valid against the schema in FILE (constrained decoding)\n"
            "  --grammar FILE          output follows the GBNF grammar in FILE (constrained decoding)\n"
            "%s",
            cli_model_help);
    mx_sampling d = mx_sampling_defaults();
    cli_sampling_usage(to, &d);
}

static bool print_text(void *user, const mx_token_event *ev) {
    answer_printer_push(user, ev->text, ev->len);
    return true;
}

int cmd_generate(int argc, char **argv) {
    const char *cmd = "generate", *prompt_arg = NULL, *system = NULL, *schema_path = NULL, *grammar_path = NULL;
    int max_new = 100;
    bool no_template = false, ignore_eos = false;
    cli_model_opts mo = {0};
    mx_sampling sp = mx_sampling_defaults();
    const cli_common_opts common = {.model = &mo, .sampling = &sp, .usage = usage};
    for (int i = 1; i < argc; i++) {
        int r = cli_common_opt(cmd, argc, argv, &i, &common);
        if (r == CLI_OPT_TAKEN) continue;
        if (r != CLI_OPT_OWN) return r;
        const char *a = argv[i], *v;
        if (cli_is(a, "-p", "--prompt")) {
            if (!(prompt_arg = cli_value(cmd, argc, argv, &i))) return MX_EXIT_USAGE;
        } else if (cli_is(a, "-n", "--max-tokens")) {
            if (!(v = cli_value(cmd, argc, argv, &i)) || cli_int(cmd, a, v, -1, 1 << 24, &max_new)) return MX_EXIT_USAGE;
        } else if (cli_is(a, NULL, "--system")) {
            if (!(system = cli_value(cmd, argc, argv, &i))) return MX_EXIT_USAGE;
        } else if (cli_is(a, NULL, "--no-chat-template")) {
            no_template = true;
        } else if (cli_is(a, NULL, "--ignore-eos")) {
            ignore_eos = true;
        } else if (cli_is(a, NULL, "--json-schema")) {
            if (!(schema_path = cli_value(cmd, argc, argv, &i))) return MX_EXIT_USAGE;
        } else if (cli_is(a, NULL, "--grammar")) {
            if (!(grammar_path = cli_value(cmd, argc, argv, &i))) return MX_EXIT_USAGE;
        } else {
            cli_error(cmd, "unknown option '%s'", a);
            usage(stderr);
            return MX_EXIT_USAGE;
        }
    }
    if (!prompt_arg) {
        cli_error(cmd, "a prompt is required (-p TEXT, or -p - to read standard input)");
        return MX_EXIT_USAGE;
    }
    char *prompt_text = prompt_read_arg(cmd, prompt_arg);
    if (!prompt_text) return MX_EXIT_RUNTIME;

    int rc = MX_EXIT_RUNTIME;
    mx_backend *be = NULL;
    mx_model *m = NULL;
    char *dir = NULL;
    mx_tokenizer *tok = NULL;
    mx_engine *eng = NULL;
    mx_seq *seq = NULL;
    cli_constraint cons = {0};
    answer_printer ap = {0};
    int32_t *ids = NULL;
    size_t n_ids = 0;
    mx_error err = {{0}};
    if (cli_open_model(cmd, &mo, &be, &m, &dir) != 0) goto done;
    if (!(tok = prompt_load_tokenizer(cmd, dir))) goto done;
    int32_t extra_eos = -1;
    if (prompt_encode(cmd, dir, tok, prompt_text, system, !no_template, &ids, &n_ids, &extra_eos) != 0) goto done;
    if (cli_constraint_open(cmd, schema_path, grammar_path, tok, m, extra_eos, &cons) != 0) goto done;
    const mx_config *cfg = mx_model_config(m);
    int max_ctx = mo.ctx ? mo.ctx : (int)n_ids + (max_new >= 0 ? max_new : 4096) + 1;
    if (max_ctx > cfg->max_position_embeddings && !mo.ctx) max_ctx = cfg->max_position_embeddings;
    if ((int)n_ids + 1 > max_ctx) {
        cli_error(cmd, "the prompt has %zu tokens but the context holds %d (use --ctx)", n_ids, max_ctx);
        goto done;
    }
    mx_engine_opts eo = {.n_slots = 1, .max_ctx = max_ctx, .prefill_chunk = 512, .prefix_reuse = false,
                         .threads = mo.threads};
    int32_t stops[3];
    int n_stops = answer_stop_ids(tok, extra_eos, stops);
    if (answer_printer_init(&ap, tok, stdout) != 0) {
        cli_error(cmd, "out of memory");
        goto done;
    }
    mx_seq_opts so = {.sampling = sp, .max_new = max_new, .ignore_eos = ignore_eos, .stop_ids = stops,
                      .n_stop_ids = n_stops, .n_logprobs = -1, .on_token = print_text, .user = &ap,
                      .matcher = cons.matcher};
    if (!(eng = mx_engine_create(m, &eo, &err)) || !(seq = mx_seq_create(tok, ids, (int)n_ids, &so, max_ctx, &err)) ||
        mx_engine_admit(eng, seq, &err) != 0) {
        cli_error(cmd, "%s", err.msg);
        goto done;
    }
    int run_rc = mx_engine_run(eng, &err);
    answer_printer_finish(&ap);
    if (run_rc != 0 || mx_seq_finish_reason(seq) == MX_FINISH_ERROR) {
        fputc('\n', stdout);
        cli_error(cmd, "%s", err.msg[0] ? err.msg : mx_seq_error(seq));
        goto done;
    }
    int n_gen;
    mx_seq_generated(seq, &n_gen);
    int n_prompt = mx_seq_prompt_len(seq);
    double t_admit = mx_seq_time_admitted(seq), t_first = mx_seq_time_first(seq), t_done = mx_seq_time_done(seq);
    fputc('\n', stdout);
    fflush(stdout);
    fprintf(stderr, "Backend: %s, %s\n", be->ops->name, be->device_name);
    // The prompt's time ends with the first token (the prefill step chooses it); the rate of
    // generation counts the tokens after it.
    fprintf(stderr, "Prompt: %d tokens, %.3f tokens-per-sec\n", n_prompt,
            t_first > t_admit ? n_prompt / (t_first - t_admit) : 0.0);
    fprintf(stderr, "Generation: %d tokens, %.3f tokens-per-sec\n", n_gen,
            n_gen > 1 && t_done > t_first ? (n_gen - 1) / (t_done - t_first) : 0.0);
    fprintf(stderr, "Peak memory: %.3f GB\n", cli_peak_rss() / 1e9);
    rc = MX_EXIT_OK;
done:
    free(prompt_text);
    free(ids);
    free(dir);
    if (eng && seq) mx_engine_release(eng, seq);
    mx_seq_free(seq);
    mx_engine_free(eng);
    cli_constraint_close(&cons);
    answer_printer_free(&ap);
    mx_tokenizer_free(tok);
    mx_model_free(m);
    mx_backend_free(be);
    return rc;
}
