// SPDX-License-Identifier: MIT
// mx_ctx_forward_hidden (the hidden states embeddings pool): for every position of a prompt, the
// final hidden state times the output projection (dequantized with the reference dequantizer)
// gives the logits mx_ctx_forward computes (the path parity-tested against the reference
// fixtures); and a sequence's hidden states are the same alone and batched with another sequence
// in another KV slot.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "test_demo.h"
#include "core/quant.h"
#include "models/model.h"
#include "models/model_internal.h"

int main(void) {
    mx_error err = {{0}};
    mx_backend *be;
    mx_model *m = test_demo_model(&be);
    if (!m) return check_finish();
    const mx_config *cfg = mx_model_config(m);
    int H = cfg->hidden_size, V = cfg->vocab_size;
    enum { T = 7 };
    int32_t tok[T] = {785, 6722, 315, 9625, 374, 12095, 13}, pos[T], slot[T] = {0}, rows[T];
    for (int t = 0; t < T; t++) pos[t] = t, rows[t] = t;
    mx_ctx *ctx = mx_ctx_create(m, 2, 64, 64, &err);
    float *logits = malloc(sizeof(float) * (size_t)T * V), *hidden = malloc(sizeof(float) * (size_t)T * H);
    float *w = malloc(sizeof(float) * (size_t)H);
    mx_batch b = {T, tok, pos, slot, T, rows};
    CHECK(mx_ctx_forward(ctx, &b, logits, NULL, &err) == 0);
    CHECK(mx_ctx_forward_hidden(ctx, &b, hidden, &err) == 0);
    double worst = 0;
    for (int t = 0; t < T; t++) {
        double scale = 0;
        for (int v = 0; v < V; v++) scale = fmax(scale, fabs(logits[(size_t)t * V + v]));
        for (int v = t; v < V; v += 211) {
            mx_matrix_dequant_row(&m->lm_head, v, w);
            double dot = 0;
            for (int d = 0; d < H; d++) dot += (double)hidden[(size_t)t * H + d] * w[d];
            worst = fmax(worst, fabs(dot - logits[(size_t)t * V + v]) / scale);
        }
    }
    CHECK_MSG(worst < 1e-4, "hidden x lm_head differs from the logits by %g (relative)", worst);
    // Batched with another sequence in slot 1: the same hidden states for slot 0.
    int32_t tok2[T + 3], pos2[T + 3], slot2[T + 3], rows2[T];
    for (int t = 0; t < T; t++) tok2[t] = tok[t], pos2[t] = t, slot2[t] = 0, rows2[t] = t;
    for (int t = 0; t < 3; t++) tok2[T + t] = 100 + t, pos2[T + t] = t, slot2[T + t] = 1;
    float *hidden2 = malloc(sizeof(float) * (size_t)T * H);
    mx_batch b2 = {T + 3, tok2, pos2, slot2, T, rows2};
    CHECK(mx_ctx_forward_hidden(ctx, &b2, hidden2, &err) == 0);
    CHECK_MSG(memcmp(hidden, hidden2, sizeof(float) * (size_t)T * H) == 0, "batching changed the hidden states");
    free(logits), free(hidden), free(hidden2), free(w);
    mx_ctx_free(ctx);
    mx_model_free(m);
    mx_backend_free(be);
    return check_finish();
}
