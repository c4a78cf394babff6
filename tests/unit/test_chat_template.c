// SPDX-License-Identifier: MIT
// Chat-template parity: the 16 renderings of the real Qwen3 template in
// tests/fixtures/chat_cases.json (made by jinja2 through transformers' apply_chat_template) must be
// reproduced byte for byte. Also covers loading from a model folder (chat_template.jinja,
// tokenizer_config.json string and list forms, no template at all), load-time errors and
// concurrent rendering of one template.
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "chat/chat_template.h"
#include "check.h"

#define CASES_PATH "tests/fixtures/chat_cases.json"
#define CONFIG_PATH "tests/fixtures/qwen3_tokenizer_config.json"

// Splits a case's kwargs into tools and the remaining template variables.
static void case_inputs(json_t *c, json_t **tools, json_t **extra) {
    json_t *kwargs = json_object_get(c, "kwargs");
    *tools = json_object_get(kwargs, "tools");
    *extra = json_object();
    const char *key;
    json_t *val;
    json_object_foreach(kwargs, key, val) if (strcmp(key, "tools") != 0) json_object_set(*extra, key, val);
}

static size_t first_difference(const char *a, const char *b) {
    size_t i = 0;
    while (a[i] && a[i] == b[i]) i++;
    return i;
}

// Renders every fixture case with t; returns the number of mismatches.
static int check_cases(const mx_chat_template *t, json_t *cases, const char *label) {
    int bad = 0;
    size_t i;
    json_t *c;
    json_array_foreach(cases, i, c) {
        json_t *tools, *extra;
        case_inputs(c, &tools, &extra);
        mx_error err = {{0}};
        bool agp = json_is_true(json_object_get(c, "add_generation_prompt"));
        char *out = mx_chat_template_render(t, json_object_get(c, "messages"), tools, agp, extra, &err);
        const char *want = json_string_value(json_object_get(c, "rendered"));
        if (!out) {
            bad++;
            CHECK_MSG(out != NULL, "%s case %zu: %s", label, i, err.msg);
        } else if (strcmp(out, want) != 0) {
            bad++;
            size_t at = first_difference(out, want);
            CHECK_MSG(0, "%s case %zu differs at byte %zu:\n  got:      [%s]\n  expected: [%s]", label, i, at, out + at,
                      want + at);
        } else
            CHECK(1);
        free(out);
        json_decref(extra);
    }
    return bad;
}

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    CHECK_MSG(f != NULL, "cannot write %s", path);
    if (!f) return;
    fputs(text, f);
    fclose(f);
}

static void test_fixture_cases(json_t *cases, const char *tpl) {
    mx_error err = {{0}};
    mx_chat_template *t = mx_chat_template_from_string(tpl, NULL, "<|im_end|>", &err);
    CHECK_MSG(t != NULL, "%s", err.msg);
    if (!t) return;
    CHECK(check_cases(t, cases, "from_string") == 0);
    CHECK(json_array_size(cases) == 16);
    mx_chat_template_free(t);
}

