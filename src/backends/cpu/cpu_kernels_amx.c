// SPDX-License-Identifier: MIT
// Batched products (prefill) of affine 4/8-bit weights, group 64 or 128, on the AMX tile unit
// (TDPBUSD: 16 x 16 int32 += 16 x 64 unsigned bytes . 64 x 16 signed bytes, 16K multiply-adds per
// instruction).
//
// Precision. Weight codes are exact small integers. Each activation x is split per (token, group of
// 64 columns) into three signed bytes: with s = max|x| / 127,
//   x = s * (q0 + q1 / 254 + q2 / 254^2) + e,   |q_i| <= 127,   |e| <= s / (2 * 254^2) ~ 6e-8 max|x|,
// i.e. float32-level accuracy (one byte alone, or two, measured too coarse for the 1e-3 logit parity
// bound). The three parts go through three tile products; per group the int32 sums are converted,
// combined and scaled by w_scale * s, and the affine bias enters as w_bias * (exact float sum of x
// over the group), as in the integer gemv.
//
// Layouts. Prepared activations (cpu_amx_quantize_x_tiles), per tile of 16 tokens and per 64-column
// block: three 1 KB B tiles (row k4 holds, for each of the 16 tokens, the 4 bytes of columns
// 4k4..4k4+3), then 16 floats of s per token and 16 floats of the group sum (written for the block
// that starts each group). For 4-bit weights the 64 columns of a block are taken in the order of
// the packed bytes' nibbles (the 32 even columns, then the 32 odd ones), so one row of weights
// unpacks into a 64-byte A row with an AND and a shift. A task (cpu_amx_gemm_q) takes up to 16
// weight rows: it unpacks their codes and converts their scales and biases once into scratch, then
// sweeps all token tiles; per (token tile, block) it runs 3 tile products and a 16-row epilogue.
#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#include "backends/cpu/cpu_kernels_table.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "backends/cpu/cpu_int8_activations.h"
#include "backends/cpu/cpu_simd_targets.h"
#include "backends/cpu/cpu_simd_transpose.h"

#define TILE_BYTES 1024
#define BLOCK_BYTES (3 * TILE_BYTES + 2 * 64)  // one (token tile, 64-column block) of prepared x
#define Q_STEP CPU_INT8_Q_STEP

// The tile instructions come as asm macros that do not tell the compiler which memory they read;
// this barrier keeps ordinary stores to the tile buffers ahead of them.
#define COMPILER_BARRIER() __asm__ volatile("" ::: "memory")

