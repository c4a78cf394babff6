// SPDX-License-Identifier: MIT
// CPU RoPE: rotates the first rot_dim values of each head of x by the angles pos * inv_freq[i]
// (longrope: long_inv_freq from long_from on), cos and sin times attn_factor. A step's positions
// are the same for q and k of every layer, so their cos and sin (computed in double precision, as
// before, per token) go into a table that the later calls of the step reuse: ROPE_TABLES tables,
// each keyed by the rope's parameters and the positions (Gemma's local and global layers rotate
// with two bases), the least recently used one refilled on a miss. A reused value is the value the
// call would compute. A table grows only for a larger batch than it held (a prefill), so decode
// steps allocate nothing; where growing fails the call computes its angles per token as before.
// Per pp512 of Qwen3-0.6B: 56 calls each computed 512 x 64 cos/sin pairs (rope 0.6-1.4% of the
// records' time).
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_internal.h"

#define ROPE_TABLES 2
#define ROPE_MAX_HALF 256
// Values of x below which a call stays on the calling thread (a decode step's).
#define ROPE_POOL_VALUES 16384

typedef struct rope_table {
    float inv[ROPE_MAX_HALF], long_inv[ROPE_MAX_HALF];  // key: the rope's parameters (by value, so a
    bool has_long;                                       // new model's arrays at old addresses miss) ...
    int long_from, half;
    float attn_factor;
    int n;            // ... and its positions pos[n]; n = 0: empty
    int32_t *pos;
    float *cs;        // [n][2 * half]: cos, then sin
    size_t cap;       // tokens pos and cs have room for
    unsigned long long used;
} rope_table;

struct cpu_rope_cache {
    rope_table t[ROPE_TABLES];
    unsigned long long clock;
};

void cpu_rope_cache_free(struct cpu_rope_cache *c) {
    if (!c) return;
    for (int i = 0; i < ROPE_TABLES; i++) free(c->t[i].pos), free(c->t[i].cs);
    free(c);
}

static bool same_key(const rope_table *t, const mx_rope *r, int half, const int32_t *pos, int n) {
    size_t fb = sizeof(float) * (size_t)half;
    return t->n == n && t->half == half && t->attn_factor == r->attn_factor && t->has_long == (r->long_inv_freq != NULL) &&
           (!t->has_long || (t->long_from == r->long_from && memcmp(t->long_inv, r->long_inv_freq, fb) == 0)) &&
           memcmp(t->inv, r->inv_freq, fb) == 0 && memcmp(t->pos, pos, sizeof(int32_t) * (size_t)n) == 0;
}

// The table for (r, pos[n]): *fill says whether the caller must compute it. NULL where none could
// be allocated.
static float *rope_table_for(cpu_ctx *c, const mx_rope *r, int half, const int32_t *pos, int n, bool *fill) {
    if (!c->rope_cache && !(c->rope_cache = calloc(1, sizeof *c->rope_cache))) return NULL;
    struct cpu_rope_cache *rc = c->rope_cache;
    rope_table *lru = &rc->t[0];
    for (int i = 0; i < ROPE_TABLES; i++) {
        rope_table *t = &rc->t[i];
        if (same_key(t, r, half, pos, n)) {
            t->used = ++rc->clock;
            *fill = false;
            return t->cs;
        }
        if (t->used < lru->used) lru = t;
    }
    if ((size_t)n > lru->cap) {
        free(lru->pos), free(lru->cs);
        lru->pos = malloc(sizeof(int32_t) * (size_t)n);
        lru->cs = malloc(sizeof(float) * 2 * ROPE_MAX_HALF * (size_t)n);
        lru->cap = lru->pos && lru->cs ? (size_t)n : 0;
        if (!lru->cap) {
            free(lru->pos), free(lru->cs);
            *lru = (rope_table){0};
            return NULL;
        }
    }
    memcpy(lru->inv, r->inv_freq, sizeof(float) * (size_t)half);
    lru->has_long = r->long_inv_freq != NULL;
    if (lru->has_long) memcpy(lru->long_inv, r->long_inv_freq, sizeof(float) * (size_t)half);
    lru->long_from = r->long_from, lru->half = half, lru->attn_factor = r->attn_factor, lru->n = n;
    memcpy(lru->pos, pos, sizeof(int32_t) * (size_t)n);
    lru->used = ++rc->clock;
    *fill = true;
    return lru->cs;
}

typedef struct rope_job {
    float *x;  // [n, n_heads, head_dim]
    const int32_t *pos;
    int n_heads;
    const mx_rope *rope;
    float *table;  // [n][2 * half] or NULL (angles per call)
    bool fill;     // the table's rows are computed by this call
} rope_job;

// One token's heads.
static void rope_task(void *arg, int t, int thread) {
    (void)thread;
    const rope_job *j = arg;
    const mx_rope *rope = j->rope;
    int hd = rope->head_dim, half = (rope->rot_dim ? rope->rot_dim : hd) / 2;
    float own[2 * ROPE_MAX_HALF];
    float *cs = j->table ? j->table + (size_t)t * 2 * half : own, *sn = cs + half;
    if (!j->table || j->fill) {
        const float *inv = rope->long_inv_freq && j->pos[t] >= rope->long_from ? rope->long_inv_freq : rope->inv_freq;
        for (int i = 0; i < half; i++) {
            double ang = (double)j->pos[t] * inv[i];
            cs[i] = (float)cos(ang) * rope->attn_factor;
            sn[i] = (float)sin(ang) * rope->attn_factor;
        }
    }
    for (int h = 0; h < j->n_heads; h++) {
        float *v = j->x + ((size_t)t * j->n_heads + h) * hd;
        for (int i = 0; i < half; i++) {
            float a = v[i], b = v[i + half];
            v[i] = a * cs[i] - b * sn[i];
            v[i + half] = b * cs[i] + a * sn[i];
        }
    }
}

void cpu_rope(mx_backend *be, float *x, const int32_t *pos, int n, int n_heads, const mx_rope *rope) {
    cpu_ctx *c = cpu_of(be);
    int hd = rope->head_dim, half = (rope->rot_dim ? rope->rot_dim : hd) / 2;
    MX_ASSERT(half <= ROPE_MAX_HALF && 2 * half <= hd);
    rope_job j = {x, pos, n_heads, rope, NULL, false};
    j.table = rope_table_for(c, rope, half, pos, n, &j.fill);
    if ((int64_t)n * n_heads * hd < ROPE_POOL_VALUES) {
        for (int t = 0; t < n; t++) rope_task(&j, t, 0);
        return;
    }
    mx_pool_run(c->pool, n, rope_task, &j);
}
