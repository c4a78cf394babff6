// SPDX-License-Identifier: MIT
// Building and running plans (backend.h): a growable list of op records with a process-unique id.
// The model builds one plan per step shape and runs it many times; tests run single records.
#ifndef MX_BACKENDS_PLAN_H
#define MX_BACKENDS_PLAN_H

#include "backends/backend.h"

// An empty plan with a fresh id, or NULL (error in err).
mx_plan *mx_plan_create(mx_error *err);
// Tells the backend to forget what it kept for the plan, then frees it (NULL is fine). The buffers
// the records point at may be released after this call, not before.
void mx_plan_free(mx_backend *be, mx_plan *p);
// Appends a record; on out of memory the plan is marked failed (mx_plan_run then refuses it).
void mx_plan_add(mx_plan *p, mx_op op);
// Runs the plan on the backend (asynchronous on devices).
int mx_plan_run(mx_backend *be, const mx_plan *p, mx_error *err);
// Runs one record as a plan of its own (tests and benches).
int mx_run_op(mx_backend *be, mx_op op, mx_error *err);
// "matmul", "attention", ... for messages.
const char *mx_op_kind_name(mx_op_kind kind);

#endif
