// SPDX-License-Identifier: MIT
// Grammar module tests (src/grammar): GBNF parse errors name line and column; the matcher accepts
// the token sequences of valid texts and rejects invalid ones; every token of a mask is accepted by
// the matcher and every other token refused (checked exhaustively on sampled states); random walks
// that pick uniformly among the allowed tokens until the grammar completes produce text that
// parses as JSON, for JSON-schema grammars; schema errors name the keyword and path. A failed parse,
// schema compilation or matcher start says what kind of failure it was: a wrong text or schema
// (MX_GRAM_INVALID) or a bound (MX_GRAM_BOUND); test_fault_injection checks MX_GRAM_NO_MEMORY.
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/clock.h"
#include "grammar/grammar.h"

// The bound of the blow-up guards below: the forms that were quadratic (or unbounded) took a minute
// or more at these sizes; the linear ones take about a second optimized and up to ~20 s under the
// sanitizers at -O0 on a slow two-core machine, so the bound tells the two apart with room for both.
static const double BLOWUP_SECONDS = 45.0;

static const char *tok_path = "models/qwen3-demo-44m-4bit/tokenizer.json";

static uint64_t rng_state = 88172645463325252ull;
static uint32_t rng(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)rng_state;
}

// A grammar that must fail to parse with a message holding needle, as a failure of kind `failure`
// (MX_GRAM_INVALID: the text is wrong; MX_GRAM_BOUND: it needs more than a bound allows).
static void expect_parse_failure(const char *text, int failure, const char *needle) {
    mx_error err = {{0}};
    int got = 0;
    mx_grammar *g = mx_grammar_parse(text, &got, &err);
    CHECK_MSG(g == NULL, "grammar should fail: %s", text);
    CHECK_MSG(strstr(err.msg, needle) != NULL, "message '%s' lacks '%s'", err.msg, needle);
    CHECK_MSG(got == failure, "'%s': failure %d, want %d", err.msg, got, failure);
    mx_grammar_free(g);
}
static void expect_parse_error(const char *text, const char *needle) { expect_parse_failure(text, MX_GRAM_INVALID, needle); }

static void test_parse_errors(void) {
    expect_parse_error("root ::= \"a\" foo\n", "line 1, column 14: rule 'foo' is used but not defined");
    expect_parse_error("root ::= \"a\"\nx ::= [b-a]\n", "line 2, column 10: character range is backwards");
    expect_parse_error("root ::= \"abc\n", "line 1, column 10: unterminated string literal");
    expect_parse_error("root ::= ( \"a\" \n", "line 1, column 10: '(' is not closed");
    expect_parse_error("root ::= \"a\"{3,1}", "line 1, column 13: repetition {3,1} has max below min");
    expect_parse_error("root ::= \"a\" \"\\q\"", "line 1, column 15: unknown escape");
    expect_parse_error("  root \"a\"", "line 1, column 8: expected '::='");
    expect_parse_error("a ::= \"x\"", "no 'root' rule");
    expect_parse_error("root ::= root \"a\" | \"b\"", "line 1, column 1: rule 'root' is left-recursive");
    expect_parse_error("root ::= ( \"a\"? )*", "line 1, column 10: a repeated group can match the empty string");
    expect_parse_error("root ::= x{2,3}\nx ::= \"b\"?", "line 2, column 1: a repeated rule can match the empty string");
    expect_parse_error("root ::= \"a\"\nroot ::= \"b\"", "line 2, column 1: rule 'root' is defined twice");
    expect_parse_error("root ::= [abc", "line 1, column 10: unterminated character class");
    expect_parse_error("root ::= * \"a\"", "line 1, column 10: unexpected character '*'");
    mx_error err = {{0}};
    int failure = 12345;  // written only when the call fails
    mx_grammar *g = mx_grammar_parse("# comment\nroot ::= item+ # trailing\n  | \"x\"\nitem ::= [a-z] \"=\" [0-9]{1,3} \";\"\n",
                                     &failure, &err);
    CHECK_MSG(g != NULL && failure == 12345, "%s (failure %d)", err.msg, failure);
    mx_grammar_free(g);
    // Bounds of the parser: the text may be right, but it asks for too much.
    expect_parse_failure("root ::= \"a\"{1,2000000}", MX_GRAM_BOUND, "repetition count too large");
    char deep[1024] = "root ::= ";
    for (int i = 0; i < 210; i++) strcat(deep, "(");
    strcat(deep, "\"a\"");
    for (int i = 0; i < 210; i++) strcat(deep, ")");
    expect_parse_failure(deep, MX_GRAM_BOUND, "parentheses nested too deeply");
}

