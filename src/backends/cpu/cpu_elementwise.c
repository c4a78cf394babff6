// SPDX-License-Identifier: MIT
// CPU element-wise and small ops: RMSNorm, SwiGLU, residual add, MoE routing and combine,
// row gathers and argmax (RoPE: cpu_rope.c). RMSNorm and the element-wise ops (SwiGLU, GeGLU, add, scale) split
// their rows or values over the thread pool when a step has enough of them (prefill: run on the
// calling thread alone they left the other threads waiting, ~10% of a pp512's CPU samples); a
// decode step's are small and stay on the calling thread, where a hand-off would cost more. The
// rest are cheap enough to run on the calling thread.
#include <math.h>
#include <string.h>

#include "backends/cpu/cpu_internal.h"
#include "backends/cpu/cpu_kernels.h"

// Values per RMSNorm task: a prefill's per-head norms (Qwen3's q_norm and k_norm: 512 x 16 rows of
// 128) taken one row per task spent most of their time claiming tasks (470 us per call on average
// in a quiet pp512 profile, 2.5% of it); rows per task now come to about this many values.
#define NORM_TASK_VALUES 8192

typedef struct norm_job {
    float *out;
    const float *x, *w;
    int n, dim, rows;  // rows per task
    float eps;
} norm_job;

static void norm_row(const norm_job *j, int row) {
    const float *x = j->x + (size_t)row * j->dim;
    float *o = j->out + (size_t)row * j->dim;
    // Sixteen float partial sums (the loop vectorizes; one double chain was latency-bound at ~4
    // cycles per value), added in double.
    float part[16] = {0};
    int i = 0;
    for (; i + 16 <= j->dim; i += 16)
        for (int k = 0; k < 16; k++) part[k] += x[i + k] * x[i + k];
    double ss = 0.0;
    for (; i < j->dim; i++) ss += (double)x[i] * x[i];
    for (int k = 0; k < 16; k++) ss += part[k];
    float r = 1.0f / sqrtf((float)(ss / j->dim) + j->eps);
    for (i = 0; i < j->dim; i++) o[i] = x[i] * r * j->w[i];
}

static void norm_task(void *arg, int task, int thread) {
    (void)thread;
    const norm_job *j = arg;
    int r1 = (task + 1) * j->rows < j->n ? (task + 1) * j->rows : j->n;
    for (int r = task * j->rows; r < r1; r++) norm_row(j, r);
}

void cpu_rmsnorm(mx_backend *be, float *out, const float *x, const float *w, int n, int dim, float eps) {
    int rows = dim < NORM_TASK_VALUES ? NORM_TASK_VALUES / dim : 1;
    norm_job j = {out, x, w, n, dim, rows, eps};
    if ((int64_t)n * dim < 16384) {
        for (int t = 0; t < n; t++) norm_row(&j, t);
        return;
    }
    mx_pool_run(cpu_of(be)->pool, (n + rows - 1) / rows, norm_task, &j);
}

// Values per task of the element-wise ops; fewer than two tasks' worth run on the calling thread.
#define ELEM_CHUNK 8192

// An element-wise op over [0, count): fn computes the values [i0, i1).
typedef struct elem_job {
    void (*fn)(const struct elem_job *j, int64_t i0, int64_t i1);
    float *out;            // [count] (x for add and scale)
    const float *a, *b;    // [count] inputs (gate, up; y for add)
    float s;               // scale
    int64_t count;
} elem_job;

static void elem_task(void *arg, int task, int thread) {
    (void)thread;
    const elem_job *j = arg;
    int64_t i0 = (int64_t)task * ELEM_CHUNK, i1 = i0 + ELEM_CHUNK < j->count ? i0 + ELEM_CHUNK : j->count;
    j->fn(j, i0, i1);
}

static void elem_run(mx_backend *be, const elem_job *j) {
    if (j->count < 2 * ELEM_CHUNK) {
        j->fn(j, 0, j->count);
        return;
    }
    mx_pool_run(cpu_of(be)->pool, (int)((j->count + ELEM_CHUNK - 1) / ELEM_CHUNK), elem_task, (void *)j);
}

