// SPDX-License-Identifier: MIT
// Unit tests of the server's output stage (src/server/srv_output.c) and request validation
// (src/server/srv_request.c), fed with scripted text: stop strings never leak a partial match,
// Qwen3 <think> blocks go to reasoning, <tool_call> blocks become tool calls, and bad request
// fields are rejected with a message naming the field.
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/clock.h"
#include "test_rng.h"
#include "server/srv_output.h"
#include "server/srv_request.h"

// Feeds text in pieces of `step` bytes; returns whether a stop matched.
static bool feed(srv_output *o, const char *text, size_t step) {
    size_t n = strlen(text);
    for (size_t i = 0; i < n; i += step) {
        size_t k = n - i < step ? n - i : step;
        if (srv_output_push(o, text + i, k)) return true;
    }
    srv_output_finish(o);
    return false;
}

static void test_stops(void) {
    const char *stops[] = {"STOP", "\n\n"};
    for (size_t step = 1; step <= 5; step++) {
        srv_output_opts oo = {stops, 2, false, false, false, false, false, false};
        srv_output *o = srv_output_create(&oo);
        CHECK(feed(o, "hello STxSTOP world", step));
        CHECK_STR(srv_output_content(o, NULL), "hello STx");
        srv_output_free(o);
    }
    // Held-back text: while a prefix of a stop string is pending it is not released.
    srv_output_opts oo = {stops, 2, false, false, false, false, false, false};
    srv_output *o = srv_output_create(&oo);
    CHECK(!srv_output_push(o, "abc ST", 6));
    CHECK_STR(srv_output_content(o, NULL), "abc ");
    CHECK(!srv_output_push(o, "O", 1));
    CHECK_STR(srv_output_content(o, NULL), "abc ");
    CHECK(!srv_output_push(o, "x", 1));
    CHECK_STR(srv_output_content(o, NULL), "abc STOx");
    CHECK(!srv_output_push(o, "\n", 1));
    CHECK_STR(srv_output_content(o, NULL), "abc STOx");
    CHECK(srv_output_push(o, "\nmore", 5));
    CHECK_STR(srv_output_content(o, NULL), "abc STOx");
    CHECK(srv_output_stopped(o));
    srv_output_free(o);
    // No stop: finish releases the held tail.
    o = srv_output_create(&oo);
    CHECK(!feed(o, "ends with ST", 3));
    CHECK_STR(srv_output_content(o, NULL), "ends with ST");
    srv_output_free(o);
}

// The rule stop strings follow, written the plain way: after each push, the earliest-starting
// occurrence in the held text ends it; otherwise everything but the longest tail that is a proper
// prefix of a stop string is released. Returns whether a stop matched; *released grows.
typedef struct plain_stops {
    const char *const *stops;
    int n;
    char held[4096];
    size_t n_held;
} plain_stops;

static bool plain_push(plain_stops *p, const char *s, size_t k, char *released, size_t *n_released) {
    memcpy(p->held + p->n_held, s, k);
    p->n_held += k;
    const char *first = NULL;
    for (int i = 0; i < p->n; i++) {
        const char *t = memmem(p->held, p->n_held, p->stops[i], strlen(p->stops[i]));
        if (t && (!first || t < first)) first = t;
    }
    size_t out = p->n_held, hold = 0;
    if (first) out = (size_t)(first - p->held);
    for (int i = 0; i < p->n && !first; i++) {
        size_t m = strlen(p->stops[i]);
        for (size_t h = m - 1 < p->n_held ? m - 1 : p->n_held; h > hold; h--)
            if (memcmp(p->held + p->n_held - h, p->stops[i], h) == 0) {
                hold = h;
                break;
            }
    }
    out -= first ? 0 : hold;
    memcpy(released + *n_released, p->held, out);
    *n_released += out;
    memmove(p->held, p->held + out, p->n_held - out);
    p->n_held -= out;
    return first != NULL;
}