typedef struct fixture {
    mx_tokenizer *tok;
    mx_gram_vocab *v;
    int32_t eos;
} fixture;

static mx_gram_index *index_for(fixture *fx, const char *gbnf) {
    mx_error err = {{0}};
    mx_grammar *g = mx_grammar_parse(gbnf, NULL, &err);
    CHECK_MSG(g != NULL, "%s\n%s", err.msg, gbnf);
    if (!g) return NULL;
    mx_gram_index *ix = mx_gram_index_create(g, fx->v, &err);
    CHECK(ix != NULL);
    return ix;
}

// Feeds text's tokens; returns 0 when all were accepted and the grammar is complete.
static int feed_text(fixture *fx, mx_gram_index *ix, const char *text, bool *complete) {
    mx_error err = {{0}};
    int32_t *ids = NULL;
    size_t n = 0;
    if (mx_tokenizer_encode(fx->tok, text, strlen(text), &ids, &n, &err)) return -1;
    mx_matcher *m = mx_matcher_create(ix, NULL, &err);
    int rc = 0;
    uint32_t *mask = malloc(sizeof(uint32_t) * (size_t)mx_gram_vocab_mask_words(fx->v));
    for (size_t i = 0; i < n && rc == 0; i++) {
        mx_matcher_mask(m, mask, &err);
        bool in_mask = (mask[ids[i] >> 5] >> (ids[i] & 31)) & 1;
        rc = mx_matcher_accept(m, ids[i], &err);
        CHECK_MSG(in_mask == (rc == 0), "mask and accept disagree on token %d of '%s'", ids[i], text);
    }
    *complete = rc == 0 && mx_matcher_complete(m);
    free(mask);
    free(ids);
    mx_matcher_free(m);
    return rc;
}

static void test_accept_reject(fixture *fx) {
    mx_gram_index *ix = index_for(fx, "root ::= \"{\" ws pair ( \",\" ws pair )* ws \"}\"\n"
                                      "pair ::= [a-z]+ \":\" ws ( [0-9]{1,4} | \"'\" [^']* \"'\" )\n"
                                      "ws ::= [ \\n]*\n");
    if (!ix) return;
    bool complete;
    CHECK(feed_text(fx, ix, "{abc: 12, de:'hello world', x: 7}", &complete) == 0 && complete);
    CHECK(feed_text(fx, ix, "{abc: 12", &complete) == 0 && !complete);
    CHECK(feed_text(fx, ix, "{abc: 12345}", &complete) != 0);
    CHECK(feed_text(fx, ix, "{ABC: 1}", &complete) != 0);
    CHECK(feed_text(fx, ix, "{a:'é ü 漢字 ok'}", &complete) == 0 && complete);
    mx_gram_index_release(ix);
}

