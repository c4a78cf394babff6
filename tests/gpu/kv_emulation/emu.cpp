// SPDX-License-Identifier: MIT
// The launch, barriers and shuffles of the host emulation (emu.h). A block's threads are fibers
// run by a round-robin scheduler on the calling thread: a fiber runs until it waits at a barrier
// (the block's, or its warp's for an exchange) or ends; the last arrival at a barrier releases the
// waiters; no fiber able to run while some wait is a divergent barrier, reported and aborted.
// Blocks run one after another, or (emu_launch_coresident, the persistent kernels' launch) all
// together, fiber by fiber in block order, each with its own shared memory, so a grid barrier in
// global memory (kernels/grid_barrier.cuh, spinning through emu_spin) works; a grid barrier that
// never opens is reported and aborted. On
// x86-64 a switch is a few instructions (callee-saved registers and the stack pointer); elsewhere,
// and under AddressSanitizer (which follows swapcontext), ucontext.
#include <algorithm>
#include "emu.h"
#include <cstdio>
#include <cstdlib>
dim3 threadIdx, blockIdx, blockDim, gridDim;

namespace {
void fiber_main();

#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__)
extern "C" void emu_switch(void **save_sp, void *to_sp);
asm(R"(
.pushsection .text
.globl emu_switch
.type emu_switch, @function
emu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
.size emu_switch, .-emu_switch
.popsection
)");
struct Ctx { void *sp = nullptr; };
void ctx_make(Ctx *c, char *stack, size_t size) {
    uintptr_t top = ((uintptr_t)(stack + size)) & ~(uintptr_t)15;
    void **sp = (void **)(top - 16);
    sp[0] = (void *)&fiber_main;  // `ret` lands here with the stack as after a call
    sp -= 6;                      // rbp, rbx, r12-r15
    for (int i = 0; i < 6; i++) sp[i] = nullptr;
    c->sp = sp;
}
void ctx_swap(Ctx *from, Ctx *to) { emu_switch(&from->sp, to->sp); }
#else
}  // namespace
#include <ucontext.h>
namespace {
struct Ctx { ucontext_t uc; };
void ctx_make(Ctx *c, char *stack, size_t size) {
    getcontext(&c->uc);
    c->uc.uc_stack.ss_sp = stack;
    c->uc.uc_stack.ss_size = size;
    c->uc.uc_link = nullptr;
    makecontext(&c->uc, fiber_main, 0);
}
void ctx_swap(Ctx *from, Ctx *to) { swapcontext(&from->uc, &to->uc); }
#endif

enum State { kReady, kAtBlock, kAtWarp, kDone };
constexpr size_t kStack = 256 * 1024;
struct Fiber { Ctx ctx; State state; };
std::vector<Fiber> fibers;                // the running blocks' threads, block after block
std::vector<std::unique_ptr<char[]>> stacks;
std::vector<int> warp_waiting;            // per warp (of 32 lanes' slots) of the running blocks
std::vector<uint32_t> xbuf;
std::vector<std::vector<unsigned char>> smems;  // per running block
std::vector<int> block_live, block_waiting;     // per running block
std::vector<dim3> block_idx;                    // per running block
std::function<void()> kernel;
Ctx sched;
int cur, live, width_used = 32, bdim;
bool spun;       // the fiber that last ran yielded in emu_spin
long spins_in_row;

void yield() { ctx_swap(&fibers[cur].ctx, &sched); }

int warps_per_block() { return (bdim + 31) / 32; }

// The fibers of the running blocks' warp w (lanes of `width`): [first, end).
void warp_range(int w, int width, int &first, int &end) {
    const int wpb = (bdim + width - 1) / width, b = w / wpb;
    first = b * bdim + (w % wpb) * width;
    end = std::min(first + width, (b + 1) * bdim);
}

int warp_of(int f, int width) { return (f / bdim) * ((bdim + width - 1) / width) + (f % bdim) / width; }

void release_block(int b) {
    for (int t = b * bdim; t < (b + 1) * bdim; t++)
        if (fibers[t].state == kAtBlock) fibers[t].state = kReady;
}

void release_warp(int w, int width) {
    int first, end;
    warp_range(w, width, first, end);
    for (int t = first; t < end; t++)
        if (fibers[t].state == kAtWarp) fibers[t].state = kReady;
}

// The fibers of warp w (lanes of `width`) that have not ended.
int warp_live(int w, int width) {
    int first, end, n = 0;
    warp_range(w, width, first, end);
    for (int t = first; t < end; t++) n += fibers[t].state != kDone;
    return n;
}

void fiber_main() {
    kernel();
    fibers[cur].state = kDone;
    live--;
    const int b = cur / bdim;
    block_live[b]--;
    if (block_waiting[b] > 0 && block_waiting[b] == block_live[b]) block_waiting[b] = 0, release_block(b);
    int w = warp_of(cur, width_used);
    if (warp_waiting[w] > 0 && warp_waiting[w] == warp_live(w, width_used))
        warp_waiting[w] = 0, release_warp(w, width_used);
    ctx_swap(&fibers[cur].ctx, &sched);
    abort();  // a finished fiber is never resumed
}

void warp_barrier(int width) {
    width_used = width;
    int w = warp_of(cur, width);
    if (++warp_waiting[w] == warp_live(w, width)) {
        warp_waiting[w] = 0;
        release_warp(w, width);
        return;
    }
    fibers[cur].state = kAtWarp;
    yield();
}

// Runs blocks `ids` together (one, or a whole co-resident grid) until every thread has ended.
void run_blocks(const std::vector<dim3> &ids, size_t sm) {
    const int nb = (int)ids.size(), n = nb * bdim;
    live = n;
    block_idx = ids;
    block_live.assign(nb, bdim);
    block_waiting.assign(nb, 0);
    warp_waiting.assign((size_t)nb * warps_per_block(), 0);
    // Shared memory is refilled with garbage for every block, so a read before a write shows.
    smems.resize(nb);
    for (auto &m : smems) m.assign(sm ? sm : 1, 0xA5);
    while (stacks.size() < (size_t)n) stacks.push_back(std::unique_ptr<char[]>(new char[kStack]));
    fibers.resize(std::max(fibers.size(), (size_t)n));
    xbuf.assign(n, 0u);
    for (int t = 0; t < n; t++) {
        ctx_make(&fibers[t].ctx, stacks[t].get(), kStack);
        fibers[t].state = kReady;
    }
    spins_in_row = 0;
    while (live > 0) {
        bool ran = false;
        for (int t = 0; t < n; t++) {
            if (fibers[t].state != kReady) continue;
            cur = t;
            threadIdx = dim3(t % bdim);
            blockIdx = block_idx[t / bdim];
            spun = false;
            ctx_swap(&sched, &fibers[t].ctx);
            spins_in_row = spun ? spins_in_row + 1 : 0;
            ran = true;
        }
        if (spins_in_row > 100000L * n) {
            fprintf(stderr, "emu: %d threads spin on a grid barrier that never opens\n", live);
            abort();
        }
        if (!ran && live > 0) {
            fprintf(stderr, "emu: block (%u,%u,%u): %d threads wait at barriers that the others never reach\n",
                    blockIdx.x, blockIdx.y, blockIdx.z, live);
            abort();
        }
    }
}

void launch(dim3 g, dim3 b, size_t sm, std::function<void()> k, bool together) {
    if (sm > emu_smem_max) { fprintf(stderr, "emu: %zu bytes of shared memory > %zu\n", sm, emu_smem_max); abort(); }
    emu_grids.push_back(g);
    if (b.x % 32 || b.y != 1 || b.z != 1 || b.x > 1024) { fprintf(stderr, "emu: block %u x %u x %u\n", b.x, b.y, b.z); abort(); }
    gridDim = g, blockDim = b, bdim = (int)b.x;
    kernel = std::move(k);
    std::vector<dim3> ids;
    for (unsigned z = 0; z < g.z; z++)
        for (unsigned y = 0; y < g.y; y++)
            for (unsigned x = 0; x < g.x; x++) {
                ids.push_back(dim3(x, y, z));
                if (!together) run_blocks(ids, sm), ids.clear();
            }
    if (together) run_blocks(ids, sm);
}
}  // namespace

