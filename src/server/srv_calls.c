// SPDX-License-Identifier: MIT
// Tool-call format detection (see srv_calls.h): decided once at start-up from the tokenizer (Mistral's
// [TOOL_CALLS], gpt-oss's harmony tokens) and the chat template, with the marker ids to watch for.
#include "server/srv_calls.h"

#include <stdlib.h>
#include <string.h>

// Renders a conversation whose assistant turn is one call, and says whether its text has [ARGS];
// -1 when the template refuses the probe.
static int template_writes_args(const mx_chat_template *tmpl) {
    if (!tmpl) return -1;
    json_t *msgs = json_pack("[{s:s, s:s}, {s:s, s:s, s:[{s:s, s:s, s:{s:s, s:s}}]}]", "role", "user", "content", "x",
                             "role", "assistant", "content", "", "tool_calls", "id", "abcdefghi", "type", "function",
                             "function", "name", "probe", "arguments", "{}");
    if (!msgs) return -1;
    mx_error err = {{0}};
    char *text = mx_chat_template_render(tmpl, msgs, NULL, false, NULL, &err);
    json_decref(msgs);
    if (!text) return -1;
    int has = strstr(text, "[ARGS]") != NULL;
    free(text);
    return has;
}

bool srv_calls_harmony_tokenizer(const mx_tokenizer *tok) {
    static const char *const names[] = {"<|start|>", "<|channel|>", "<|message|>", "<|end|>"};
    for (int i = 0; i < 4; i++) {
        int32_t id = mx_tokenizer_token_id(tok, names[i]);
        if (id < 0 || !mx_tokenizer_is_special(tok, id)) return false;
    }
    return true;
}

srv_call_format srv_calls_detect(const mx_tokenizer *tok, const mx_chat_template *tmpl, const char *model_type) {
    if (srv_calls_harmony_tokenizer(tok)) return SRV_CALLS_HARMONY;
    if (mx_tokenizer_token_id(tok, "[TOOL_CALLS]") >= 0) {
        int args = template_writes_args(tmpl);
        if (args < 0) args = mx_tokenizer_token_id(tok, "[ARGS]") >= 0;
        return args ? SRV_CALLS_MISTRAL_ARGS : SRV_CALLS_MISTRAL_LIST;
    }
    return model_type && strcmp(model_type, "llama") == 0 ? SRV_CALLS_JSON : SRV_CALLS_TAGGED;
}

int srv_calls_marker_ids(const mx_tokenizer *tok, int32_t ids[SRV_MAX_MARKERS]) {
    static const char *const names[SRV_MAX_MARKERS] = {"[TOOL_CALLS]", "[ARGS]",      "[CALL_ID]",   "<|start|>",
                                                       "<|end|>",      "<|message|>", "<|channel|>", "<|constrain|>"};
    int n = 0;
    for (int i = 0; i < SRV_MAX_MARKERS; i++) {
        int32_t id = mx_tokenizer_token_id(tok, names[i]);
        if (id >= 0 && mx_tokenizer_is_special(tok, id)) ids[n++] = id;
    }
    return n;
}
