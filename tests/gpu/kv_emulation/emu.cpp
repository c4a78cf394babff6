// SPDX-License-Identifier: MIT
// The launch, barriers and shuffles of the host emulation (emu.h).
#include "emu.h"
thread_local dim3 threadIdx, blockIdx;
dim3 blockDim, gridDim;
static std::unique_ptr<std::barrier<>> block_bar;
static std::vector<std::unique_ptr<std::barrier<>>> warp_bar;
static std::vector<float> xbuf;
static std::vector<unsigned char> smem;
void __syncthreads() { block_bar->arrive_and_wait(); }
float emu_xchg(float v, int src) {
    int w = threadIdx.x / 32, l = threadIdx.x % 32;
    xbuf[w * 32 + l] = v;
    warp_bar[w]->arrive_and_wait();
    float r = xbuf[w * 32 + src];
    warp_bar[w]->arrive_and_wait();
    return r;
}
unsigned char *emu_smem() { return smem.data(); }
void emu_launch(dim3 g, dim3 b, size_t sm, std::function<void()> k) {
    if (sm > 48 * 1024) { fprintf(stderr, "emu: %zu bytes of shared memory > 48 KB\n", sm); abort(); }
    if (b.x % 32 || b.y != 1 || b.z != 1) { fprintf(stderr, "emu: block %u x %u x %u\n", b.x, b.y, b.z); abort(); }
    gridDim = g, blockDim = b;
    block_bar = std::make_unique<std::barrier<>>(b.x);
    warp_bar.clear();
    for (unsigned w = 0; w < b.x / 32; w++) warp_bar.push_back(std::make_unique<std::barrier<>>(32));
    xbuf.assign(b.x, 0.0f);
    // One thread per CUDA thread of a block, reused for every block in turn; shared memory is
    // refilled with garbage between blocks, so a read before a write shows.
    std::vector<std::thread> th;
    for (unsigned t = 0; t < b.x; t++)
        th.emplace_back([=]() {
            threadIdx = dim3(t);
            for (unsigned z = 0; z < g.z; z++)
                for (unsigned y = 0; y < g.y; y++)
                    for (unsigned x = 0; x < g.x; x++) {
                        block_bar->arrive_and_wait();
                        if (t == 0) smem.assign(sm ? sm : 1, 0xA5);
                        block_bar->arrive_and_wait();
                        blockIdx = dim3(x, y, z);
                        k();
                    }
        });
    for (auto &t : th) t.join();
}
