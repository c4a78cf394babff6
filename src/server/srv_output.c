// SPDX-License-Identifier: MIT
// Stop strings, reasoning and tool-call segmentation of generated text (see srv_output.h).
// Invariant: `pending` never contains a whole stop string, and `seg` never contains a whole tag
// of the current state; both only keep a tail that could still grow into one.
#include "server/srv_output.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "server/srv_buf.h"
#include "server/srv_harmony.h"
#include "server/srv_json_alloc.h"
#include "server/srv_scan.h"
#include "server/srv_stop_match.h"

enum { SEG_CONTENT, SEG_THINK, SEG_TOOL };

typedef struct out_tool {
    char *name;
    char *args;
} out_tool;

enum { JSON_OFF, JSON_UNDECIDED, JSON_HOLD, JSON_CONTENT };  // json_state

struct srv_output {
    srv_stop_match *stops;  // NULL: no stop strings
    bool parse_think, parse_tools;
    bool stopped, finished;
    bool think_allowed;  // <think> may still open (nothing but whitespace released yet)
    bool after_think;    // strip whitespace that follows </think>
    int state;
    srv_buf pending;     // text not yet cleared of stop strings
    srv_buf seg;         // released text not yet classified
    srv_buf tool;        // body of the open <tool_call> (Mistral: the text after [TOOL_CALLS])
    bool mistral;        // calls open with [TOOL_CALLS] (see srv_output.h)
    bool in_list;        // Mistral: inside the JSON list of calls ('[' taken, ']' not yet)
    int list_taken;      // Mistral: calls taken from that list
    int json_state;      // JSON calls (Llama 3.x): whether the answer is held as a possible call
    srv_buf json_held;   // the held answer
    srv_harmony *harmony;  // harmony (gpt-oss): channels and calls are read by srv_harmony.c instead
    srv_buf content, reasoning;
    out_tool *tools;
    int n_tools, cap_tools;
    bool failed;         // an allocation failed: text or a call may be missing (see srv_output_failed)
};

static void harmony_content(void *u, const char *s, size_t n);
static void harmony_reasoning(void *u, const char *s, size_t n);
static void harmony_call(void *u, const char *name, size_t name_len, const char *args, size_t args_len);

srv_output *srv_output_create(const srv_output_opts *opt) {
    srv_output *o = calloc(1, sizeof *o);
    if (!o) return NULL;
    if (opt->n_stops > 0 && !(o->stops = srv_stop_match_create(opt->stops, opt->n_stops))) {
        free(o);
        return NULL;
    }
    o->parse_think = opt->parse_think;
    o->parse_tools = opt->parse_tools;
    o->mistral = opt->mistral_calls;
    o->think_allowed = opt->parse_think && !opt->think_open;
    o->state = opt->parse_think && opt->think_open ? SEG_THINK : SEG_CONTENT;
    o->json_state = opt->json_calls ? JSON_UNDECIDED : JSON_OFF;
    if (opt->harmony) {
        o->think_allowed = false;
        o->state = SEG_CONTENT;
        o->json_state = JSON_OFF;
        srv_harmony_sink sink = {harmony_content, harmony_reasoning, harmony_call, o};
        if (!(o->harmony = srv_harmony_create(opt->parse_tools, &sink))) {
            srv_output_free(o);
            return NULL;
        }
    }
    return o;
}

void srv_output_free(srv_output *o) {
    if (!o) return;
    srv_stop_match_free(o->stops);
    for (int i = 0; i < o->n_tools; i++) free(o->tools[i].name), free(o->tools[i].args);
    free(o->tools);
    srv_buf_free(&o->pending);
    srv_buf_free(&o->seg);
    srv_buf_free(&o->tool);
    srv_buf_free(&o->json_held);
    srv_buf_free(&o->content);
    srv_buf_free(&o->reasoning);
    srv_harmony_free(o->harmony);
    free(o);
}