// On states reached by a fixed text, every token is checked: in the mask iff accepted.
static void test_mask_exhaustive(fixture *fx, const char *gbnf, const char *prefix) {
    mx_gram_index *ix = index_for(fx, gbnf);
    if (!ix) return;
    mx_error err = {{0}};
    int32_t *ids = NULL;
    size_t n = 0;
    mx_tokenizer_encode(fx->tok, prefix, strlen(prefix), &ids, &n, &err);
    int V = mx_gram_vocab_size(fx->v), W = mx_gram_vocab_mask_words(fx->v);
    uint32_t *mask = malloc(sizeof(uint32_t) * (size_t)W);
    for (size_t step = 0; step <= n; step++) {
        mx_matcher *m = mx_matcher_create(ix, NULL, &err);
        for (size_t i = 0; i < step; i++) CHECK(mx_matcher_accept(m, ids[i], &err) == 0);
        int count = mx_matcher_mask(m, mask, &err);
        int disagree = 0, allowed = 0;
        for (int32_t t = 0; t < V; t++) {
            bool in = (mask[t >> 5] >> (t & 31)) & 1;
            allowed += in;
            if (t == fx->eos) continue;
            mx_matcher *probe = mx_matcher_create(ix, NULL, &err);
            for (size_t i = 0; i < step; i++) mx_matcher_accept(probe, ids[i], &err);
            bool ok = mx_matcher_accept(probe, t, &err) == 0;
            mx_matcher_free(probe);
            if (ok != in && disagree++ < 3) fprintf(stderr, "  step %zu token %d: mask %d accept %d\n", step, t, in, ok);
        }
        CHECK_MSG(disagree == 0, "prefix '%s' step %zu: %d tokens disagree", prefix, step, disagree);
        CHECK(count == allowed);
        mx_matcher_free(m);
    }
    free(mask);
    free(ids);
    mx_gram_index_release(ix);
}

// Picks allowed tokens at random (uniformly) until the grammar completes or max steps; returns the
// text (malloc'ed) or NULL when the walk hit a dead end.
static char *random_walk(fixture *fx, mx_gram_index *ix, int max_steps, bool prefer_end, bool *ended) {
    mx_error err = {{0}};
    int V = mx_gram_vocab_size(fx->v), W = mx_gram_vocab_mask_words(fx->v);
    uint32_t *mask = malloc(sizeof(uint32_t) * (size_t)W);
    int32_t *out = malloc(sizeof(int32_t) * (size_t)max_steps);
    int32_t *cand = malloc(sizeof(int32_t) * (size_t)V);
    mx_matcher *m = mx_matcher_create(ix, NULL, &err);
    int n = 0;
    *ended = false;
    bool dead = false;
    while (n < max_steps) {
        int count = mx_matcher_mask(m, mask, &err);
        if (count == 0) {
            dead = true;
            break;
        }
        bool eos_ok = (mask[fx->eos >> 5] >> (fx->eos & 31)) & 1;
        if (eos_ok && (prefer_end || count == 1 || rng() % 8 == 0)) {
            CHECK(mx_matcher_accept(m, fx->eos, &err) == 0);
            *ended = true;
            break;
        }
        int k = 0;
        for (int32_t t = 0; t < V; t++)
            if (((mask[t >> 5] >> (t & 31)) & 1) && t != fx->eos) cand[k++] = t;
        if (k == 0) {
            dead = true;
            break;
        }
        // Prefer short tokens half of the time so walks also end inside strings and numbers.
        int32_t pick = cand[rng() % (uint32_t)k];
        int rc = mx_matcher_accept(m, pick, &err);
        CHECK_MSG(rc == 0, "allowed token %d refused: %s", pick, err.msg);
        if (rc) break;
        out[n++] = pick;
    }
    char *text = mx_tokenizer_decode(fx->tok, out, (size_t)n, false);
    if (dead) {
        fprintf(stderr, "  dead end after: '%s' (last token %d)\n", text, n ? out[n - 1] : -1);
        free(text);
        text = NULL;
    }
    mx_matcher_free(m);
    free(mask);
    free(out);
    free(cand);
    return text;
}