// Random texts over a small alphabet with overlapping stop strings (borders, one inside another),
// pushed in random pieces: the released text after every push equals the plain rule's.
static void test_stops_random(void) {
    static const char *const sets[][3] = {
        {"aab", "ab", "ba"}, {"abab", "aba", "bb"}, {"aaaa", "abaab", "b"}, {"abcab", "cabc", "bca"}};
    test_rng rng = {0x5eed5eedULL};
    for (int trial = 0; trial < 2000; trial++) {
        const char *const *stops = sets[trial % 4];
        int n_stops = 1 + (int)(test_rng_u32(&rng) % 3);
        char text[200];
        size_t len = 1 + test_rng_u32(&rng) % (sizeof text - 1);
        for (size_t i = 0; i < len; i++) text[i] = "abc"[test_rng_u32(&rng) % (trial % 4 == 3 ? 3 : 2)];
        srv_output_opts oo = {stops, n_stops, false, false, false, false, false, false};
        srv_output *o = srv_output_create(&oo);
        plain_stops p = {stops, n_stops, {0}, 0};
        char want[256];
        size_t n_want = 0;
        bool stopped = false;
        for (size_t i = 0; i < len && !stopped;) {
            size_t k = 1 + test_rng_u32(&rng) % 7;
            if (k > len - i) k = len - i;
            stopped = plain_push(&p, text + i, k, want, &n_want);
            CHECK_MSG(srv_output_push(o, text + i, k) == stopped, "trial %d: stop at %zu", trial, i);
            size_t n_got = 0;
            const char *got = srv_output_content(o, &n_got);
            CHECK_MSG(n_got == n_want && memcmp(got, want, n_want) == 0, "trial %d at %zu: '%.*s' != '%.*s'", trial,
                      i, (int)n_got, got, (int)n_want, want);
            i += k;
        }
        srv_output_free(o);
    }
}

// A stop string of 512 bytes (the longest a request may give) spanning 512 tokens, after a long
// text that keeps almost matching it and three stop strings that are its suffixes: it is found
// whole, the earliest-starting one wins, and the work per token stays bounded (the time limit is
// far above what a megabyte takes, about 0.05 s, and far below what work growing with the text
// would take).
static void test_stop_spanning_tokens(void) {
    char stop[513];
    memset(stop, 'a', 512);
    stop[255] = 'b';  // a's, b, a's: a run of a's matches its first 255 bytes at every position
    stop[512] = 0;
    const char *const stops[] = {stop, stop + 1, stop + 2, stop + 3};
    srv_output_opts oo = {stops, 4, false, false, false, false, false, false};
    srv_output *o = srv_output_create(&oo);
    double t0 = mx_now();
    size_t n_run = 1000000;
    bool stopped = false;
    for (size_t i = 0; i < n_run && !stopped; i++) stopped = srv_output_push(o, "a", 1);
    CHECK(!stopped);
    const char *lead = "xyz";
    CHECK(!srv_output_push(o, lead, 3));
    for (size_t i = 0; i < 512 && !stopped; i++) stopped = srv_output_push(o, stop + i, 1);
    double secs = mx_now() - t0;
    CHECK_MSG(stopped, "the 512-byte stop string fed a byte at a time did not stop");
    size_t n = 0;
    const char *content = srv_output_content(o, &n);
    // stop + 3 (509 bytes) starts 3 bytes after the full stop string's start: the full one wins.
    CHECK_MSG(n == n_run + 3 && memcmp(content + n_run, "xyz", 3) == 0 && content[0] == 'a',
              "released %zu bytes", n);
    CHECK_MSG(secs < 5.0, "1 MB of text against four 512-byte stop strings took %.2f s", secs);
    srv_output_free(o);
}

static void test_think(void) {
    for (size_t step = 1; step <= 7; step += 2) {
        srv_output_opts oo = {NULL, 0, true, false, true, false, false, false};
        srv_output *o = srv_output_create(&oo);
        feed(o, "<think>\nLet me think.\n</think>\n\nThe answer is 4.", step);
        CHECK_STR(srv_output_reasoning(o, NULL), "\nLet me think.\n");
        CHECK_STR(srv_output_content(o, NULL), "The answer is 4.");
        srv_output_free(o);
    }
    // The prompt opened <think> already.
    srv_output_opts oo = {NULL, 0, true, true, true, false, false, false};
    srv_output *o = srv_output_create(&oo);
    feed(o, "hmm</think>ok", 2);
    CHECK_STR(srv_output_reasoning(o, NULL), "hmm");
    CHECK_STR(srv_output_content(o, NULL), "ok");
    srv_output_free(o);
    // <think> in the middle of content is just text.
    srv_output_opts o2 = {NULL, 0, true, false, false, false, false, false};
    o = srv_output_create(&o2);
    feed(o, "a <think>b</think>", 1);
    CHECK_STR(srv_output_content(o, NULL), "a <think>b</think>");
    CHECK_STR(srv_output_reasoning(o, NULL), "");
    srv_output_free(o);
}

