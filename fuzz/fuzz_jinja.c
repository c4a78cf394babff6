// SPDX-License-Identifier: MIT
// libFuzzer target: the Jinja engine. The input is a template source, then (after the first NUL
// byte) a JSON object of variables; without one, a small chat context is used. Parse and render
// must succeed or fail with a message.
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/jinja.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *src = (const char *)data;
    const uint8_t *nul = memchr(data, 0, size);
    size_t n_src = nul ? (size_t)(nul - data) : size;
    json_t *vars = NULL;
    if (nul) vars = json_loadb((const char *)nul + 1, size - n_src - 1, 0, NULL);
    if (!json_is_object(vars)) {
        json_decref(vars);
        vars = json_pack("{s:[{s:s, s:s}, {s:s, s:s}], s:b, s:s, s:s}", "messages", "role", "system", "content",
                         "Be brief.", "role", "user", "content", "Hi", "add_generation_prompt", 1, "bos_token", "<s>",
                         "eos_token", "</s>");
    }
    mx_error err = {{0}};
    jinja_template *t = jinja_template_parse(src, n_src, &err);
    if (t) {
        char *out = jinja_template_render(t, vars, &err);
        if (!out && !err.msg[0]) {
            fprintf(stderr, "render failed without a message\n");
            abort();
        }
        free(out);
        jinja_template_free(t);
    } else if (!err.msg[0]) {
        fprintf(stderr, "parse failed without a message\n");
        abort();
    }
    json_decref(vars);
    return 0;
}
