// SPDX-License-Identifier: MIT
// Kernel lab: times the CPU kernels of cpu_kernels.h on one thread, on random affine 4-bit weights
// (group 64, bf16 scales), for the shapes that matter in Qwen3-0.6B. Not part of the build:
//   cc -O2 -std=c11 -D_GNU_SOURCE -Isrc bench/kernel_lab.c build/cpu/libmlxcel_lib.a -lm -lpthread
//   ./a.out ROWS COLS TOKENS [KERNEL_SET]
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/cpu/cpu_kernels.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    int64_t rows = argc > 1 ? atoll(argv[1]) : 3072, cols = argc > 2 ? atoll(argv[2]) : 1024;
    int n = argc > 3 ? atoi(argv[3]) : 64;
    const char *set = argc > 4 ? argv[4] : NULL;
    if (set && cpu_kernels_select(set) != 0) return 1;
    int gs = 64;
    uint8_t *data = malloc(rows * cols / 2);
    uint16_t *sc = malloc(rows * cols / gs * 2), *bi = malloc(rows * cols / gs * 2);
    for (int64_t i = 0; i < rows * cols / 2; i++) data[i] = (uint8_t)(i * 2654435761u >> 13);
    for (int64_t i = 0; i < rows * cols / gs; i++) sc[i] = 0x3c00 + (i & 63), bi[i] = 0xbd00 + (i & 31);
    mx_matrix w = {.q = {MX_QUANT_AFFINE, 4, gs}, .dtype = MX_DTYPE_U32, .scale_dtype = MX_DTYPE_BF16,
                   .n_experts = 1, .rows = rows, .cols = cols, .data = data, .scales = sc, .biases = bi};
    float *x = malloc(sizeof(float) * cols * n), *out = malloc(sizeof(float) * rows * n);
    float *scratch = aligned_alloc(64, sizeof(float) * (cols * 4 + 1024));
    for (int64_t i = 0; i < cols * n; i++) x[i] = (float)((i * 7919) % 101) / 50.0f - 1.0f;
    printf("kernels %s, %lld x %lld affine4 g64\n", cpu_kernels_name(), (long long)rows, (long long)cols);
    double best = 1e9;
    for (int rep = 0; rep < 20; rep++) {
        double t0 = now();
        cpu_kernels_gemv(&w, 0, rows, x, out, scratch);
        double t = now() - t0;
        best = t < best ? t : best;
    }
    printf("gemv: %.3f ms, %.1f GB/s of weights, %.1f GMAC/s\n", best * 1e3, rows * cols * 0.5625 / best / 1e9,
           rows * cols / best / 1e9);
    size_t qb = cpu_kernels_qx_row_bytes(&w, false);
    if (qb) {
        void *qx = aligned_alloc(64, (qb + 63) & ~(size_t)63);
        best = 1e9;
        for (int rep = 0; rep < 20; rep++) {
            double t0 = now();
            cpu_kernels_quantize_x(&w, x, 1, qx, false);
            cpu_kernels_gemv_q(&w, 0, rows, qx, out, false);
            double t = now() - t0;
            best = t < best ? t : best;
        }
        printf("gemv_q (integer, incl. quantizing x): %.3f ms, %.1f GB/s of weights, %.1f GMAC/s\n", best * 1e3,
               rows * cols * 0.5625 / best / 1e9, rows * cols / best / 1e9);
        free(qx);
    }
    best = 1e9;
    for (int rep = 0; rep < 5; rep++) {
        double t0 = now();
        for (int64_t r = 0; r < rows; r += 4) cpu_kernels_gemm(&w, r, 4, x, n, out + r, rows, scratch);
        double t = now() - t0;
        best = t < best ? t : best;
    }
    printf("gemm n=%d: %.3f ms, %.1f GMAC/s\n", n, best * 1e3, (double)rows * cols * n / best / 1e9);
    // Integer batches (AMX or VNNI sets): prepare x, then token chunks of ~1 MB of prepared x, each
    // swept by every block of 16 rows, as the backend splits them (cpu_matmul.c).
    // The set's plain integer batch, else its bit-equal one (the avx2 set has only that).
    bool eq = cpu_kernels_qx_tiles_bytes(&w, n, false) == 0;
    size_t qtb = cpu_kernels_qx_tiles_bytes(&w, n, eq);
    if (qtb) {
        int tiles = (n + 15) / 16;
        size_t tile_bytes = qtb / (size_t)tiles;
        int chunk = (int)((1 << 20) / tile_bytes);
        chunk = chunk < 1 ? 1 : chunk;
        void *qx = aligned_alloc(64, (qtb + 63) & ~(size_t)63);
        void *scr = aligned_alloc(64, (cpu_kernels_gemm_q_scratch_bytes(&w) + 63) & ~(size_t)63);
        double bq = 1e9, bg = 1e9;
        for (int rep = 0; rep < 5; rep++) {
            double t0 = now();
            for (int t = 0; t < tiles; t++) cpu_kernels_quantize_x_tiles(&w, x, n, t, qx);
            double t1 = now();
            for (int c0 = 0; c0 < tiles; c0 += chunk) {
                int nt = n - c0 * 16 < chunk * 16 ? n - c0 * 16 : chunk * 16;
                for (int64_t r = 0; r < rows; r += 16)
                    cpu_kernels_gemm_q(&w, r, rows - r < 16 ? (int)(rows - r) : 16, (uint8_t *)qx + c0 * tile_bytes, nt,
                                       out + (int64_t)c0 * 16 * rows, rows, scr, eq);
            }
            double t2 = now();
            bq = t1 - t0 < bq ? t1 - t0 : bq;
            bg = t2 - t1 < bg ? t2 - t1 : bg;
        }
        printf("gemm_q n=%d (integer batch): quantize %.3f ms, products %.3f ms, %.1f GMAC/s\n", n, bq * 1e3,
               bg * 1e3, (double)rows * cols * n / bg / 1e9);
        free(qx), free(scr);
    }
    return 0;
}