// Frees a buffer the parser is done with, keeping its allocation failure (the text it handed on was cut).
static void drop(srv_output *o, srv_buf *b) {
    o->failed |= b->oom;
    srv_buf_free(b);
}

static void emit_content(srv_output *o, const char *s, size_t n) {
    if (o->after_think) {
        while (n && (*s == ' ' || *s == '\n' || *s == '\r' || *s == '\t')) s++, n--;
        if (!n) return;
        o->after_think = false;
    }
    if (o->json_state == JSON_UNDECIDED) {  // the first visible character decides
        size_t i = 0;
        while (i < n && (s[i] == ' ' || s[i] == '\n' || s[i] == '\r' || s[i] == '\t')) i++;
        if (i < n) o->json_state = s[i] == '{' || s[i] == '[' ? JSON_HOLD : JSON_CONTENT;
        if (o->json_state == JSON_HOLD) s += i, n -= i;
    }
    if (o->json_state == JSON_HOLD) {
        srv_buf_append(&o->json_held, s, n);
        return;
    }
    if (o->think_allowed)
        for (size_t i = 0; i < n; i++)
            if (s[i] != ' ' && s[i] != '\n' && s[i] != '\r' && s[i] != '\t') o->think_allowed = false;
    srv_buf_append(&o->content, s, n);
}

// Records {"name": ..., "arguments" | "parameters": ...} as a tool call; false when j is not one.
static bool add_call(srv_output *o, json_t *j) {
    json_t *name = json_object_get(j, "name");
    if (!json_is_string(name)) return false;
    json_t *args = json_object_get(j, "arguments");
    if (!args) args = json_object_get(j, "parameters");
    // Any JSON value is written back as text (ENCODE_ANY: a bare number or list too).
    char *args_s = json_is_string(args) ? strdup(json_string_value(args))
                   : args              ? json_dumps(args, JSON_COMPACT | JSON_ENSURE_ASCII | JSON_ENCODE_ANY)
                                       : strdup("{}");
    char *name_s = strdup(json_string_value(name));
    if (o->n_tools == o->cap_tools && args_s && name_s) {
        int cap = o->cap_tools ? o->cap_tools * 2 : 4;
        out_tool *t = realloc(o->tools, sizeof *t * (size_t)cap);
        if (t) o->tools = t, o->cap_tools = cap;
    }
    if (!args_s || !name_s || o->n_tools == o->cap_tools) {  // out of memory: the output has failed
        free(args_s), free(name_s);
        o->failed = true;
        return true;
    }
    o->tools[o->n_tools].name = name_s;
    o->tools[o->n_tools].args = args_s;
    o->n_tools++;
    o->think_allowed = false;
    return true;
}

// The harmony reader's sink: its content, reasoning and calls land where the other formats' do.
static void harmony_content(void *u, const char *s, size_t n) { srv_buf_append(&((srv_output *)u)->content, s, n); }
static void harmony_reasoning(void *u, const char *s, size_t n) { srv_buf_append(&((srv_output *)u)->reasoning, s, n); }
static void harmony_call(void *u, const char *name, size_t name_len, const char *args, size_t args_len) {
    json_t *a = json_loadb(args, args_len, JSON_DECODE_ANY, NULL);
    json_t *call = a ? json_pack("{s:s%, s:O}", "name", name, name_len, "arguments", a) : NULL;
    if (call) add_call(u, call);
    json_decref(call);
    json_decref(a);
}

static void add_tool(srv_output *o, const char *body, size_t n) {
    json_error_t je;
    json_t *j = json_loadb(body, n, 0, &je);
    if (!add_call(o, j)) {
        // Not a tool call after all: keep the raw text as content.
        srv_buf_puts(&o->content, "<tool_call>");
        srv_buf_append(&o->content, body, n);
        srv_buf_puts(&o->content, "</tool_call>");
    }
    json_decref(j);
}

