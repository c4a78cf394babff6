// SPDX-License-Identifier: MIT
// Unit tests of gpt-oss's output format (harmony) in the output stage the server and the CLI share
// (src/server/srv_output.c with srv_harmony.c), fed with scripted text: the analysis channel is
// reasoning, final is content, `commentary to=functions.NAME` messages are tool calls, in both
// header orders; every script gives the same result whole, in two pieces split at every byte,
// and byte by byte, and at no point is any part of a marker released; malformed, cut-off and
// random harmony never crashes and falls back to plain content.
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "server/srv_output.h"
#include "test_rng.h"

static const char *const MARKERS[] = {"<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>",
                                      "<|return|>", "<|call|>"};

typedef struct result {
    char content[4096], reasoning[4096], calls[4096];  // calls: "name(args);" for each
    bool leak;  // a released text held part of a marker at some point
} result;

static srv_output *make(bool tools, const char *const *stops, int n_stops) {
    srv_output_opts oo = {.stops = stops, .n_stops = n_stops, .parse_tools = tools, .harmony = true};
    return srv_output_create(&oo);
}

// Whether s contains "<|" or ends with "<" (part of a marker), for bodies that contain no '<'.
static bool has_marker_part(const char *s, size_t n) {
    for (size_t i = 0; i + 1 < n; i++)
        if (s[i] == '<' && s[i + 1] == '|') return true;
    return n && s[n - 1] == '<';
}

static void collect(srv_output *o, result *r) {
    snprintf(r->content, sizeof r->content, "%s", srv_output_content(o, NULL));
    snprintf(r->reasoning, sizeof r->reasoning, "%s", srv_output_reasoning(o, NULL));
    r->calls[0] = 0;
    for (int i = 0; i < srv_output_n_tools(o); i++)
        snprintf(r->calls + strlen(r->calls), sizeof r->calls - strlen(r->calls), "%s(%s);", srv_output_tool_name(o, i),
                 srv_output_tool_args(o, i));
}

// Feeds the pieces cut at the given offsets (cuts[0..n_cuts), increasing), checking after each
// push that nothing released holds part of a marker (when check_leaks).
static void run_cuts(const char *text, const size_t *cuts, int n_cuts, bool tools, bool check_leaks, result *r) {
    srv_output *o = make(tools, NULL, 0);
    memset(r, 0, sizeof *r);
    size_t at = 0, n = strlen(text);
    for (int i = 0; i <= n_cuts; i++) {
        size_t to = i < n_cuts ? cuts[i] : n;
        srv_output_push(o, text + at, to - at);
        at = to;
        size_t cl, rl;
        const char *c = srv_output_content(o, &cl), *rs = srv_output_reasoning(o, &rl);
        if (check_leaks && (has_marker_part(c, cl) || has_marker_part(rs, rl))) r->leak = true;
    }
    srv_output_finish(o);
    collect(o, r);
    srv_output_free(o);
}

// One script: whole, split in two at every byte, and byte by byte must all give the expected result.
static void check_script(const char *what, const char *text, bool tools, const char *content, const char *reasoning,
                         const char *calls) {
    result r;
    run_cuts(text, NULL, 0, tools, false, &r);
    CHECK_MSG(!strcmp(r.content, content) && !strcmp(r.reasoning, reasoning) && !strcmp(r.calls, calls),
              "%s: content [%s] reasoning [%s] calls [%s]", what, r.content, r.reasoning, r.calls);
    size_t n = strlen(text);
    int bad = 0;
    bool leaks_ok = strstr(content, "<|") != NULL;  // the plain-text fallback keeps markers as text
    for (size_t cut = 1; cut < n; cut++) {
        run_cuts(text, &cut, 1, tools, !leaks_ok, &r);
        if (strcmp(r.content, content) || strcmp(r.reasoning, reasoning) || strcmp(r.calls, calls) || r.leak) {
            if (!bad++) fprintf(stderr, "%s cut at %zu: content [%s] reasoning [%s] calls [%s] leak %d\n", what, cut,
                                r.content, r.reasoning, r.calls, r.leak);
        }
    }
    size_t *all = malloc(sizeof *all * n);
    for (size_t i = 0; i + 1 < n; i++) all[i] = i + 1;
    run_cuts(text, all, n ? (int)n - 1 : 0, tools, !leaks_ok, &r);
    free(all);
    if (strcmp(r.content, content) || strcmp(r.reasoning, reasoning) || strcmp(r.calls, calls) || r.leak) bad++;
    CHECK_MSG(bad == 0, "%s: %d splits differ (byte by byte: content [%s] calls [%s] leak %d)", what, bad, r.content,
              r.calls, r.leak);
}

