// SPDX-License-Identifier: MIT
// Attention decode lab: one decoded token's attention over a long context, on one thread, in the CPU
// backend's paged cache layout ([layer][block][K|V][kv_head][16][head_dim] codes, then the scales in
// the same order, cpu_attention.c) for each cache type, through cpu_kernels_attn_rows exactly as
// cpu_attention calls it (one call per layer and KV head with that head's GQA group of queries).
// Shape: Qwen3-0.6B (28 layers, 8 KV heads, head_dim 128, 2 query heads per KV head). Prints, per
// cache type, the best and median per-token time by the wall clock and by the thread's CPU clock
// (the latter is what a loaded machine leaves comparable), the cache bytes read per second, and a hash
// of every output's bits in the last repetition (equal hashes: bit-identical kernels).
// Not part of the build:
//   cc -O2 -std=c11 -D_GNU_SOURCE -Isrc bench/attn_decode_lab.c build/cpu/libmlxcel_lib.a -lm -lpthread
//   ./a.out [CONTEXT=2080] [REPS=15] [KERNEL_SET [TYPE: I16, I8, I4 or F32; default all four [QUERIES=2]]]
// QUERIES: query heads per KV head (2 for Qwen3-0.6B, 4 for Qwen3-8B), at most MAX_GROUP.
// MLXCEL_CPU_ATTN_I8=int: the I8 cache's integer scores (AVX-512 VNNI sets; cpu_kernels_attn_vnni.c).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/cpu/cpu_kernels.h"
#include "core/dtype.h"

#define LAYERS 28
#define HEADS 8
#define HD 128
#define MAX_GROUP 8

