// SPDX-License-Identifier: MIT
// The CPU backend's weight arena (cpu_weight_arena.h): weights copied onto huge pages. Checked:
// MLXCEL_CPU_WEIGHTS names no mode -> the backend refuses to start, naming the variable; "mapped"
// keeps the weights where they are (no copy); the default places copies 64-byte aligned in
// 2 MB-aligned chunks advised as huge (smaps' "hg" flag) when the kernel offers huge pages, a
// copy larger than a chunk gets its own, small copies share one, a chunk is unmapped when its last
// copy is released and a foreign pointer is not released; and a 4-bit matmul through the backend
// gives the same floats, bit for bit, with the weights mapped and on huge pages.
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_weight_arena.h"
#include "backends/plan.h"
#include "check.h"
#include "core/dtype.h"
#include "test_rng.h"

static test_rng rng = {0x51ab5eedu};

static bool is_mapped(const void *p) {
    void *page = (void *)((uintptr_t)p & ~(uintptr_t)4095);
    return msync(page, 4096, MS_ASYNC) == 0 || errno != ENOMEM;
}

// The VmFlags line of the mapping that holds p carries "hg" (MADV_HUGEPAGE) or "ht" (hugetlb).
static bool advised_huge(const void *p) {
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f) return false;
    char line[512];
    bool inside = false, huge = false;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, ':') > strchr(line, ' ')) {
            inside = (uintptr_t)p >= lo && (uintptr_t)p < hi;
            continue;
        }
        if (inside && !strncmp(line, "VmFlags:", 8)) {
            huge = strstr(line, " hg") || strstr(line, " ht");
            break;
        }
    }
    fclose(f);
    return huge;
}

static void check_modes(void) {
    mx_error err = {{0}};
    setenv("MLXCEL_CPU_WEIGHTS", "fast", 1);
    CHECK(cpu_weight_arena_create(&err) == NULL);
    CHECK_MSG(strstr(err.msg, "MLXCEL_CPU_WEIGHTS") && strstr(err.msg, "fast"), "message: %s", err.msg);
    CHECK(mx_cpu_backend_create(1, &err) == NULL);
    CHECK_MSG(strstr(err.msg, "MLXCEL_CPU_WEIGHTS"), "message: %s", err.msg);

    setenv("MLXCEL_CPU_WEIGHTS", "mapped", 1);
    cpu_weight_arena *a = cpu_weight_arena_create(&err);
    CHECK(a != NULL);
    CHECK(!cpu_weight_arena_on(a));
    CHECK(cpu_weight_arena_alloc(a, 4096) == NULL);
    CHECK(!strcmp(cpu_weight_arena_kind(a), "file mapping"));
    cpu_weight_arena_free(a);

    unsetenv("MLXCEL_CPU_WEIGHTS");
    a = cpu_weight_arena_create(&err);
    CHECK(a != NULL);
    if (!cpu_weight_arena_on(a)) {
        fprintf(stderr, "note: no huge pages on this system; the arena is off (%s)\n", cpu_weight_arena_kind(a));
        CHECK(cpu_weight_arena_alloc(a, 4096) == NULL);
        cpu_weight_arena_free(a);
        return;
    }
    uint8_t *s1 = cpu_weight_arena_alloc(a, 100), *s2 = cpu_weight_arena_alloc(a, 5000);
    uint8_t *big = cpu_weight_arena_alloc(a, (size_t)300 << 20);  // more than a chunk: its own
    CHECK(s1 && s2 && big);
    if (!s1 || !s2 || !big) {
        cpu_weight_arena_free(a);
        return;
    }
    CHECK((uintptr_t)s1 % (2u << 20) == 0 && (uintptr_t)big % (2u << 20) == 0);
    CHECK(s2 == s1 + 128);  // 100 bytes rounded up to 64-byte alignment, same chunk
    CHECK(big < s1 || big >= s1 + ((size_t)256 << 20));
    memset(s1, 1, 100), memset(s2, 2, 5000), memset(big, 3, 4096);
    CHECK(advised_huge(s1) && advised_huge(big));
    int x = 0;
    CHECK(!cpu_weight_arena_release(a, &x));
    CHECK(!cpu_weight_arena_release(a, NULL));
    CHECK(cpu_weight_arena_release(a, big));
    CHECK(!is_mapped(big));  // its chunk held nothing else
    CHECK(cpu_weight_arena_release(a, s1));
    CHECK(is_mapped(s1) && s2[4999] == 2);  // s2 still lives there
    CHECK(cpu_weight_arena_release(a, s2));
    CHECK(!is_mapped(s1));
    uint8_t *again = cpu_weight_arena_alloc(a, 64);  // a fresh chunk after the last one went
    CHECK(again != NULL);
    cpu_weight_arena_free(a);
}

