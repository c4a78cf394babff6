// SPDX-License-Identifier: MIT
// Host versions of vendor/cuda/wgmma.cuh for the emulation (kv_emulation/emu.h with emu_pipe.h; this
// file defines that header's guard and __CUDA_ARCH_FEAT_SM90_ALL, so the sm_90a body of
// vendor/cuda/matmul_wgmma.cu is what runs), plus the few runtime calls of that file's probe.
//
// The wgmma here (A from registers, B from shared memory) is written from the PTX ISA's rules, not
// from the kernel's layout function (mxg_wg_offset) or its dequantization, so the two are checked
// against each other. A: the four registers of every lane of the warp are gathered at issue; row r
// (of the warp's 16), k of the 64 x 16 operand is register r / 8 + 2 (k / 8) of lane 4 (r % 8) +
// (k % 8) / 2, half k % 2 ("Matrix fragments for wgmma .m64nNk16", A: mma.sync m16n8k16's A per
// warp, warp w % 4 of the warpgroup holding rows 16 w..). B: a descriptor's start address, leading
// and stride byte offsets are decoded from its bit fields (bits 0-13, 16-29, 32-45, each >> 4; a
// swizzle mode or base offset other than 0 is refused), element (token c, k) of the K-major
// no-swizzle operand read at start + (c / 8) SBO + (k / 8) LBO + 16 (c % 8) + 2 (k % 8) ("Shared
// Memory Matrix Layout"). Accumulator i of a thread is row g + 8 ((i / 2) % 2) of its warp's 16,
// column 8 (i / 4) + 2 t + i % 2 (D), so every thread computes its own outputs after the gather.
// Products are exact, sums in float32 in k order.
//
// Asynchrony: a wgmma reads B when issued and again when the thread's wait_group retires its group
// (the latest moment the device may read it); the two must agree (else "operands changed while in
// flight": the kernel overwrote a ring stage its products still read). Each thread's own A
// registers are kept at issue and compared at the retiring wait (else "A registers changed while
// in flight": the kernel wrote a fragment set its products still read); only then is the result
// added to the accumulators. A wgmma issued without a wgmma.fence since the thread's previous wait
// is refused too (the PTX ISA requires the fence before the first wgmma.mma_async that follows
// register accesses to the accumulators or the A fragments).
#pragma once
#include "emu_pipe.h"

#include <cstdio>
#include <cstdlib>
#include <deque>
#include <map>
#include <tuple>
#include <vector>

#define MXG_WGMMA_CUH
#define __CUDA_ARCH_FEAT_SM90_ALL 1

inline uint32_t mxg_smem_u32(const void *p) { return (uint32_t)((const unsigned char *)p - emu_smem()); }

#include "backends/gpu/vendor/cuda/wgmma_layout.cuh"  // the kernel's own layout and descriptor

struct emu_wgmma_op {
    float *d; int nacc; uint64_t db; const uint32_t *areg; uint32_t amine[4], aall[32 * 4]; float prod[64];
};
struct emu_wgmma_state { bool fenced = false; std::vector<emu_wgmma_op> open; std::deque<std::vector<emu_wgmma_op>> committed; };
inline std::map<std::tuple<unsigned, unsigned, unsigned, unsigned>, emu_wgmma_state> &emu_wgmma_states() {
    static std::map<std::tuple<unsigned, unsigned, unsigned, unsigned>, emu_wgmma_state> m;
    return m;
}
inline emu_wgmma_state &emu_my_wgmma() { return emu_wgmma_states()[{blockIdx.x, blockIdx.y, blockIdx.z, threadIdx.x}]; }
inline long emu_wgmma_count = 0;  // wgmma.mma_async issued (all threads)

// The shared-memory byte of element (c, k) of a K-major no-swizzle bf16 operand by its descriptor
// (PTX ISA rules above).
inline uint32_t emu_wgmma_addr(uint64_t desc, int c, int k) {
    if ((desc >> 62) != 0 || ((desc >> 49) & 7) != 0) { fprintf(stderr, "emu wgmma: swizzle or base offset not 0\n"); abort(); }
    const uint32_t start = (uint32_t)(desc & 0x3fff) << 4, lbo = (uint32_t)((desc >> 16) & 0x3fff) << 4,
                   sbo = (uint32_t)((desc >> 32) & 0x3fff) << 4;
    return start + (uint32_t)(c / 8) * sbo + (uint32_t)(k / 8) * lbo + (uint32_t)(c % 8) * 16 + (uint32_t)(k % 8) * 2;
}
inline float emu_wgmma_elem(uint64_t desc, int c, int k) {
    const uint32_t at = emu_wgmma_addr(desc, c, k);
    if (at + 2 > emu_smem_max) { fprintf(stderr, "emu wgmma: operand byte %u outside shared memory\n", at); abort(); }
    uint16_t h;
    memcpy(&h, emu_smem() + at, 2);
    return __uint_as_float((uint32_t)h << 16);
}