static void test_load_folder(json_t *cases, json_t *config, const char *tpl) {
    char dir[] = "/tmp/mx_chat_test_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char cfg_path[256], jinja_path[256];
    snprintf(cfg_path, sizeof cfg_path, "%s/tokenizer_config.json", dir);
    snprintf(jinja_path, sizeof jinja_path, "%s/chat_template.jinja", dir);
    mx_error err = {{0}};

    // No files at all: no template, and no error message.
    mx_chat_template *t = mx_chat_template_load(dir, &err);
    CHECK(t == NULL);
    CHECK_MSG(err.msg[0] == 0, "%s", err.msg);

    // tokenizer_config.json with the template as a string.
    CHECK(json_dump_file(config, cfg_path, 0) == 0);
    t = mx_chat_template_load(dir, &err);
    CHECK_MSG(t != NULL, "%s", err.msg);
    if (t) {
        CHECK(check_cases(t, cases, "tokenizer_config") == 0);
        CHECK(mx_chat_template_bos(t) == NULL);
        CHECK(mx_chat_template_eos(t) && strcmp(mx_chat_template_eos(t), "<|im_end|>") == 0);
        mx_chat_template_free(t);
    }

    // A list of named templates; "tool_use" is picked when tools are given.
    json_t *cfg2 = json_deep_copy(config);
    json_t *list = json_pack("[{s:s, s:s}, {s:s, s:s}]", "name", "default", "template", tpl, "name", "tool_use", "template",
                             "TOOLS{{ tools | length }}");
    json_object_set_new(cfg2, "chat_template", list);
    json_object_set_new(cfg2, "bos_token", json_pack("{s:s}", "content", "<s>"));
    CHECK(json_dump_file(cfg2, cfg_path, 0) == 0);
    t = mx_chat_template_load(dir, &err);
    CHECK_MSG(t != NULL, "%s", err.msg);
    if (t) {
        CHECK(mx_chat_template_bos(t) && strcmp(mx_chat_template_bos(t), "<s>") == 0);
        json_t *msgs = json_pack("[{s:s, s:s}]", "role", "user", "content", "Hi");
        json_t *tools = json_pack("[{s:s}]", "type", "function");
        char *out = mx_chat_template_render(t, msgs, tools, true, NULL, &err);
        CHECK(out && strcmp(out, "TOOLS1") == 0);
        free(out);
        out = mx_chat_template_render(t, msgs, NULL, true, NULL, &err);
        CHECK(out && strcmp(out, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n") == 0);
        free(out);
        json_decref(msgs);
        json_decref(tools);
        mx_chat_template_free(t);
    }
    json_decref(cfg2);

    // chat_template.jinja wins over tokenizer_config.json; its trailing newline is dropped.
    write_file(jinja_path, "{{ bos_token }}|{{ eos_token }}|{{ messages | length }}|{{ enable_thinking }}\n");
    CHECK(json_dump_file(config, cfg_path, 0) == 0);
    t = mx_chat_template_load(dir, &err);
    CHECK_MSG(t != NULL, "%s", err.msg);
    if (t) {
        json_t *msgs = json_pack("[{s:s, s:s}]", "role", "user", "content", "Hi");
        json_t *extra = json_pack("{s:b}", "enable_thinking", 0);
        char *out = mx_chat_template_render(t, msgs, NULL, false, extra, &err);
        CHECK_MSG(out && strcmp(out, "|<|im_end|>|1|False") == 0, "[%s] %s", out ? out : "", err.msg);
        free(out);
        json_decref(msgs);
        json_decref(extra);
        mx_chat_template_free(t);
    }

    // A syntax error is a load error naming the file, the line and the construct.
    write_file(jinja_path, "ok\n{% for m in messages %}\n");
    t = mx_chat_template_load(dir, &err);
    CHECK(t == NULL);
    CHECK_MSG(strstr(err.msg, "chat_template.jinja") && strstr(err.msg, "line 2") && strstr(err.msg, "unclosed 'for' block"),
              "%s", err.msg);
    // An unknown filter fails when a render reaches it (as in jinja2), naming line and filter.
    write_file(jinja_path, "ok\n{% if messages %}{{ messages | nosuch }}{% endif %}\n");
    t = mx_chat_template_load(dir, &err);
    CHECK_MSG(t != NULL, "%s", err.msg);
    if (t) {
        json_t *msgs = json_array();
        char *out = mx_chat_template_render(t, msgs, NULL, false, NULL, &err);
        CHECK_MSG(out && strcmp(out, "ok\n") == 0, "[%s]", out ? out : err.msg);
        free(out);
        json_array_append_new(msgs, json_pack("{s:s}", "role", "user"));
        out = mx_chat_template_render(t, msgs, NULL, false, NULL, &err);
        CHECK(out == NULL);
        CHECK_MSG(strstr(err.msg, "chat template line 2: unknown filter 'nosuch'") != NULL, "%s", err.msg);
        free(out);
        json_decref(msgs);
        mx_chat_template_free(t);
    }

    // Llama 3.x publishes "model_max_length": 1000000000000000019884624838656, an integer beyond
    // 64 bits in a key mlxcel does not use: the load must not stop on it. A used key with a wrong
    // value is an error naming the key.
    unlink(jinja_path);
    write_file(cfg_path, "{\n  \"bos_token\": \"<|begin_of_text|>\",\n"
                         "  \"model_max_length\": 1000000000000000019884624838656,\n"
                         "  \"other\": [-99999999999999999999999, 1e300, \"123456789012345678901234567890\"],\n"
                         "  \"eos_token\": \"<|eot_id|>\",\n"
                         "  \"chat_template\": \"{{ bos_token }}{{ messages[0].content }}{{ eos_token }}\"\n}\n");
    t = mx_chat_template_load(dir, &err);
    CHECK_MSG(t != NULL, "%s", err.msg);
    if (t) {
        json_t *msgs = json_pack("[{s:s, s:s}]", "role", "user", "content", "Hi");
        char *out = mx_chat_template_render(t, msgs, NULL, false, NULL, &err);
        CHECK_MSG(out && strcmp(out, "<|begin_of_text|>Hi<|eot_id|>") == 0, "[%s] %s", out ? out : "", err.msg);
        free(out);
        json_decref(msgs);
        mx_chat_template_free(t);
    }
    write_file(cfg_path, "{\"eos_token\": 1000000000000000019884624838656, \"chat_template\": \"x\"}");
    t = mx_chat_template_load(dir, &err);
    CHECK(t == NULL);
    CHECK_MSG(strstr(err.msg, "tokenizer_config.json") && strstr(err.msg, "'eos_token'"), "%s", err.msg);

    // Unreadable JSON config.
    write_file(cfg_path, "{not json");
    t = mx_chat_template_load(dir, &err);
    CHECK(t == NULL);
    CHECK_MSG(strstr(err.msg, "tokenizer_config.json") != NULL, "%s", err.msg);

    unlink(cfg_path);
    rmdir(dir);
}

static void test_render_errors(const char *tpl) {
    mx_error err = {{0}};
    mx_chat_template *t = mx_chat_template_from_string(
        "{% for m in messages %}{% if m.role not in ['user', 'assistant'] %}"
        "{{ raise_exception('Unknown role: ' + m.role) }}{% endif %}{{ m.content }}{% endfor %}",
        NULL, NULL, &err);
    CHECK_MSG(t != NULL, "%s", err.msg);
    if (t) {
        json_t *msgs = json_pack("[{s:s, s:s}]", "role", "robot", "content", "x");
        char *out = mx_chat_template_render(t, msgs, NULL, false, NULL, &err);
        CHECK(out == NULL);
        CHECK_MSG(strstr(err.msg, "chat template line 1: raise_exception: Unknown role: robot") != NULL, "%s", err.msg);
        free(out);
        out = mx_chat_template_render(t, json_object_get(msgs, "role"), NULL, false, NULL, &err);
        CHECK(out == NULL && strstr(err.msg, "messages") != NULL);
        json_decref(msgs);
        mx_chat_template_free(t);
    }
    // The Qwen3 template applied to a message without content fails rather than inventing text.
    t = mx_chat_template_from_string(tpl, NULL, NULL, &err);
    if (t) {
        json_t *msgs = json_pack("[{s:s, s:n}]", "role", "user", "content");
        char *out = mx_chat_template_render(t, msgs, NULL, true, NULL, &err);
        CHECK(out == NULL);
        CHECK_MSG(strstr(err.msg, "chat template line ") != NULL, "%s", err.msg);
        free(out);
        json_decref(msgs);
        mx_chat_template_free(t);
    }
    t = mx_chat_template_from_string("{% if %}", NULL, NULL, &err);
    CHECK(t == NULL);
    CHECK_MSG(strstr(err.msg, "chat template line 1") != NULL, "%s", err.msg);
    mx_chat_template_free(NULL);
}

typedef struct thread_arg {
    const mx_chat_template *t;
    json_t *cases;
    int bad;
} thread_arg;

static void *render_all(void *p) {
    thread_arg *a = p;
    for (int round = 0; round < 20; round++) {
        size_t i;
        json_t *c;
        json_array_foreach(a->cases, i, c) {
            json_t *kwargs = json_object_get(c, "kwargs");
            mx_error err = {{0}};
            // Extra variables are passed as the kwargs object itself (tools included), read-only.
            char *out = mx_chat_template_render(a->t, json_object_get(c, "messages"), json_object_get(kwargs, "tools"),
                                                json_is_true(json_object_get(c, "add_generation_prompt")), kwargs, &err);
            if (!out || strcmp(out, json_string_value(json_object_get(c, "rendered"))) != 0) a->bad++;
            free(out);
        }
    }
    return NULL;
}

static void test_threads(json_t *cases, const char *tpl) {
    mx_error err = {{0}};
    mx_chat_template *t = mx_chat_template_from_string(tpl, NULL, "<|im_end|>", &err);
    if (!t) return;
    pthread_t th[4];
    thread_arg args[4];
    for (int i = 0; i < 4; i++) {
        args[i] = (thread_arg){.t = t, .cases = cases};
        pthread_create(&th[i], NULL, render_all, &args[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        CHECK_MSG(args[i].bad == 0, "thread %d: %d mismatches", i, args[i].bad);
    }
    mx_chat_template_free(t);
}

int main(void) {
    json_error_t je;
    json_t *fixture = json_load_file(CASES_PATH, 0, &je);
    json_t *config = json_load_file(CONFIG_PATH, 0, &je);
    CHECK_MSG(fixture && config, "cannot load fixtures: %s", je.text);
    if (!fixture || !config) return check_finish();
    json_t *cases = json_object_get(fixture, "cases");
    const char *tpl = json_string_value(json_object_get(config, "chat_template"));
    CHECK(json_is_array(cases) && tpl);
    if (json_is_array(cases) && tpl) {
        test_fixture_cases(cases, tpl);
        test_load_folder(cases, config, tpl);
        test_render_errors(tpl);
        test_threads(cases, tpl);
    }
    json_decref(fixture);
    json_decref(config);
    return check_finish();
}