static void test_tools(void) {
    const char *text = "<think>\nI should call the tool.\n</think>\n\n"
                       "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 2}}\n</tool_call>\n"
                       "<tool_call>\n{\"name\": \"now\", \"arguments\": \"{}\"}\n</tool_call>";
    for (size_t step = 1; step <= 9; step += 4) {
        srv_output_opts oo = {NULL, 0, true, false, true, false, false, false};
        srv_output *o = srv_output_create(&oo);
        feed(o, text, step);
        CHECK(srv_output_n_tools(o) == 2);
        if (srv_output_n_tools(o) == 2) {
            CHECK_STR(srv_output_tool_name(o, 0), "get_weather");
            json_t *args = json_loads(srv_output_tool_args(o, 0), 0, NULL);
            CHECK(args && strcmp(json_string_value(json_object_get(args, "city")), "Paris") == 0);
            CHECK(args && json_integer_value(json_object_get(args, "days")) == 2);
            json_decref(args);
            CHECK_STR(srv_output_tool_name(o, 1), "now");
            CHECK_STR(srv_output_tool_args(o, 1), "{}");
        }
        CHECK_STR(srv_output_reasoning(o, NULL), "\nI should call the tool.\n");
        size_t clen;
        const char *c = srv_output_content(o, &clen);
        for (size_t i = 0; i < clen; i++) CHECK(c[i] == '\n' || c[i] == ' ');
        srv_output_free(o);
    }
    // Not JSON: kept as content.
    srv_output_opts oo = {NULL, 0, false, false, true, false, false, false};
    srv_output *o = srv_output_create(&oo);
    feed(o, "x<tool_call>oops</tool_call>y", 3);
    CHECK(srv_output_n_tools(o) == 0);
    CHECK_STR(srv_output_content(o, NULL), "x<tool_call>oops</tool_call>y");
    srv_output_free(o);
    // Unterminated but complete JSON (generation ended at </tool_call>'s stop): accepted.
    o = srv_output_create(&oo);
    feed(o, "<tool_call>{\"name\":\"f\",\"arguments\":{}}", 4);
    CHECK(srv_output_n_tools(o) == 1);
    srv_output_free(o);
    // Stop string inside the tool-call text stops before it.
    const char *stops[] = {"<tool"};
    srv_output_opts os = {stops, 1, false, false, true, false, false, false};
    o = srv_output_create(&os);
    CHECK(feed(o, "abc<tool_call>{}</tool_call>", 2));
    CHECK_STR(srv_output_content(o, NULL), "abc");
    srv_output_free(o);
}

// Llama 3.x: a bare JSON answer {"name", "parameters"} (or a list of them) is a tool call; other
// answers stay content, whether they start with '{' or not.
static void test_json_calls(void) {
    srv_output_opts oo = {.parse_think = true, .parse_tools = true, .json_calls = true};
    for (size_t step = 1; step <= 9; step += 4) {
        srv_output *o = srv_output_create(&oo);
        feed(o, " {\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}", step);
        CHECK(srv_output_n_tools(o) == 1);
        if (srv_output_n_tools(o) == 1) {
            CHECK_STR(srv_output_tool_name(o, 0), "get_weather");
            CHECK_STR(srv_output_tool_args(o, 0), "{\"city\":\"Paris\"}");
        }
        CHECK_STR(srv_output_content(o, NULL), "");
        srv_output_free(o);
        o = srv_output_create(&oo);
        feed(o, "[{\"name\": \"a\", \"arguments\": {}}, {\"name\": \"b\", \"parameters\": {\"x\": 1}}]", step);
        CHECK(srv_output_n_tools(o) == 2 && strcmp(srv_output_tool_name(o, 1), "b") == 0);
        srv_output_free(o);
        o = srv_output_create(&oo);
        feed(o, "{\"answer\": 42}", step);
        CHECK(srv_output_n_tools(o) == 0);
        CHECK_STR(srv_output_content(o, NULL), "{\"answer\": 42}");
        srv_output_free(o);
        o = srv_output_create(&oo);
        feed(o, "Hello {\"name\": \"x\"}", step);
        CHECK(srv_output_n_tools(o) == 0);
        CHECK_STR(srv_output_content(o, NULL), "Hello {\"name\": \"x\"}");
        srv_output_free(o);
    }
}