static void test_schema_walks(fixture *fx) {
    static const char *const schemas[] = {
        "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":12},\"age\":{\"type\":\"integer\","
        "\"minimum\":0,\"maximum\":150},\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"a\",\"b\",\"c\"]},\"maxItems\":3}},"
        "\"required\":[\"name\",\"age\"]}",
        "{\"anyOf\":[{\"type\":\"null\"},{\"type\":\"boolean\"},{\"type\":\"number\"}]}",
        "{\"type\":\"array\",\"items\":{\"type\":\"integer\",\"minimum\":-20,\"maximum\":1234},\"minItems\":2,\"maxItems\":4}",
        "{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},\"next\":{\"anyOf\":[{\"$ref\":"
        "\"#/$defs/node\"},{\"type\":\"null\"}]}},\"required\":[\"v\",\"next\"]}},\"$ref\":\"#/$defs/node\"}",
        "{\"type\":\"string\",\"pattern\":\"^[A-Z]{3}-[0-9]{2,4}$\"}",
        NULL};
    for (int s = 0; schemas[s]; s++) {
        json_error_t je;
        json_t *schema = json_loads(schemas[s], 0, &je);
        mx_error err = {{0}};
        char *gbnf = mx_json_schema_to_gbnf(schema, NULL, &err);
        CHECK_MSG(gbnf != NULL, "schema %d: %s", s, err.msg);
        json_decref(schema);
        if (!gbnf) continue;
        mx_gram_index *ix = index_for(fx, gbnf);
        free(gbnf);
        if (!ix) continue;
        int finished = 0;
        for (int w = 0; w < 12; w++) {
            bool ended;
            char *text = random_walk(fx, ix, 400, w >= 6, &ended);
            CHECK_MSG(text != NULL, "schema %d walk %d: dead end", s, w);
            if (text && ended) {
                finished++;
                json_t *doc = json_loads(text, JSON_DECODE_ANY, &je);
                CHECK_MSG(doc != NULL, "schema %d: output is not JSON: %s (%s)", s, text, je.text);
                json_decref(doc);
            }
            free(text);
        }
        CHECK_MSG(finished > 0, "schema %d: no walk finished", s);
        mx_gram_index_release(ix);
    }
}

// Deterministic mutations (byte overwrites, deletions, truncations, spliced grammar fragments) of a
// valid GBNF text and of a JSON schema: every parse succeeds or fails with a message; the
// sanitizer build turns out-of-bounds reads and leaks into failures.
static void test_mutations(void) {
    static const char *const pieces[] = {"(", ")", "|", "*", "+", "?", "{2,}", "{0,3}", "[", "]", "[^", "\"", "\\",
                                         "::=", "root", "x", "\n", "#", "\\x4", "\\u12", "é", ".", "-"};
    const char *gbnf = "root ::= \"{\" ws pair ( \",\" ws pair )* ws \"}\"\n"
                       "pair ::= [a-z]+ \":\" ws ( [0-9]{1,4} | \"'\" [^'\\n]* \"'\" )\nws ::= [ \\n]*\n";
    size_t n = strlen(gbnf);
    char buf[512];
    int parsed = 0, rejected = 0;
    for (int round = 0; round < 2000; round++) {
        memcpy(buf, gbnf, n + 1);
        size_t len = n;
        int edits = 1 + (int)(rng() % 3);
        for (int e = 0; e < edits; e++) {
            size_t at = rng() % (len + 1);
            switch (rng() % 4) {
            case 0: if (at < len) buf[at] = (char)(rng() % 128 ? rng() % 128 : 1); break;
            case 1: if (at < len) memmove(buf + at, buf + at + 1, len - at), len--; break;
            case 2: len = at, buf[len] = 0; break;
            default: {
                const char *p = pieces[rng() % (sizeof pieces / sizeof *pieces)];
                size_t k = strlen(p);
                if (len + k < sizeof buf) {
                    memmove(buf + at + k, buf + at, len - at + 1);
                    memcpy(buf + at, p, k);
                    len += k;
                }
            }
            }
        }
        mx_error err = {{0}};
        mx_grammar *g = mx_grammar_parse(buf, NULL, &err);
        if (g) {
            parsed++;
        } else {
            rejected++;
            CHECK_MSG(err.msg[0] != 0, "rejected without a message: %s", buf);
        }
        mx_grammar_free(g);
    }
    CHECK(parsed > 0 && rejected > 0);
    const char *schema = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\",\"minimum\":-5,\"maximum\":70},"
                         "\"b\":{\"type\":\"array\",\"items\":{\"enum\":[\"x\",1,null]},\"maxItems\":3},\"c\":{\"type\":\"string\","
                         "\"pattern\":\"^[A-Z]{2}(-[0-9]+)?$\"}},\"required\":[\"a\"]}";
    n = strlen(schema);
    for (int round = 0; round < 1500; round++) {
        memcpy(buf, schema, n + 1);
        size_t len = n;
        for (int e = 0; e < 2; e++) {
            size_t at = rng() % len;
            if (rng() % 2) buf[at] = "{}[]\":,0123456789-abcxyz^$()|*+?\\"[rng() % 34];
            else memmove(buf + at, buf + at + 1, len - at), len--;
        }
        json_t *j = json_loads(buf, 0, NULL);
        if (!j) continue;
        mx_error err = {{0}};
        char *text = mx_json_schema_to_gbnf(j, NULL, &err);
        if (text) {
            mx_grammar *g = mx_grammar_parse(text, NULL, &err);
            CHECK_MSG(g != NULL, "schema %s compiled to a grammar that does not parse: %s", buf, err.msg);
            mx_grammar_free(g);
        } else {
            CHECK_MSG(err.msg[0] != 0, "schema rejected without a message: %s", buf);
        }
        free(text);
        json_decref(j);
    }
}

