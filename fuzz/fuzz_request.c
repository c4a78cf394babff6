// SPDX-License-Identifier: MIT
// libFuzzer target: a server request body as the server sees it (JSON text -> object -> validated
// request), for both /v1/chat/completions and /v1/completions. Validation must succeed or fail
// with a message naming what was wrong; an accepted request must satisfy the struct's invariants.
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "server/srv_request.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    json_t *body = json_loadb((const char *)data, size, 0, NULL);
    if (!json_is_object(body)) {
        json_decref(body);
        return 0;
    }
    mx_sampling defaults = mx_sampling_defaults();
    for (int k = 0; k < 2; k++) {
        srv_request r;
        char msg[1024] = "";
        srv_kind kind = k ? SRV_KIND_COMPLETION : SRV_KIND_CHAT;
        if (srv_request_parse(body, kind, &defaults, &r, msg, sizeof msg) == 0) {
            if (r.n_stops < 0 || r.n_stops > 16 || (kind == SRV_KIND_CHAT && !json_is_array(r.messages)) ||
                (kind == SRV_KIND_COMPLETION && !r.prompt && !r.prompt_tokens)) {
                fprintf(stderr, "accepted request breaks an invariant\n");
                abort();
            }
            srv_request_clear(&r);
        } else if (!msg[0]) {
            fprintf(stderr, "request rejected without a message\n");
            abort();
        }
    }
    json_decref(body);
    return 0;
}