void __syncthreads() {
    const int b = cur / bdim;
    if (++block_waiting[b] == block_live[b]) {
        block_waiting[b] = 0;
        release_block(b);
        return;
    }
    fibers[cur].state = kAtBlock;
    yield();
}

void emu_spin() {
    spun = true;
    yield();
}

uint32_t emu_xchg(uint32_t v, int src, int width) {
    if (width != 32 && width != 64) { fprintf(stderr, "emu: a warp of %d lanes\n", width); abort(); }
    int first, end;
    warp_range(warp_of(cur, width), width, first, end);
    xbuf[cur] = v;
    warp_barrier(width);
    uint32_t r = xbuf[first + src];
    warp_barrier(width);
    return r;
}

void emu_warp_gather(const uint32_t *mine, int count, uint32_t *all, int width) {
    if (count > 16) { fprintf(stderr, "emu: a gather of %d words\n", count); abort(); }
    static std::vector<uint32_t> gbuf;
    if (gbuf.size() < xbuf.size() * 16) gbuf.resize(xbuf.size() * 16);
    int first, end;
    warp_range(warp_of(cur, width), width, first, end);
    for (int i = 0; i < count; i++) gbuf[(size_t)cur * 16 + i] = mine[i];
    warp_barrier(width);
    for (int l = 0; l < width; l++)
        for (int i = 0; i < count; i++) all[l * count + i] = gbuf[(size_t)(first + l) * 16 + i];
    warp_barrier(width);
}

unsigned char *emu_smem() { return smems[cur / bdim].data(); }

void emu_launch(dim3 g, dim3 b, size_t sm, std::function<void()> k) { launch(g, b, sm, std::move(k), false); }
void emu_launch_coresident(dim3 g, dim3 b, size_t sm, std::function<void()> k) { launch(g, b, sm, std::move(k), true); }
int emu_blocks_per_sm = 2;
size_t emu_smem_max = 48 * 1024;
std::vector<dim3> emu_grids;
