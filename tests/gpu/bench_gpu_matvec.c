// SPDX-License-Identifier: MIT
// Matrix-vector bandwidth per product shape and per kernel, in one run: the decode products of a
// Qwen3 shape on random affine 4-bit g64 (bf16 scales) weights, timed on six backends, one per
// matrix-vector path: the float32 default (the streaming kernel, kernels/matvec_stream.cuh), its
// previous task shape (stream-r2: MLXCEL_GPU_STREAM_ROWS=2), without it
// (MLXCEL_GPU_NO_STREAM_MATVEC=1: kernels/matvec.cuh with the scaled dot and split-K), the previous
// one (MLXCEL_GPU_OLD_MATVEC=1), its lean one-token form (stream-lean: MLXCEL_GPU_STREAM_LEAN=1;
// these five with MLXCEL_GPU_TC_DECODE=0) and the tensor-core decode product for batches of 2-64
// tokens (MLXCEL_GPU_TC_DECODE=2, vendor/cuda/matvec_mma.cu).
// Each case is a plan of C copies of one product or one
// fused decode pattern (rmsnorm + q/k/v, o + residual add, rmsnorm + gate/up + SwiGLU, down +
// residual add, the output head), each copy with its own weights so that a replay reads C x the
// bytes from DRAM (at least 512 MB, several times the L2), recorded as a graph and replayed; the
// time per product is the replay time / C, GB/s the matrices' bytes (codes, scales, biases) over it.
// One-record products also run at 2, 4, 8, 16, 32 and 64 tokens (q and gate), k/v, o and down at
// 16, 32 and 64 (server decode batches). Every path sees the
// same weights and inputs (the generator restarts per path), so the one-record outputs are also
// compared: each path within 2e-5 relative L2 error of the default's (float32 summation order
// only; 1.5e-2 at 64 tokens, where the default is the bf16 tensor-core prefill kernel; stream-lean
// bit for bit), else the bench fails (exit 1), which checks the kernels at the real model shapes.
// Usage: bench_gpu_matvec [qwen3-8b|qwen3-0.6b] [replays=20]
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/gpu/gpu_backend.h"
#include "backends/gpu/gpu_rt.h"
#include "backends/gpu_entry.h"
#include "backends/plan.h"
#include "../unit/test_rng.h"

typedef struct shape {
    const char *name;
    int hidden, q_rows, kv_rows, inter, vocab;
} shape;

static const shape shapes[] = {
    {"qwen3-0.6b", 1024, 2048, 1024, 3072, 151936},
    {"qwen3-8b", 4096, 4096, 1024, 12288, 151936},
};

// A case: one product (rows x cols at n tokens) or a fused pattern.
enum { C_ONE, C_NORM_QKV, C_O_RESIDUAL, C_NORM_GATE_UP, C_DOWN_RESIDUAL };
typedef struct bench_case {
    const char *label;
    int kind, n;
    int64_t rows, cols;  // C_ONE
} bench_case;

enum { PATHS = 6, MAX_CASES = 32, PATH_LEAN = 5 };
static const char *const path_names[PATHS] = {"stream", "stream-r2", "no-stream", "old", "tc-decode", "stream-lean"};
static const char *const path_env[PATHS] = {NULL, "MLXCEL_GPU_STREAM_ROWS", "MLXCEL_GPU_NO_STREAM_MATVEC",
                                            "MLXCEL_GPU_OLD_MATVEC", "MLXCEL_GPU_TC_DECODE", "MLXCEL_GPU_STREAM_LEAN"};
static const char *const path_value[PATHS] = {NULL, "2", "1", "1", "2", "1"};

static mx_error err;
static test_rng rng = {0x3243f6a8885a308dull};

static void die(const char *what) {
    fprintf(stderr, "bench_gpu_matvec: %s: %s\n", what, err.msg);
    exit(1);
}

static void *dalloc(mx_backend *be, size_t bytes) {
    void *p = be->ops->alloc(be, bytes, &err);
    if (!p) die("alloc");
    return p;
}

