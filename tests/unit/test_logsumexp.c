// SPDX-License-Identifier: MIT
// The vectorized logsumexp against the libm reference, on vocabulary-sized random logits, on
// extreme ranges (terms far below the max), on lengths that are not a multiple of 8, and with NaN.
#include <math.h>
#include <stdlib.h>

#include "check.h"
#include "core/logsumexp.h"

int main(void) {
    static float x[151937];
    unsigned s = 7;
    for (int trial = 0; trial < 6; trial++) {
        float scale = trial < 3 ? 5.0f : 80.0f;
        for (int i = 0; i < 151937; i++) {
            s = s * 1664525u + 1013904223u;
            x[i] = ((float)(s >> 8) / 16777216.0f - 0.5f) * 2 * scale;
        }
        int n = 151937 - trial * 3;
        double a = mx_logsumexp(x, n), b = mx_logsumexp_ref(x, n);
        CHECK_MSG(fabs(a - b) < 1e-5 * fmax(1.0, fabs(b)), "trial %d: %.9f vs %.9f", trial, a, b);
    }
    float one[3] = {-INFINITY, 2.0f, -INFINITY};
    CHECK(fabs(mx_logsumexp(one, 3) - 2.0) < 1e-6);
    // A NaN anywhere (in the vector loop's lanes or the tail, either sign) makes the result NaN, as
    // in the reference: the sampler's logprobs of a row with a NaN logit are NaN on every backend.
    for (int at = 0; at < 21; at++) {
        float v[21];
        for (int i = 0; i < 21; i++) v[i] = (float)(i % 5) * 0.3f;
        v[at] = at % 2 ? NAN : -NAN;
        CHECK_MSG(isnan(mx_logsumexp(v, 21)) && isnan(mx_logsumexp_ref(v, 21)), "NaN at %d: %.9f", at, mx_logsumexp(v, 21));
    }
    return check_finish();
}
