// SPDX-License-Identifier: MIT
// The CPU backend runs consecutive batch-1 matmul records that read the same x (q, k, v; gate, up)
// as one pool job with x quantized once (cpu_matmul_group). A plan must give what running its
// records one by one gives, bit for bit (same kernels, same prepared x). Checked for: an
// integer-path format (affine 4-bit g64) with and without a bias, a float-path format (affine
// 3-bit), a mixed run (the format changes inside it: it must split), a chain (a record reading the
// previous one's output), batch-2 records (grouped where the kernel set has integer tile kernels),
// five records in a row (more than one group), and batches of 200 tokens of 2048 columns (prepared
// x in two chunks, so the tasks of the group go chunk by chunk), with a chain that must split.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_backend.h"
#include "backends/plan.h"
#include "check.h"
#include "core/dtype.h"
#include "test_rng.h"

static test_rng rng = {0x9e3779b97f4a7c15ull};
static uint32_t rnd(void) { return test_rng_u32(&rng); }
static float rndf(void) { return test_rng_unit(&rng); }

// A random affine matrix with bf16 scales and biases (host memory is the CPU backend's memory).
static mx_matrix make(int bits, int group, int64_t rows, int64_t cols) {
    mx_matrix m = {0};
    m.q = (mx_quant){.mode = MX_QUANT_AFFINE, .bits = bits, .group_size = group};
    m.dtype = MX_DTYPE_U32;
    m.scale_dtype = MX_DTYPE_BF16;
    m.n_experts = 1;
    m.rows = rows;
    m.cols = cols;
    int64_t bytes = mx_matrix_data_bytes(&m), ns = rows * (cols / group);
    uint8_t *d = malloc((size_t)bytes);
    uint16_t *s = malloc((size_t)ns * 2), *b = malloc((size_t)ns * 2);
    for (int64_t i = 0; i < bytes; i++) d[i] = (uint8_t)rnd();
    for (int64_t i = 0; i < ns; i++) s[i] = mx_f32_to_bf16(rndf() * 0.05f), b[i] = mx_f32_to_bf16(rndf() * 0.2f);
    m.data = d, m.scales = s, m.biases = b;
    return m;
}

static void drop(mx_matrix *m) {
    free((void *)m->data), free((void *)m->scales), free((void *)m->biases);
}

#define N_BUF 8
#define BUF_FLOATS (1 << 19)

// Runs ops[n] as one plan on bufs a, and one record at a time on bufs b (same initial contents);
// every buffer must come out identical.
static void check_plan(mx_backend *be, const char *label, mx_op *ops, int n, float *a[N_BUF], float *b[N_BUF]) {
    mx_error err = {{0}};
    for (int i = 0; i < N_BUF; i++)
        for (int k = 0; k < BUF_FLOATS; k++) a[i][k] = b[i][k] = rndf();
    mx_plan *p = mx_plan_create(&err);
    CHECK(p != NULL);
    for (int r = 0; r < n; r++) mx_plan_add(p, ops[r]);
    CHECK(mx_plan_run(be, p, &err) == 0);
    mx_plan_free(be, p);
    // The same records on the b buffers, one plan each.
    for (int r = 0; r < n; r++) {
        mx_op op = ops[r];
        for (int i = 0; i < N_BUF; i++) {
            if (op.matmul.out >= a[i] && op.matmul.out < a[i] + BUF_FLOATS) op.matmul.out = b[i] + (op.matmul.out - a[i]);
            if (op.matmul.x >= a[i] && op.matmul.x < a[i] + BUF_FLOATS) op.matmul.x = b[i] + (op.matmul.x - a[i]);
        }
        CHECK(mx_run_op(be, op, &err) == 0);
    }
    for (int i = 0; i < N_BUF; i++) CHECK_MSG(memcmp(a[i], b[i], sizeof(float) * BUF_FLOATS) == 0, "%s: buffer %d differs", label, i);
}

static mx_op mm(float *out, const float *x, const mx_matrix *w, const float *bias, int n) {
    return (mx_op){.kind = MX_OP_MATMUL, .matmul = {out, x, w, bias, n}};
}