// The held answer of a JSON-call model: one call object, or a list of them, else content.
static void finish_json_call(srv_output *o) {
    json_t *j = json_loadb(srv_buf_str(&o->json_held), o->json_held.n, 0, NULL);
    bool calls = json_is_object(j) ? json_is_string(json_object_get(j, "name")) : json_is_array(j) && json_array_size(j) > 0;
    size_t i;
    json_t *c;
    if (json_is_array(j)) json_array_foreach(j, i, c) calls &= json_is_object(c) && json_is_string(json_object_get(c, "name"));
    if (calls && json_is_object(j)) {
        add_call(o, j);
    } else if (calls) {
        json_array_foreach(j, i, c) add_call(o, c);
    } else {
        srv_buf_append(&o->content, srv_buf_str(&o->json_held), o->json_held.n);
    }
    json_decref(j);
    drop(o, &o->json_held);
}

static const char MISTRAL_OPEN[] = "[TOOL_CALLS]";


// Parses one JSON value at the start of s[0..n). Returns it (*used: its bytes), or NULL with *more
// true when s is a prefix of one that has not ended yet.
static json_t *json_prefix(const char *s, size_t n, size_t *used, bool *more) {
    json_error_t je;
    json_t *j = json_loadb(s, n, JSON_DISABLE_EOF_CHECK, &je);
    *more = !j && (size_t)je.position >= n;  // the error is at the end: more text may fix it
    if (j) *used = (size_t)je.position;
    return j;
}

// Mistral: takes the complete calls at the start of o->tool (the text after [TOOL_CALLS]). Returns
// false while the calls may still grow; true once they ended, with what follows them moved back to
// `seg` (it may hold the next [TOOL_CALLS]). Text that is not a call becomes content, marker included.
static bool mistral_take(srv_output *o, bool at_end) {
    for (;;) {
        const char *s = srv_buf_str(&o->tool);
        size_t n = o->tool.n, i = 0;
        while (i < n && srv_is_space(s[i])) i++;
        bool more = i == n, ok = false;
        size_t used = 0;
        if (more) {
            // nothing yet: wait, or at the end fall through to keeping the text
        } else if (!o->in_list && s[i] == '[') {  // the list form: take the '[' and go on element by element
            o->in_list = true;
            o->list_taken = 0;
            srv_buf_consume(&o->tool, i + 1);
            continue;
        }
        if (o->in_list) {
            if (s[i] == ',' || s[i] == ']') {
                bool close = s[i] == ']';
                srv_buf_consume(&o->tool, i + 1);
                if (!close) continue;
                o->in_list = false;
                srv_buf_append(&o->seg, srv_buf_str(&o->tool), o->tool.n);
                drop(o, &o->tool);
                return true;
            }
            json_t *j = s[i] == '{' ? json_prefix(s + i, n - i, &used, &more) : NULL;
            ok = j && add_call(o, j);
            json_decref(j);
            if (ok) {
                srv_buf_consume(&o->tool, i + used);
                o->list_taken++;
                continue;
            }
        } else {
            // NAME[ARGS]{...} or NAME[CALL_ID]ID[ARGS]{...}
            const char *args = srv_find(s + i, n - i, "[ARGS]");
            if (args) {
                const char *name_end = srv_find(s + i, (size_t)(args - (s + i)), "[CALL_ID]");
                if (!name_end) name_end = args;
                size_t name_len = (size_t)(name_end - (s + i));
                while (name_len && srv_is_space(s[i + name_len - 1])) name_len--;
                size_t a = (size_t)(args - s) + 6;
                while (a < n && srv_is_space(s[a])) a++;
                json_t *j = a < n && name_len > 0 ? json_prefix(s + a, n - a, &used, &more) : NULL;
                if (a >= n) more = true;
                json_t *call = j ? json_pack("{s:s%, s:O}", "name", s + i, name_len, "arguments", j) : NULL;
                ok = call && add_call(o, call);
                json_decref(call);
                json_decref(j);
                if (ok) {
                    srv_buf_consume(&o->tool, a + used);
                    srv_buf_append(&o->seg, srv_buf_str(&o->tool), o->tool.n);
                    drop(o, &o->tool);
                    return true;
                }
            } else {
                more = n - i < 4096;  // a name still being written
            }
        }
        if (more && !at_end) return false;
        // Not a call (or cut short): the rest is content, with the marker when nothing was taken yet.
        if (!o->in_list || !o->list_taken) srv_buf_puts(&o->content, o->in_list ? "[TOOL_CALLS][" : MISTRAL_OPEN);
        srv_buf_append(&o->content, s, n);
        drop(o, &o->tool);
        o->in_list = false;
        return true;
    }
}

