// SPDX-License-Identifier: MIT
// Plain-text message content for untrusted input (see srv_guard.h, --no-special-in-content): added
// tokens written in messages are wrapped in two noncharacter markers before rendering, and the
// marked ranges are tokenized as ordinary text after it.
#include "server/srv_guard.h"

#include <stdlib.h>
#include <string.h>

#include "server/srv_buf.h"

static const char OPEN[] = "\xEF\xB7\x90";   // U+FDD0
static const char CLOSE[] = "\xEF\xB7\x91";  // U+FDD1

static bool is_marker(const char *s, size_t n) {
    return n >= 3 && (memcmp(s, OPEN, 3) == 0 || memcmp(s, CLOSE, 3) == 0);
}

// The content with client-written markers dropped and each added token wrapped in markers.
static char *mark(const mx_tokenizer *tok, const char *s, size_t n, size_t *out_len) {
    srv_buf clean = {0}, out = {0};
    for (size_t i = 0; i < n;) {
        if (is_marker(s + i, n - i)) {
            i += 3;
            continue;
        }
        srv_buf_append(&clean, s + i, 1);
        i++;
    }
    const char *c = srv_buf_str(&clean);
    size_t m = clean.n, at = 0, len;
    for (;;) {
        size_t k = mx_tokenizer_next_added(tok, c, m, at, &len);
        srv_buf_append(&out, c + at, k - at);
        if (k >= m) break;
        srv_buf_append(&out, OPEN, 3);
        srv_buf_append(&out, c + k, len);
        srv_buf_append(&out, CLOSE, 3);
        at = k + len;
    }
    bool oom = clean.oom || out.oom;
    srv_buf_free(&clean);
    if (oom) {
        srv_buf_free(&out);
        return NULL;
    }
    *out_len = out.n;
    if (!out.p) return strdup("");
    return out.p;
}

int srv_guard_messages(const mx_tokenizer *tok, json_t *messages, mx_error *err) {
    size_t i;
    json_t *msg;
    json_array_foreach(messages, i, msg) {
        json_t *content = json_object_get(msg, "content");
        if (!json_is_string(content)) continue;
        size_t len;
        char *marked = mark(tok, json_string_value(content), json_string_length(content), &len);
        if (!marked || json_object_set_new(msg, "content", json_stringn(marked, len)) != 0) {
            free(marked);
            return mx_fail(err, "out of memory");
        }
        free(marked);
    }
    return 0;
}

int srv_guard_encode(const mx_tokenizer *tok, char *text, int32_t **ids, size_t *n_ids, mx_error *err) {
    size_t n = strlen(text), w = 0, n_ranges = 0, cap = 0;
    size_t *ranges = NULL;
    bool open = false;
    for (size_t r = 0; r < n;) {
        if (is_marker(text + r, n - r)) {
            bool is_open = memcmp(text + r, OPEN, 3) == 0;
            if (is_open && !open) {
                if (n_ranges == cap) {
                    cap = cap ? 2 * cap : 8;
                    size_t *g = realloc(ranges, 2 * cap * sizeof *g);
                    if (!g) {
                        free(ranges);
                        return mx_fail(err, "out of memory");
                    }
                    ranges = g;
                }
                ranges[2 * n_ranges] = w;
                open = true;
            } else if (!is_open && open) {
                ranges[2 * n_ranges + 1] = w;
                n_ranges++;
                open = false;
            }
            // A stray marker (the template cut a marked token apart) is dropped.
            r += 3;
            continue;
        }
        text[w++] = text[r++];
    }
    if (open) ranges[2 * n_ranges++ + 1] = w;
    text[w] = 0;
    int rc = mx_tokenizer_encode_guarded(tok, text, w, ranges, n_ranges, ids, n_ids, err);
    free(ranges);
    return rc;
}
