// SPDX-License-Identifier: MIT
// Memory estimate before a context is created: weights (already loaded) + KV cache + per-step
// scratch, compared with what the backend's memory has (mx_backend_ops.mem_info). Refusing here,
// with the numbers, replaces a failure in the middle of a run: on the host, calloc of a large KV
// cache succeeds under overcommit and the process is killed later when the pages are touched.
// The scratch terms mirror the buffers mx_ctx_create allocates (forward_ctx.c).
#include <stdio.h>

#include "models/forward_mla.h"
#include "models/model_internal.h"

enum { LOGIT_ROWS_ESTIMATE = 64 };  // rows of logits a step keeps (LOGIT_ROWS in forward_internal.h)

static double gib(double b) { return b / (1024.0 * 1024.0 * 1024.0); }

int mx_ctx_memory_check(const mx_model *m, const mx_kv_layout *lay, int max_batch, mx_error *err) {
    const mx_config *cfg = &m->cfg;
    mx_backend *be = m->be;
    if (!be->ops->mem_info) return 0;
    size_t free_b = 0, total_b = 0;
    if (be->ops->mem_info(be, &free_b, &total_b) != 0) return 0;
    double kv = (double)mx_kv_bytes(lay, be->kv_dtype);
    double B = max_batch, H = cfg->hidden_size, QD = (double)cfg->n_heads * cfg->head_dim,
           KD = (double)cfg->n_kv_heads * cfg->head_dim;
    double K = cfg->num_experts_per_tok > 0 ? cfg->num_experts_per_tok : 1;
    double I = (double)mx_model_dense_intermediate(m);
    double ff = B * I > B * K * cfg->moe_intermediate_size ? B * I : B * K * cfg->moe_intermediate_size;
    double shared = B * cfg->moe_intermediate_size * cfg->n_shared_experts;
    if (shared > ff) ff = shared;
    double scratch = 4 * (3 * B + 3 * B * H + 2 * B * QD + 2 * B * KD + 2 * ff +
                          LOGIT_ROWS_ESTIMATE * (H + (double)cfg->vocab_size + 3));
    if (cfg->num_experts > 0) scratch += 4 * (B * cfg->num_experts + 2 * B * K + B * K * H);
    if (cfg->kv_lora_rank > 0) scratch += (double)mx_mla_scratch_bytes(cfg, max_batch);
    double weights = (double)m->weight_bytes;
    double need_free = kv + scratch;
    bool too_big = need_free > (double)free_b ||
                   (be->ops->weights_mapped && weights + need_free > (double)total_b);
    if (!too_big) return 0;
    return mx_fail(err,
                   "not enough %s memory for %d slot(s) x %d positions (%d KV blocks): weights %.2f GiB + KV cache %.2f GiB + "
                   "scratch %.2f GiB = %.2f GiB, but %.2f GiB is free of %.2f GiB; lower --kv-size, --ctx or --parallel",
                   be->ops->weights_mapped ? "host" : be->ops->name, lay->n_slots, lay->max_ctx, mx_kv_blocks(lay), gib(weights), gib(kv),
                   gib(scratch), gib(weights + kv + scratch), gib((double)free_b), gib((double)total_b));
}