// A schema that must fail to compile with a message holding needle, as a failure of kind `failure`.
static void expect_schema_failure(const char *schema_text, int failure, const char *needle) {
    json_error_t je;
    json_t *schema = json_loads(schema_text, 0, &je);
    mx_error err = {{0}};
    int got = 0;
    char *g = mx_json_schema_to_gbnf(schema, &got, &err);
    CHECK_MSG(g == NULL, "schema should fail: %s", schema_text);
    CHECK_MSG(strstr(err.msg, needle) != NULL, "message '%s' lacks '%s'", err.msg, needle);
    CHECK_MSG(got == failure, "'%s': failure %d, want %d", err.msg, got, failure);
    free(g);
    json_decref(schema);
}
static void expect_schema_error(const char *schema_text, const char *needle) {
    expect_schema_failure(schema_text, MX_GRAM_INVALID, needle);
}

static void test_schema_errors(void) {
    expect_schema_error("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"format\":\"email\"}}}",
                        "json schema at '#/properties/a': format 'email' is not supported");
    expect_schema_error("{\"type\":\"array\",\"uniqueItems\":true}", "keyword 'uniqueItems' is not supported");
    expect_schema_error("{\"$ref\":\"#/$defs/missing\"}", "$ref '#/$defs/missing' does not resolve");
    expect_schema_error("{\"type\":\"integer\",\"minimum\":5,\"maximum\":2}", "no integer satisfies the bounds");
    expect_schema_error("{\"type\":\"object\",\"required\":[\"x\"],\"properties\":{}}", "required property 'x'");
    expect_schema_error("{\"type\":\"string\",\"pattern\":\"(?=a)b\"}", "lookaround");
    // $ref cycles that no object or array interrupts would make a left-recursive grammar.
    expect_schema_error("{\"$ref\":\"#\"}", "leads back to itself");
    expect_schema_error("{\"anyOf\":[{\"$ref\":\"#/$defs/a\"},{\"type\":\"null\"}],\"$defs\":{\"a\":{\"$ref\":\"#\"}}}",
                        "leads back to itself");
    // The same cycle in one of several schemas compiled together (tool calls) gets the same error,
    // not the GBNF parser's left-recursion message.
    json_t *ok = json_loads("{\"type\":\"object\"}", 0, NULL);
    json_t *cyclic = json_loads("{\"anyOf\":[{\"$ref\":\"#\"},{\"type\":\"null\"}]}", 0, NULL);
    json_t *const schemas[] = {ok, cyclic};
    const char *const rules[] = {"args0", "args1"};
    mx_error err = {{0}};
    int failure = 0;
    char *text = mx_json_schemas_to_gbnf_rules(schemas, rules, 2, &failure, &err);
    CHECK_MSG(text == NULL && strstr(err.msg, "leads back to itself") != NULL && failure == MX_GRAM_INVALID,
              "schemas with a $ref cycle: '%s' (failure %d)", text ? text : err.msg, failure);
    free(text);
    json_decref(ok);
    json_decref(cyclic);
    // A backslash ending the pattern (inside a class it used to step past the string's end).
    expect_schema_error("{\"type\":\"string\",\"pattern\":\"^[ab\\\\\"}", "pattern: unterminated '['");
    expect_schema_error("{\"type\":\"string\",\"pattern\":\"ab\\\\\"}", "trailing");
    expect_schema_error("{\"type\":\"string\",\"pattern\":\"^[c-a]$\"}", "pattern '^[c-a]$' is not supported: grammar line 1");
    // A pattern whose translation passes a bound of the GBNF parser fails as that bound.
    expect_schema_failure("{\"type\":\"string\",\"pattern\":\"^a{1,2000000}$\"}", MX_GRAM_BOUND, "repetition count too large");
    char deep[4096] = "";  // 70 arrays of 28 bytes each around a null
    for (int i = 0; i < 70; i++) strcat(deep, "{\"type\":\"array\",\"items\":");
    strcat(deep, "{\"type\":\"null\"}");
    for (int i = 0; i < 70; i++) strcat(deep, "}");
    expect_schema_failure(deep, MX_GRAM_BOUND, "schema nested too deeply");
}

