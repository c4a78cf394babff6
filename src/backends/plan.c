// SPDX-License-Identifier: MIT
// Plans: records appended to a growing array, ids from one process-wide counter (so an id is never
// reused, whatever the allocator does with freed plans).
#include "backends/plan.h"

#include <stdatomic.h>
#include <stdlib.h>

static atomic_uint_fast64_t next_plan_id = 1;

static uint64_t fresh_id(void) { return (uint64_t)atomic_fetch_add(&next_plan_id, 1); }

mx_plan *mx_plan_create(mx_error *err) {
    mx_plan *p = calloc(1, sizeof *p);
    if (!p) {
        mx_fail(err, "out of memory creating a plan");
        return NULL;
    }
    p->id = fresh_id();
    return p;
}

void mx_plan_free(mx_backend *be, mx_plan *p) {
    if (!p) return;
    if (be && be->ops->plan_release) be->ops->plan_release(be, p->id);
    free(p->ops);
    free(p);
}

void mx_plan_add(mx_plan *p, mx_op op) {
    if (p->failed) return;
    if (p->n_ops == p->cap_ops) {
        int cap = p->cap_ops ? 2 * p->cap_ops : 64;
        mx_op *grown = realloc(p->ops, sizeof *grown * (size_t)cap);
        if (!grown) {
            p->failed = true;
            return;
        }
        p->ops = grown, p->cap_ops = cap;
    }
    p->ops[p->n_ops++] = op;
}

int mx_plan_run(mx_backend *be, const mx_plan *p, mx_error *err) {
    if (p->failed) return mx_fail(err, "out of memory building a plan of %d records", p->n_ops);
    return be->ops->run_plan(be, p, err);
}

int mx_run_op(mx_backend *be, mx_op op, mx_error *err) {
    mx_plan one = {.id = fresh_id(), .ops = &op, .n_ops = 1, .cap_ops = 1};
    int rc = be->ops->run_plan(be, &one, err);
    if (be->ops->plan_release) be->ops->plan_release(be, one.id);
    return rc;
}

const char *mx_op_kind_name(mx_op_kind kind) {
    static const char *const names[MX_OP_KIND_COUNT] = {
        [MX_OP_EMBED] = "embed",           [MX_OP_MATMUL] = "matmul",
        [MX_OP_RMSNORM] = "rmsnorm",       [MX_OP_ROPE] = "rope",
        [MX_OP_KV_STORE] = "kv_store",     [MX_OP_ATTENTION] = "attention",
        [MX_OP_SWIGLU] = "swiglu",         [MX_OP_ADD] = "add",
        [MX_OP_GEGLU] = "geglu",           [MX_OP_SCALE] = "scale",
        [MX_OP_MOE_ROUTE] = "moe_route",   [MX_OP_MOE_MATMUL] = "moe_matmul",
        [MX_OP_MOE_COMBINE] = "moe_combine", [MX_OP_GATHER_ROWS] = "gather_rows",
        [MX_OP_ARGMAX] = "argmax",         [MX_OP_SAMPLE] = "sample",
        [MX_OP_LATENT_STORE] = "latent_store", [MX_OP_LATENT_ATTENTION] = "latent_attention",
        [MX_OP_MOE_ROUTE_GROUPED] = "moe_route_grouped",
        [MX_OP_SWIGLU_CLAMPED] = "swiglu_clamped", [MX_OP_EXPERT_BIAS] = "expert_bias",
    };
    return kind >= 0 && kind < MX_OP_KIND_COUNT && names[kind] ? names[kind] : "unknown op";
}
