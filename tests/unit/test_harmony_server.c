// SPDX-License-Identifier: MIT
// The server's gpt-oss (harmony) pieces around the output parser, on a synthetic harmony tokenizer
// (the demo model's tokenizer.json plus the seven harmony special tokens): format detection, the
// marker ids, the grammars that force a call (tool_choice "required" or named) or a JSON answer
// in harmony (an optional free analysis message, then the constrained message, matched with the
// markers as special tokens; a vocabulary without them cannot write one), what those grammars
// accept parsing back into the same calls and content, and the message preparation that lets
// OpenAI-style histories (content null, arguments as a string, reasoning_content) render through
// the real gpt-oss template.
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "chat/chat_template.h"
#include "check.h"
#include "grammar/grammar.h"
#include "server/srv_calls.h"
#include "server/srv_grammar.h"
#include "server/srv_harmony.h"
#include "server/srv_output.h"
#include "server/srv_request.h"

static const char *const HARMONY_TOKENS[] = {"<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>",
                                             "<|return|>", "<|call|>"};

// The demo tokenizer with the harmony tokens at ids 151669.. (inside the demo model's vocabulary).
static mx_tokenizer *harmony_tokenizer(void) {
    json_t *t = json_load_file("models/qwen3-demo-44m-4bit/tokenizer.json", 0, NULL);
    json_t *added = json_object_get(t, "added_tokens");
    for (int i = 0; i < 7; i++)
        json_array_append_new(added, json_pack("{s:i, s:s, s:b, s:b, s:b, s:b, s:b}", "id", 151669 + i, "content",
                                               HARMONY_TOKENS[i], "single_word", 0, "lstrip", 0, "rstrip", 0,
                                               "normalized", 0, "special", 1));
    char path[] = "/tmp/mx_harmony_tok_XXXXXX";
    int fd = mkstemp(path);
    if (fd >= 0) close(fd);
    mx_tokenizer *tok = NULL;
    mx_error err = {{0}};
    if (fd >= 0 && json_dump_file(t, path, 0) == 0) tok = mx_tokenizer_load(path, &err);
    CHECK_MSG(tok != NULL, "%s", err.msg);
    unlink(path);
    json_decref(t);
    return tok;
}

static bool accepts(const mx_tokenizer *tok, mx_gram_index *ix, const char *text) {
    mx_error err = {{0}};
    int32_t *ids = NULL;
    size_t n = 0;
    if (mx_tokenizer_encode(tok, text, strlen(text), &ids, &n, &err)) return false;
    mx_matcher *m = mx_matcher_create(ix, NULL, &err);
    int rc = m ? 0 : -1;
    for (size_t i = 0; i < n && rc == 0; i++) rc = mx_matcher_accept(m, ids[i], &err);
    bool ok = rc == 0 && mx_matcher_complete(m);
    mx_matcher_free(m);
    free(ids);
    return ok;
}

