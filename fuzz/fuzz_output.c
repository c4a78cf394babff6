// SPDX-License-Identifier: MIT
// libFuzzer target: generated text through the server's output stage (stop strings, reasoning,
// tool calls in the tagged, Llama JSON and Mistral formats, and gpt-oss's harmony channels and calls),
// as the scheduler feeds it: in pieces.
// The first byte picks the options, the second the piece size, the rest is the text (a line
// "STOP:<s>\n" at its start adds a stop string). Every call must have a name and arguments, and
// the released content and reasoning never exceed what was fed.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/srv_output.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    unsigned opts = data[0], step = data[1] % 16 + 1;
    const char *text = (const char *)data + 2;
    size_t n = size - 2;
    char stop[64] = "";
    const char *stops[1] = {stop};
    if (n > 5 && memcmp(text, "STOP:", 5) == 0) {
        const char *nl = memchr(text, '\n', n);
        size_t k = nl ? (size_t)(nl - text) - 5 : 0;
        if (nl && k < sizeof stop) {
            memcpy(stop, text + 5, k);
            stop[k] = 0;
            n -= (size_t)(nl + 1 - text);
            text = nl + 1;
        }
    }
    srv_output_opts o = {stops, stop[0] ? 1 : 0, opts & 1, (opts >> 1) & 1, (opts >> 2) & 1, (opts >> 3) & 1,
                         (opts >> 4) & 1, (opts >> 5) & 1};
    srv_output *out = srv_output_create(&o);
    if (!out) return 0;
    for (size_t i = 0; i < n; i += step)
        if (srv_output_push(out, text + i, n - i < step ? n - i : step)) break;
    srv_output_finish(out);
    size_t clen = 0, rlen = 0;
    srv_output_content(out, &clen);
    srv_output_reasoning(out, &rlen);
    // Text that is not a call may come back with its markers ("[TOOL_CALLS][" is the longest).
    if (clen + rlen > n + 16) {
        fprintf(stderr, "released %zu + %zu bytes from %zu fed\n", clen, rlen, n);
        abort();
    }
    for (int i = 0; i < srv_output_n_tools(out); i++)
        if (!srv_output_tool_name(out, i) || !srv_output_tool_args(out, i)) {
            fprintf(stderr, "tool call %d without a name or arguments\n", i);
            abort();
        }
    srv_output_free(out);
    return 0;
}
