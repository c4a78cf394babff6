// SPDX-License-Identifier: MIT
// Host versions of vendor/cuda/cp_async.cuh for the emulation (kv_emulation/emu.h; this file defines
// that header's guard), so vendor/cuda/matmul_pipe.cu runs unchanged on the host. A cp.async does
// not land when issued: its bytes are read from global memory then (the kernels' inputs do not
// change during a launch) but written to shared memory only when the issuing thread's
// cp.async.wait_group retires its group, as late as the instruction allows; so a stage read before
// its wait and barrier, or a copy into a stage that another warp still reads, gives stale or
// overwritten data and wrong results, as it could on the device. Packed bf16 arithmetic is done in
// double and rounded once to bf16 (nearest even), as fma.rn.bf16x2 and cvt.rn.bf16x2.f32 do.
#pragma once
#include "emu.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <deque>
#include <map>
#include <tuple>

#define MXG_CP_ASYNC_CUH

struct emu_copy { void *dst; unsigned char bytes[16]; int size; };
struct emu_copy_groups { std::vector<emu_copy> open; std::deque<std::vector<emu_copy>> committed; long issued = 0; };
// Per thread (block x, y, z, thread x); cleared by the test before each launch pair.
inline std::map<std::tuple<unsigned, unsigned, unsigned, unsigned>, emu_copy_groups> &emu_copies() {
    static std::map<std::tuple<unsigned, unsigned, unsigned, unsigned>, emu_copy_groups> m;
    return m;
}
inline emu_copy_groups &emu_my_copies() { return emu_copies()[{blockIdx.x, blockIdx.y, blockIdx.z, threadIdx.x}]; }

// While on, a record of every cp.async: its block, warp, the issuing thread's count of copies before
// it (the same in every lane of a warp for kernels whose copies do not diverge: it names the warp
// instruction), lane, global address and size; emu_cp_sectors counts the sectors from it.
struct emu_cp_record { unsigned bx, by, bz, warp; long seq; int lane, size; uintptr_t g; };
struct emu_cp_log { bool on = false; std::vector<emu_cp_record> recs; };
inline emu_cp_log &emu_cp_async_log() {
    static emu_cp_log l;
    return l;
}

inline void emu_cp_async(void *smem, const void *gmem, int size) {
    emu_copy c;
    c.dst = smem, c.size = size;
    memcpy(c.bytes, gmem, (size_t)size);
    emu_copy_groups &g = emu_my_copies();
    if (emu_cp_async_log().on)
        emu_cp_async_log().recs.push_back({blockIdx.x, blockIdx.y, blockIdx.z, threadIdx.x / 32, g.issued, (int)(threadIdx.x % 32),
                                           size, (uintptr_t)gmem});
    g.issued++;
    g.open.push_back(c);
}

// The 32-byte global sectors of each warp-wide cp.async in `recs`, counted as the memory pipeline
// requests them: per quarter warp (8 lanes) for 16-byte copies, per half warp for 8 bytes, per warp
// for 4 bytes (the count that reproduces Nsight Compute's sector totals for the wgmma prefill
// product exactly, bench/RESULTS.md); ideal: the instruction's bytes / 32, rounded up. Calls
// f(a record of the instruction, its sectors, its ideal sectors) once per warp instruction.
template <class F>
inline void emu_cp_sectors(std::vector<emu_cp_record> recs, F f) {
    auto key = [](const emu_cp_record &r) { return std::make_tuple(r.bx, r.by, r.bz, r.warp, r.seq); };
    std::sort(recs.begin(), recs.end(), [&](const emu_cp_record &a, const emu_cp_record &b) {
        return std::make_tuple(key(a), a.lane) < std::make_tuple(key(b), b.lane);
    });
    for (size_t i = 0; i < recs.size();) {
        size_t j = i;
        std::vector<std::pair<int, uintptr_t>> sectors;  // (phase, sector)
        long bytes = 0;
        for (; j < recs.size() && key(recs[j]) == key(recs[i]); j++) {
            const int phase = recs[j].lane / (recs[j].size >= 16 ? 8 : recs[j].size == 8 ? 16 : 32);
            for (uintptr_t a = recs[j].g / 32; a <= (recs[j].g + recs[j].size - 1) / 32; a++) sectors.push_back({phase, a});
            bytes += recs[j].size;
        }
        std::sort(sectors.begin(), sectors.end());
        const long n = (long)(std::unique(sectors.begin(), sectors.end()) - sectors.begin());
        f(recs[i], n, (bytes + 31) / 32);
        i = j;
    }
}
inline void mxg_cp_async16(void *smem, const void *gmem) {
    if (((uintptr_t)smem | (uintptr_t)gmem) & 15) { fprintf(stderr, "cp.async 16: unaligned address\n"); abort(); }
    emu_cp_async(smem, gmem, 16);
}
inline void mxg_cp_async4(void *smem, const void *gmem) {
    if (((uintptr_t)smem | (uintptr_t)gmem) & 3) { fprintf(stderr, "cp.async 4: unaligned address\n"); abort(); }
    emu_cp_async(smem, gmem, 4);
}
inline void mxg_cp_async_commit() {
    emu_copy_groups &g = emu_my_copies();
    g.committed.push_back(std::move(g.open));
    g.open.clear();
}
template <int N>
inline void mxg_cp_async_wait() {
    emu_copy_groups &g = emu_my_copies();
    while (g.committed.size() > (size_t)N) {
        for (const emu_copy &c : g.committed.front()) memcpy(c.dst, c.bytes, (size_t)c.size);
        g.committed.pop_front();
    }
}

// v rounded to bf16 (nearest even; finite, normal-range v), as the bf16 bits.
inline uint16_t emu_bf16_rn(double v) {
    if (v == 0.0) return std::signbit(v) ? 0x8000 : 0;
    int e;
    (void)frexp(v, &e);                       // |v| in [2^(e-1), 2^e)
    const double r = nearbyint(ldexp(v, 8 - e));  // 8 significant bits, ties to even
    const float f = (float)ldexp(r, e - 8);   // exact
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)(u >> 16);
}
inline double emu_bf16_val(uint32_t reg, int half) { return (double)__uint_as_float(half ? reg & 0xffff0000u : reg << 16); }

inline uint32_t mxg_bf16x2_fma(uint32_t a, uint32_t b, uint32_t c) {
    uint32_t d = 0;
    for (int h = 0; h < 2; h++)  // a * b is exact in double (8 x 8 bits); the sum too for the values used
        d |= (uint32_t)emu_bf16_rn(emu_bf16_val(a, h) * emu_bf16_val(b, h) + emu_bf16_val(c, h)) << (16 * h);
    return d;
}
inline uint32_t mxg_pack_bf16x2(float lo, float hi) { return emu_bf16_rn(lo) | ((uint32_t)emu_bf16_rn(hi) << 16); }

// The limit is one for all kernels here (the device's is per kernel), capped at sm_90's 227 KB.
template <class K>
inline void mxg_allow_smem(K *, size_t bytes) {
    if (bytes > 227 * 1024) { fprintf(stderr, "emu: %zu bytes of shared memory > 227 KB\n", bytes); abort(); }
    if (bytes > emu_smem_max) emu_smem_max = bytes;
}