static void test_scripts(void) {
    check_script("analysis then final",
                 "<|channel|>analysis<|message|>User says hi. Reply.<|end|><|start|>assistant<|channel|>final<|message|>"
                 "Hello! How can I help?",
                 false, "Hello! How can I help?", "User says hi. Reply.", "");
    // With ignore_eos the stop token <|return|> is text, and the model may go on.
    check_script("final with return", "<|channel|>final<|message|>Done.<|return|>", false, "Done.", "", "");
    check_script("tool call, constrain form",
                 "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary "
                 "to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\", \"days\": 2}",
                 true, "", "Need weather.", "get_weather({\"city\":\"Paris\",\"days\":2});");
    check_script("tool call, recipient first (the template's order), <|call|> kept",
                 "<|channel|>analysis<|message|>ok<|end|><|start|>assistant to=functions.f<|channel|>commentary "
                 "json<|message|>{\"a\": [1, 2]}<|call|>",
                 true, "", "ok", "f({\"a\":[1,2]});");
    check_script("two calls and a final answer (ignore_eos)",
                 " to=functions.a<|channel|>commentary json<|message|>{}<|call|><|start|>assistant<|channel|>commentary "
                 "to=functions.b <|constrain|>json<|message|>{\"x\": \"caf\xc3\xa9\"}<|call|><|start|>assistant<|channel|>"
                 "final<|message|>Both done.<|return|>",
                 true, "Both done.", "", "a({});b({\"x\":\"caf\\u00E9\"});");
    check_script("a built-in tool's call keeps its full name",
                 "<|channel|>analysis to=browser.search <|constrain|>json<|message|>{\"query\": \"x\"}<|call|>", true,
                 "", "", "browser.search({\"query\":\"x\"});");
    check_script("a call without tools is content",
                 "<|channel|>commentary to=functions.f <|constrain|>json<|message|>{\"a\": 1}", false, "{\"a\": 1}", "", "");
    check_script("commentary preamble is content",
                 "<|channel|>commentary<|message|>Let me check.<|end|><|start|>assistant<|channel|>final<|message|>Done",
                 true, "Let me check.Done", "", "");
    check_script("a call whose arguments are not JSON is content",
                 "<|channel|>commentary to=functions.f json<|message|>{broken<|call|>", true, "{broken", "", "");
    check_script("not harmony at all", "Just plain text, no markers.", true, "Just plain text, no markers.", "", "");
    check_script("a newline before any header", "Hello\n<|channel|>final<|message|>x", false,
                 "Hello\n<|channel|>final<|message|>x", "", "");
    check_script("a final channel without <|start|> before it",
                 "<|channel|>analysis<|message|>think<|channel|>final<|message|>answer", false, "answer", "think", "");
    check_script("<|constrain|> and <|message|> inside a body are dropped",
                 "<|channel|>final<|message|>a<|message|>b<|constrain|>c", false, "abc", "", "");
    check_script("multi-byte text and a lone '<' at the end",
                 "<|channel|>analysis<|message|>\xe6\x80\x9d\xe8\x80\x83 2 > 1<|end|><|start|>assistant<|channel|>final"
                 "<|message|>\xf0\x9f\x98\x80 a <",
                 false, "\xf0\x9f\x98\x80 a <", "\xe6\x80\x9d\xe8\x80\x83 2 > 1", "");
    check_script("empty output", "", true, "", "", "");
}