// Classifies as much of `seg` as possible; at_end releases partial tags too.
static void segment(srv_output *o, bool at_end) {
    for (;;) {
        const char *s = o->seg.p ? o->seg.p : "";
        size_t n = o->seg.n;
        if (!n) return;
        if (o->state == SEG_CONTENT) {
            const char *t_think = o->think_allowed ? srv_find(s, n, "<think>") : NULL;
            const char *open_tag = o->mistral ? MISTRAL_OPEN : "<tool_call>";
            const char *t_tool = o->parse_tools ? srv_find(s, n, open_tag) : NULL;
            // <think> only counts at the start (after whitespace).
            if (t_think) {
                for (const char *q = s; q < t_think; q++)
                    if (*q != ' ' && *q != '\n' && *q != '\r' && *q != '\t') t_think = NULL;
            }
            const char *t = t_think && (!t_tool || t_think < t_tool) ? t_think : t_tool;
            if (t) {
                size_t before = (size_t)(t - s);
                if (t == t_think) {
                    // Whitespace before <think> is dropped.
                    o->state = SEG_THINK;
                    o->think_allowed = false;
                    srv_buf_consume(&o->seg, before + 7);
                } else {
                    emit_content(o, s, before);
                    o->state = SEG_TOOL;
                    srv_buf_consume(&o->seg, before + strlen(open_tag));
                }
                continue;
            }
            size_t hold = 0;
            if (!at_end) {
                if (o->think_allowed) hold = srv_partial_suffix(s, n, "<think>");
                if (o->parse_tools) {
                    size_t h = srv_partial_suffix(s, n, open_tag);
                    if (h > hold) hold = h;
                }
            }
            // While <think> may still open, hold back leading whitespace too.
            if (!at_end && o->think_allowed) {
                size_t ws = 0;
                while (ws < n && (s[ws] == ' ' || s[ws] == '\n' || s[ws] == '\r' || s[ws] == '\t')) ws++;
                if (ws == n || ws + hold == n) return;
            }
            emit_content(o, s, n - hold);
            srv_buf_consume(&o->seg, n - hold);
            return;
        }
        if (o->state == SEG_TOOL && o->mistral) {
            srv_buf_append(&o->tool, s, n);
            srv_buf_consume(&o->seg, n);
            if (!mistral_take(o, at_end)) return;
            o->state = SEG_CONTENT;
            continue;
        }
        const char *close = o->state == SEG_THINK ? "</think>" : "</tool_call>";
        const char *t = srv_find(s, n, close);
        srv_buf *dst = o->state == SEG_THINK ? &o->reasoning : &o->tool;
        if (t) {
            size_t before = (size_t)(t - s);
            srv_buf_append(dst, s, before);
            if (o->state == SEG_TOOL) {
                add_tool(o, srv_buf_str(&o->tool), o->tool.n);
                drop(o, &o->tool);
            } else {
                o->after_think = true;
                o->think_allowed = false;
            }
            o->state = SEG_CONTENT;
            srv_buf_consume(&o->seg, before + strlen(close));
            continue;
        }
        size_t hold = at_end ? 0 : srv_partial_suffix(s, n, close);
        srv_buf_append(dst, s, n - hold);
        srv_buf_consume(&o->seg, n - hold);
        return;
    }
}

static void release(srv_output *o, const char *s, size_t n) {
    if (o->harmony) {
        srv_harmony_push(o->harmony, s, n, false);
        return;
    }
    srv_buf_append(&o->seg, s, n);
    segment(o, false);
}

