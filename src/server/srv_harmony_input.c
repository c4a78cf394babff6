// SPDX-License-Identifier: MIT
// Chat messages adjusted for gpt-oss's chat template before rendering (see srv_harmony.h).
#include <string.h>

#include "server/srv_harmony.h"

static void prepare_calls(json_t *calls) {
    size_t i;
    json_t *c;
    json_array_foreach(calls, i, c) {
        json_t *f = json_object_get(c, "function");
        json_t *holder = json_is_object(f) ? f : c;
        json_t *args = json_object_get(holder, "arguments");
        if (!json_is_string(args)) continue;
        json_t *v = json_loadb(json_string_value(args), json_string_length(args), JSON_DECODE_ANY, NULL);
        if (v) json_object_set_new(holder, "arguments", v);
    }
}

void srv_harmony_prepare_messages(json_t *messages) {
    size_t i;
    json_t *m;
    json_array_foreach(messages, i, m) {
        const char *role = json_string_value(json_object_get(m, "role"));
        if (!role || strcmp(role, "assistant") != 0) continue;
        json_t *content = json_object_get(m, "content");
        if (content && json_is_null(content)) json_object_del(m, "content"), content = NULL;
        json_t *calls = json_object_get(m, "tool_calls");
        if (json_is_array(calls)) prepare_calls(calls);
        else if (calls && json_is_null(calls)) json_object_del(m, "tool_calls"), calls = NULL;
        json_t *reasoning = json_object_get(m, "reasoning_content");
        bool has_content = json_is_string(content) && json_string_length(content) > 0;
        if (json_is_string(reasoning) && !json_object_get(m, "thinking") && !(calls && has_content))
            json_object_set(m, "thinking", reasoning);
    }
}