typedef struct tile_config {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config;

size_t cpu_amx_qx_tiles_bytes(const mx_matrix *w, int n) {
    if (!cpu_int8_format_ok(w) || n < 1) return 0;
    size_t tiles = (size_t)(n + 15) / 16, blocks = (size_t)w->cols / 64;
    return tiles * blocks * BLOCK_BYTES;
}

// Splits 64 values (already divided by s; in A-row order) into three byte parts: part i's 64 bytes
// at rows + i * 1024 (one token's row of a part; the rows of 16 tokens are transposed into B tiles
// afterwards).
CPU_TARGET_AVX512_INLINE static void split_row(__m512 a, __m512 b, __m512 c, __m512 d, uint8_t *rows) {
    __m512 v[4] = {a, b, c, d};
    for (int i = 0; i < 4; i++) cpu_int8_split3(v[i], rows + 16 * i, TILE_BYTES);
}

// Per group, the 16 tokens' scales and sums; per 64-column block, each token's three part rows go
// to a 3 KB staging area, and each part's 16 rows are transposed (16 x 16 dwords) into its B tile:
// row k4 of a B tile = dword k4 of every token. (Writing each token's dwords straight into the
// tiles' columns took a 16-lane scatter per part and token: 6.8% of a pp512's CPU samples.)
CPU_TARGET_AMX void cpu_amx_quantize_x_tiles(const mx_matrix *w, const float *x, int n, int tile, void *qx) {
    int64_t cols = w->cols, blocks = cols / 64;
    int gs = w->q.group_size;
    bool perm4 = w->q.bits == 4;
    uint8_t *base = (uint8_t *)qx + (size_t)tile * blocks * BLOCK_BYTES;
    _Alignas(64) uint8_t rows[3 * TILE_BYTES];  // [part][token][64 bytes]
    for (int64_t g0 = 0; g0 < cols; g0 += gs) {
        float amax[16], sum[16];
        for (int t = 0; t < 16; t++) {
            int tok = tile * 16 + t;
            amax[t] = sum[t] = 0.0f;
            if (tok < n) cpu_int8_group_stats(x + (int64_t)tok * cols + g0, gs, &amax[t], &sum[t]);
        }
        for (int64_t k0 = g0; k0 < g0 + gs; k0 += 64) {
            uint8_t *blk = base + (size_t)(k0 / 64) * BLOCK_BYTES;
            float *sx = (float *)(blk + 3 * TILE_BYTES), *gsum = sx + 16;
            for (int t = 0; t < 16; t++) {
                int tok = tile * 16 + t;
                sx[t] = amax[t] / 127.0f;
                gsum[t] = k0 == g0 ? sum[t] : 0.0f;  // the group's sum enters once, at its first block
                __m512 a = _mm512_setzero_ps(), b = a, c = a, d = a;
                if (tok < n) {
                    const float *xr = x + (int64_t)tok * cols + k0;
                    __m512 inv = _mm512_set1_ps(amax[t] > 0.0f ? 127.0f / amax[t] : 0.0f);
                    a = _mm512_mul_ps(_mm512_loadu_ps(xr), inv);
                    b = _mm512_mul_ps(_mm512_loadu_ps(xr + 16), inv);
                    c = _mm512_mul_ps(_mm512_loadu_ps(xr + 32), inv);
                    d = _mm512_mul_ps(_mm512_loadu_ps(xr + 48), inv);
                }
                if (perm4) cpu_int8_even_odd(&a, &b, &c, &d);
                split_row(a, b, c, d, rows + t * 64);
            }
            for (int part = 0; part < 3; part++) {
                __m512i r[16];
                for (int t = 0; t < 16; t++) r[t] = _mm512_load_si512(rows + part * TILE_BYTES + t * 64);
                cpu_transpose16x16(r);
                for (int k4 = 0; k4 < 16; k4++) _mm512_storeu_si512(blk + part * TILE_BYTES + k4 * 64, r[k4]);
            }
        }
    }
}

CPU_TARGET_AMX static void amx_tiles_config(void) {
    tile_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 7; t++) {
        cfg.colsb[t] = 64;
        cfg.rows[t] = 16;
    }
    _tile_loadconfig(&cfg);
}

// Scratch layout for a task: A codes [blocks][16 rows][64 bytes], then per group 16 scales and 16
// biases (floats, by row), then 3 int32 C tiles.
size_t cpu_amx_scratch_bytes(const mx_matrix *w) {
    int64_t blocks = w->cols / 64, groups = w->cols / w->q.group_size;
    return (size_t)blocks * TILE_BYTES + (size_t)groups * 128 + 3 * TILE_BYTES + 64;
}

