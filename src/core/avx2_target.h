// SPDX-License-Identifier: MIT
// The x86 AVX2 code paths' target attribute (AVX2 with FMA and F16C) and their runtime check, in one
// place for core's vector loops (logsumexp.c) and the CPU backend's kernel sets
// (backends/cpu/cpu_simd_targets.h builds its AVX-512, VNNI and AMX targets on this string). A
// function marked with MX_TARGET_AVX2 may only be called after mx_cpu_has_avx2() returned true.
#ifndef MX_CORE_AVX2_TARGET_H
#define MX_CORE_AVX2_TARGET_H

#if defined(__x86_64__)

#define MX_TARGET_AVX2_ISA "avx2,fma,f16c"
#define MX_TARGET_AVX2 __attribute__((target(MX_TARGET_AVX2_ISA)))

#endif

// Nonzero when this CPU has AVX2, FMA and F16C (the target above; asked once, then remembered); 0 off x86-64.
int mx_cpu_has_avx2(void);

#endif
