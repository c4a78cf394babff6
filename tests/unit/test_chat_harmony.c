// SPDX-License-Identifier: MIT
// Chat-template parity for gpt-oss (harmony): the real gpt-oss chat templates (the current one,
// tests/fixtures/gpt_oss_chat_template.jinja, and the 2025-08-05 release's, whose string literals
// hold raw newlines) rendered by mlxcel must equal jinja2's renderings in
// tests/fixtures/gpt_oss_chat_cases.json and gpt_oss_0805_chat_cases.json byte for byte (system and developer messages, multi-turn,
// reasoning_effort and model_identity, function tools with every schema shape the template's
// TypeScript rendering knows, built-in tools, tool calls and tool results). Cases where jinja2
// raises must fail here too, with the template's own raise_exception message. The generator pins
// strftime_now to the fixture's "date"; the template here runs with the real clock, so that date is
// replaced by today's in the expected text (the only substitution).
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "chat/chat_template.h"
#include "check.h"

static const char *const FIXTURES[][2] = {
    {"tests/fixtures/gpt_oss_chat_template.jinja", "tests/fixtures/gpt_oss_chat_cases.json"},
    {"tests/fixtures/gpt_oss_chat_template_0805.jinja", "tests/fixtures/gpt_oss_0805_chat_cases.json"},
};

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
        free(s);
        s = NULL;
    }
    if (s) s[n] = 0;
    fclose(f);
    return s;
}

static void today(char out[16]) {
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    strftime(out, 16, "%Y-%m-%d", &tm);
}

// want with every "Current date: <pinned>" replaced by "Current date: <date>" (malloc'ed).
static char *with_date(const char *want, const char *pinned, const char *date) {
    char from[64], to[64];
    snprintf(from, sizeof from, "Current date: %s", pinned);
    snprintf(to, sizeof to, "Current date: %s", date);
    size_t n = strlen(want), lf = strlen(from), lt = strlen(to);
    char *out = malloc(n + 64 * (lt + 1) + 1), *o = out;
    if (!out) return NULL;
    for (const char *p = want; *p;) {
        if (strncmp(p, from, lf) == 0) {
            memcpy(o, to, lt), o += lt, p += lf;
        } else {
            *o++ = *p++;
        }
    }
    *o = 0;
    return out;
}

static size_t first_difference(const char *a, const char *b) {
    size_t i = 0;
    while (a[i] && a[i] == b[i]) i++;
    return i;
}

// Renders one case; returns 0 when it matches jinja2 (text or error).
static int check_case(const mx_chat_template *t, json_t *c, size_t i, const char *pinned) {
    json_t *kwargs = json_object_get(c, "kwargs");
    json_t *extra = json_deep_copy(kwargs);
    json_t *tools = json_object_get(kwargs, "tools");
    json_object_del(extra, "tools");
    bool agp = json_is_true(json_object_get(c, "add_generation_prompt"));
    const char *want = json_string_value(json_object_get(c, "rendered"));
    const char *want_err = json_string_value(json_object_get(c, "error"));
    int bad = 0;
    for (int attempt = 0; attempt < 2; attempt++) {  // a render that straddles midnight is retried once
        char d0[16], d1[16];
        today(d0);
        mx_error err = {{0}};
        char *out = mx_chat_template_render(t, json_object_get(c, "messages"), tools, agp, extra, &err);
        today(d1);
        if (strcmp(d0, d1) != 0 && attempt == 0) {
            free(out);
            continue;
        }
        if (want_err) {
            // "TemplateError: MSG" is raise_exception(MSG); a TypeError only has to fail.
            const char *msg = strncmp(want_err, "TemplateError: ", 15) == 0 ? want_err + 15 : NULL;
            bad = out != NULL || (msg && !strstr(err.msg, msg));
            CHECK_MSG(!bad, "case %zu: expected the error [%s], got [%s]", i, want_err, out ? out : err.msg);
        } else {
            char *expect = with_date(want, pinned, d0);
            bad = !out || !expect || strcmp(out, expect) != 0;
            if (!out) {
                CHECK_MSG(0, "case %zu: %s", i, err.msg);
            } else if (bad && expect) {
                size_t at = first_difference(out, expect);
                CHECK_MSG(0, "case %zu differs at byte %zu:\n  got:      [%s]\n  expected: [%s]", i, at, out + at,
                          expect + at);
            } else {
                CHECK(!bad);
            }
            free(expect);
        }
        free(out);
        break;
    }
    json_decref(extra);
    return bad;
}

// A template from a model folder, as mlxcel loads gpt-oss: chat_template.jinja next to gpt-oss's
// own tokenizer_config.json (tests/fixtures/gpt_oss_tokenizer_config.json), whose eos_token is
// <|return|> and whose model_max_length does not fit 64 bits.
static void test_folder(const char *template_path, json_t *cases, const char *pinned) {
    char dir[] = "/tmp/mx_harmony_test_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char cfg[256], jinja[256], cmd[600];
    snprintf(cfg, sizeof cfg, "%s/tokenizer_config.json", dir);
    snprintf(jinja, sizeof jinja, "%s/chat_template.jinja", dir);
    snprintf(cmd, sizeof cmd, "cp tests/fixtures/gpt_oss_tokenizer_config.json %s", cfg);
    CHECK(system(cmd) == 0);
    snprintf(cmd, sizeof cmd, "cp %s %s", template_path, jinja);
    CHECK(system(cmd) == 0);
    mx_error err = {{0}};
    mx_chat_template *t = mx_chat_template_load(dir, &err);
    CHECK_MSG(t != NULL, "%s", err.msg);
    if (t) {
        CHECK(mx_chat_template_eos(t) && strcmp(mx_chat_template_eos(t), "<|return|>") == 0);
        CHECK(mx_chat_template_bos(t) && strcmp(mx_chat_template_bos(t), "<|startoftext|>") == 0);
        int bad = 0;
        for (size_t i = 0; i < json_array_size(cases); i++) bad += check_case(t, json_array_get(cases, i), i, pinned);
        CHECK_MSG(bad == 0, "%d of %zu cases differ (folder)", bad, json_array_size(cases));
        mx_chat_template_free(t);
    }
    unlink(jinja);
    unlink(cfg);
    rmdir(dir);
}

static void test_fixture(const char *template_path, const char *cases_path) {
    json_error_t je;
    json_t *fixture = json_load_file(cases_path, 0, &je);
    char *src = slurp(template_path);
    CHECK_MSG(fixture && src, "cannot load the fixtures: %s", fixture ? template_path : je.text);
    json_t *cases = json_object_get(fixture, "cases");
    const char *pinned = json_string_value(json_object_get(fixture, "date"));
    CHECK(json_array_size(cases) == 17 && pinned);
    mx_error err = {{0}};
    mx_chat_template *t = src ? mx_chat_template_from_string(src, "<|startoftext|>", "<|return|>", &err) : NULL;
    CHECK_MSG(t != NULL, "%s: %s", template_path, err.msg);
    if (t && pinned) {
        int bad = 0;
        for (size_t i = 0; i < json_array_size(cases); i++) bad += check_case(t, json_array_get(cases, i), i, pinned);
        CHECK_MSG(bad == 0, "%s: %d of %zu cases differ", template_path, bad, json_array_size(cases));
        test_folder(template_path, cases, pinned);
    }
    mx_chat_template_free(t);
    free(src);
    json_decref(fixture);
}

int main(void) {
    for (size_t i = 0; i < sizeof FIXTURES / sizeof FIXTURES[0]; i++) test_fixture(FIXTURES[i][0], FIXTURES[i][1]);
    return check_finish();
}
