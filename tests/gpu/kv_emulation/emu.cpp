// SPDX-License-Identifier: MIT
// The launch, barriers and shuffles of the host emulation (emu.h). A block's threads are fibers
// run by a round-robin scheduler on the calling thread: a fiber runs until it waits at a barrier
// (the block's, or its warp's for an exchange) or ends; the last arrival at a barrier releases the
// waiters; no fiber able to run while some wait is a divergent barrier, reported and aborted. The
// grid wait is a block barrier too while a test emulates MLXCEL_GPU_PDL=3's order (emu.h,
// emu_pdl_guard), at whose release the block's guarded ranges get their contents back. On
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

enum State { kReady, kAtBlock, kAtWarp, kAtGrid, kDone };
constexpr size_t kStack = 256 * 1024;
struct Fiber { Ctx ctx; State state; };
std::vector<Fiber> fibers;
std::vector<std::unique_ptr<char[]>> stacks;
std::vector<int> warp_waiting;
std::vector<uint32_t> xbuf;
std::vector<unsigned char> smem;
std::function<void()> kernel;
Ctx sched;
int cur, live, block_waiting, width_used = 32;
// MLXCEL_GPU_PDL=3's order (emu.h, emu_pdl_guard): the running block's hidden copy of the guarded
// ranges, the threads at its grid wait, and whether they have all passed it.
std::vector<std::vector<unsigned char>> pdl_saved;
int grid_waiting;
bool block_waited;

void pdl_hide() {  // at a block's start
    pdl_saved.resize(emu_pdl_guard.size());
    for (size_t i = 0; i < emu_pdl_guard.size(); i++) {
        const unsigned char *p = (const unsigned char *)emu_pdl_guard[i].p;
        pdl_saved[i].assign(p, p + emu_pdl_guard[i].bytes);
        memset(emu_pdl_guard[i].p, 0xFF, emu_pdl_guard[i].bytes);
    }
}
void pdl_show() {  // at its grid wait (or its end, when it never waited)
    for (size_t i = 0; i < emu_pdl_guard.size(); i++) memcpy(emu_pdl_guard[i].p, pdl_saved[i].data(), emu_pdl_guard[i].bytes);
}

void yield() { ctx_swap(&fibers[cur].ctx, &sched); }

void release(State s, int warp, int width) {
    for (int t = 0; t < (int)blockDim.x; t++)
        if (fibers[t].state == s && (warp < 0 || t / width == warp)) fibers[t].state = kReady;
}

// The fibers of warp w (lanes of `width`) that have not ended.
int warp_live(int w, int width) {
    int n = 0;
    for (int t = w * width; t < (w + 1) * width && t < (int)blockDim.x; t++) n += fibers[t].state != kDone;
    return n;
}

void fiber_main() {
    kernel();
    fibers[cur].state = kDone;
    live--;
    if (block_waiting > 0 && block_waiting == live) block_waiting = 0, release(kAtBlock, -1, 0);
    if (grid_waiting > 0 && grid_waiting == live) grid_waiting = 0, block_waited = true, pdl_show(), release(kAtGrid, -1, 0);
    int w = cur / width_used;
    if (warp_waiting[w] > 0 && warp_waiting[w] == warp_live(w, width_used))
        warp_waiting[w] = 0, release(kAtWarp, w, width_used);
    ctx_swap(&fibers[cur].ctx, &sched);
    abort();  // a finished fiber is never resumed
}

void warp_barrier(int width) {
    width_used = width;
    int w = cur / width;
    if (++warp_waiting[w] == warp_live(w, width)) {
        warp_waiting[w] = 0;
        release(kAtWarp, w, width);
        return;
    }
    fibers[cur].state = kAtWarp;
    yield();
}