static const char request_fmt[] =
    "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], %s \"tools\": ["
    "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": {\"type\": \"object\", "
    "\"properties\": {\"city\": {\"type\": \"string\", \"maxLength\": 10}, \"unit\": {\"enum\": [\"c\", \"f\"]}}, "
    "\"required\": [\"city\", \"unit\"]}}},"
    "{\"type\": \"function\", \"function\": {\"name\": \"now\"}}]}";

typedef struct gcase {
    const char *fields, *text;
    bool accept;
    const char *calls, *content, *reasoning;  // what the parser makes of an accepted text
} gcase;

static void test_grammars(const mx_tokenizer *tok) {
    int32_t markers[SRV_MAX_MARKERS], stops[2] = {151674, 151675};  // <|return|>, <|call|>
    int n_markers = srv_calls_marker_ids(tok, markers);
    CHECK(n_markers == 5);
    mx_error err = {{0}};
    int vocab = mx_tokenizer_vocab_size(tok);
    mx_gram_vocab *with = mx_gram_vocab_create_with_specials(tok, vocab, stops, 2, markers, n_markers, &err);
    mx_gram_vocab *plain = mx_gram_vocab_create(tok, vocab, stops, 2, &err);
    CHECK(with && plain);
    static const gcase cases[] = {
        {"\"tool_choice\": \"required\",", "<|channel|>commentary to=functions.now <|constrain|>json<|message|>{}", true,
         "now({});", "", ""},
        {"\"tool_choice\": \"required\",",
         "<|channel|>analysis<|message|>The user wants weather: call it.<|end|><|start|>assistant<|channel|>commentary "
         "to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Rome\", \"unit\": \"c\"}",
         true, "get_weather({\"city\":\"Rome\",\"unit\":\"c\"});", "", "The user wants weather: call it."},
        {"\"tool_choice\": \"required\",", "<|channel|>commentary to=functions.other <|constrain|>json<|message|>{}", false, NULL, NULL, NULL},
        {"\"tool_choice\": \"required\",",
         "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Rome\", \"unit\": \"k\"}", false, NULL, NULL, NULL},
        {"\"tool_choice\": \"required\",", "<|channel|>final<|message|>No call.", false, NULL, NULL, NULL},
        {"\"tool_choice\": \"required\",",
         "<|channel|>commentary to=functions.now <|constrain|>json<|message|>{}<|start|>assistant<|channel|>commentary "
         "to=functions.now <|constrain|>json<|message|>{}", false, NULL, NULL, NULL},
        {"\"tool_choice\": {\"type\": \"function\", \"function\": {\"name\": \"now\"}},",
         "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Rome\", \"unit\": \"c\"}", false, NULL, NULL, NULL},
        {"\"tool_choice\": {\"type\": \"function\", \"function\": {\"name\": \"now\"}},",
         "<|channel|>commentary to=functions.now <|constrain|>json<|message|>{ }", true, "now({});", "", ""},
        {"\"response_format\": {\"type\": \"json_object\"},",
         "<|channel|>analysis<|message|>JSON it is.<|end|><|start|>assistant<|channel|>final<|message|>{\"a\": [1, 2]}",
         true, "", "{\"a\": [1, 2]}", "JSON it is."},
        {"\"response_format\": {\"type\": \"json_object\"},", "{\"a\": 1}", false, NULL, NULL, NULL},
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        const gcase *c = &cases[k];
        char body[2048], msg[256];
        snprintf(body, sizeof body, request_fmt, c->fields);
        json_t *j = json_loads(body, 0, NULL);
        mx_sampling d = mx_sampling_defaults();
        srv_request r;
        CHECK(j && srv_request_parse(j, SRV_KIND_CHAT, &d, &r, msg, sizeof msg) == 0);
        unsigned status = 0;
        char *gbnf = srv_grammar_text(&r, SRV_CALLS_HARMONY, false, &status, msg, sizeof msg);
        CHECK_MSG(gbnf != NULL, "case %zu: %s", k, msg);
        mx_grammar *g = gbnf ? mx_grammar_parse(gbnf, NULL, &err) : NULL;
        CHECK_MSG(g != NULL, "case %zu: %s\n%s", k, err.msg, gbnf ? gbnf : "");
        mx_gram_index *ix = g && with ? mx_gram_index_create(g, with, &err) : NULL;
        if (ix) {
            CHECK_MSG(accepts(tok, ix, c->text) == c->accept, "case %zu: '%s' should be %s\n%s", k, c->text,
                      c->accept ? "accepted" : "rejected", gbnf);
            mx_gram_index_release(ix);
        }
        // Without the markers as text the model could never write a harmony message.
        mx_grammar *g2 = gbnf ? mx_grammar_parse(gbnf, NULL, &err) : NULL;
        mx_gram_index *ix2 = g2 && plain ? mx_gram_index_create(g2, plain, &err) : NULL;
        if (ix2) {
            if (c->accept) CHECK_MSG(!accepts(tok, ix2, c->text), "case %zu: accepted without the markers", k);
            mx_gram_index_release(ix2);
        }
        if (c->accept) {
            srv_output_opts oo = {.parse_tools = true, .harmony = true};
            srv_output *o = srv_output_create(&oo);
            srv_output_push(o, c->text, strlen(c->text));
            srv_output_finish(o);
            char calls[512] = "";
            for (int i = 0; i < srv_output_n_tools(o); i++)
                snprintf(calls + strlen(calls), sizeof calls - strlen(calls), "%s(%s);", srv_output_tool_name(o, i),
                         srv_output_tool_args(o, i));
            CHECK_MSG(!strcmp(calls, c->calls), "case %zu: calls [%s]", k, calls);
            CHECK_STR(srv_output_content(o, NULL), c->content);
            CHECK_STR(srv_output_reasoning(o, NULL), c->reasoning);
            srv_output_free(o);
        }
        free(gbnf);
        srv_request_clear(&r);
        json_decref(j);
    }
    mx_gram_vocab_free(with);
    mx_gram_vocab_free(plain);
}

// An OpenAI-style history renders through the real template once prepared (jinja2 fails on it as
// sent: the template tests `in` on a null content), with the arguments as the model saw them.
static void test_prepare_messages(void) {
    FILE *f = fopen("tests/fixtures/gpt_oss_chat_template.jinja", "rb");
    CHECK(f != NULL);
    if (!f) return;
    char *src = calloc(1, 1 << 16);
    size_t n = fread(src, 1, (1 << 16) - 1, f);
    fclose(f);
    CHECK(n > 10000);
    mx_error err = {{0}};
    mx_chat_template *t = mx_chat_template_from_string(src, NULL, "<|return|>", &err);
    CHECK_MSG(t != NULL, "%s", err.msg);
    json_t *msgs = json_loads(
        "[{\"role\": \"user\", \"content\": \"Weather in Paris?\"},"
        " {\"role\": \"assistant\", \"content\": null, \"reasoning_content\": \"Use the tool.\", \"tool_calls\": [{\"id\": \"c1\","
        "  \"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\":\\\"Paris\\\"}\"}}]},"
        " {\"role\": \"tool\", \"tool_call_id\": \"c1\", \"content\": \"sunny\"}]",
        0, NULL);
    CHECK(msgs != NULL);
    char *raw = t && msgs ? mx_chat_template_render(t, msgs, NULL, true, NULL, &err) : NULL;
    CHECK(raw == NULL);  // as jinja2: "argument of type 'NoneType' is not iterable"
    free(raw);
    srv_harmony_prepare_messages(msgs);
    json_t *m1 = json_array_get(msgs, 1);
    CHECK(json_object_get(m1, "content") == NULL);
    CHECK(json_is_object(json_object_get(json_object_get(json_array_get(json_object_get(m1, "tool_calls"), 0), "function"),
                                         "arguments")));
    CHECK(json_is_string(json_object_get(m1, "thinking")));
    char *out = t ? mx_chat_template_render(t, msgs, NULL, true, NULL, &err) : NULL;
    CHECK_MSG(out != NULL, "%s", err.msg);
    if (out) {
        const char *want = "<|start|>user<|message|>Weather in Paris?<|end|><|start|>assistant<|channel|>analysis"
                           "<|message|>Use the tool.<|end|><|start|>assistant to=functions.get_weather<|channel|>commentary "
                           "json<|message|>{\"city\": \"Paris\"}<|call|><|start|>functions.get_weather to=assistant"
                           "<|channel|>commentary<|message|>\"sunny\"<|end|><|start|>assistant";
        CHECK_MSG(strstr(out, want) != NULL, "[%s]", out);
    }
    free(out);
    // A message with content and tool calls keeps its content (as analysis) and gets no thinking.
    json_t *both = json_loads("[{\"role\": \"assistant\", \"content\": \"Checking.\", \"reasoning_content\": \"r\","
                              " \"tool_calls\": [{\"function\": {\"name\": \"f\", \"arguments\": \"not json\"}}]}]",
                              0, NULL);
    srv_harmony_prepare_messages(both);
    json_t *b0 = json_array_get(both, 0);
    CHECK(json_object_get(b0, "thinking") == NULL);
    CHECK(json_is_string(json_object_get(json_object_get(json_array_get(json_object_get(b0, "tool_calls"), 0), "function"),
                                         "arguments")));
    json_decref(both);
    json_decref(msgs);
    mx_chat_template_free(t);
    free(src);
}

int main(void) {
    mx_tokenizer *demo = mx_tokenizer_load("models/qwen3-demo-44m-4bit/tokenizer.json", &(mx_error){{0}});
    mx_tokenizer *tok = harmony_tokenizer();
    if (demo) CHECK(srv_calls_detect(demo, NULL, "qwen3") == SRV_CALLS_TAGGED && !srv_calls_harmony_tokenizer(demo));
    if (tok) {
        CHECK(srv_calls_detect(tok, NULL, "gpt_oss") == SRV_CALLS_HARMONY);
        test_grammars(tok);
    }
    test_prepare_messages();
    mx_tokenizer_free(tok);
    mx_tokenizer_free(demo);
    return check_finish();
}