CPU_TARGET_AMX void cpu_amx_gemm_q(const mx_matrix *w, int64_t r0, int nr, const void *qx, int n, float *out,
                                   int64_t ldo, void *scratch) {
    int64_t cols = w->cols, blocks = cols / 64;
    int gs = w->q.group_size, bpg = gs / 64;
    int64_t groups = cols / gs, row_bytes = cols * w->q.bits / 8;
    uint8_t *A = (uint8_t *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
    float *sb = (float *)(A + (size_t)blocks * TILE_BYTES);  // [groups][16 scales, 16 biases]
    int32_t *C = (int32_t *)(sb + groups * 32);
    // Unpack the rows' codes into A rows of 64 bytes, and their scales/biases by group.
    for (int m = 0; m < 16; m++) {
        const uint8_t *src = (const uint8_t *)w->data + (r0 + m) * row_bytes;
        for (int64_t b = 0; b < blocks; b++) {
            uint8_t *dst = A + (size_t)b * TILE_BYTES + m * 64;
            if (m >= nr) {
                _mm512_storeu_si512(dst, _mm512_setzero_si512());
            } else if (w->q.bits == 4) {
                __m256i v = _mm256_loadu_si256((const __m256i *)(src + b * 32));
                __m256i lo = _mm256_and_si256(v, _mm256_set1_epi8(0x0f));
                __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), _mm256_set1_epi8(0x0f));
                _mm256_storeu_si256((__m256i *)dst, lo);
                _mm256_storeu_si256((__m256i *)(dst + 32), hi);
            } else {
                _mm512_storeu_si512(dst, _mm512_loadu_si512(src + b * 64));
            }
        }
        for (int64_t g = 0; g < groups; g++) {
            sb[g * 32 + m] = m < nr ? mx_load_float(w->scales, w->scale_dtype, (r0 + m) * groups + g) : 0.0f;
            sb[g * 32 + 16 + m] = m < nr ? mx_load_float(w->biases, w->scale_dtype, (r0 + m) * groups + g) : 0.0f;
        }
    }
    amx_tiles_config();
    COMPILER_BARRIER();
    const __m512 step1 = _mm512_set1_ps(1.0f / Q_STEP), step2 = _mm512_set1_ps(1.0f / (Q_STEP * Q_STEP));
    int tiles = (n + 15) / 16;
    for (int tt = 0; tt < tiles; tt++) {
        const uint8_t *xb = (const uint8_t *)qx + (size_t)tt * blocks * BLOCK_BYTES;
        __m512 acc[16];  // kept in registers: every loop over m below is unrolled
#pragma GCC unroll 16
        for (int m = 0; m < 16; m++) acc[m] = _mm512_setzero_ps();
        for (int64_t g = 0; g < groups; g++) {
            _tile_zero(4);
            _tile_zero(5);
            _tile_zero(6);
            for (int k = 0; k < bpg; k++) {
                int64_t b = g * bpg + k;
                const uint8_t *blk = xb + (size_t)b * BLOCK_BYTES;
                _tile_loadd(0, A + (size_t)b * TILE_BYTES, 64);
                _tile_loadd(1, blk, 64);
                _tile_loadd(2, blk + TILE_BYTES, 64);
                _tile_loadd(3, blk + 2 * TILE_BYTES, 64);
                _tile_dpbusd(4, 0, 1);
                _tile_dpbusd(5, 0, 2);
                _tile_dpbusd(6, 0, 3);
            }
            _tile_stored(4, C, 64);
            _tile_stored(5, C + 256, 64);
            _tile_stored(6, C + 512, 64);
            const uint8_t *first = xb + (size_t)g * bpg * BLOCK_BYTES;
            __m512 sx = _mm512_loadu_ps((const float *)(first + 3 * TILE_BYTES));
            __m512 gsum = _mm512_loadu_ps((const float *)(first + 3 * TILE_BYTES) + 16);
            const float *sc = sb + g * 32;
#pragma GCC unroll 16
            for (int m = 0; m < 16; m++) {
                __m512 d = _mm512_cvtepi32_ps(_mm512_load_si512(C + m * 16));
                d = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(C + 256 + m * 16)), step1, d);
                d = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(C + 512 + m * 16)), step2, d);
                acc[m] = _mm512_fmadd_ps(d, _mm512_mul_ps(sx, _mm512_set1_ps(sc[m])), acc[m]);
                acc[m] = _mm512_fmadd_ps(gsum, _mm512_set1_ps(sc[16 + m]), acc[m]);
            }
        }
        // acc[m] lane t = output (token tt*16 + t, row r0 + m).
        float tmp[16][16];
#pragma GCC unroll 16
        for (int m = 0; m < 16; m++) _mm512_storeu_ps(tmp[m], acc[m]);
        int nt = n - tt * 16 < 16 ? n - tt * 16 : 16;
        for (int t = 0; t < nt; t++)
            for (int m = 0; m < nr; m++) out[(int64_t)(tt * 16 + t) * ldo + r0 + m] = tmp[m][t];
    }
    _tile_release();
}

// AMX needs the CPU bits (AMX-TILE, AMX-INT8) and the kernel's permission for this process to
// use the 8 KB tile state (Linux 5.16+: arch_prctl ARCH_REQ_XCOMP_PERM for XTILEDATA).
int cpu_amx_supported(void) {
    static int cached = -1;
    int c = __atomic_load_n(&cached, __ATOMIC_ACQUIRE);
    if (c >= 0) return c;
    unsigned a, b, cx, d;
    int ok = __get_cpuid_count(7, 0, &a, &b, &cx, &d) && (d >> 24 & 1) && (d >> 25 & 1);
#if defined(SYS_arch_prctl)
    if (ok) ok = syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */) == 0;
#else
    ok = 0;
#endif
    __atomic_store_n(&cached, ok, __ATOMIC_RELEASE);
    return ok;
}

#endif