// Grammars as long as a request body allows: a chain of 200000 rules (each checks used to recurse
// once per rule, overflowing the stack) and 100000 alternatives (rule lookup, nullability and the
// matcher's stack sets used to be quadratic: minutes) parse and match in well under a second each.
static char *long_grammar(int kind, int n) {
    size_t cap = (size_t)n * 40 + 64, len = 0;
    char *t = malloc(cap);
    if (kind == 0) {
        len += (size_t)snprintf(t + len, cap - len, "root ::= a0\n");
        for (int i = 0; i < n; i++) len += (size_t)snprintf(t + len, cap - len, "a%d ::= a%d\n", i, i + 1);
        snprintf(t + len, cap - len, "a%d ::= \"xyz\"\n", n);
    } else if (kind == 1) {
        len += (size_t)snprintf(t + len, cap - len, "root ::= \"q\"");
        for (int i = 0; i < n; i++) len += (size_t)snprintf(t + len, cap - len, " | \"w%d\"", i);
        snprintf(t + len, cap - len, "\n");
    } else {
        // Each rule is nullable only through the next one, listed after it.
        len += (size_t)snprintf(t + len, cap - len, "root ::= c0 \"z\"\n");
        for (int i = 0; i < n; i++) len += (size_t)snprintf(t + len, cap - len, "c%d ::= c%d | \"a\"\n", i, i + 1);
        snprintf(t + len, cap - len, "c%d ::= \"\"\n", n);
    }
    return t;
}

