// SPDX-License-Identifier: MIT
// Mistral tool calls, on scripted model output: both of Mistral's forms ([TOOL_CALLS] followed by a
// JSON list, or NAME[ARGS]{...} per call) become tool calls, each as soon as it is complete (what the
// stream sends as a delta), parallel calls included, and text that is not a call stays content.
// The grammars that force a call (tool_choice "required" or named) in each format accept valid
// calls of the listed tools and reject other names and arguments that break a tool's schema, and
// what they accept parses back into the same calls.
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "grammar/grammar.h"
#include "server/srv_calls.h"
#include "server/srv_grammar.h"
#include "server/srv_output.h"
#include "server/srv_request.h"

static const srv_output_opts mistral = {.parse_think = true, .parse_tools = true, .mistral_calls = true};

// Feeds text in pieces of `step` bytes, then finishes.
static void feed(srv_output *o, const char *text, size_t step) {
    size_t n = strlen(text);
    for (size_t i = 0; i < n; i += step) srv_output_push(o, text + i, n - i < step ? n - i : step);
    srv_output_finish(o);
}

static void check_call(srv_output *o, int i, const char *name, const char *args) {
    if (srv_output_n_tools(o) <= i) return;
    CHECK_STR(srv_output_tool_name(o, i), name);
    json_t *a = json_loads(srv_output_tool_args(o, i), 0, NULL), *b = json_loads(args, 0, NULL);
    CHECK_MSG(a && b && json_equal(a, b), "call %d args %s, want %s", i, srv_output_tool_args(o, i), args);
    json_decref(a), json_decref(b);
}

// Fed in pieces of 1, 3, 5, 7 and 9 bytes, text gives two calls, get_weather(weather_args) and
// now({}), and the content `content`.
static void check_weather_now(const char *text, const char *weather_args, const char *content) {
    for (size_t step = 1; step <= 9; step += 2) {
        srv_output *o = srv_output_create(&mistral);
        feed(o, text, step);
        CHECK_MSG(srv_output_n_tools(o) == 2, "'%s' in pieces of %zu: %d calls", text, step, srv_output_n_tools(o));
        check_call(o, 0, "get_weather", weather_args);
        check_call(o, 1, "now", "{}");
        CHECK_STR(srv_output_content(o, NULL), content);
        srv_output_free(o);
    }
}

static void test_list_form(void) {
    check_weather_now("Sure.[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}, "
                      "{\"name\": \"now\", \"arguments\": {}, \"id\": \"abc123XYZ\"}]",
                      "{\"city\": \"Paris\"}", "Sure.");
    // The first call is out as soon as its object closes, before the list does.
    srv_output *o = srv_output_create(&mistral);
    const char *part = "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {\"x\": 1}}, {\"name\": \"b\", \"argu";
    srv_output_push(o, part, strlen(part));
    CHECK(srv_output_n_tools(o) == 1);
    check_call(o, 0, "a", "{\"x\": 1}");
    srv_output_push(o, "ments\": {}}]", 12);
    CHECK(srv_output_n_tools(o) == 2);
    srv_output_finish(o);
    CHECK_STR(srv_output_content(o, NULL), "");
    srv_output_free(o);
}

static void test_args_form(void) {
    check_weather_now("[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\", \"days\": 2}[TOOL_CALLS]now[CALL_ID]abc123XYZ[ARGS]{}",
                      "{\"city\": \"Paris\", \"days\": 2}", "");
    // A call is out once its arguments close; a partial marker is held back, not sent as content.
    srv_output *o = srv_output_create(&mistral);
    srv_output_push(o, "Let me check.[TOOL_", 19);
    CHECK_STR(srv_output_content(o, NULL), "Let me check.");
    const char *rest = "CALLS]f[ARGS]{\"q\": \"a}b\"}";
    srv_output_push(o, rest, strlen(rest) - 1);
    CHECK(srv_output_n_tools(o) == 0);
    srv_output_push(o, "}", 1);
    CHECK(srv_output_n_tools(o) == 1);
    check_call(o, 0, "f", "{\"q\": \"a}b\"}");
    srv_output_finish(o);
    srv_output_free(o);
}

