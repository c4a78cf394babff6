// SPDX-License-Identifier: MIT
// A grid-wide barrier for persistent kernels (kernels/persist_mlp.cu): every block of the launch
// waits until all have arrived, and what any block wrote before it is visible to every block after
// it. Only for launches whose blocks are all resident at once (the grid sized by
// mxg_blocks_per_sm x multiprocessors, compat.h); a block that cannot start would leave the others
// waiting forever. Plain atomics and fences, so nvcc and hipcc compile it alike and the host
// emulation (tests/gpu/kv_emulation/emu.h) runs this very code, with no cooperative-groups launch.
//
// State: two words of global memory, zero before the first use (gpu_backend.c clears them when it
// allocates them): bar[0] counts the arrivals at the current barrier, bar[1] counts the barriers
// completed (the generation). Thread 0 of each block reads the generation, then arrives; the last
// to arrive sets the count back to 0 and then advances the generation, which releases the others
// (they spin on it with a pause). The count is zero again when the barrier ends, so the same words
// serve the next barrier, the next launch and a replayed graph; two launches must not use them at
// the same time (one stream per backend).
#ifndef MXG_GRID_BARRIER_CUH
#define MXG_GRID_BARRIER_CUH

#include "backends/gpu/common.cuh"

__device__ __forceinline__ void mxg_grid_sync(unsigned *bar, unsigned nblocks) {
    __syncthreads();  // the block's writes happen before its arrival
    if (threadIdx.x == 0) {
        volatile unsigned *vbar = bar;
        const unsigned gen = vbar[1];
        __threadfence();  // the generation read and the block's writes before the arrival
        if (atomicAdd(bar, 1u) == nblocks - 1) {
            atomicExch(bar, 0u);
            __threadfence();  // the count reset before the release
            atomicAdd(bar + 1, 1u);
        } else {
            while (vbar[1] == gen) mxg_spin_pause();
        }
        __threadfence();  // the other blocks' writes before this block's reads
    }
    __syncthreads();
}

#endif
