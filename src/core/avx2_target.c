// SPDX-License-Identifier: MIT
// The runtime check of the AVX2 code paths (see avx2_target.h).
#include "core/avx2_target.h"

#include "core/cpu_features.h"

int mx_cpu_has_avx2(void) {
#if defined(__x86_64__)
    static int have = -1;
    if (have < 0) {
        __builtin_cpu_init();
        have = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && mx_cpu_has_f16c();
    }
    return have;
#else
    return 0;
#endif
}