// y = W x through the backend for a random affine 4-bit [rows, cols] matrix, weights placed per
// MLXCEL_CPU_WEIGHTS=mode; *moved says whether the backend's copy is elsewhere than the host bytes.
static void matmul(const char *mode, const mx_matrix *host, const float *x, float *y, bool *moved) {
    mx_error err = {{0}};
    setenv("MLXCEL_CPU_WEIGHTS", mode, 1);
    mx_backend *be = mx_cpu_backend_create(2, &err);
    unsetenv("MLXCEL_CPU_WEIGHTS");
    CHECK_MSG(be != NULL, "%s", err.msg);
    if (!be) return;
    mx_matrix w;
    CHECK(be->ops->upload_matrix(be, host, &w, &err) == 0);
    *moved = w.data != host->data;
    mx_op op = {.kind = MX_OP_MATMUL, .matmul = {y, x, &w, NULL, 1}};
    CHECK(mx_run_op(be, op, &err) == 0);
    be->ops->release_matrix(be, &w);
    mx_backend_free(be);
}

static void check_matmul(void) {
    enum { ROWS = 512, COLS = 1024, GROUP = 64 };
    mx_matrix m = {.q = {.mode = MX_QUANT_AFFINE, .bits = 4, .group_size = GROUP}, .dtype = MX_DTYPE_U32,
                   .scale_dtype = MX_DTYPE_BF16, .n_experts = 1, .rows = ROWS, .cols = COLS};
    int64_t bytes = mx_matrix_data_bytes(&m), ns = ROWS * (COLS / GROUP);
    uint8_t *d = malloc((size_t)bytes);
    uint16_t *s = malloc((size_t)ns * 2), *b = malloc((size_t)ns * 2);
    for (int64_t i = 0; i < bytes; i++) d[i] = (uint8_t)test_rng_u32(&rng);
    for (int64_t i = 0; i < ns; i++)
        s[i] = mx_f32_to_bf16(test_rng_unit(&rng) * 0.05f), b[i] = mx_f32_to_bf16(test_rng_unit(&rng) * 0.2f);
    m.data = d, m.scales = s, m.biases = b;
    float x[COLS], mapped[ROWS], huge[ROWS];
    for (int i = 0; i < COLS; i++) x[i] = test_rng_unit(&rng);
    bool moved_mapped = true, moved_huge = false;
    matmul("mapped", &m, x, mapped, &moved_mapped);
    matmul("huge", &m, x, huge, &moved_huge);
    CHECK(!moved_mapped);  // malloc'ed bytes are aligned: the mapped mode keeps them
    setenv("MLXCEL_CPU_WEIGHTS", "huge", 1);
    mx_error err = {{0}};
    cpu_weight_arena *probe = cpu_weight_arena_create(&err);
    unsetenv("MLXCEL_CPU_WEIGHTS");
    if (cpu_weight_arena_on(probe)) CHECK(moved_huge);
    cpu_weight_arena_free(probe);
    CHECK_MSG(memcmp(mapped, huge, sizeof mapped) == 0, "the product differs with the weights on huge pages");
    free(d), free(s), free(b);
}

int main(void) {
    check_modes();
    check_matmul();
    return check_finish();
}
