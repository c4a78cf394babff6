// SPDX-License-Identifier: MIT
// The CPU references of gpt_oss's MLP ops (backend.h): the clamped SwiGLU of its experts and the
// per-expert bias added to MoE rows. Both are cheap next to the expert matmuls around them, so
// they run on the calling thread.
#include <math.h>

#include "backends/cpu/cpu_internal.h"

void cpu_swiglu_clamped(mx_backend *be, float *out, const float *gate, const float *up, int64_t count, float limit,
                        float alpha) {
    (void)be;
    for (int64_t i = 0; i < count; i++) {
        float g = fminf(gate[i], limit), u = fminf(fmaxf(up[i], -limit), limit);
        out[i] = g / (1.0f + expf(-alpha * g)) * (u + 1.0f);
    }
}

void cpu_expert_bias(mx_backend *be, float *x, const float *bias, const int32_t *ids, int m, int dim) {
    (void)be;
    for (int r = 0; r < m; r++) {
        const float *b = bias + (size_t)ids[r] * dim;
        float *row = x + (size_t)r * dim;
        for (int i = 0; i < dim; i++) row[i] += b[i];
    }
}
