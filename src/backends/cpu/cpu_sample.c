// SPDX-License-Identifier: MIT
// Token choice on the CPU backend (backend.h `sample` record): the host implementation of
// core/sample_rows.h, one row per task over the backend's threads, so the CPU backend, the engine's
// host path and the reference a GPU kernel is compared with are one piece of code.
#include "backends/cpu/cpu_internal.h"
#include "core/sample_rows.h"

void cpu_sample(mx_backend *be, mx_sample_out *out, float *logits, int n, int vocab, const mx_sample_row *rows,
                const mx_logit_mod *mods) {
    cpu_ctx *c = cpu_of(be);
    void *scratch = cpu_act_buf(c, MX_SAMPLE_SCRATCH_BYTES(vocab) * (size_t)c->n_threads);
    if (!scratch) return;  // out of memory: cpu_run_plan reports it
    mx_sample_rows_host(c->pool, logits, n, vocab, rows, mods, scratch, out);
}
