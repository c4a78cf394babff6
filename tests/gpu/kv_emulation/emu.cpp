// SPDX-License-Identifier: MIT
// The launch, barriers and shuffles of the host emulation (emu.h). A block's threads (a cluster's:
// all its blocks' threads) are fibers run by a round-robin scheduler on the calling thread: a fiber
// runs until it waits at a barrier (its block's, its cluster's, or its warp's for an exchange) or
// ends; the last arrival at a barrier releases the waiters; no fiber able to run while some wait is a divergent barrier, reported and aborted. On
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

enum State { kReady, kAtBlock, kAtWarp, kAtCluster, kDone };
constexpr size_t kStack = 256 * 1024;
// Fiber f of a group (one block, or a cluster's blocks) is thread f % blockDim.x of block f / blockDim.x.
struct Fiber { Ctx ctx; State state; int block; };
std::vector<Fiber> fibers;
std::vector<std::unique_ptr<char[]>> stacks;
std::vector<int> warp_waiting;
std::vector<uint32_t> xbuf;
std::vector<std::vector<unsigned char>> smems;  // each block of the group
std::vector<dim3> group_ids;                    // each block's blockIdx, in rank order
std::vector<int> block_live, block_waiting;     // per block of the group
std::function<void()> kernel;
Ctx sched;
int cur, live, cluster_waiting, group_fibers, width_used = 32;

void yield() { ctx_swap(&fibers[cur].ctx, &sched); }

// Readies the fibers waiting in state s: of block `block` (< 0: any), of warp `warp` (< 0: any).
void release(State s, int block, int warp, int width) {
    for (int f = 0; f < group_fibers; f++)
        if (fibers[f].state == s && (block < 0 || fibers[f].block == block) && (warp < 0 || f / width == warp))
            fibers[f].state = kReady;
}

// The fibers of warp w (lanes of `width`) that have not ended.
int warp_live(int w, int width) {
    int n = 0;
    for (int f = w * width; f < (w + 1) * width && f < group_fibers; f++) n += fibers[f].state != kDone;
    return n;
}

void fiber_main() {
    kernel();
    const int b = fibers[cur].block;
    fibers[cur].state = kDone;
    live--, block_live[b]--;
    if (block_waiting[b] > 0 && block_waiting[b] == block_live[b]) block_waiting[b] = 0, release(kAtBlock, b, -1, 0);
    if (cluster_waiting > 0 && cluster_waiting == live) cluster_waiting = 0, release(kAtCluster, -1, -1, 0);
    int w = cur / width_used;
    if (warp_waiting[w] > 0 && warp_waiting[w] == warp_live(w, width_used))
        warp_waiting[w] = 0, release(kAtWarp, -1, w, width_used);
    ctx_swap(&fibers[cur].ctx, &sched);
    abort();  // a finished fiber is never resumed
}

void warp_barrier(int width) {
    width_used = width;
    int w = cur / width;
    if (++warp_waiting[w] == warp_live(w, width)) {
        warp_waiting[w] = 0;
        release(kAtWarp, -1, w, width);
        return;
    }
    fibers[cur].state = kAtWarp;
    yield();
}

// Runs the blocks group_ids together (n threads each) until every thread has ended.
void run_group(unsigned n, size_t sm) {
    const int blocks = (int)group_ids.size();
    group_fibers = blocks * (int)n;
    live = group_fibers, cluster_waiting = 0;
    block_live.assign(blocks, (int)n), block_waiting.assign(blocks, 0);
    warp_waiting.assign((group_fibers + 31) / 32, 0);
    xbuf.assign(group_fibers, 0u);
    // Shared memory is refilled with garbage between blocks, so a read before a write shows.
    smems.resize(blocks);
    for (auto &m : smems) m.assign(sm ? sm : 1, 0xA5);
    if (fibers.size() < (size_t)group_fibers) fibers.resize(group_fibers);
    while (stacks.size() < (size_t)group_fibers) stacks.push_back(std::make_unique<char[]>(kStack));
    for (int f = 0; f < group_fibers; f++) {
        ctx_make(&fibers[f].ctx, stacks[f].get(), kStack);
        fibers[f].state = kReady, fibers[f].block = f / (int)n;
    }
    while (live > 0) {
        bool ran = false;
        for (int f = 0; f < group_fibers; f++) {
            if (fibers[f].state != kReady) continue;
            cur = f;
            threadIdx = dim3((unsigned)f % n);
            blockIdx = group_ids[f / n];
            ctx_swap(&sched, &fibers[f].ctx);
            ran = true;
        }
        if (!ran && live > 0) {
            fprintf(stderr, "emu: block (%u,%u,%u): %d threads wait at barriers that the others never reach\n",
                    group_ids[0].x, group_ids[0].y, group_ids[0].z, live);
            abort();
        }
    }
}
}  // namespace

