// SPDX-License-Identifier: MIT
// `mlxcel chat`: an interactive multi-turn chat in the terminal. The whole conversation is rendered
// through the chat template at each turn, and only the tokens after the longest prefix already in
// the KV cache are computed, so earlier turns are not recomputed. Ctrl-C stops the current answer
// (the partial answer stays in the history); /reset clears the conversation; /exit or end of input
// quits. A model without a chat template gets plain "User:/Assistant:" turns.
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/chat_template.h"
#include "cli.h"
#include "commands.h"
#include "gen_loop.h"
#include "prompt.h"

static volatile sig_atomic_t interrupted;

static void on_sigint(int sig) {
    (void)sig;
    interrupted = 1;
}

typedef struct answer {
    char *text;
    size_t len, cap;
} answer;

static bool collect_and_print(void *user, const char *text, size_t len) {
    answer *a = user;
    fwrite(text, 1, len, stdout);
    fflush(stdout);
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

static void usage(FILE *to) {
    fprintf(to, "usage: mlxcel chat [-m MODEL] [--system TEXT] [-n MAX_TOKENS_PER_ANSWER] [options]\n"
                "  type a message and press enter; /reset clears the conversation, /exit quits;\n"
                "  Ctrl-C stops the current answer.\n"
                "  --no-prefix-cache       recompute the whole conversation at each turn\n"
                "  --print-prompt          print each turn's whole prompt, as the model gets it, to stderr\n%s%s", cli_model_help, cli_sampling_help);
}

int cmd_chat(int argc, char **argv) {
    const char *cmd = "chat", *system = NULL;
    int max_new = 512;
    bool reuse_cache = true, print_prompt = false;
    cli_model_opts mo = {0};
    mx_sampling sp = mx_sampling_defaults();
    sp.temp = 0.7f;  // a conversation reads better sampled; --temp 0 gives greedy answers
    for (int i = 1; i < argc; i++) {
        int r = cli_model_opt(cmd, argc, argv, &i, &mo);
        if (r == 0) r = cli_sampling_opt(cmd, argc, argv, &i, &sp);
        if (r < 0) return MX_EXIT_USAGE;
        if (r > 0) continue;
        const char *a = argv[i], *v;
        if (cli_is(a, "-h", "--help")) {
            usage(stdout);
            return MX_EXIT_OK;
        } else if (cli_is(a, NULL, "--system")) {
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
    mx_ctx *ctx = NULL;
    mx_sampler *sampler = NULL;
    int32_t *cached = NULL, *gen_ids = NULL;
    int n_cached = 0, rc = MX_EXIT_RUNTIME;
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
    const mx_config *cfg = mx_model_config(m);
    int max_ctx = mo.ctx ? mo.ctx : (cfg->max_position_embeddings < 4096 ? cfg->max_position_embeddings : 4096);
    if (!(ctx = mx_ctx_create(m, 1, max_ctx, 512, &err)) || !(sampler = mx_sampler_create(&sp, cfg->vocab_size)) ||
        !(cached = malloc(sizeof *cached * max_ctx)) || !(gen_ids = malloc(sizeof *gen_ids * (max_new + 1)))) {
        cli_error(cmd, "%s", err.msg[0] ? err.msg : "out of memory");
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
            n_cached = 0;
            mx_sampler_reset(sampler);
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
        int prefix = 0;  // reuse the cached tokens that the new rendering starts with
        while (reuse_cache && prefix < n_cached && prefix < (int)n_ids && cached[prefix] == ids[prefix]) prefix++;
        if (prefix == (int)n_ids) prefix--;  // at least one token must be computed
        if (getenv("MLXCEL_CHAT_DEBUG")) fprintf(stderr, "(reusing %d of %zu tokens)\n", prefix, n_ids);
        answer a = {0};
        gen_request req = {.ctx = ctx, .model = m, .tok = tok, .sampler = sampler, .params = &sp, .prompt = ids + prefix,
                           .n_prompt = (int)n_ids - prefix, .start_pos = prefix, .max_new = max_new,
                           .extra_eos = turn_end, .on_text = collect_and_print, .user = &a, .out_ids = gen_ids};
        gen_stats st;
        mx_sampler_reset(sampler);
        int grc = gen_run(&req, &st, &err);
        fputc('\n', stdout);
        if (grc != 0) cli_error(cmd, "%s", err.msg);
        if (st.stopped) fprintf(stderr, "(stopped)\n");
        // The cache now holds the prompt and every generated token but the last one.
        memcpy(cached, ids, sizeof *ids * n_ids);
        n_cached = (int)n_ids;
        for (int g = 0; g + 1 < st.generated_tokens && n_cached < max_ctx; g++) cached[n_cached++] = gen_ids[g];
        json_array_append_new(messages, json_pack("{s:s, s:s}", "role", "assistant", "content", a.text ? a.text : ""));
        free(a.text);
        free(ids);
    }
    rc = MX_EXIT_OK;
done:
    json_decref(messages);
    free(cached);
    free(gen_ids);
    free(dir);
    mx_sampler_free(sampler);
    mx_ctx_free(ctx);
    mx_chat_template_free(tmpl);
    mx_tokenizer_free(tok);
    mx_model_free(m);
    mx_backend_free(be);
    return rc;
}
