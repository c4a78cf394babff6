// SPDX-License-Identifier: MIT
// Harmony output parsing (see srv_harmony.h). Invariant: `in` holds only text that could still be
// the start of a marker (in a body) or an unfinished header; everything before it has been routed.
#include "server/srv_harmony.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "server/srv_buf.h"
#include "server/srv_scan.h"

enum { H_HEADER, H_BODY, H_PLAIN };            // what `in` holds
enum { R_CONTENT, R_REASONING, R_CALL };       // where the current body goes

struct srv_harmony {
    srv_harmony_sink sink;
    bool calls;
    int state, route;
    srv_buf in;     // text not yet routed
    srv_buf body;   // the held body of a message with a recipient
    srv_buf name;   // that recipient
    bool failed;    // a buffer's allocation failed (see srv_harmony_failed)
};

static const char *const MARKERS[] = {"<|start|>", "<|end|>",    "<|message|>", "<|channel|>",
                                      "<|constrain|>", "<|return|>", "<|call|>"};
enum { N_MARKERS = sizeof MARKERS / sizeof MARKERS[0], HEADER_MAX = 256 };

srv_harmony *srv_harmony_create(bool calls, const srv_harmony_sink *sink) {
    srv_harmony *h = calloc(1, sizeof *h);
    if (!h) return NULL;
    h->sink = *sink;
    h->calls = calls;
    return h;
}

void srv_harmony_free(srv_harmony *h) {
    if (!h) return;
    srv_buf_free(&h->in);
    srv_buf_free(&h->body);
    srv_buf_free(&h->name);
    free(h);
}

// Frees a buffer the reader is done with, keeping its allocation failure (the text it handed on was cut).
static void drop(srv_harmony *h, srv_buf *b) {
    h->failed |= b->oom;
    srv_buf_free(b);
}

bool srv_harmony_failed(const srv_harmony *h) { return h->failed || h->in.oom || h->body.oom || h->name.oom; }

// The first marker in s[0..n) (*which: its index), or NULL.
static const char *first_marker(const char *s, size_t n, int *which) {
    const char *best = NULL;
    for (int i = 0; i < N_MARKERS; i++) {
        const char *t = srv_find(s, n, MARKERS[i]);
        if (t && (!best || t < best)) best = t, *which = i;
    }
    return best;
}

// Length of the longest suffix of s[0..n) that is a proper prefix of a marker.
static size_t marker_tail(const char *s, size_t n) {
    size_t k = 0;
    for (int i = 0; i < N_MARKERS; i++) {
        size_t t = srv_partial_suffix(s, n, MARKERS[i]);
        if (t > k) k = t;
    }
    return k;
}

// The word at s (up to a space or a marker), as [*w, *w + *len).
static void word_at(const char *s, const char *end, const char **w, size_t *len) {
    while (s < end && *s == ' ') s++;
    const char *e = s;
    while (e < end && *e != ' ' && *e != '<') e++;
    *w = s;
    *len = (size_t)(e - s);
}

static void route_text(srv_harmony *h, const char *s, size_t n) {
    if (!n) return;
    if (h->route == R_CALL) srv_buf_append(&h->body, s, n);
    else if (h->route == R_REASONING) h->sink.reasoning(h->sink.user, s, n);
    else h->sink.content(h->sink.user, s, n);
}

// A header is complete (the text before <|message|>): its channel and recipient pick the route.
static void start_message(srv_harmony *h, const char *s, size_t n) {
    const char *end = s + n;
    // Only the last message's header counts (a stray <|start|> or <|end|> restarts it).
    for (int i = 0; i < N_MARKERS; i++) {
        if (strcmp(MARKERS[i], "<|start|>") && strcmp(MARKERS[i], "<|end|>") && strcmp(MARKERS[i], "<|return|>") &&
            strcmp(MARKERS[i], "<|call|>"))
            continue;
        const char *t;
        while ((t = srv_find(s, (size_t)(end - s), MARKERS[i]))) s = t + strlen(MARKERS[i]);
    }
    const char *chan = NULL, *to = NULL;
    size_t chan_len = 0, to_len = 0;
    const char *c = srv_find(s, (size_t)(end - s), "<|channel|>");
    if (c) word_at(c + 11, end, &chan, &chan_len);
    for (const char *p = s; p + 3 <= end; p++)
        if (memcmp(p, "to=", 3) == 0 && (p == s || p[-1] == ' ' || p[-1] == '>')) {
            word_at(p + 3, end, &to, &to_len);
            break;
        }
    if (to && ((to_len == 9 && !memcmp(to, "assistant", 9)) || (to_len == 4 && !memcmp(to, "user", 4)))) to_len = 0;
    drop(h, &h->name);
    drop(h, &h->body);
    if (to_len) {
        if (to_len > 10 && memcmp(to, "functions.", 10) == 0) to += 10, to_len -= 10;
        srv_buf_append(&h->name, to, to_len);
        h->route = R_CALL;
    } else {
        h->route = chan_len == 8 && memcmp(chan, "analysis", 8) == 0 ? R_REASONING : R_CONTENT;
    }
}