static bool bufs_failed(const srv_output *o) {
    return o->pending.oom || o->seg.oom || o->tool.oom || o->json_held.oom || o->content.oom || o->reasoning.oom;
}

// Records what the parser could not tell apart from text: a failed allocation in jansson (a call read
// as text, or read with bytes left out) or in one of the buffers.
static void note_failures(srv_output *o, unsigned long json_failures) {
    o->failed |= bufs_failed(o) || srv_json_alloc_failures() != json_failures ||
                 (o->harmony && srv_harmony_failed(o->harmony));
}

static bool push(srv_output *o, const char *text, size_t len);
static void finish(srv_output *o);

bool srv_output_push(srv_output *o, const char *text, size_t len) {
    unsigned long json_failures = srv_json_alloc_failures();
    bool stopped = push(o, text, len);
    note_failures(o, json_failures);
    return stopped;
}

static bool push(srv_output *o, const char *text, size_t len) {
    if (o->stopped || o->finished) return o->stopped;
    srv_buf_append(&o->pending, text, len);
    const char *s = srv_buf_str(&o->pending);
    size_t n = o->pending.n, tail = 0;
    // pending holds the automata's longest partial match, so a stop string starts within it.
    if (o->stops && srv_stop_match_feed(o->stops, text, len, &tail)) {
        release(o, s, tail < n ? n - tail : 0);
        drop(o, &o->pending);
        o->stopped = true;
        finish(o);
        return true;
    }
    size_t hold = o->stops ? srv_stop_match_partial(o->stops) : 0;
    if (hold > n) hold = n;  // (pending lost bytes to an allocation failure)
    release(o, s, n - hold);
    srv_buf_consume(&o->pending, n - hold);
    return false;
}

void srv_output_finish(srv_output *o) {
    unsigned long json_failures = srv_json_alloc_failures();
    finish(o);
    note_failures(o, json_failures);
}

static void finish(srv_output *o) {
    if (o->finished) return;
    o->finished = true;
    if (o->harmony) {
        srv_harmony_push(o->harmony, srv_buf_str(&o->pending), o->pending.n, true);
        drop(o, &o->pending);
        return;
    }
    if (o->pending.n) srv_buf_append(&o->seg, o->pending.p, o->pending.n);
    drop(o, &o->pending);
    segment(o, true);
    if (o->state == SEG_TOOL && o->mistral) {
        mistral_take(o, true);
        o->state = SEG_CONTENT;
        segment(o, true);
    }
    if (o->state == SEG_TOOL) {
        // An unterminated tool call: accept it if its body is complete JSON, else keep it as text.
        json_t *j = json_loadb(srv_buf_str(&o->tool), o->tool.n, 0, NULL);
        if (j && json_is_string(json_object_get(j, "name"))) {
            add_tool(o, srv_buf_str(&o->tool), o->tool.n);
        } else {
            srv_buf_puts(&o->content, "<tool_call>");
            srv_buf_append(&o->content, srv_buf_str(&o->tool), o->tool.n);
        }
        json_decref(j);
        drop(o, &o->tool);
        o->state = SEG_CONTENT;
    }
    if (o->json_state == JSON_HOLD) finish_json_call(o);
}

bool srv_output_stopped(const srv_output *o) { return o->stopped; }
bool srv_output_failed(const srv_output *o) { return o->failed; }

const char *srv_output_content(const srv_output *o, size_t *len) {
    if (len) *len = o->content.n;
    return srv_buf_str(&o->content);
}

const char *srv_output_reasoning(const srv_output *o, size_t *len) {
    if (len) *len = o->reasoning.n;
    return srv_buf_str(&o->reasoning);
}

int srv_output_n_tools(const srv_output *o) { return o->n_tools; }
const char *srv_output_tool_name(const srv_output *o, int i) { return o->tools[i].name; }
const char *srv_output_tool_args(const srv_output *o, int i) { return o->tools[i].args; }
