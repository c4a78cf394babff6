// SPDX-License-Identifier: MIT
// CPUID reads of the features in cpu_features.h.
#include "core/cpu_features.h"

#if defined(__x86_64__)
#include <cpuid.h>

int mx_cpu_has_f16c(void) {
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c >> 29 & 1);  // leaf 1, ECX bit 29
}

int mx_cpu_has_avx512vnni(void) {
    unsigned a, b, c, d;
    return __get_cpuid_count(7, 0, &a, &b, &c, &d) && (c >> 11 & 1);  // leaf 7, ECX bit 11
}

#else

int mx_cpu_has_f16c(void) { return 0; }
int mx_cpu_has_avx512vnni(void) { return 0; }

#endif
