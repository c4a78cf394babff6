// SPDX-License-Identifier: MIT
// VNNI issue-rate probe: how many `vpdpbusd` (zmm) one core retires per second, which is the ceiling
// of the integer batched product (cpu_kernels_vnni_gemm.c: three activation digits, so 3 / 64
// instructions per multiply-add), and which of the product's other instructions take issue slots
// from it. Three loops on one thread, timed by the thread's CPU clock (comparable on a loaded machine):
//   register:  18 independent accumulators, register operands (the peak);
//   kernel:    the batched product's inner-loop form, one 64-byte weight load and 18 `vpdpbusd`
//              with a {1to16} broadcast of 4 activation bytes from L1;
//   mixes:     12 `vpdpbusd` plus 4 independent instructions of one other kind per iteration (the
//              group epilogue's kinds); a kind that shares the multiply pipes lowers the rate.
// Run two copies at once to check that both vCPUs are separate cores for this unit.
// Not part of the build:
//   cc -O2 -std=c11 -D_GNU_SOURCE bench/vnni_issue_probe.c -o /tmp/vnni_probe && /tmp/vnni_probe
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#if defined(__x86_64__)
#include <immintrin.h>

#define ITERS 20000000L

static double thread_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

// One `vpdpbusd` into acc: register operands, or 4 bytes at p broadcast to every lane.
#define DP_REG(acc) __asm__ volatile("vpdpbusd %1, %2, %0" : "+v"(acc) : "v"(w), "v"(x))
#define DP_MEM(acc, p) \
    __asm__ volatile("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*(const int32_t *)(const void *)(p)))
// Four independent instructions of one kind: two-source float or integer ops, a conversion, a shift.
#define TWO_SRC4(ins)                                                 \
    __asm__ volatile(ins " %1, %1, %0" : "+v"(f0) : "v"(y));        \
    __asm__ volatile(ins " %1, %1, %0" : "+v"(f1) : "v"(y));        \
    __asm__ volatile(ins " %1, %1, %0" : "+v"(f2) : "v"(y));        \
    __asm__ volatile(ins " %1, %1, %0" : "+v"(f3) : "v"(y))
#define CVT4(ins)                                                     \
    __asm__ volatile(ins " %1, %0" : "=v"(f0) : "v"(x));            \
    __asm__ volatile(ins " %1, %0" : "=v"(f1) : "v"(x));            \
    __asm__ volatile(ins " %1, %0" : "=v"(f2) : "v"(x));            \
    __asm__ volatile(ins " %1, %0" : "=v"(f3) : "v"(x))
#define SHIFT4(ins)                                                   \
    __asm__ volatile(ins " $8, %0, %0" : "+v"(f0));                 \
    __asm__ volatile(ins " $8, %0, %0" : "+v"(f1));                 \
    __asm__ volatile(ins " $8, %0, %0" : "+v"(f2));                 \
    __asm__ volatile(ins " $8, %0, %0" : "+v"(f3))

#define TARGET __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")))

static volatile int sink;

TARGET static void keep(const __m512i *a, int n, const __m512 *f) {
    __m512i s = _mm512_setzero_si512();
    for (int i = 0; i < n; i++) s = _mm512_add_epi32(s, a[i]);
    for (int i = 0; i < 4; i++) s = _mm512_add_epi32(s, _mm512_castps_si512(f[i]));
    sink += _mm512_reduce_add_epi32(s);
}

TARGET static double rate_register(void) {
    __m512i w = _mm512_set1_epi32(0x01010101), x = _mm512_set1_epi32(0x02020202), a[18];
    for (int i = 0; i < 18; i++) a[i] = _mm512_set1_epi32(i);
    __m512i a0 = a[0], a1 = a[1], a2 = a[2], a3 = a[3], a4 = a[4], a5 = a[5], a6 = a[6], a7 = a[7], a8 = a[8];
    __m512i a9 = a[9], a10 = a[10], a11 = a[11], a12 = a[12], a13 = a[13], a14 = a[14], a15 = a[15], a16 = a[16],
            a17 = a[17];
    double t0 = thread_seconds();
    for (long i = 0; i < ITERS / 2; i++) {
        DP_REG(a0); DP_REG(a1); DP_REG(a2); DP_REG(a3); DP_REG(a4); DP_REG(a5); DP_REG(a6); DP_REG(a7); DP_REG(a8);
        DP_REG(a9); DP_REG(a10); DP_REG(a11); DP_REG(a12); DP_REG(a13); DP_REG(a14); DP_REG(a15); DP_REG(a16); DP_REG(a17);
    }
    double t = thread_seconds() - t0;
    __m512i out[18] = {a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17};
    __m512 f[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
    keep(out, 18, f);
    return (double)(ITERS / 2) * 18 / t / 1e9;
}

TARGET static double rate_kernel_form(void) {
    static int32_t buf[64 * 16 + 4096] __attribute__((aligned(64)));  // activations, then weights
    for (int i = 0; i < (int)(sizeof buf / sizeof buf[0]); i++) buf[i] = (int32_t)((uint32_t)i * 0x01010101u);
    __m512i a[18];
    for (int i = 0; i < 18; i++) a[i] = _mm512_set1_epi32(i);
    __m512i a0 = a[0], a1 = a[1], a2 = a[2], a3 = a[3], a4 = a[4], a5 = a[5], a6 = a[6], a7 = a[7], a8 = a[8];
    __m512i a9 = a[9], a10 = a[10], a11 = a[11], a12 = a[12], a13 = a[13], a14 = a[14], a15 = a[15], a16 = a[16],
            a17 = a[17];
    double t0 = thread_seconds();
    for (long i = 0; i < ITERS / 2; i++) {
        const char *xp = (const char *)buf + (i & 15) * 4;                   // 6 tokens x 3 digits, 64 bytes apart
        __m512i w = _mm512_load_si512((const char *)buf + 4096 + (i & 63) * 64);  // one weight vector
        DP_MEM(a0, xp); DP_MEM(a1, xp + 64); DP_MEM(a2, xp + 128); DP_MEM(a3, xp + 192); DP_MEM(a4, xp + 256);
        DP_MEM(a5, xp + 320); DP_MEM(a6, xp + 384); DP_MEM(a7, xp + 448); DP_MEM(a8, xp + 512);
        DP_MEM(a9, xp + 576); DP_MEM(a10, xp + 640); DP_MEM(a11, xp + 704); DP_MEM(a12, xp + 768);
        DP_MEM(a13, xp + 832); DP_MEM(a14, xp + 896); DP_MEM(a15, xp + 960); DP_MEM(a16, xp + 1024);
        DP_MEM(a17, xp + 1088);
    }
    double t = thread_seconds() - t0;
    __m512i out[18] = {a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17};
    __m512 f[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
    keep(out, 18, f);
    return (double)(ITERS / 2) * 18 / t / 1e9;
}

// 12 `vpdpbusd` and 4 instructions of one kind (EXTRA) per iteration; the `vpdpbusd` rate. One
// function per kind, every value a named variable, so that all stay in registers.
#define RATE_MIXED(name, EXTRA)                                                                         \
    TARGET static double name(void) {                                                                   \
        __m512i w = _mm512_set1_epi32(0x01010101), x = _mm512_set1_epi32(0x02020202);                   \
        __m512 y = _mm512_set1_ps(1.0f), f0 = y, f1 = y, f2 = y, f3 = y;                                \
        __m512i a0 = x, a1 = x, a2 = x, a3 = x, a4 = x, a5 = x, a6 = x, a7 = x, a8 = x, a9 = x, a10 = x, \
                a11 = x;                                                                                \
        double t0 = thread_seconds();                                                                   \
        for (long i = 0; i < ITERS; i++) {                                                              \
            DP_REG(a0); DP_REG(a1); DP_REG(a2); DP_REG(a3); DP_REG(a4); DP_REG(a5);                     \
            DP_REG(a6); DP_REG(a7); DP_REG(a8); DP_REG(a9); DP_REG(a10); DP_REG(a11);                   \
            EXTRA;                                                                                      \
        }                                                                                               \
        double t = thread_seconds() - t0;                                                               \
        __m512i out[12] = {a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11};                           \
        __m512 f[4] = {f0, f1, f2, f3};                                                                 \
        keep(out, 12, f);                                                                               \
        return (double)ITERS * 12 / t / 1e9;                                                            \
    }
RATE_MIXED(rate_none, (void)y)
RATE_MIXED(rate_fma, TWO_SRC4("vfmadd231ps"))
RATE_MIXED(rate_mul, TWO_SRC4("vmulps"))
RATE_MIXED(rate_add, TWO_SRC4("vaddps"))
RATE_MIXED(rate_scalef, TWO_SRC4("vscalefps"))
RATE_MIXED(rate_cvt, CVT4("vcvtdq2ps"))
RATE_MIXED(rate_shift, SHIFT4("vpslld"))
RATE_MIXED(rate_iadd, TWO_SRC4("vpaddd"))

int main(void) {
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512vnni")) {
        fprintf(stderr, "vnni_issue_probe: this CPU has no AVX-512 VNNI\n");
        return 1;
    }
    printf("vpdpbusd zmm, G per CPU-second of one thread\n");
    printf("  register operands, 18 accumulators: %.3f\n", rate_register());
    printf("  kernel form (64-byte load + 18 with 4-byte broadcasts): %.3f\n", rate_kernel_form());
    static const char *kinds[] = {"none", "vfmadd231ps", "vmulps", "vaddps", "vscalefps", "vcvtdq2ps", "vpslld",
                                  "vpaddd"};
    double (*const rates[])(void) = {rate_none, rate_fma, rate_mul, rate_add, rate_scalef, rate_cvt, rate_shift,
                                     rate_iadd};
    for (int k = 0; k < 8; k++) printf("  12 + 4 x %-12s %.3f\n", kinds[k], rates[k]());
    return 0;
}

#else
int main(void) {
    fprintf(stderr, "vnni_issue_probe: x86-64 only\n");
    return 1;
}
#endif
