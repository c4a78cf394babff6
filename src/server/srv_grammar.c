// SPDX-License-Identifier: MIT
// Request constraints as grammars, and the server's grammar cache (see srv_grammar.h).
//
// Forced tool calls (tool_choice "required" or a named function) are written in the model's own
// format (srv_calls.h), which the output parser turns into tool_calls:
//   tagged (Qwen, Hermes; also Llama): <tool_call>\n{"name": NAME, "arguments": ARGS}\n</tool_call>
//   Mistral, list form:  [TOOL_CALLS][{"name": NAME, "arguments": ARGS}, ...]
//   Mistral, [ARGS] form: [TOOL_CALLS]NAME[ARGS]ARGS, the whole repeated per call
//   harmony (gpt-oss):   [analysis message] <|channel|>commentary to=functions.NAME <|constrain|>json<|message|>ARGS,
//                        one call (the model ends its turn with <|call|>); a response_format answer is
//                        [analysis message] <|channel|>final<|message|>JSON
// with NAME one of the tools (or the named one) and ARGS valid against that tool's parameters;
// several calls unless parallel_tool_calls is false. Grammar elements match text, and special
// tokens normally never do; a forced Mistral call is matched against a second vocabulary in which
// the markers' special tokens match their text, so the model writes its own marker tokens (its job
// keeps special tokens in the decoded text, which the parser reads).
#include "server/srv_grammar.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/srv_json_alloc.h"

#define CACHE_SLOTS 8
#define INDEX_BYTES_MAX ((size_t)512 << 20)  // a cached grammar above this is dropped (freed with its last matcher)
#define MAX_PARALLEL_CALLS 8

typedef struct cached {
    char *text;
    bool markers;  // bound to the vocabulary whose tool-call markers match text
    mx_gram_index *ix;
    unsigned long used;
} cached;

struct srv_grammars {
    pthread_mutex_t mu;
    const mx_tokenizer *tok;
    int vocab;
    int32_t *stops;
    int n_stop;
    mx_gram_vocab *v;  // built on first use
    mx_gram_vocab *v_markers;  // the same with the special tool-call markers matching text (first use)
    cached slots[CACHE_SLOTS];
    unsigned long clock;
};

srv_grammars *srv_grammars_create(const mx_tokenizer *tok, int vocab, const int32_t *stops, int n_stop) {
    srv_grammars *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    g->stops = malloc(sizeof *g->stops * (size_t)(n_stop + 1));
    if (!g->stops) {
        free(g);
        return NULL;
    }
    if (n_stop > 0) memcpy(g->stops, stops, sizeof *stops * (size_t)n_stop);
    g->n_stop = n_stop;
    g->tok = tok;
    g->vocab = vocab;
    pthread_mutex_init(&g->mu, NULL);
    return g;
}

void srv_grammars_free(srv_grammars *g) {
    if (!g) return;
    for (int i = 0; i < CACHE_SLOTS; i++) {
        free(g->slots[i].text);
        mx_gram_index_release(g->slots[i].ix);
    }
    mx_gram_vocab_free(g->v);
    mx_gram_vocab_free(g->v_markers);
    free(g->stops);
    pthread_mutex_destroy(&g->mu);
    free(g);
}

// The HTTP status of a grammar that could not be compiled, from the grammar call's failure (MX_GRAM_*):
// 500 when an allocation failed, else 400 (the request's grammar or schema is wrong, or needs more
// than a bound allows).
static unsigned failure_status(int failure) { return failure == MX_GRAM_NO_MEMORY ? 500 : 400; }

mx_matcher *srv_grammars_matcher(srv_grammars *g, const char *gbnf, bool markers, unsigned *status, char *msg,
                                 size_t cap) {
    mx_error err = {{0}};
    int failure = MX_GRAM_NO_MEMORY;  // the vocabulary and the index fail only when out of memory
    pthread_mutex_lock(&g->mu);
    mx_gram_index *ix = NULL;
    int32_t marker_ids[SRV_MAX_MARKERS];
    int n_markers = markers ? srv_calls_marker_ids(g->tok, marker_ids) : 0;
    markers = n_markers > 0;
    mx_gram_vocab **vp = markers ? &g->v_markers : &g->v;
    if (!*vp && !(*vp = mx_gram_vocab_create_with_specials(g->tok, g->vocab, g->stops, g->n_stop, marker_ids, n_markers, &err)))
        goto fail;
    int oldest = 0;
    for (int i = 0; i < CACHE_SLOTS; i++) {  // recursive grammars can reach ever new stacks: bound them
        if (g->slots[i].ix && mx_gram_index_bytes(g->slots[i].ix) > INDEX_BYTES_MAX) {
            free(g->slots[i].text);
            mx_gram_index_release(g->slots[i].ix);
            g->slots[i] = (cached){0};
        }
    }
    for (int i = 0; i < CACHE_SLOTS && !ix; i++) {
        if (g->slots[i].text && g->slots[i].markers == markers && strcmp(g->slots[i].text, gbnf) == 0) {
            ix = g->slots[i].ix;
            g->slots[i].used = ++g->clock;
        } else if (g->slots[i].used < g->slots[oldest].used) {
            oldest = i;
        }
    }
    if (!ix) {
        mx_grammar *gr = mx_grammar_parse(gbnf, &failure, &err);
        if (!gr || !(ix = mx_gram_index_create(gr, *vp, &err))) goto fail;
        char *text = strdup(gbnf);
        if (text) {
            free(g->slots[oldest].text);
            mx_gram_index_release(g->slots[oldest].ix);
            g->slots[oldest] = (cached){text, markers, ix, ++g->clock};
            mx_gram_index_retain(ix);
        }
        mx_matcher *m = mx_matcher_create(ix, &failure, &err);
        mx_gram_index_release(ix);  // the cache (when stored) and the matcher hold it
        pthread_mutex_unlock(&g->mu);
        if (!m) snprintf(msg, cap, "%s", err.msg), *status = failure_status(failure);
        return m;
    }
    mx_matcher *m = mx_matcher_create(ix, &failure, &err);
    pthread_mutex_unlock(&g->mu);
    if (!m) snprintf(msg, cap, "%s", err.msg), *status = failure_status(failure);
    return m;
fail:
    pthread_mutex_unlock(&g->mu);
    snprintf(msg, cap, "%s", err.msg);
    *status = failure_status(failure);
    return NULL;
}