void run_block(unsigned n) {
    live = (int)n, block_waiting = 0, grid_waiting = 0, block_waited = false;
    warp_waiting.assign((n + 31) / 32, 0);
    for (unsigned t = 0; t < n; t++) {
        ctx_make(&fibers[t].ctx, stacks[t].get(), kStack);
        fibers[t].state = kReady;
    }
    while (live > 0) {
        bool ran = false;
        for (unsigned t = 0; t < n; t++) {
            if (fibers[t].state != kReady) continue;
            cur = (int)t;
            threadIdx = dim3(t);
            ctx_swap(&sched, &fibers[t].ctx);
            ran = true;
        }
        if (!ran && live > 0) {
            fprintf(stderr, "emu: block (%u,%u,%u): %d threads wait at barriers that the others never reach\n",
                    blockIdx.x, blockIdx.y, blockIdx.z, live);
            abort();
        }
    }
}
}  // namespace

void __syncthreads() {
    if (++block_waiting == live) {
        block_waiting = 0;
        release(kAtBlock, -1, 0);
        return;
    }
    fibers[cur].state = kAtBlock;
    yield();
}

void mxg_grid_wait() {
    if (emu_pdl_guard.empty() || block_waited) return;
    if (++grid_waiting == live) {
        grid_waiting = 0, block_waited = true;
        pdl_show();
        release(kAtGrid, -1, 0);
        return;
    }
    fibers[cur].state = kAtGrid;
    yield();
}

uint32_t emu_xchg(uint32_t v, int src, int width) {
    if (width != 32 && width != 64) { fprintf(stderr, "emu: a warp of %d lanes\n", width); abort(); }
    int w = cur / width;
    xbuf[cur] = v;
    warp_barrier(width);
    uint32_t r = xbuf[w * width + src];
    warp_barrier(width);
    return r;
}

void emu_warp_gather(const uint32_t *mine, int count, uint32_t *all, int width) {
    if (count > 16) { fprintf(stderr, "emu: a gather of %d words\n", count); abort(); }
    static std::vector<uint32_t> gbuf;
    if (gbuf.size() < (size_t)blockDim.x * 16) gbuf.resize((size_t)blockDim.x * 16);
    const int w = cur / width;
    for (int i = 0; i < count; i++) gbuf[(size_t)cur * 16 + i] = mine[i];
    warp_barrier(width);
    for (int l = 0; l < width; l++)
        for (int i = 0; i < count; i++) all[l * count + i] = gbuf[(size_t)(w * width + l) * 16 + i];
    warp_barrier(width);
}

unsigned char *emu_smem() { return smem.data(); }

void emu_launch(dim3 g, dim3 b, size_t sm, std::function<void()> k) {
    if (sm > emu_smem_max) { fprintf(stderr, "emu: %zu bytes of shared memory > %zu\n", sm, emu_smem_max); abort(); }
    emu_grids.push_back(g);
    emu_smem_sizes.push_back(sm);
    emu_dependent.push_back(emu_next_dependent);
    emu_next_dependent = false;
    if (b.x % 32 || b.y != 1 || b.z != 1 || b.x > 1024) { fprintf(stderr, "emu: block %u x %u x %u\n", b.x, b.y, b.z); abort(); }
    gridDim = g, blockDim = b;
    kernel = std::move(k);
    fibers.resize(std::max(fibers.size(), (size_t)b.x));
    while (stacks.size() < b.x) stacks.push_back(std::make_unique<char[]>(kStack));
    xbuf.assign(b.x, 0u);
    // Shared memory is refilled with garbage between blocks, so a read before a write shows.
    for (unsigned z = 0; z < g.z; z++)
        for (unsigned y = 0; y < g.y; y++)
            for (unsigned x = 0; x < g.x; x++) {
                smem.assign(sm ? sm : 1, 0xA5);
                blockIdx = dim3(x, y, z);
                if (!emu_pdl_guard.empty()) pdl_hide();
                run_block(b.x);
                if (!emu_pdl_guard.empty() && !block_waited) emu_pdl_unwaited++, pdl_show();
            }
}
size_t emu_smem_max = 48 * 1024;
std::vector<dim3> emu_grids;
std::vector<size_t> emu_smem_sizes;
std::vector<emu_range> emu_prefetches;
std::vector<emu_span> emu_pdl_guard;
long emu_pdl_unwaited, emu_pdl_releases;
std::vector<bool> emu_dependent;
bool emu_next_dependent;