// A random 4-bit g64 host matrix (data, bf16 scales and biases) of the bench_gpu_decode kind.
static mx_matrix host_q4(int64_t rows, int64_t cols) {
    mx_matrix m = {{MX_QUANT_AFFINE, 4, 64}, MX_DTYPE_U32, MX_DTYPE_BF16, 1, rows, cols, NULL, NULL, NULL};
    int64_t db = mx_matrix_data_bytes(&m), sb = mx_matrix_scale_bytes(&m);
    uint64_t *d = malloc((size_t)db);
    uint16_t *s = malloc((size_t)sb), *b = malloc((size_t)sb);
    if (!d || !s || !b) {
        fprintf(stderr, "bench_gpu_matvec: out of host memory\n");
        exit(1);
    }
    for (int64_t i = 0; i < db / 8; i++) d[i] = test_rng_next(&rng);
    for (int64_t i = 0; i < sb / 2; i++) {
        float sv = ((float)(test_rng_next(&rng) % 1000) + 500.0f) * 2e-6f;
        s[i] = mx_f32_to_bf16(sv);
        b[i] = mx_f32_to_bf16(-8.0f * sv);
    }
    m.data = d, m.scales = s, m.biases = b;
    return m;
}

static void host_free(mx_matrix *m) {
    free((void *)m->data), free((void *)m->scales), free((void *)m->biases);
}

static double matrix_bytes(const mx_matrix *m) {
    return (double)mx_matrix_data_bytes(m) + 2.0 * (double)mx_matrix_scale_bytes(m);
}

// Device activations, large enough for every case of the shape at up to 64 tokens: `in` is the input of
// the one-record products, x the residual stream of the patterns.
typedef struct acts {
    float *in, *x, *h, *q, *k, *v, *g, *u, *tmp, *norm;
} acts;

// Device floats in [0.5, 1.5).
static float *dfill(mx_backend *be, int64_t count) {
    float *p = dalloc(be, sizeof(float) * (size_t)count);
    float *h = calloc((size_t)count, sizeof(float));
    for (int64_t i = 0; i < count; i++) h[i] = 0.5f + (float)(test_rng_next(&rng) % 1000) * 1e-3f;
    if (be->ops->upload(be, p, h, sizeof(float) * (size_t)count, &err) != 0) die("upload");
    free(h);
    return p;
}

#define ADD(p, KIND, field, ...) mx_plan_add(p, (mx_op){.kind = KIND, .field = {__VA_ARGS__}})

// Times one case on one backend: returns microseconds per product (pattern) and sets *bytes; a
// one-record case also downloads its output (n x rows floats) into *result (malloc'ed).
static double run_case(mx_backend *be, const shape *s, const acts *a, const bench_case *c, const mx_matrix *hm,
                       int nmat, int replays, double *bytes, float **result) {
    double one = 0;
    for (int k = 0; k < nmat; k++) one += matrix_bytes(&hm[k]);
    *bytes = one;
    int copies = (int)ceil(512e6 / one);
    copies = copies < 2 ? 2 : copies > 96 ? 96 : copies;
    mx_matrix *dm = calloc((size_t)(copies * nmat), sizeof(mx_matrix));
    for (int i = 0; i < copies * nmat; i++)
        if (be->ops->upload_matrix(be, &hm[i % nmat], &dm[i], &err) != 0) die("upload_matrix");
    mx_plan *p = mx_plan_create(&err);
    if (!p) die("plan");
    const int n = c->n, H = s->hidden;
    for (int i = 0; i < copies; i++) {
        mx_matrix *m = &dm[i * nmat];
        switch (c->kind) {
        case C_ONE: ADD(p, MX_OP_MATMUL, matmul, a->tmp, a->in, &m[0], NULL, n); break;
        case C_NORM_QKV:
            ADD(p, MX_OP_RMSNORM, rmsnorm, a->h, a->x, a->norm, 1, H, 1e-6f);
            ADD(p, MX_OP_MATMUL, matmul, a->q, a->h, &m[0], NULL, 1);
            ADD(p, MX_OP_MATMUL, matmul, a->k, a->h, &m[1], NULL, 1);
            ADD(p, MX_OP_MATMUL, matmul, a->v, a->h, &m[2], NULL, 1);
            break;
        case C_O_RESIDUAL:
            ADD(p, MX_OP_MATMUL, matmul, a->tmp, a->q, &m[0], NULL, 1);
            ADD(p, MX_OP_ADD, add, a->x, a->tmp, (int64_t)H);
            break;
        case C_NORM_GATE_UP:
            ADD(p, MX_OP_RMSNORM, rmsnorm, a->h, a->x, a->norm, 1, H, 1e-6f);
            ADD(p, MX_OP_MATMUL, matmul, a->g, a->h, &m[0], NULL, 1);
            ADD(p, MX_OP_MATMUL, matmul, a->u, a->h, &m[1], NULL, 1);
            ADD(p, MX_OP_SWIGLU, swiglu, a->g, a->g, a->u, (int64_t)s->inter);
            break;
        case C_DOWN_RESIDUAL:
            ADD(p, MX_OP_MATMUL, matmul, a->tmp, a->g, &m[0], NULL, 1);
            ADD(p, MX_OP_ADD, add, a->x, a->tmp, (int64_t)H);
            break;
        }
    }
    void *e0, *e1, *stream = mx_gpu_stream(be);
    if (mxg_rt_event_create(&e0, &err) || mxg_rt_event_create(&e1, &err)) die("events");
    for (int i = 0; i < 3; i++)  // the second run records the graph
        if (mx_plan_run(be, p, &err) != 0) die("plan run");
    mxg_rt_event_record(e0, stream, &err);
    for (int i = 0; i < replays; i++)
        if (mx_plan_run(be, p, &err) != 0) die("plan run");
    mxg_rt_event_record(e1, stream, &err);
    if (be->ops->sync(be, &err) != 0) die("sync");
    float ms = 0;
    if (mxg_rt_event_elapsed_ms(e0, e1, &ms, &err) != 0) die("timing");
    *result = NULL;
    if (c->kind == C_ONE) {
        const size_t len = sizeof(float) * (size_t)(c->n * c->rows);
        *result = malloc(len);
        if (!*result || be->ops->download(be, *result, a->tmp, len, &err) != 0) die("download");
    }
    mxg_rt_event_destroy(e0), mxg_rt_event_destroy(e1);
    mx_plan_free(be, p);
    for (int i = 0; i < copies * nmat; i++) be->ops->release_matrix(be, &dm[i]);
    free(dm);
    return 1e3 * ms / ((double)replays * copies);
}