static double clock_s(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    int ctx = argc > 1 ? atoi(argv[1]) : 2080, reps = argc > 2 ? atoi(argv[2]) : 15;
    int group = argc > 5 ? atoi(argv[5]) : 2;
    if (ctx < 1 || reps < 1 || group < 1 || group > MAX_GROUP) {
        fprintf(stderr, "context and repetitions must be positive, queries 1..%d\n", MAX_GROUP);
        return 1;
    }
    if (argc > 3 && cpu_kernels_select(argv[3]) != 0) return 1;
    int blocks = (ctx + MX_KV_BLOCK - 1) / MX_KV_BLOCK;
    size_t rows = (size_t)LAYERS * blocks * 2 * HEADS * MX_KV_BLOCK;
    const mx_dtype types[] = {MX_DTYPE_I16, MX_DTYPE_I8, MX_DTYPE_I4, MX_DTYPE_F32};
    float *q = malloc(sizeof(float) * HEADS * group * HD), *out = malloc(sizeof(float) * HEADS * group * HD);
    float *scratch = aligned_alloc(64, sizeof(float) * CPU_ATTN_SCRATCH(HD));
    float *row = malloc(sizeof(float) * HD);
    for (int i = 0; i < HEADS * group * HD; i++) q[i] = (float)((i * 7919) % 101) / 100.0f - 0.5f;
    printf("kernels %s, context %d, %d layers x %d KV heads x %d, %d queries per KV head, one thread\n",
           cpu_kernels_name(), ctx, LAYERS, HEADS, HD, group);
    for (int t = 0; t < 4; t++) {
        mx_dtype dt = types[t];
        if (argc > 4 && strcmp(argv[4], mx_dtype_name(dt)) != 0) continue;
        int nsc = mx_kv_row_scales(dt, HD);
        size_t row_bytes = mx_kv_elem_bytes(dt, HD), code_bytes = rows * row_bytes;
        size_t scale_bytes = mx_kv_scaled(dt) ? rows * nsc * sizeof(float) : 0;
        uint8_t *kv = aligned_alloc(2 << 20, (code_bytes + scale_bytes + (2 << 20) - 1) / (2 << 20) * (2 << 20));
        float *scales = (float *)(kv + code_bytes);
        for (size_t r = 0; r < rows; r++) {  // every row through the store's own conversion
            for (int d = 0; d < HD; d++) row[d] = (float)(((r * 131 + (size_t)d * 17) % 1009)) / 500.0f - 1.0f;
            uint8_t *dst = kv + r * row_bytes;
            if (dt == MX_DTYPE_I4) cpu_kernels_kv_i4_row(dst, scales + r * nsc, row, HD);
            else if (dt == MX_DTYPE_I16) cpu_kernels_kv_i16_row((int16_t *)dst, scales + r * nsc, row, HD);
            else if (dt == MX_DTYPE_I8) cpu_kernels_kv_i8_row((int8_t *)dst, scales + r * nsc, row, HD);
            else memcpy(dst, row, sizeof(float) * HD);
        }
        double *wall = malloc(sizeof(double) * reps), *cpu = malloc(sizeof(double) * reps);
        uint64_t hash = 14695981039346656037ull;
        for (int rep = 0; rep < reps; rep++) {
            double w0 = clock_s(CLOCK_MONOTONIC), c0 = clock_s(CLOCK_THREAD_CPUTIME_ID);
            for (int l = 0; l < LAYERS; l++)
                for (int h = 0; h < HEADS; h++) {
                    size_t k0 = (((size_t)l * blocks) * 2 + 0) * HEADS + h, v0 = (((size_t)l * blocks) * 2 + 1) * HEADS + h;
                    const float *qp[MAX_GROUP];
                    float *op[MAX_GROUP];
                    int first[MAX_GROUP], last[MAX_GROUP];
                    for (int g = 0; g < group; g++) {
                        qp[g] = q + (h * group + g) * HD, op[g] = out + (h * group + g) * HD;
                        first[g] = 0, last[g] = ctx - 1;
                    }
                    int64_t block_rows = (int64_t)2 * HEADS * MX_KV_BLOCK;
                    cpu_attn_args a = {.q = qp, .out = op, .nq = group, .first = first, .last = last,
                                       .K = kv + k0 * MX_KV_BLOCK * row_bytes, .V = kv + v0 * MX_KV_BLOCK * row_bytes,
                                       .stride = HD, .kv_dtype = dt, .hd = HD, .scale = 0.088f,
                                       .block0 = 0, .block_stride = block_rows * HD};
                    if (scale_bytes) {
                        a.K_scale = scales + k0 * MX_KV_BLOCK * nsc, a.V_scale = scales + v0 * MX_KV_BLOCK * nsc;
                        a.scale_stride = nsc, a.scale_block_stride = block_rows * nsc;
                    }
                    cpu_kernels_attn_rows(&a, scratch);
                    if (rep == reps - 1)  // FNV-1a over the output bits of every call
                        for (int g = 0; g < group; g++)
                            for (int d = 0; d < HD; d++) {
                                uint32_t bits;
                                memcpy(&bits, &op[g][d], sizeof bits);
                                hash = (hash ^ bits) * 1099511628211ull;
                            }
                }
            wall[rep] = clock_s(CLOCK_MONOTONIC) - w0, cpu[rep] = clock_s(CLOCK_THREAD_CPUTIME_ID) - c0;
        }
        double read = (double)(code_bytes + scale_bytes) * ctx / ((double)blocks * MX_KV_BLOCK);
        qsort(wall, reps, sizeof *wall, cmp), qsort(cpu, reps, sizeof *cpu, cmp);
        printf("%-4s %6.1f MB per token: wall best %.2f ms median %.2f ms (%.2f GB/s); thread CPU best %.2f ms "
               "median %.2f ms (%.2f GB/s per CPU-second); out[0] %.5f, output hash %016llx\n",
               mx_dtype_name(dt), read / 1e6, wall[0] * 1e3, wall[reps / 2] * 1e3, read / wall[0] / 1e9, cpu[0] * 1e3,
               cpu[reps / 2] * 1e3, read / cpu[reps / 2] / 1e9, out[0], (unsigned long long)hash);
        free(wall), free(cpu), free(kv);
    }
    free(q), free(out), free(scratch), free(row);
    return 0;
}