static void test_not_calls(void) {
    static const struct {
        const char *text, *content;
    } cases[] = {
        {"x[TOOL_CALLS]oops", "x[TOOL_CALLS]oops"},
        {"[TOOL_CALLS] [1, 2]", "[TOOL_CALLS][1, 2]"},
        {"[TOOL_CALLS]f[ARGS]{\"a\": tru", "[TOOL_CALLS]f[ARGS]{\"a\": tru"},
        {"no calls [TOOL here", "no calls [TOOL here"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++)
        for (size_t step = 1; step <= 5; step += 4) {
            srv_output *o = srv_output_create(&mistral);
            feed(o, cases[k].text, step);
            CHECK_MSG(srv_output_n_tools(o) == 0, "'%s'", cases[k].text);
            CHECK_STR(srv_output_content(o, NULL), cases[k].content);
            srv_output_free(o);
        }
    // Arguments that are not an object are kept as their JSON text (found by fuzz_output).
    srv_output *a = srv_output_create(&mistral);
    feed(a, "[TOOL_CALLS] [{\"name\": \"f\", \"arguments\": 1}, {\"name\": \"g\", \"arguments\": [true]}]", 4);
    CHECK(srv_output_n_tools(a) == 2);
    if (srv_output_n_tools(a) == 2) {
        CHECK_STR(srv_output_tool_args(a, 0), "1");
        CHECK_STR(srv_output_tool_args(a, 1), "[true]");
    }
    srv_output_free(a);
    // Without mistral_calls the marker is plain text.
    srv_output_opts plain = {.parse_tools = true};
    srv_output *o = srv_output_create(&plain);
    feed(o, "[TOOL_CALLS]f[ARGS]{}", 3);
    CHECK(srv_output_n_tools(o) == 0);
    srv_output_free(o);
}

typedef struct fixture {
    mx_tokenizer *tok;
    mx_gram_vocab *v;
} fixture;

// True when the grammar accepts text (as the demo tokenizer encodes it) and is complete after it.
static bool grammar_accepts(fixture *fx, mx_gram_index *ix, const char *text) {
    mx_error err = {{0}};
    int32_t *ids = NULL;
    size_t n = 0;
    if (mx_tokenizer_encode(fx->tok, text, strlen(text), &ids, &n, &err)) return false;
    mx_matcher *m = mx_matcher_create(ix, NULL, &err);
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) rc = mx_matcher_accept(m, ids[i], &err);
    bool ok = rc == 0 && mx_matcher_complete(m);
    mx_matcher_free(m);
    free(ids);
    return ok;
}

