// SPDX-License-Identifier: MIT
// The runtime check of the AVX2 code paths (see avx2_target.h).
#include "core/avx2_target.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

int mx_cpu_has_avx2(void) {
#if defined(__x86_64__)
    static int have = -1;
    if (have < 0) {
        __builtin_cpu_init();
        // F16C from CPUID leaf 1 (ECX bit 29): clang 14's __builtin_cpu_supports has no "f16c".
        unsigned a, b, c, d;
        int f16c = __get_cpuid(1, &a, &b, &c, &d) && (c >> 29 & 1);
        have = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
    }
    return have;
#else
    return 0;
#endif
}
