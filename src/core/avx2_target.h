// SPDX-License-Identifier: MIT
// The x86 target attribute of the AVX2 code paths (AVX2 with FMA and F16C), in one place for core's
// vector loops (logsumexp.c) and the CPU backend's kernel sets (backends/cpu/cpu_simd_targets.h
// builds its AVX-512, VNNI and AMX targets on this string). A function marked with it may only be
// called after a runtime check has found AVX2 and FMA on this CPU (__builtin_cpu_supports).
#ifndef MX_CORE_AVX2_TARGET_H
#define MX_CORE_AVX2_TARGET_H

#if defined(__x86_64__)

#define MX_TARGET_AVX2_ISA "avx2,fma,f16c"
#define MX_TARGET_AVX2 __attribute__((target(MX_TARGET_AVX2_ISA)))

#endif
#endif