static int parse(const char *body, srv_kind kind, srv_request *r, char *msg) {
    json_t *j = json_loads(body, 0, NULL);
    mx_sampling d = mx_sampling_defaults();
    int rc = srv_request_parse(j, kind, &d, r, msg, 256);
    json_decref(j);
    return rc;
}

static void test_request(void) {
    srv_request r;
    char msg[256];
    CHECK(parse("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"text\",\"text\":\"b\"}]}],"
                "\"temperature\":0.5,\"stop\":[\"x\",\"y\"],\"max_tokens\":7,\"seed\":3,\"user\":\"u\",\"metadata\":{},"
                "\"n\":3,\"logit_bias\":{\"5\":-100,\"7\":2.5},\"response_format\":{\"type\":\"json_object\"}}",
                SRV_KIND_CHAT, &r, msg) == 0);
    CHECK(r.n_stops == 2 && r.max_tokens == 7 && r.sampling.has_seed && r.sampling.seed == 3);
    CHECK(r.sampling.temp == 0.5f);
    CHECK(r.n == 3 && r.n_bias == 2 && r.bias_ids[0] == 5 && r.bias_values[0] == -100.0f && r.bias_values[1] == 2.5f);
    CHECK(r.json_object && r.json_schema == NULL);
    CHECK_STR(json_string_value(json_object_get(json_array_get(r.messages, 0), "content")), "ab");
    srv_request_clear(&r);
    // max_tokens and max_completion_tokens: either alone, or both with one value (different values: below).
    const char *limits[][2] = {{"\"max_completion_tokens\":9", "9"}, {"\"max_tokens\":9,\"max_completion_tokens\":9", "9"},
                               {"\"max_tokens\":4,\"max_completion_tokens\":null", "4"}, {"\"max_tokens\":null", "-1"}};
    for (size_t i = 0; i < sizeof limits / sizeof limits[0]; i++) {
        char body[256];
        snprintf(body, sizeof body, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],%s}", limits[i][0]);
        int rc = parse(body, SRV_KIND_CHAT, &r, msg);
        CHECK_MSG(rc == 0 && r.max_tokens == atoi(limits[i][1]), "%s: rc %d, max_tokens %d (%s)", body, rc,
                  rc == 0 ? r.max_tokens : 0, rc ? msg : "");
        if (rc == 0) srv_request_clear(&r);
    }
    struct {
        const char *body;
        srv_kind kind;
        const char *needle;
    } bad[] = {
        {"{}", SRV_KIND_CHAT, "'messages' is required"},
        {"{\"messages\":\"hi\"}", SRV_KIND_CHAT, "'messages'"},
        {"{\"messages\":[{\"content\":\"x\"}]}", SRV_KIND_CHAT, "role"},
        {"{\"prompt\":\"x\",\"temperature\":\"hot\"}", SRV_KIND_COMPLETION, "'temperature'"},
        {"{\"prompt\":\"x\",\"max_tokens\":1.5}", SRV_KIND_COMPLETION, "'max_tokens'"},
        {"{\"prompt\":\"x\",\"n\":17}", SRV_KIND_COMPLETION, "'n'"},
        {"{\"prompt\":\"x\",\"unknown_field\":{}}", SRV_KIND_COMPLETION, "'unknown_field' is not supported"},
        {"{\"prompt\":\"x\",\"best_of\":2}", SRV_KIND_COMPLETION, "'best_of' is not supported"},
        {"{\"prompt\":\"x\",\"logit_bias\":{\"a\":1}}", SRV_KIND_COMPLETION, "'logit_bias' key 'a'"},
        {"{\"prompt\":\"x\",\"logit_bias\":{\"3\":101}}", SRV_KIND_COMPLETION, "'logit_bias[3]'"},
        {"{\"prompt\":\"x\",\"stop\":[\"1\",\"2\",\"3\",\"4\",\"5\",\"6\",\"7\",\"8\",\"9\",\"a\",\"b\",\"c\",\"d\",\"e\",\"f\",\"g\",\"h\"]}",
         SRV_KIND_COMPLETION, "at most 16"},
        {"{\"prompt\":\"x\",\"stream_options\":{\"x\":1}}", SRV_KIND_COMPLETION, "'stream_options.x'"},
        {"{\"prompt\":\"x\",\"response_format\":{\"type\":\"yaml\"}}", SRV_KIND_COMPLETION, "'response_format.type'"},
        {"{\"prompt\":\"x\",\"response_format\":{\"type\":\"json_schema\"}}", SRV_KIND_COMPLETION, "'response_format.json_schema'"},
        {"{\"prompt\":\"x\",\"grammar\":\"root ::= x\",\"response_format\":{\"type\":\"json_object\"}}", SRV_KIND_COMPLETION,
         "cannot be combined"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tool_choice\":\"required\"}", SRV_KIND_CHAT, "needs 'tools'"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],"
         "\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"g\"}}}", SRV_KIND_CHAT, "names 'g'"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":\"function\"}]}", SRV_KIND_CHAT, "'tools[0]'"},
        {"{\"prompt\":\"x\",\"store\":true}", SRV_KIND_COMPLETION, "'store'"},
        {"{\"prompt\":\"x\",\"stop\":5}", SRV_KIND_COMPLETION, "'stop'"},
        {"{\"prompt\":\"x\",\"stream\":\"yes\"}", SRV_KIND_COMPLETION, "'stream'"},
        {"{\"prompt\":\"x\",\"top_p\":3}", SRV_KIND_COMPLETION, "'top_p'"},
        {"{\"prompt\":7}", SRV_KIND_COMPLETION, "'prompt'"},
        {"{}", SRV_KIND_COMPLETION, "'prompt' is required"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":5,\"max_completion_tokens\":6}", SRV_KIND_CHAT,
         "'max_tokens' (5) and 'max_completion_tokens' (6) differ"},
        {"{\"prompt\":\"x\",\"max_completion_tokens\":6}", SRV_KIND_COMPLETION, "'max_completion_tokens' is not supported"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        msg[0] = 0;
        CHECK_MSG(parse(bad[i].body, bad[i].kind, &r, msg) != 0, "%s accepted", bad[i].body);
        CHECK_MSG(strstr(msg, bad[i].needle) != NULL, "%s: message '%s' lacks '%s'", bad[i].body, msg, bad[i].needle);
    }
    // Stop strings are bounded (each token's partial-match check costs up to their length squared).
    for (int len = SRV_MAX_STOP_BYTES; len <= SRV_MAX_STOP_BYTES + 1; len++) {
        for (int as_list = 0; as_list < 2; as_list++) {
            char body[2048];
            int at = snprintf(body, sizeof body, "{\"prompt\":\"x\",\"stop\":%s\"", as_list ? "[\"y\"," : "");
            memset(body + at, 'a', (size_t)len);
            snprintf(body + at + len, sizeof body - (size_t)(at + len), "\"%s}", as_list ? "]" : "");
            msg[0] = 0;
            int rc = parse(body, SRV_KIND_COMPLETION, &r, msg);
            if (len <= SRV_MAX_STOP_BYTES) {
                CHECK_MSG(rc == 0, "a stop string of %d bytes refused: %s", len, msg);
                if (rc == 0) srv_request_clear(&r);
            } else {
                CHECK_MSG(rc != 0 && strstr(msg, "512 bytes"), "a stop string of %d bytes: '%s'", len, msg);
            }
        }
    }
}

int main(void) {
    test_stops();
    test_stops_random();
    test_stop_spanning_tokens();
    test_think();
    test_tools();
    test_json_calls();
    test_request();
    return check_finish();
}
