// SPDX-License-Identifier: MIT
// `mlxcel chat`: an interactive multi-turn chat in the terminal. The whole conversation is rendered
// through the chat template at each turn, and only the tokens after the full KV blocks already in the
// cache are computed (the engine's prefix cache, src/generate/engine.h), so earlier turns are not
// recomputed. Ctrl-C stops the current answer (the partial answer stays in the history); /reset clears the conversation; /exit or end of input
// quits. A model without a chat template gets plain "User:/Assistant:" turns. A harmony model's
// (gpt-oss) channels are shown as answer.h describes, and its history keeps the final channel.
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "answer.h"
#include "chat/chat_template.h"
#include "cli.h"
#include "commands.h"
#include "core/env_switch.h"
#include "generate/engine.h"
#include "prompt.h"

static volatile sig_atomic_t interrupted;

static void on_sigint(int sig) {
    (void)sig;
    interrupted = 1;
}

typedef struct answer {
    char *text;
    size_t len, cap;
    answer_printer *printer;
} answer;

static bool collect_and_print(void *user, const mx_token_event *ev) {
    answer *a = user;
    const char *text = ev->text;
    size_t len = ev->len;
    answer_printer_push(a->printer, text, len);
    if (a->len + len + 1 > a->cap) {
        size_t cap = 2 * (a->len + len + 1);
        char *g = realloc(a->text, cap);
        if (!g) return false;
        a->text = g;
        a->cap = cap;
    }
    memcpy(a->text + a->len, text, len);
    a->len += len;
    a->text[a->len] = 0;
    return !interrupted;
}

// Renders the conversation (template or plain turns) ending with the assistant's turn opening.
static char *render(const mx_chat_template *t, json_t *messages, mx_error *err) {
    if (t) return mx_chat_template_render(t, messages, NULL, true, NULL, err);
    size_t cap = 256;
    size_t i;
    json_t *m;
    json_array_foreach(messages, i, m) cap += strlen(json_string_value(json_object_get(m, "content"))) + 32;
    char *out = calloc(1, cap);
    if (!out) return NULL;
    json_array_foreach(messages, i, m) {
        const char *role = json_string_value(json_object_get(m, "role"));
        snprintf(out + strlen(out), cap - strlen(out), "%s: %s\n\n",
                 strcmp(role, "user") == 0 ? "User" : strcmp(role, "system") == 0 ? "System" : "Assistant",
                 json_string_value(json_object_get(m, "content")));
    }
    snprintf(out + strlen(out), cap - strlen(out), "Assistant:");
    return out;
}

// The conversation's defaults: sampled (a conversation reads better so; --temp 0 gives greedy answers).
#define CHAT_TEMP 0.7f
#define CHAT_MAX_TOKENS 512

static void usage(FILE *to) {
    fprintf(to, "usage: mlxcel chat [-m MODEL] [--system TEXT] [-n MAX_TOKENS_PER_ANSWER] [options]\n"
                "  type a message and press enter; /reset clears the conversation, /exit quits;\n"
                "  Ctrl-C stops the current answer.\n"
                "  --system TEXT           system message at the start of the conversation (chat template)\n"
                "  -n, --max-tokens N      tokens per answer at most (default %d)\n"
                "  --no-prefix-cache       recompute the whole conversation at each turn\n"
                "  --print-prompt          print each turn's whole prompt, as the model gets it, to stderr\n"
                "%s",
            CHAT_MAX_TOKENS, cli_model_help);
    mx_sampling d = mx_sampling_defaults();
    d.temp = CHAT_TEMP;
    cli_sampling_usage(to, &d);
}

