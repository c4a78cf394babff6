// SPDX-License-Identifier: MIT
// Printing a streamed answer (see answer.h): plain text goes straight through; a harmony model's
// (gpt-oss) output passes the server's output stage, so the reasoning prints between <think> and
// </think> before the final text. Also the stop ids of an answer: the template's end of turn and
// harmony's <|return|> and <|call|>.
#include "answer.h"

#include <string.h>

#include "server/srv_calls.h"

int answer_printer_init(answer_printer *p, const mx_tokenizer *tok, FILE *out) {
    *p = (answer_printer){.out = out};
    if (!srv_calls_harmony_tokenizer(tok)) return 0;
    srv_output_opts oo = {.harmony = true};
    p->harmony = srv_output_create(&oo);
    return p->harmony ? 0 : -1;
}

// Prints what the output stage released since the last call.
static void show_new(answer_printer *p) {
    size_t rn, cn;
    const char *r = srv_output_reasoning(p->harmony, &rn), *c = srv_output_content(p->harmony, &cn);
    if (rn > p->shown_reasoning) {
        if (!p->think_open && p->shown_reasoning == 0) fputs("<think>\n", p->out), p->think_open = true;
        fwrite(r + p->shown_reasoning, 1, rn - p->shown_reasoning, p->out);
        p->shown_reasoning = rn;
    }
    if (cn > p->shown_content) {
        if (p->think_open) fputs("\n</think>\n\n", p->out), p->think_open = false;
        fwrite(c + p->shown_content, 1, cn - p->shown_content, p->out);
        p->shown_content = cn;
    }
}

void answer_printer_push(answer_printer *p, const char *text, size_t len) {
    if (p->harmony) {
        srv_output_push(p->harmony, text, len);
        show_new(p);
    } else {
        fwrite(text, 1, len, p->out);
    }
    fflush(p->out);
}

void answer_printer_finish(answer_printer *p) {
    if (!p->harmony) return;
    srv_output_finish(p->harmony);
    show_new(p);
    if (p->think_open) fputs("\n</think>", p->out), p->think_open = false;
    fflush(p->out);
}

const char *answer_printer_content(const answer_printer *p) {
    return p->harmony ? srv_output_content(p->harmony, NULL) : NULL;
}

void answer_printer_free(answer_printer *p) {
    srv_output_free(p->harmony);
    p->harmony = NULL;
}

int answer_stop_ids(const mx_tokenizer *tok, int32_t template_eos, int32_t ids[3]) {
    int n = 0;
    if (template_eos >= 0) ids[n++] = template_eos;
    if (!srv_calls_harmony_tokenizer(tok)) return n;
    static const char *const ends[2] = {"<|return|>", "<|call|>"};
    for (int i = 0; i < 2; i++) {
        int32_t id = mx_tokenizer_token_id(tok, ends[i]);
        if (id >= 0 && id != template_eos) ids[n++] = id;
    }
    return n;
}
