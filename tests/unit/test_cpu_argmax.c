// SPDX-License-Identifier: MIT
// The CPU backend's argmax record splits long rows (vocabularies of 32,768 and more) into chunks
// over the thread pool. Its answer must be one pass's: the first index of the largest value (ties
// go to the lowest index, also across chunk boundaries), and the NaN rule of `l[i] > l[best]` from
// index 0 (a NaN never wins, and a NaN at index 0 is never replaced). Checked against that pass on
// rows of 151,936 and 40,000 values (the last chunk partial) and a short row (one chunk), with the
// maximum in the first, a middle and the last chunk, ties across chunks, NaNs at index 0 and at a
// chunk's start, and all -inf.
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "backends/plan.h"
#include "check.h"
#include "test_cpu.h"
#include "test_rng.h"

static test_rng rng = {0x5eed1234u};

static int one_pass(const float *l, int vocab) {
    int best = 0;
    for (int i = 1; i < vocab; i++)
        if (l[i] > l[best]) best = i;
    return best;
}

int main(void) {
    mx_error err = {{0}};
    mx_backend *be = test_cpu_backend(2);
    if (!be) return check_finish();
    const int vocabs[] = {151936, 40000, 1000};
    enum { ROWS = 9 };
    for (int v = 0; v < 3; v++) {
        int vocab = vocabs[v];
        float *l = malloc(sizeof(float) * vocab * ROWS);
        for (int i = 0; i < vocab * ROWS; i++) l[i] = test_rng_unit(&rng) * 10.0f;
        float *r;
        r = l + 1 * vocab, r[7] = 50.0f;                                      // in the first chunk
        r = l + 2 * vocab, r[vocab / 2] = 50.0f;                              // a middle chunk
        r = l + 3 * vocab, r[vocab - 1] = 50.0f;                              // the last value
        r = l + 4 * vocab, r[vocab - 3] = 50.0f, r[vocab / 3] = 50.0f;        // tie: lower index wins
        r = l + 5 * vocab, r[0] = NAN, r[vocab / 2] = 50.0f;                  // NaN at 0: stays 0
        r = l + 6 * vocab, r[vocab > 16384 ? 16384 : 1] = NAN;                // NaN at a chunk's start,
        r[vocab > 16384 ? 20000 : 2] = 50.0f, r[5] = 49.0f;                   // the largest after it
        r = l + 7 * vocab;
        for (int i = 0; i < vocab; i++) r[i] = -INFINITY;                     // all -inf: index 0
        r = l + 8 * vocab, r[16383 < vocab ? 16383 : 3] = 60.0f, r[16384 < vocab ? 16384 : 4] = 60.0f;  // tie at a boundary
        int32_t ids[ROWS];
        mx_op op = {.kind = MX_OP_ARGMAX, .argmax = {ids, l, ROWS, vocab}};
        CHECK(mx_run_op(be, op, &err) == 0);
        for (int t = 0; t < ROWS; t++)
            CHECK_MSG(ids[t] == one_pass(l + (size_t)t * vocab, vocab), "vocab %d row %d: %d, one pass %d", vocab, t,
                      ids[t], one_pass(l + (size_t)t * vocab, vocab));
        free(l);
    }
    mx_backend_free(be);
    return check_finish();
}