static void test_long_grammars(fixture *fx) {
    static const char *const accepted[] = {"xyz", "w99999", "z"};
    static const int sizes[] = {200000, 100000, 100000};
    for (int kind = 0; kind < 3; kind++) {
        char *text = long_grammar(kind, sizes[kind]);
        // Timed: parsing and the start set (the parts that were quadratic). Matching the text then
        // walks the vocabulary with up to 100000 stacks, which takes its honest time.
        double t0 = mx_now();
        mx_gram_index *ix = index_for(fx, text);
        mx_error err = {{0}};
        mx_matcher *m = ix ? mx_matcher_create(ix, NULL, &err) : NULL;
        double dt = mx_now() - t0;
        CHECK_MSG(m != NULL, "long grammar %d: %s", kind, err.msg);
        CHECK_MSG(dt < BLOWUP_SECONDS, "long grammar %d took %.1f s", kind, dt);
        mx_matcher_free(m);
        bool complete = false;
        if (ix) CHECK_MSG(feed_text(fx, ix, accepted[kind], &complete) == 0 && complete, "long grammar %d", kind);
        mx_gram_index_release(ix);
        free(text);
    }
    // An object of 200000 required properties (each looked through 'required' once: was quadratic).
    {
        int n = 200000;
        json_t *props = json_object(), *req = json_array();
        for (int i = 0; i < n; i++) {
            char name[32];
            snprintf(name, sizeof name, "p%d", i);
            json_object_set_new(props, name, json_pack("{s:s}", "type", "boolean"));
            json_array_append_new(req, json_string(name));
        }
        json_t *schema = json_pack("{s:s, s:o, s:o}", "type", "object", "properties", props, "required", req);
        mx_error err = {{0}};
        double t0 = mx_now();
        char *g = mx_json_schema_to_gbnf(schema, NULL, &err);
        double dt = mx_now() - t0;
        CHECK_MSG(g != NULL, "%s", err.msg);
        CHECK_MSG(dt < BLOWUP_SECONDS, "a schema of %d properties took %.1f s", n, dt);
        free(g);
        json_decref(schema);
    }
    // Two hundred unbounded repetitions in a row, each allowed empty: every stack set holds them
    // all and each step used to take a minute; the matcher's work limit answers -1 instead.
    {
        size_t cap = 200 * 8 + 64, len = 0;
        char *g = malloc(cap);
        len += (size_t)snprintf(g + len, cap - len, "root ::=");
        for (int i = 0; i < 200; i++) len += (size_t)snprintf(g + len, cap - len, i % 2 ? " [a-z]*" : " [0-9]*");
        snprintf(g + len, cap - len, " \"x\"\n");
        mx_gram_index *ix = index_for(fx, g);
        mx_error err = {{0}};
        mx_matcher *m = ix ? mx_matcher_create(ix, NULL, &err) : NULL;
        CHECK_MSG(m != NULL, "%s", err.msg);
        if (m) {
            uint32_t *mask = malloc(sizeof(uint32_t) * (size_t)mx_gram_vocab_mask_words(fx->v));
            double t0 = mx_now();
            int allowed = mx_matcher_mask(m, mask, &err);
            double dt = mx_now() - t0;
            CHECK_MSG(allowed == MX_GRAM_BOUND && strstr(err.msg, "work limit"), "mask of an over-ambiguous grammar: %d %s", allowed, err.msg);
            CHECK_MSG(dt < BLOWUP_SECONDS, "the work limit took %.1f s", dt);
            free(mask);
        }
        mx_matcher_free(m);
        mx_gram_index_release(ix);
        free(g);
    }
    // A left-recursive cycle closed at the end of a long chain is still found.
    char *text = long_grammar(0, 100000);
    char *end = strstr(text, "a100000 ::=");
    snprintf(end, 32, "a100000 ::= a0 \"x\"\n");
    expect_parse_error(text, "left-recursive");
    free(text);
}