static void swiglu_range(const elem_job *j, int64_t i0, int64_t i1) {
    cpu_kernels_swiglu(j->out + i0, j->a + i0, j->b + i0, i1 - i0);
}

void cpu_swiglu(mx_backend *be, float *out, const float *gate, const float *up, int64_t count) {
    elem_job j = {.fn = swiglu_range, .out = out, .a = gate, .b = up, .count = count};
    elem_run(be, &j);
}

static void geglu_range(const elem_job *j, int64_t i0, int64_t i1) {
    const float k = 0.7978845608028654f;  // sqrt(2 / pi)
    for (int64_t i = i0; i < i1; i++) {
        float g = j->a[i];
        j->out[i] = 0.5f * g * (1.0f + tanhf(k * (g + 0.044715f * g * g * g))) * j->b[i];
    }
}

void cpu_geglu(mx_backend *be, float *out, const float *gate, const float *up, int64_t count) {
    elem_job j = {.fn = geglu_range, .out = out, .a = gate, .b = up, .count = count};
    elem_run(be, &j);
}

static void scale_range(const elem_job *j, int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; i++) j->out[i] *= j->s;
}

void cpu_scale(mx_backend *be, float *x, int64_t count, float scale) {
    elem_job j = {.fn = scale_range, .out = x, .s = scale, .count = count};
    elem_run(be, &j);
}

static void add_range(const elem_job *j, int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; i++) j->out[i] += j->a[i];
}

void cpu_add(mx_backend *be, float *x, const float *y, int64_t count) {
    elem_job j = {.fn = add_range, .out = x, .a = y, .count = count};
    elem_run(be, &j);
}

void cpu_moe_route(mx_backend *be, int32_t *ids, float *weights, const float *logits, int n, int n_experts, int k,
                   bool norm_topk) {
    (void)be;
    float probs[1024];
    MX_ASSERT(n_experts <= 1024 && k <= n_experts);
    for (int t = 0; t < n; t++) {
        const float *lg = logits + (size_t)t * n_experts;
        float mx = lg[0];
        for (int e = 1; e < n_experts; e++) mx = lg[e] > mx ? lg[e] : mx;
        float sum = 0.0f;
        for (int e = 0; e < n_experts; e++) sum += probs[e] = expf(lg[e] - mx);
        for (int e = 0; e < n_experts; e++) probs[e] /= sum;
        float chosen_sum = 0.0f;
        for (int j = 0; j < k; j++) {  // k is small: repeated selection of the largest
            // Taken experts are marked -1; a NaN probability (NaN logits, from NaN weights or a
            // degenerate RoPE base) is still a candidate, so each pass picks one of the untaken.
            int best = -1;
            for (int e = 0; e < n_experts; e++)
                if (!(probs[e] < 0.0f) && (best < 0 || probs[e] > probs[best])) best = e;
            ids[t * k + j] = best;
            weights[t * k + j] = probs[best];
            chosen_sum += probs[best];
            probs[best] = -1.0f;
        }
        if (norm_topk)
            for (int j = 0; j < k; j++) weights[t * k + j] /= chosen_sum;
    }
}

// DeepSeek-V3's grouped top-k (backend.h, moe_route_grouped), as transformers computes it.
void cpu_moe_route_grouped(mx_backend *be, int32_t *ids, float *weights, const float *logits, const float *bias, int n,
                           int n_experts, int k, int n_group, int topk_group, bool norm_topk, float scaling) {
    (void)be;
    float s[1024], choice[1024], group[1024];
    MX_ASSERT(n_experts <= 1024 && n_group >= 1 && n_experts % n_group == 0 && n_experts / n_group >= 2);
    MX_ASSERT(topk_group <= n_group && k <= n_experts);
    int per = n_experts / n_group;
    for (int t = 0; t < n; t++) {
        const float *lg = logits + (size_t)t * n_experts;
        for (int e = 0; e < n_experts; e++) {
            s[e] = 1.0f / (1.0f + expf(-lg[e]));
            choice[e] = s[e] + bias[e];
        }
        for (int g = 0; g < n_group; g++) {  // the sum of the group's two largest choices
            float a = -INFINITY, b = -INFINITY;
            for (int e = g * per; e < (g + 1) * per; e++) {
                if (choice[e] > a) b = a, a = choice[e];
                else if (choice[e] > b) b = choice[e];
            }
            group[g] = a + b;
        }
        bool keep[1024] = {false};
        for (int j = 0; j < topk_group; j++) {
            int best = -1;
            for (int g = 0; g < n_group; g++)
                if (!keep[g] && (best < 0 || group[g] > group[best])) best = g;
            keep[best] = true;
        }
        for (int e = 0; e < n_experts; e++)
            if (!keep[e / per]) choice[e] = 0.0f;
        float chosen_sum = 0.0f;
        bool taken[1024] = {false};
        for (int j = 0; j < k; j++) {
            int best = -1;
            for (int e = 0; e < n_experts; e++)
                if (!taken[e] && (best < 0 || choice[e] > choice[best])) best = e;
            taken[best] = true;
            ids[t * k + j] = best;
            weights[t * k + j] = s[best];
            chosen_sum += s[best];
        }
        for (int j = 0; j < k; j++) {
            if (norm_topk) weights[t * k + j] /= chosen_sum + 1e-20f;
            weights[t * k + j] *= scaling;
        }
    }
}