// This thread's nacc outputs of A (64 x 16: the warp's gathered registers aall) * B (16 x 2 nacc, db),
// each a float32 sum in k order.
inline void emu_wgmma_product(const uint32_t *aall, uint64_t db, int nacc, float *p) {
    const int lane = (int)(threadIdx.x % 32), g = lane / 4, t = lane % 4;
    auto A = [&](int r, int k) {
        const uint32_t reg = aall[((r % 8) * 4 + (k % 8) / 2) * 4 + r / 8 + 2 * (k / 8)];
        return __uint_as_float(k % 2 ? reg & 0xffff0000u : reg << 16);
    };
    for (int i = 0; i < nacc; i++) {
        const int r = g + 8 * ((i / 2) % 2), c = 8 * (i / 4) + 2 * t + i % 2;
        float s = 0.0f;
        for (int k = 0; k < 16; k++) s += A(r, k) * emu_wgmma_elem(db, c, k);
        p[i] = s;
    }
}

template <int R>
inline void emu_wgmma_rs(float (&d)[R], const uint32_t (&a)[4], uint64_t db) {
    emu_wgmma_state &s = emu_my_wgmma();
    if (!s.fenced) { fprintf(stderr, "emu wgmma: wgmma.mma_async without a wgmma.fence after the last wait\n"); abort(); }
    emu_wgmma_op op;
    op.d = d, op.nacc = R, op.db = db, op.areg = a;
    memcpy(op.amine, a, sizeof op.amine);
    emu_warp_gather(a, 4, op.aall, 32);
    emu_wgmma_product(op.aall, db, R, op.prod);
    s.open.push_back(op);
    emu_wgmma_count++;
}
inline void mxg_wgmma_m64n128k16_rs_bf16(float (&d)[64], const uint32_t (&a)[4], uint64_t db) { emu_wgmma_rs(d, a, db); }
inline void mxg_wgmma_m64n64k16_rs_bf16(float (&d)[32], const uint32_t (&a)[4], uint64_t db) { emu_wgmma_rs(d, a, db); }

inline void mxg_wgmma_fence() { emu_my_wgmma().fenced = true; }
inline void mxg_fence_proxy_async() {}
template <int R> inline void mxg_wgmma_touch(float (&)[R]) {}
template <int R> inline void mxg_wgmma_touch(uint32_t (&)[R]) {}
inline void mxg_wgmma_commit() {
    emu_wgmma_state &s = emu_my_wgmma();
    s.committed.push_back(std::move(s.open));
    s.open.clear();
}
template <int N>
inline void mxg_wgmma_wait() {
    emu_wgmma_state &s = emu_my_wgmma();
    while (s.committed.size() > (size_t)N) {
        for (emu_wgmma_op &op : s.committed.front()) {
            if (memcmp(op.areg, op.amine, sizeof op.amine) != 0) {
                fprintf(stderr, "emu wgmma: A registers changed while in flight (block %u,%u thread %u)\n", blockIdx.x,
                        blockIdx.y, threadIdx.x);
                abort();
            }
            float now[64];
            emu_wgmma_product(op.aall, op.db, op.nacc, now);
            if (memcmp(now, op.prod, sizeof(float) * op.nacc) != 0) {
                fprintf(stderr, "emu wgmma: operands changed while in flight (block %u,%u thread %u)\n", blockIdx.x,
                        blockIdx.y, threadIdx.x);
                abort();
            }
            for (int i = 0; i < op.nacc; i++) op.d[i] += now[i];
        }
        s.committed.pop_front();
    }
    s.fenced = false;
}

// The runtime calls of mxg_wgmma_probe: host memory, copies at once.
typedef void *cudaStream_t;
typedef int cudaError_t;
constexpr int cudaSuccess = 0, cudaMemcpyDeviceToHost = 2;
inline cudaError_t cudaMalloc(void **p, size_t n) { *p = malloc(n); return *p ? cudaSuccess : 2; }
inline cudaError_t cudaFree(void *p) { free(p); return cudaSuccess; }
inline cudaError_t cudaGetLastError() { return cudaSuccess; }
inline cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, int, cudaStream_t) { memcpy(d, s, n); return cudaSuccess; }
inline cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
