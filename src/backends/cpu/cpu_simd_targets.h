// SPDX-License-Identifier: MIT
// The target attributes of the x86 CPU kernel sets, in one place so that every file of a set asks
// the compiler for the same instructions. Private to src/backends/cpu/. A function marked with one
// of these may only be called after the set's runtime check (cpu_kernels_x86.c, cpu_kernels_vnni.c,
// cpu_kernels_amx.c) has found those instructions on this CPU. The _INLINE forms are for helpers
// that must be inlined into their callers (an always_inline helper compiles only into a caller whose
// target includes the helper's). The VNNI and AMX targets include the AVX-512 one, which includes AVX2
// (core/avx2_target.h, whose spelling core's own AVX2 loops share).
#ifndef MX_BACKENDS_CPU_SIMD_TARGETS_H
#define MX_BACKENDS_CPU_SIMD_TARGETS_H

#include "core/avx2_target.h"

#if defined(__x86_64__)

#define CPU_TARGET_AVX2_ISA MX_TARGET_AVX2_ISA
#define CPU_TARGET_AVX512_ISA "avx512f,avx512bw,avx512dq,avx512vl," CPU_TARGET_AVX2_ISA
#define CPU_TARGET_VNNI_ISA "avx512f,avx512bw,avx512dq,avx512vl,avx512vnni," CPU_TARGET_AVX2_ISA
#define CPU_TARGET_AMX_ISA CPU_TARGET_AVX512_ISA ",amx-tile,amx-int8"

// AVX2 with FMA and F16C (the avx2 set).
#define CPU_TARGET_AVX2 MX_TARGET_AVX2
#define CPU_TARGET_AVX2_INLINE __attribute__((target(CPU_TARGET_AVX2_ISA), always_inline)) inline
// AVX-512 F/BW/DQ/VL (the avx512 set; also the float code of the vnni and amx sets).
#define CPU_TARGET_AVX512 __attribute__((target(CPU_TARGET_AVX512_ISA)))
#define CPU_TARGET_AVX512_INLINE __attribute__((target(CPU_TARGET_AVX512_ISA), always_inline)) inline
// AVX-512 with VNNI's integer dot products (the avx512vnni set).
#define CPU_TARGET_VNNI __attribute__((target(CPU_TARGET_VNNI_ISA)))
#define CPU_TARGET_VNNI_INLINE __attribute__((target(CPU_TARGET_VNNI_ISA), always_inline)) inline
// AVX-512 with the AMX tile unit and its int8 products (the amx set).
#define CPU_TARGET_AMX __attribute__((target(CPU_TARGET_AMX_ISA)))

#endif
#endif