// Closes a memory stream; when a write or the close failed (out of memory: the text may be cut
// short), frees the text and sets it NULL. Returns -1 then.
static int close_text(FILE *f, char **text) {
    bool bad = ferror(f) != 0;
    if (fclose(f) != 0 || bad) {
        free(*text);
        *text = NULL;
        return -1;
    }
    return 0;
}

static bool tool_wanted(const srv_request *r, json_t *tool) {
    const char *name = json_string_value(json_object_get(json_object_get(tool, "function"), "name"));
    return r->tool_choice != SRV_TOOLS_NAMED || strcmp(name, r->tool_name) == 0;
}

// One schema rule per tool (argsK: each tool's parameters compile as a schema of their own, so
// their $ref resolves within them) and `answer` as the alternatives, one per tool. With pre set a
// call is PRE NAME MID argsK: Mistral's [ARGS] form [TOOL_CALLS] NAME [ARGS]; harmony
// <|channel|>commentary to=functions. NAME " <|constrain|>json<|message|>". With pre NULL it is the
// JSON object {"name": NAME, "arguments": argsK} (Qwen/Hermes and Llama 3.x). Returns the rules
// (malloc'ed) or NULL with err and *failure (MX_GRAM_*) set.
static char *named_call_rules(const srv_request *r, const char *pre, const char *mid, int *failure, mx_error *err) {
    size_t n_tools = json_array_size(r->tools), n = 0, i;
    json_t **schemas = calloc(n_tools + 1, sizeof *schemas);
    char (*names)[16] = calloc(n_tools + 1, sizeof *names);
    const char **rules = calloc(n_tools + 1, sizeof *rules);
    char *text = NULL, *body = NULL;
    size_t len = 0;
    json_t *t;
    if (!schemas || !names || !rules) goto done;
    json_array_foreach(r->tools, i, t) {
        if (!tool_wanted(r, t)) continue;
        json_t *params = json_object_get(json_object_get(t, "function"), "parameters");
        schemas[n] = params ? json_incref(params) : json_pack("{s:s}", "type", "object");
        if (!schemas[n]) goto done;  // out of memory (a NULL schema would compile as any value)
        snprintf(names[n], sizeof names[n], "args%zu", n);
        rules[n] = names[n];
        n++;
    }
    if (!(body = mx_json_schemas_to_gbnf_rules(schemas, rules, (int)n, failure, err))) goto done;
    FILE *f = open_memstream(&text, &len);
    if (!f) goto done;
    fputs(body, f);
    fputs("answer ::= ", f);
    n = 0;
    json_array_foreach(r->tools, i, t) {
        if (!tool_wanted(r, t)) continue;
        fputs(n ? " | " : "", f);
        json_t *name = json_object_get(json_object_get(t, "function"), "name");
        if (pre) {
            mx_gbnf_put_literal(f, pre, strlen(pre));
            fputc(' ', f);
            mx_gbnf_put_literal(f, json_string_value(name), json_string_length(name));
            fputc(' ', f);
            mx_gbnf_put_literal(f, mid, strlen(mid));
            fprintf(f, " args%zu", n);
        } else {
            char *quoted = json_dumps(name, JSON_ENCODE_ANY);
            if (!quoted) {
                fclose(f);
                free(text);
                text = NULL;
                goto done;  // out of memory
            }
            fputs("\"{\" ws \"\\\"name\\\"\" ws \":\" ws ", f);
            mx_gbnf_put_literal(f, quoted, strlen(quoted));
            fprintf(f, " ws \",\" ws \"\\\"arguments\\\"\" ws \":\" ws args%zu ws \"}\"", n);
            free(quoted);
        }
        n++;
    }
    fputc('\n', f);
    close_text(f, &text);
done:
    if (!text && !err->msg[0]) *failure = MX_GRAM_NO_MEMORY, mx_fail(err, "out of memory");
    for (i = 0; schemas && i < n_tools; i++) json_decref(schemas[i]);
    free(schemas), free(names), free(rules), free(body);
    return text;
}