// get_weather's $ref resolves within its parameters, in every call format.
static const char tools_request[] =
    "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tool_choice\": %s, \"parallel_tool_calls\": %s, \"tools\": ["
    "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": {\"type\": \"object\", "
    "\"properties\": {\"city\": {\"type\": \"string\", \"maxLength\": 10}, \"unit\": {\"$ref\": \"#/$defs/unit\"}}, "
    "\"$defs\": {\"unit\": {\"enum\": [\"c\", \"f\"]}}, \"required\": [\"city\", \"unit\"]}}},"
    "{\"type\": \"function\", \"function\": {\"name\": \"now\"}}]}";

typedef struct gcase {
    srv_call_format format;
    const char *choice, *parallel, *text;
    bool accept;
    int n_calls;  // calls the output parser reads from an accepted text
} gcase;

static void test_forced_grammars(fixture *fx) {
    static const gcase cases[] = {
        {SRV_CALLS_MISTRAL_ARGS, "\"required\"", "true", "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Rome\", \"unit\": \"c\"}", true, 1},
        {SRV_CALLS_MISTRAL_ARGS, "\"required\"", "true", "[TOOL_CALLS]now[ARGS]{}[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Oslo\", \"unit\": \"f\"}", true, 2},
        {SRV_CALLS_MISTRAL_ARGS, "\"required\"", "false", "[TOOL_CALLS]now[ARGS]{}[TOOL_CALLS]now[ARGS]{}", false, 0},
        {SRV_CALLS_MISTRAL_ARGS, "\"required\"", "true", "[TOOL_CALLS]other[ARGS]{}", false, 0},
        {SRV_CALLS_MISTRAL_ARGS, "\"required\"", "true", "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Rome\", \"unit\": \"k\"}", false, 0},
        {SRV_CALLS_MISTRAL_ARGS, "{\"type\": \"function\", \"function\": {\"name\": \"now\"}}", "true", "[TOOL_CALLS]now[ARGS]{}", true, 1},
        {SRV_CALLS_MISTRAL_ARGS, "{\"type\": \"function\", \"function\": {\"name\": \"now\"}}", "true",
         "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Rome\", \"unit\": \"c\"}", false, 0},
        {SRV_CALLS_MISTRAL_LIST, "\"required\"", "true",
         "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\", \"unit\": \"c\"}}, {\"name\": \"now\", \"arguments\": {}}]", true, 2},
        {SRV_CALLS_MISTRAL_LIST, "\"required\"", "false", "[TOOL_CALLS][{\"name\": \"now\", \"arguments\": {}}]", true, 1},
        {SRV_CALLS_MISTRAL_LIST, "\"required\"", "false",
         "[TOOL_CALLS][{\"name\": \"now\", \"arguments\": {}}, {\"name\": \"now\", \"arguments\": {}}]", false, 0},
        {SRV_CALLS_MISTRAL_LIST, "\"required\"", "true", "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}]", false, 0},
        {SRV_CALLS_TAGGED, "\"required\"", "true", "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>", true, 1},
        {SRV_CALLS_TAGGED, "\"required\"", "true",
         "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\", \"unit\": \"f\"}}\n</tool_call>", true, 1},
        {SRV_CALLS_TAGGED, "\"required\"", "true",
         "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\", \"unit\": \"k\"}}\n</tool_call>", false, 0},
        {SRV_CALLS_TAGGED, "\"required\"", "true", "<tool_call>\n{\"name\": \"nope\", \"arguments\": {}}\n</tool_call>", false, 0},
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        const gcase *c = &cases[k];
        char body[2048], msg[256];
        snprintf(body, sizeof body, tools_request, c->choice, c->parallel);
        json_t *j = json_loads(body, 0, NULL);
        mx_sampling d = mx_sampling_defaults();
        srv_request r;
        CHECK(j && srv_request_parse(j, SRV_KIND_CHAT, &d, &r, msg, sizeof msg) == 0);
        unsigned status = 0;
        char *gbnf = srv_grammar_text(&r, c->format, false, &status, msg, sizeof msg);
        CHECK_MSG(gbnf != NULL, "case %zu: %s", k, msg);
        mx_error err = {{0}};
        mx_grammar *g = gbnf ? mx_grammar_parse(gbnf, NULL, &err) : NULL;
        CHECK_MSG(g != NULL, "case %zu: %s\n%s", k, err.msg, gbnf ? gbnf : "");
        mx_gram_index *ix = g ? mx_gram_index_create(g, fx->v, &err) : NULL;
        if (ix) {
            CHECK_MSG(grammar_accepts(fx, ix, c->text) == c->accept, "case %zu: '%s' should be %s", k, c->text,
                      c->accept ? "accepted" : "rejected");
            mx_gram_index_release(ix);
        }
        if (c->accept) {
            srv_output_opts oo = mistral;
            oo.mistral_calls = srv_calls_mistral(c->format);
            srv_output *o = srv_output_create(&oo);
            feed(o, c->text, 3);
            CHECK_MSG(srv_output_n_tools(o) == c->n_calls, "case %zu: %d calls", k, srv_output_n_tools(o));
            srv_output_free(o);
        }
        free(gbnf);
        srv_request_clear(&r);
        json_decref(j);
    }
}

// A tool whose parameters' $ref leads back to itself with no object or array in between is a 400
// in the schema's terms, in the formats that compile one schema per tool and in the one-schema form.
static void test_cyclic_tool_schema(void) {
    static const char body[] =
        "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tool_choice\": \"required\", \"tools\": ["
        "{\"type\": \"function\", \"function\": {\"name\": \"now\"}},"
        "{\"type\": \"function\", \"function\": {\"name\": \"loop\", \"parameters\": "
        "{\"anyOf\": [{\"$ref\": \"#\"}, {\"type\": \"object\"}]}}}]}";
    static const srv_call_format formats[] = {SRV_CALLS_MISTRAL_ARGS, SRV_CALLS_HARMONY, SRV_CALLS_TAGGED};
    for (size_t k = 0; k < sizeof formats / sizeof *formats; k++) {
        char msg[256] = "";
        json_t *j = json_loads(body, 0, NULL);
        mx_sampling d = mx_sampling_defaults();
        srv_request r;
        CHECK(j && srv_request_parse(j, SRV_KIND_CHAT, &d, &r, msg, sizeof msg) == 0);
        unsigned status = 0;
        char *gbnf = srv_grammar_text(&r, formats[k], false, &status, msg, sizeof msg);
        CHECK_MSG(gbnf == NULL && status == 400 && strstr(msg, "tools: json schema: a $ref leads back to itself"),
                  "format %zu: status %u, '%s'", k, status, gbnf ? gbnf : msg);
        free(gbnf);
        srv_request_clear(&r);
        json_decref(j);
    }
}

int main(void) {
    test_cyclic_tool_schema();
    test_list_form();
    test_args_form();
    test_not_calls();
    fixture fx = {0};
    mx_error err = {{0}};
    fx.tok = mx_tokenizer_load("models/qwen3-demo-44m-4bit/tokenizer.json", &err);
    CHECK_MSG(fx.tok != NULL, "%s", err.msg);
    if (fx.tok) {
        int32_t eos = mx_tokenizer_token_id(fx.tok, "<|im_end|>");
        fx.v = mx_gram_vocab_create(fx.tok, mx_tokenizer_vocab_size(fx.tok), &eos, 1, &err);
        CHECK(fx.v != NULL);
        // The demo tokenizer has no [TOOL_CALLS]: its format is the tagged one (JSON for Llama).
        CHECK(srv_calls_detect(fx.tok, NULL, "qwen3") == SRV_CALLS_TAGGED);
        CHECK(srv_calls_detect(fx.tok, NULL, "llama") == SRV_CALLS_JSON);
        if (fx.v) test_forced_grammars(&fx);
        mx_gram_vocab_free(fx.v);
        mx_tokenizer_free(fx.tok);
    }
    return check_finish();
}