int cmd_chat(int argc, char **argv) {
    const char *cmd = "chat", *system = NULL;
    int max_new = CHAT_MAX_TOKENS;
    bool reuse_cache = true, print_prompt = false;
    cli_model_opts mo = {0};
    mx_sampling sp = mx_sampling_defaults();
    sp.temp = CHAT_TEMP;
    const cli_common_opts common = {.model = &mo, .sampling = &sp, .usage = usage};
    for (int i = 1; i < argc; i++) {
        int r = cli_common_opt(cmd, argc, argv, &i, &common);
        if (r == CLI_OPT_TAKEN) continue;
        if (r != CLI_OPT_OWN) return r;
        const char *a = argv[i], *v;
        if (cli_is(a, NULL, "--system")) {
            if (!(system = cli_value(cmd, argc, argv, &i))) return MX_EXIT_USAGE;
        } else if (cli_is(a, NULL, "--no-prefix-cache")) {
            reuse_cache = false;  // recompute the whole conversation each turn (tests compare both)
        } else if (cli_is(a, NULL, "--print-prompt")) {
            print_prompt = true;
        } else if (cli_is(a, "-n", "--max-tokens")) {
            if (!(v = cli_value(cmd, argc, argv, &i)) || cli_int(cmd, a, v, 1, 1 << 20, &max_new)) return MX_EXIT_USAGE;
        } else {
            cli_error(cmd, "unknown option '%s'", a);
            usage(stderr);
            return MX_EXIT_USAGE;
        }
    }
    mx_backend *be = NULL;
    mx_model *m = NULL;
    char *dir = NULL;
    mx_tokenizer *tok = NULL;
    mx_chat_template *tmpl = NULL;
    mx_engine *eng = NULL;
    int rc = MX_EXIT_RUNTIME;
    json_t *messages = json_array();
    mx_error err = {{0}};
    char line[16384];
    if (cli_open_model(cmd, &mo, &be, &m, &dir) != 0 || !(tok = prompt_load_tokenizer(cmd, dir))) goto done;
    tmpl = mx_chat_template_load(dir, &err);
    if (!tmpl && err.msg[0]) {
        cli_error(cmd, "%s", err.msg);
        goto done;
    }
    if (!tmpl) fprintf(stderr, "mlxcel chat: this model has no chat template; using plain User:/Assistant: turns\n");
    int32_t turn_end = tmpl && mx_chat_template_eos(tmpl) ? mx_tokenizer_token_id(tok, mx_chat_template_eos(tmpl)) : -1;
    int32_t stops[3];
    int n_stops = answer_stop_ids(tok, turn_end, stops);
    const mx_config *cfg = mx_model_config(m);
    int max_ctx = mo.ctx ? mo.ctx : (cfg->max_position_embeddings < 4096 ? cfg->max_position_embeddings : 4096);
    mx_engine_opts eo = {.n_slots = 1, .max_ctx = max_ctx, .prefill_chunk = 512, .prefix_reuse = reuse_cache,
                         .threads = mo.threads};
    if (!(eng = mx_engine_create(m, &eo, &err))) {
        cli_error(cmd, "%s", err.msg);
        goto done;
    }
    if (system) json_array_append_new(messages, json_pack("{s:s, s:s}", "role", "system", "content", system));
    signal(SIGINT, on_sigint);
    fprintf(stderr, "mlxcel chat on %s (%s). /reset clears, /exit quits, Ctrl-C stops an answer.\n", dir, be->device_name);
    for (;;) {
        fputs("> ", stdout);
        fflush(stdout);
        interrupted = 0;
        if (!fgets(line, sizeof line, stdin)) {
            if (interrupted) {  // Ctrl-C at the prompt: a fresh prompt, not an exit
                clearerr(stdin);
                fputc('\n', stdout);
                continue;
            }
            break;
        }
        line[strcspn(line, "\r\n")] = 0;
        if (!line[0]) continue;
        if (strcmp(line, "/exit") == 0 || strcmp(line, "/quit") == 0) break;
        if (strcmp(line, "/reset") == 0) {
            json_array_clear(messages);
            if (system) json_array_append_new(messages, json_pack("{s:s, s:s}", "role", "system", "content", system));
            mx_engine_forget(eng);
            printf("(conversation cleared)\n");
            continue;
        }
        json_array_append_new(messages, json_pack("{s:s, s:s}", "role", "user", "content", line));
        char *text = render(tmpl, messages, &err);
        int32_t *ids = NULL;
        size_t n_ids = 0;
        if (!text || mx_tokenizer_encode(tok, text, strlen(text), &ids, &n_ids, &err) != 0) {
            cli_error(cmd, "%s", err.msg);
            free(text);
            json_array_remove(messages, json_array_size(messages) - 1);
            continue;
        }
        if (print_prompt) fprintf(stderr, "--- prompt (%zu tokens) ---\n%s\n--- end of prompt ---\n", n_ids, text);
        free(text);
        if ((int)n_ids + 1 >= max_ctx) {
            cli_error(cmd, "the conversation has %zu tokens and the context holds %d: /reset to start over", n_ids, max_ctx);
            free(ids);
            json_array_remove(messages, json_array_size(messages) - 1);
            continue;
        }
        answer_printer ap;
        if (answer_printer_init(&ap, tok, stdout) != 0) {
            cli_error(cmd, "out of memory");
            free(ids);
            break;
        }
        answer a = {.printer = &ap};
        mx_seq_opts so = {.sampling = sp, .max_new = max_new, .stop_ids = stops, .n_stop_ids = n_stops,
                          .n_logprobs = -1, .on_token = collect_and_print, .user = &a};
        mx_seq *seq = mx_seq_create(tok, ids, (int)n_ids, &so, max_ctx, &err);
        int grc = !seq || mx_engine_admit(eng, seq, &err) != 0 ? -1 : mx_engine_run(eng, &err);
        answer_printer_finish(&ap);
        fputc('\n', stdout);
        if (grc != 0) cli_error(cmd, "%s", err.msg);
        if (seq && mx_env_switch("MLXCEL_CHAT_DEBUG")) fprintf(stderr, "(reusing %d of %zu tokens)\n", mx_seq_reused(seq), n_ids);
        if (seq && mx_seq_finish_reason(seq) == MX_FINISH_STOP && interrupted) fprintf(stderr, "(stopped)\n");
        if (seq) mx_engine_release(eng, seq);
        mx_seq_free(seq);
        const char *said = answer_printer_content(&ap) ? answer_printer_content(&ap) : a.text ? a.text : "";
        json_array_append_new(messages, json_pack("{s:s, s:s}", "role", "assistant", "content", said));
        answer_printer_free(&ap);
        free(a.text);
        free(ids);
    }
    rc = MX_EXIT_OK;
done:
    json_decref(messages);
    free(dir);
    mx_engine_free(eng);
    mx_chat_template_free(tmpl);
    mx_tokenizer_free(tok);
    mx_model_free(m);
    mx_backend_free(be);
    return rc;
}