int main(void) {
    mx_error err = {{0}};
    mx_backend *be = mx_cpu_backend_create(2, &err);
    CHECK(be != NULL);
    float *a[N_BUF], *b[N_BUF];
    for (int i = 0; i < N_BUF; i++) a[i] = malloc(sizeof(float) * BUF_FLOATS), b[i] = malloc(sizeof(float) * BUF_FLOATS);
    float *bias = malloc(sizeof(float) * 1024);
    for (int i = 0; i < 1024; i++) bias[i] = rndf();
    mx_matrix q4a = make(4, 64, 512, 256), q4b = make(4, 64, 136, 256), q4c = make(4, 64, 72, 256);
    mx_matrix q4sq = make(4, 64, 256, 256), q3 = make(3, 64, 200, 256), q3b = make(3, 64, 40, 256);
    mx_matrix q4g128 = make(4, 128, 96, 256);

    mx_op qkv[] = {mm(a[1], a[0], &q4a, NULL, 1), mm(a[2], a[0], &q4b, bias, 1), mm(a[3], a[0], &q4c, NULL, 1)};
    check_plan(be, "q, k, v (4-bit g64)", qkv, 3, a, b);
    mx_op flt[] = {mm(a[1], a[0], &q3, bias, 1), mm(a[2], a[0], &q3b, NULL, 1)};
    check_plan(be, "gate, up (3-bit, float path)", flt, 2, a, b);
    mx_op mixed[] = {mm(a[1], a[0], &q4a, NULL, 1), mm(a[2], a[0], &q4g128, NULL, 1), mm(a[3], a[0], &q4b, NULL, 1)};
    check_plan(be, "formats change inside the run", mixed, 3, a, b);
    // A chain (the second record reads the first's output): different x, never grouped.
    mx_op chain[] = {mm(a[1], a[0], &q4sq, NULL, 1), mm(a[2], a[1], &q4b, NULL, 1), mm(a[3], a[1], &q4c, NULL, 1)};
    check_plan(be, "chain", chain, 3, a, b);
    mx_op batch[] = {mm(a[1], a[0], &q4a, NULL, 2), mm(a[3], a[0], &q4b, bias, 2), mm(a[5], a[0], &q4c, NULL, 1)};
    check_plan(be, "batch of 2", batch, 3, a, b);
    mx_op five[] = {mm(a[1], a[0], &q4c, NULL, 1), mm(a[2], a[0], &q4b, NULL, 1), mm(a[3], a[0], &q4c, bias, 1),
                    mm(a[4], a[0], &q4b, NULL, 1), mm(a[5], a[0], &q4a, NULL, 1)};
    check_plan(be, "five in a row", five, 5, a, b);

    mx_matrix w1 = make(4, 64, 136, 2048), w2 = make(4, 64, 72, 2048), w3 = make(4, 64, 40, 2048);
    mx_op wide[] = {mm(a[1], a[0], &w1, NULL, 200), mm(a[2], a[0], &w2, bias, 200), mm(a[3], a[0], &w3, NULL, 200)};
    check_plan(be, "q, k, v, batch of 200 x 2048 columns", wide, 3, a, b);
    // The second record writes into x (in place): the group must end before it, and the third
    // record reads what it wrote.
    mx_op wide_chain[] = {mm(a[1], a[0], &w1, NULL, 200), mm(a[0], a[0], &w3, NULL, 200), mm(a[2], a[0], &w2, NULL, 200)};
    check_plan(be, "batch of 200, x rewritten inside the run", wide_chain, 3, a, b);
    mx_op odd[] = {mm(a[1], a[0], &q4a, NULL, 37), mm(a[2], a[0], &q4b, bias, 37), mm(a[3], a[0], &q4c, NULL, 37)};
    check_plan(be, "q, k, v, batch of 37", odd, 3, a, b);

    mx_matrix *ms[] = {&q4a, &q4b, &q4c, &q4sq, &q3, &q3b, &q4g128, &w1, &w2, &w3};
    for (size_t i = 0; i < sizeof ms / sizeof *ms; i++) drop(ms[i]);
    for (int i = 0; i < N_BUF; i++) free(a[i]), free(b[i]);
    free(bias);
    be->ops->destroy(be);
    return check_finish();
}