// Stop strings act on the raw text before the channels are read.
static void test_stops(void) {
    const char *stops[] = {"STOP"};
    srv_output *o = make(false, stops, 1);
    const char *t = "<|channel|>analysis<|message|>a<|end|><|start|>assistant<|channel|>final<|message|>b STOP c";
    CHECK(srv_output_push(o, t, strlen(t)));
    CHECK_STR(srv_output_reasoning(o, NULL), "a");
    CHECK_STR(srv_output_content(o, NULL), "b ");
    srv_output_free(o);
}

// The whole output cut off at every byte: no crash, reasoning and content are prefixes of the
// complete ones, and a call cut off before its JSON is complete is content, never a call.
static void test_truncated(void) {
    const char *full = "<|channel|>analysis<|message|>Need it.<|end|><|start|>assistant<|channel|>commentary "
                       "to=functions.get <|constrain|>json<|message|>{\"k\": \"v\"}";
    size_t n = strlen(full);
    int bad = 0;
    for (size_t cut = 0; cut <= n; cut++) {
        char *t = strndup(full, cut);
        result r;
        run_cuts(t, NULL, 0, true, false, &r);
        // A text that ends in a lone '<' keeps it (it is text, not a marker: markers are whole tokens).
        size_t rl = strlen(r.reasoning);
        if (cut && full[cut - 1] == '<' && rl && r.reasoning[rl - 1] == '<') r.reasoning[rl - 1] = 0;
        bool ok = !strncmp("Need it.", r.reasoning, strlen(r.reasoning)) && !has_marker_part(r.content, strlen(r.content));
        if (cut == n) ok = ok && !strcmp(r.calls, "get({\"k\":\"v\"});") && !r.content[0];
        else ok = ok && !r.calls[0] && !strncmp("{\"k\": \"v\"", r.content, strlen(r.content));
        if (!ok && !bad++) fprintf(stderr, "cut %zu: content [%s] reasoning [%s] calls [%s]\n", cut, r.content, r.reasoning, r.calls);
        free(t);
    }
    CHECK_MSG(bad == 0, "%d cut-off outputs went wrong", bad);
}

// Random sequences of markers, words, newlines and JSON bits, whole and byte by byte: never a
// crash (the ASan build runs this), the two feeds agree, and released text never holds "<|" when
// the words hold no '<'.
static void test_random(void) {
    static const char *const words[] = {"analysis", "final", "commentary", " to=functions.x", " json", "assistant",
                                        "hello ", "{\"a\": 1}", "{", "\n", " ", "to=", "functions.", "caf\xc3\xa9"};
    test_rng rng = {20260115};
    int bad = 0;
    for (int round = 0; round < 3000; round++) {
        char text[1024] = "";
        int parts = 1 + (int)(test_rng_next(&rng) % 24);
        for (int p = 0; p < parts; p++) {
            uint64_t x = test_rng_next(&rng);
            const char *piece = x % 2 ? MARKERS[(x >> 8) % 7] : words[(x >> 8) % (sizeof words / sizeof words[0])];
            strncat(text, piece, sizeof text - strlen(text) - 1);
        }
        size_t n = strlen(text);
        result whole, bytes;
        run_cuts(text, NULL, 0, true, false, &whole);
        size_t *all = malloc(sizeof *all * (n ? n : 1));
        for (size_t i = 0; i + 1 < n; i++) all[i] = i + 1;
        run_cuts(text, all, n ? (int)n - 1 : 0, true, false, &bytes);
        free(all);
        bool same = !strcmp(whole.content, bytes.content) && !strcmp(whole.reasoning, bytes.reasoning) &&
                    !strcmp(whole.calls, bytes.calls);
        bool leaks = has_marker_part(whole.reasoning, strlen(whole.reasoning));
        if ((!same || leaks) && !bad++)
            fprintf(stderr, "random [%s]: whole [%s|%s|%s] bytes [%s|%s|%s]\n", text, whole.content, whole.reasoning,
                    whole.calls, bytes.content, bytes.reasoning, bytes.calls);
    }
    CHECK_MSG(bad == 0, "%d random outputs went wrong", bad);
}

int main(void) {
    test_scripts();
    test_stops();
    test_truncated();
    test_random();
    return check_finish();
}