int main(int argc, char **argv) {
    const char *name = argc > 1 ? argv[1] : "qwen3-8b";
    const int replays = argc > 2 ? atoi(argv[2]) : 20;
    const shape *s = NULL;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        if (strcmp(shapes[i].name, name) == 0) s = &shapes[i];
    if (!s || replays < 1) {
        fprintf(stderr, "usage: bench_gpu_matvec [qwen3-0.6b|qwen3-8b] [replays >= 1]\n");
        return 2;
    }
    const int H = s->hidden;
    bench_case cases[MAX_CASES];
    int nc = 0;
    const int64_t one_shapes[6][2] = {{s->q_rows, H}, {s->kv_rows, H}, {H, s->q_rows},
                                      {s->inter, H}, {H, s->inter}, {s->vocab, H}};
    const char *const one_names[6] = {"q", "k/v", "o", "gate", "down", "lm_head"};
    for (int i = 0; i < 6; i++) cases[nc++] = (bench_case){one_names[i], C_ONE, 1, one_shapes[i][0], one_shapes[i][1]};
    const int batch[6] = {2, 4, 8, 16, 32, 64};
    for (int b = 0; b < 6; b++) {
        cases[nc++] = (bench_case){"q", C_ONE, batch[b], s->q_rows, H};
        cases[nc++] = (bench_case){"gate", C_ONE, batch[b], s->inter, H};
    }
    for (int b = 3; b < 6; b++) {  // the other products of a layer at 16, 32 and 64 tokens
        cases[nc++] = (bench_case){"k/v", C_ONE, batch[b], s->kv_rows, H};
        cases[nc++] = (bench_case){"o", C_ONE, batch[b], H, s->q_rows};
        cases[nc++] = (bench_case){"down", C_ONE, batch[b], H, s->inter};
    }
    cases[nc++] = (bench_case){"rmsnorm+q/k/v", C_NORM_QKV, 1, 0, 0};
    cases[nc++] = (bench_case){"o+residual", C_O_RESIDUAL, 1, 0, 0};
    cases[nc++] = (bench_case){"rmsnorm+gate/up+swiglu", C_NORM_GATE_UP, 1, 0, 0};
    cases[nc++] = (bench_case){"down+residual", C_DOWN_RESIDUAL, 1, 0, 0};

    double us[PATHS][MAX_CASES], bytes[MAX_CASES], worst[PATHS][MAX_CASES] = {{0}};
    float *first[MAX_CASES] = {NULL};
    char dev[256] = "";
    for (int path = 0; path < PATHS; path++) {
        rng = (test_rng){0x3243f6a8885a308dull};  // the same weights and inputs on every path
        // The float32 paths with the tensor-core product off (it is the default from 4 tokens); the
        // tc-decode path sets it to 2 tokens below.
        setenv("MLXCEL_GPU_TC_DECODE", "0", 1);
        if (path_env[path]) setenv(path_env[path], path_value[path], 1);
        mx_backend_options opt = {.name = mx_gpu_backend_name()};
        mx_backend *be = mx_gpu_backend_create(&opt, &err);
        if (path_env[path]) unsetenv(path_env[path]);
        unsetenv("MLXCEL_GPU_TC_DECODE");
        if (!be) {
            printf("skipped: %s\n", err.msg);
            return 77;
        }
        snprintf(dev, sizeof dev, "%s", be->device_name);
        acts a;
        const int64_t wide = (int64_t)8 * (s->vocab > s->inter ? s->vocab : s->inter);
        a.in = dfill(be, wide), a.x = dfill(be, H), a.h = dfill(be, H), a.q = dfill(be, s->q_rows);
        a.k = dfill(be, s->kv_rows), a.v = dfill(be, s->kv_rows), a.g = dfill(be, s->inter);
        a.u = dfill(be, s->inter), a.tmp = dfill(be, wide), a.norm = dfill(be, H);
        for (int c = 0; c < nc; c++) {
            mx_matrix hm[3];
            int nmat = 1;
            switch (cases[c].kind) {
            case C_ONE: hm[0] = host_q4(cases[c].rows, cases[c].cols); break;
            case C_NORM_QKV:
                hm[0] = host_q4(s->q_rows, H), hm[1] = host_q4(s->kv_rows, H), hm[2] = host_q4(s->kv_rows, H);
                nmat = 3;
                break;
            case C_O_RESIDUAL: hm[0] = host_q4(H, s->q_rows); break;
            case C_NORM_GATE_UP: hm[0] = host_q4(s->inter, H), hm[1] = host_q4(s->inter, H), nmat = 2; break;
            case C_DOWN_RESIDUAL: hm[0] = host_q4(H, s->inter); break;
            }
            float *res = NULL;
            us[path][c] = run_case(be, s, &a, &cases[c], hm, nmat, replays, &bytes[c], &res);
            if (res && path == 0) {
                first[c] = res;
            } else if (res) {  // relative L2 error against the default path's output
                double num = 0, den = 0;
                for (int64_t i = 0; i < cases[c].n * cases[c].rows; i++) {
                    const double d = (double)res[i] - first[c][i];
                    num += d * d, den += (double)first[c][i] * first[c][i];
                }
                worst[path][c] = den > 0 ? sqrt(num / den) : (num > 0 ? INFINITY : 0);
                if (isnan(num)) worst[path][c] = INFINITY;
                free(res);
            }
            for (int k = 0; k < nmat; k++) host_free(&hm[k]);
        }
        float *bufs[] = {a.in, a.x, a.h, a.q, a.k, a.v, a.g, a.u, a.tmp, a.norm};
        for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) be->ops->release(be, bufs[i]);
        mx_backend_free(be);
    }
    printf("bench_gpu_matvec %s, affine 4-bit g64 bf16 scales, device %s, %d replays of >= 512 MB each\n", s->name, dev,
           replays);
    printf("%-24s %-3s %9s", "case", "n", "MB");
    for (int path = 0; path < PATHS; path++) printf(" | %9s us  GB/s", path_names[path]);
    printf("\n");
    for (int c = 0; c < nc; c++) {
        char label[64];
        if (cases[c].kind == C_ONE)
            snprintf(label, sizeof label, "%s %lldx%lld", cases[c].label, (long long)cases[c].rows, (long long)cases[c].cols);
        else
            snprintf(label, sizeof label, "%s", cases[c].label);
        printf("%-24s %-3d %9.2f", label, cases[c].n, bytes[c] / 1e6);
        for (int path = 0; path < PATHS; path++) printf(" | %12.2f %5.0f", us[path][c], bytes[c] / (us[path][c] * 1e3));
        printf("\n");
    }
    int bad = 0;
    for (int c = 0; c < nc; c++) {
        for (int path = 1; path < PATHS; path++) {
            if (cases[c].kind != C_ONE) continue;
            // The lean form claims bit for bit the default's outputs (kernels/matvec_stream_lean.cuh).
            const double bound = path == PATH_LEAN ? 0.0 : cases[c].n >= 64 ? 1.5e-2 : 2e-5;
            const bool ok = worst[path][c] <= bound;
            bad += !ok;
            if (!ok)
                printf("FAIL: %s %lldx%lld n=%d: %s differs from %s by %.3e (relative L2; bound %.1e)\n", cases[c].label,
                       (long long)cases[c].rows, (long long)cases[c].cols, cases[c].n, path_names[path], path_names[0],
                       worst[path][c], bound);
        }
        free(first[c]);
    }
    printf("outputs of the one-record products: %s\n", bad ? "paths differ (see FAIL lines)" : "every path within its bound of the default");
    return bad ? 1 : 0;
}