// The matcher's bounds stop a sequence with an error, never as the grammar's normal end: a
// recursive grammar whose stacks grow with the text passes a lowered frame limit a few tokens in,
// and a lowered work limit stops the next step. The mask answers MX_GRAM_BOUND with the bound in the
// message, accept likewise, and the matcher stays usable for what fits.
static void test_bounds_mid_sequence(fixture *fx) {
    mx_gram_index *ix = index_for(fx, "root ::= \"(\" root \")\" | \"x\"\n");
    if (!ix) return;
    mx_error err = {{0}};
    uint32_t *mask = malloc(sizeof(uint32_t) * (size_t)mx_gram_vocab_mask_words(fx->v));
    mx_gram_index_set_limits(ix, MX_GRAM_MAX_WORK, 40);
    mx_matcher *m = mx_matcher_create(ix, NULL, &err);
    CHECK_MSG(m != NULL, "%s", err.msg);
    int32_t open = mx_tokenizer_token_id(fx->tok, "(");
    int rc = 0, steps = 0;
    for (; m && steps < 100 && rc >= 0; steps++) {
        rc = mx_matcher_mask(m, mask, &err);
        if (rc > 0) rc = mx_matcher_accept(m, open, &err);
    }
    CHECK_MSG(rc == MX_GRAM_BOUND && strstr(err.msg, "parser stacks passed their limit (40 frames"),
              "nested '(' past 40 frames: step %d, %d '%s'", steps, rc, err.msg);
    CHECK_MSG(steps > 5, "the frame limit stopped the matcher after %d steps", steps);
    mx_matcher_free(m);
    mx_gram_index_release(ix);

    ix = index_for(fx, "root ::= [a-z]{0,3} [0-9]* [a-z]* [0-9]* [a-z]* \"x\"\n");
    m = ix ? mx_matcher_create(ix, NULL, &err) : NULL;
    if (m) {
        CHECK(mx_matcher_mask(m, mask, &err) > 0);
        mx_gram_index_set_limits(ix, 10, MX_GRAM_MAX_FRAMES);
        int32_t a = mx_tokenizer_token_id(fx->tok, "a");
        rc = mx_matcher_accept(m, a, &err);
        if (rc == 0) rc = mx_matcher_mask(m, mask, &err);
        CHECK_MSG(rc == MX_GRAM_BOUND && strstr(err.msg, "work limit (10 steps"), "work limit of 10: %d '%s'", rc, err.msg);
        mx_gram_index_set_limits(ix, MX_GRAM_MAX_WORK, MX_GRAM_MAX_FRAMES);
        CHECK(mx_matcher_mask(m, mask, &err) > 0);
    }
    mx_matcher_free(m);
    mx_gram_index_release(ix);

    // A frame limit the start state already passes: the matcher cannot be made, as a bound.
    ix = index_for(fx, "root ::= \"(\" root \")\" | \"x\"\n");
    if (ix) {
        int failure = 0;
        mx_gram_index_set_limits(ix, MX_GRAM_MAX_WORK, 1);
        m = mx_matcher_create(ix, &failure, &err);
        CHECK_MSG(m == NULL && failure == MX_GRAM_BOUND && strstr(err.msg, "parser stacks passed their limit (1 frames"),
                  "a matcher past 1 frame: failure %d '%s'", failure, err.msg);
        mx_matcher_free(m);
        mx_gram_index_release(ix);
    }
    free(mask);
}

int main(void) {
    test_parse_errors();
    test_schema_errors();
    test_mutations();
    fixture fx = {0};
    mx_error err = {{0}};
    fx.tok = mx_tokenizer_load(tok_path, &err);
    CHECK_MSG(fx.tok != NULL, "%s", err.msg);
    if (!fx.tok) return check_finish();
    fx.eos = mx_tokenizer_token_id(fx.tok, "<|im_end|>");
    fx.v = mx_gram_vocab_create(fx.tok, 151936, &fx.eos, 1, &err);
    CHECK(fx.v != NULL);
    test_accept_reject(&fx);
    test_mask_exhaustive(&fx, "root ::= \"\\\"\" [^\"\\\\]{0,40} \"\\\"\" [ ]? \"end\"\n", "\"hello wor\" end");
    test_mask_exhaustive(&fx, "root ::= ( [0-9]{2,5} \",\" )+ \"x\"\n", "12,345,x");
    test_mask_exhaustive(&fx, "root ::= \"é\" [α-ω]* \"漢\"\n", "éαβγ漢");
    // Long repetitions: stacks at counts far from the bounds share cached masks (mask_key).
    test_mask_exhaustive(&fx, "root ::= \"[\" item ( \",\" item ){3,400} \"]\"\nitem ::= [a-z]{1,6}\n",
                         "[ab,cd,ef,gh,ij,kl,mn,op");
    test_mask_exhaustive(&fx, "root ::= \"<\" [a-z ]{0,300} \">\"\n",
                         "<the quick brown fox jumps over the lazy dog and keeps running far away>");
    test_schema_walks(&fx);
    test_long_grammars(&fx);
    test_bounds_mid_sequence(&fx);
    mx_gram_vocab_free(fx.v);
    mx_tokenizer_free(fx.tok);
    return check_finish();
}