static const char think_rules[] = "think-skip ::= [^<]* ( \"<\" [^/<] [^<]* )* \"</think>\" [\\n ]{0,4}\n";
// Harmony (gpt-oss): an optional analysis message written freely (no marker inside), then the
// constrained message. The markers are special tokens; the job's vocabulary lets them match.
static const char harmony_rules[] =
    "harmony-free ::= [^<]* ( \"<\"+ [^|<] [^<]* )*\n"
    "harmony-pre ::= ( \"<|channel|>analysis<|message|>\" harmony-free \"<|end|><|start|>assistant\" )?\n";
static void put_harmony_root(FILE *f, bool call) {
    fputs(harmony_rules, f);
    fprintf(f, "root ::= harmony-pre %s\n", call ? "answer" : "\"<|channel|>final<|message|>\" ws answer ws");
}

char *srv_grammar_harmony_final(const char *answer_rules) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) return NULL;
    fputs(answer_rules, f);
    put_harmony_root(f, false);
    close_text(f, &text);
    return text;
}

static const char HARMONY_CALL_PRE[] = "<|channel|>commentary to=functions.", HARMONY_CALL_MID[] = " <|constrain|>json<|message|>";

char *srv_grammar_text(const srv_request *r, srv_call_format calls, bool think_open, unsigned *status, char *msg,
                       size_t cap) {
    *status = 0;
    mx_error err = {{0}};
    int failure = MX_GRAM_INVALID;  // of the rules' compilation (MX_GRAM_*), when it fails
    unsigned long json_failures = srv_json_alloc_failures();  // the tools' names and schemas are read by jansson
    if (r->grammar) {
        char *t = strdup(r->grammar);
        if (!t) *status = 500, snprintf(msg, cap, "out of memory");
        return t;
    }
    bool tools = r->tool_choice == SRV_TOOLS_REQUIRED || r->tool_choice == SRV_TOOLS_NAMED;
    if (!r->json_object && !tools) return NULL;
    char *body;
    if (tools && calls == SRV_CALLS_MISTRAL_ARGS) {
        body = named_call_rules(r, "[TOOL_CALLS]", "[ARGS]", &failure, &err);
    } else if (tools && calls == SRV_CALLS_HARMONY) {
        body = named_call_rules(r, HARMONY_CALL_PRE, HARMONY_CALL_MID, &failure, &err);
    } else if (tools) {
        body = named_call_rules(r, NULL, NULL, &failure, &err);
    } else {
        body = mx_json_schema_to_gbnf_rule(r->json_schema, "answer", &failure, &err);
    }
    if (!body || srv_json_alloc_failures() != json_failures) {
        // An allocation failing is the server's fault (500), never a missing alternative or schema.
        bool oom = srv_json_alloc_failures() != json_failures || failure_status(failure) == 500;
        free(body);
        *status = oom ? 500 : 400;
        snprintf(msg, cap, "%s%s", tools ? "tools: " : "response_format: ", oom ? "out of memory building the grammar" : err.msg);
        return NULL;
    }
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) {
        free(body);
        *status = 500;
        snprintf(msg, cap, "out of memory");
        return NULL;
    }
    fputs(body, f);
    free(body);
    if (think_open) fputs(think_rules, f);
    const char *pre = think_open ? "think-skip " : "";
    char more[32] = "";  // the calls after the first
    if (r->parallel_tool_calls) snprintf(more, sizeof more, "{0,%d}", MAX_PARALLEL_CALLS - 1);
    bool one = !r->parallel_tool_calls;
    if (calls == SRV_CALLS_HARMONY) {  // one call per turn: <|call|> ends it
        put_harmony_root(f, tools);
    } else if (tools && calls == SRV_CALLS_MISTRAL_ARGS) {
        fprintf(f, "root ::= %sanswer%s%s\n", pre, one ? "" : " answer", more);
    } else if (tools && calls == SRV_CALLS_MISTRAL_LIST) {
        fprintf(f, "root ::= %s\"[TOOL_CALLS]\" \" \"? \"[\" answer%s%s \"]\"\n", pre, one ? "" : " ( \", \" answer )", more);
    } else if (tools) {
        fputs("call ::= \"<tool_call>\\n\" answer \"\\n</tool_call>\"\n", f);
        fprintf(f, "root ::= %scall%s%s\n", pre, one ? "" : " ( \"\\n\" call )", more);
    } else {
        fprintf(f, "root ::= %sws answer ws\n", pre);
    }
    if (close_text(f, &text)) {
        *status = 500;
        snprintf(msg, cap, "out of memory building the grammar");
    }
    return text;
}