// The current message ended: a held body becomes a call (JSON, calls wanted) or content.
static void end_message(srv_harmony *h) {
    if (h->route == R_CALL) {
        const char *b = srv_buf_str(&h->body);
        size_t n = h->body.n;
        while (n && srv_is_space(*b)) b++, n--;
        while (n && srv_is_space(b[n - 1])) n--;
        json_t *j = h->calls && n ? json_loadb(b, n, 0, NULL) : NULL;
        if (j) h->sink.call(h->sink.user, srv_buf_str(&h->name), h->name.n, b, n);
        else if (h->body.n) h->sink.content(h->sink.user, srv_buf_str(&h->body), h->body.n);
        json_decref(j);
        drop(h, &h->body);
        drop(h, &h->name);
    }
    h->route = R_CONTENT;
}

// Whether s[0..n) can still be (the start of) a harmony header: after spaces it starts with a
// marker, "to=" or the role "assistant" (or a prefix of one), has no newline and is not too long.
static bool plausible_header(const char *s, size_t n) {
    if (n >= HEADER_MAX) return false;
    size_t i = 0;
    while (i < n && srv_is_space(s[i])) i++;
    if (memchr(s + i, '\n', n - i)) return false;
    static const char *const starts[] = {"<|", "to=", "assistant"};
    for (int k = 0; k < 3; k++) {
        size_t m = strlen(starts[k]), c = n - i < m ? n - i : m;
        if (memcmp(s + i, starts[k], c) == 0) return true;
    }
    return false;
}

void srv_harmony_push(srv_harmony *h, const char *text, size_t len, bool at_end) {
    srv_buf_append(&h->in, text, len);
    for (;;) {
        const char *s = srv_buf_str(&h->in);
        size_t n = h->in.n;
        if (h->state == H_PLAIN) {
            if (n) h->sink.content(h->sink.user, s, n);
            drop(h, &h->in);
            return;
        }
        if (h->state == H_HEADER) {
            const char *m = srv_find(s, n, "<|message|>");
            if (!plausible_header(s, m ? (size_t)(m - s) : n)) {  // decided on the header alone, so that
                h->state = H_PLAIN;                                  // any split of the text decides alike
                continue;
            }
            if (m) {
                start_message(h, s, (size_t)(m - s));
                srv_buf_consume(&h->in, (size_t)(m - s) + 11);
                h->state = H_BODY;
                continue;
            }
            if (at_end) drop(h, &h->in);  // a header cut short (still plausible: markup) is dropped
            return;
        }
        int which = -1;
        const char *m = first_marker(s, n, &which);
        if (m) {
            route_text(h, s, (size_t)(m - s));
            const char *mk = MARKERS[which];
            bool ends = !strcmp(mk, "<|end|>") || !strcmp(mk, "<|return|>") || !strcmp(mk, "<|call|>");
            bool opens = !strcmp(mk, "<|start|>") || !strcmp(mk, "<|channel|>");
            // <|message|> or <|constrain|> inside a body is dropped; an end marker ends the message;
            // <|start|> or <|channel|> ends it too and begins the next header.
            srv_buf_consume(&h->in, (size_t)(m - s) + (opens ? 0 : strlen(mk)));
            if (ends || opens) {
                end_message(h);
                h->state = H_HEADER;
            }
            continue;
        }
        // A marker's start is held back; at the end a held "<|..." is dropped (a marker is one token,
        // so only a cut-off text can end inside one), a lone "<" is text.
        size_t hold = marker_tail(s, n);
        route_text(h, s, n - (at_end && hold < 2 ? 0 : hold));
        srv_buf_consume(&h->in, n - hold);
        if (at_end) {
            drop(h, &h->in);
            end_message(h);
            h->state = H_HEADER;
        }
        return;
    }
}
