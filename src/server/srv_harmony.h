// SPDX-License-Identifier: MIT
// Reading gpt-oss's output format (OpenAI harmony) as it streams. The model writes messages
//   [<|start|>ROLE] [to=RECIPIENT] <|channel|>CHANNEL [to=RECIPIENT] [<|constrain|>TYPE | TYPE] <|message|>BODY END
// where END is <|end|>, <|return|> or <|call|> (the last two are stop tokens, so usually the text just
// ends), e.g. `<|channel|>analysis<|message|>...<|end|><|start|>assistant<|channel|>final<|message|>...`
// or a call `<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}`.
// Bodies are routed as they arrive: the analysis channel to reasoning, final (and commentary
// without a recipient: a preamble meant for the user) to content; a message with a recipient is
// held and becomes a tool call at its end (name: the recipient without "functions.", arguments: its
// JSON body) when calls are wanted and the body is JSON, else its body is content. The markers are
// special tokens, so the text must keep them (the job decodes with special tokens kept). A marker
// split across pushes is held back, so no part of one is ever released; text that cannot be a
// harmony header (it does not start with a marker, "to=" or the role "assistant", or it holds a
// newline, or reaches 256 bytes before <|message|>) makes the rest of the output plain content.
// Not thread-safe; no model knowledge, so it is unit-tested with scripted text.
#ifndef MX_SERVER_SRV_HARMONY_H
#define MX_SERVER_SRV_HARMONY_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct srv_harmony srv_harmony;

// Where parsed text goes: content, reasoning, and complete tool calls (args: JSON text).
typedef struct srv_harmony_sink {
    void (*content)(void *user, const char *s, size_t n);
    void (*reasoning)(void *user, const char *s, size_t n);
    void (*call)(void *user, const char *name, size_t name_len, const char *args, size_t args_len);
    void *user;
} srv_harmony_sink;

// calls: messages with a recipient become tool calls (a request with tools); otherwise their
// bodies are content.
srv_harmony *srv_harmony_create(bool calls, const srv_harmony_sink *sink);
void srv_harmony_free(srv_harmony *h);
// An allocation failed in the reader's buffers: text it routed may be cut. Sticky. (jansson's
// failures are counted by srv_json_alloc.h.)
bool srv_harmony_failed(const srv_harmony *h);
// Feeds released text; at_end (the output is complete) releases what was held back: a message cut
// short ends there, and a header cut short is dropped.
void srv_harmony_push(srv_harmony *h, const char *s, size_t n, bool at_end);

// Request messages as gpt-oss's template needs them (srv_harmony_input.c), changed in place before
// rendering: an assistant message's "content": null is removed (the template tests `in` on it,
// which fails on null, as in jinja2); a tool call's "arguments" string that holds JSON becomes
// that JSON value (the template writes it with tojson: a string would be quoted twice, unlike what
// the model was trained on); an assistant's "reasoning_content" (what this server answers with) is
// passed as "thinking", the template's name, when the message has no "thinking" and the template
// accepts it (not next to content in a message with tool calls); "tool_calls": null is removed.
void srv_harmony_prepare_messages(json_t *messages);

#endif