void cpu_moe_combine(mx_backend *be, float *out, const float *y, const float *weights, int n, int k, int dim) {
    (void)be;
    for (int t = 0; t < n; t++) {
        float *o = out + (size_t)t * dim;
        for (int j = 0; j < k; j++) {
            const float *yr = y + ((size_t)t * k + j) * dim;
            float w = weights[t * k + j];
            for (int d = 0; d < dim; d++) o[d] += w * yr[d];
        }
    }
}

void cpu_gather_rows(mx_backend *be, float *out, const float *x, const int32_t *rows, int n, int dim) {
    (void)be;
    for (int i = 0; i < n; i++) memmove(out + (size_t)i * dim, x + (size_t)rows[i] * dim, sizeof(float) * dim);
}

// Argmax over a row split in chunks (the output projection's 151,936 logits took ~0.1 ms of a decode
// step on the calling thread): each task finds its chunk's first largest value, then the chunks are
// compared in order, so the result is one pass's (first index of the largest; ties to the lowest).
#define ARGMAX_CHUNK 16384
#define ARGMAX_MAX_CHUNKS 64

typedef struct argmax_job {
    const float *l;  // [vocab]
    int vocab;
    int best[ARGMAX_MAX_CHUNKS];
} argmax_job;

static int argmax_range(const float *l, int i0, int i1) {
    int best = i0;
    for (int i = i0 + 1; i < i1; i++)
        if (l[i] > l[best]) best = i;
    return best;
}

// Chunks after the first: the first largest non-NaN value, or -1 (one pass from index 0 never moves
// to a NaN, and never moves at all when l[0] is NaN: the first chunk keeps that rule).
static void argmax_task(void *arg, int task, int thread) {
    (void)thread;
    argmax_job *j = arg;
    int i0 = task * ARGMAX_CHUNK, i1 = i0 + ARGMAX_CHUNK < j->vocab ? i0 + ARGMAX_CHUNK : j->vocab;
    if (task == 0) {
        j->best[0] = argmax_range(j->l, i0, i1);
        return;
    }
    int best = -1;
    for (int i = i0; i < i1; i++)
        if (!isnan(j->l[i]) && (best < 0 || j->l[i] > j->l[best])) best = i;
    j->best[task] = best;
}

void cpu_argmax(mx_backend *be, int32_t *ids, const float *logits, int n, int vocab) {
    int chunks = (vocab + ARGMAX_CHUNK - 1) / ARGMAX_CHUNK;
    for (int t = 0; t < n; t++) {
        const float *l = logits + (size_t)t * vocab;
        if (chunks < 2 || chunks > ARGMAX_MAX_CHUNKS) {
            ids[t] = argmax_range(l, 0, vocab);
            continue;
        }
        argmax_job j = {.l = l, .vocab = vocab};
        mx_pool_run(cpu_of(be)->pool, chunks, argmax_task, &j);
        int best = j.best[0];
        for (int c = 1; c < chunks; c++)
            if (j.best[c] >= 0 && l[j.best[c]] > l[best]) best = j.best[c];
        ids[t] = best;
    }
}