void __syncthreads() {
    const int b = fibers[cur].block;
    if (++block_waiting[b] == block_live[b]) {
        block_waiting[b] = 0;
        release(kAtBlock, b, -1, 0);
        return;
    }
    fibers[cur].state = kAtBlock;
    yield();
}

void emu_cluster_sync() {
    if (++cluster_waiting == live) {
        cluster_waiting = 0;
        release(kAtCluster, -1, -1, 0);
        return;
    }
    fibers[cur].state = kAtCluster;
    yield();
}

void *emu_cluster_map(void *p, unsigned rank) {
    const int blocks = (int)smems.size();
    std::vector<unsigned char> &mine = smems[fibers[cur].block];
    const size_t off = (size_t)((unsigned char *)p - mine.data());
    if ((unsigned char *)p < mine.data() || off >= mine.size() || rank >= (unsigned)blocks) {
        fprintf(stderr, "emu: map_shared_rank of a pointer outside this block's shared memory, or rank %u of %d\n",
                rank, blocks);
        abort();
    }
    if (emu_cluster_fault == 1 && rank == (unsigned)blocks - 1) rank = 0;
    if (emu_cluster_fault == 2) rank = (unsigned)blocks - 1 - rank;
    return smems[rank].data() + off;
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
    if (gbuf.size() < (size_t)group_fibers * 16) gbuf.resize((size_t)group_fibers * 16);
    const int w = cur / width;
    for (int i = 0; i < count; i++) gbuf[(size_t)cur * 16 + i] = mine[i];
    warp_barrier(width);
    for (int l = 0; l < width; l++)
        for (int i = 0; i < count; i++) all[l * count + i] = gbuf[(size_t)(w * width + l) * 16 + i];
    warp_barrier(width);
}

unsigned char *emu_smem() { return smems[fibers[cur].block].data(); }

void emu_launch_cluster(dim3 g, dim3 b, size_t sm, dim3 c, std::function<void()> k) {
    if (sm > 48 * 1024) { fprintf(stderr, "emu: %zu bytes of shared memory > 48 KB\n", sm); abort(); }
    if (b.x % 32 || b.y != 1 || b.z != 1 || b.x > 1024) { fprintf(stderr, "emu: block %u x %u x %u\n", b.x, b.y, b.z); abort(); }
    if (g.x % c.x || g.y % c.y || g.z % c.z || c.x * c.y * c.z > 16) {
        fprintf(stderr, "emu: grid %u x %u x %u in clusters of %u x %u x %u\n", g.x, g.y, g.z, c.x, c.y, c.z);
        abort();
    }
    gridDim = g, blockDim = b;
    kernel = std::move(k);
    emu_launches.push_back({g, c});
    std::vector<dim3> order;  // each cluster's first block
    for (unsigned z = 0; z < g.z; z += c.z)
        for (unsigned y = 0; y < g.y; y += c.y)
            for (unsigned x = 0; x < g.x; x += c.x) order.push_back(dim3(x, y, z));
    for (const dim3 &id : order) {
        group_ids.clear();
        for (unsigned z = 0; z < c.z; z++)
            for (unsigned y = 0; y < c.y; y++)
                for (unsigned x = 0; x < c.x; x++) group_ids.push_back(dim3(id.x + x, id.y + y, id.z + z));
        run_group(b.x, sm);
    }
}

void emu_launch(dim3 g, dim3 b, size_t sm, std::function<void()> k) { emu_launch_cluster(g, b, sm, dim3(1, 1, 1), std::move(k)); }
int emu_cluster_fault = 0;
std::vector<emu_launch_record> emu_launches;
