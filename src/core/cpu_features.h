// SPDX-License-Identifier: MIT
// x86 CPU features that compilers' __builtin_cpu_supports does not name everywhere (clang 14 knows
// neither "f16c" nor "avx512vnni"), read from CPUID once here for the kernel-set checks and
// `mlxcel info`. Each returns nonzero when the CPU has the feature; 0 off x86-64.
#ifndef MX_CORE_CPU_FEATURES_H
#define MX_CORE_CPU_FEATURES_H

int mx_cpu_has_f16c(void);
int mx_cpu_has_avx512vnni(void);

#endif
