// SPDX-License-Identifier: MIT
// Row utilities: gather_rows (row indices in device memory, so a recorded graph reads new rows on
// every replay) and argmax over the vocabulary (the first
// maximum wins, as on the CPU).
#include "backends/gpu/common.cuh"
#include "backends/gpu/kernels.h"
#include "backends/gpu/kernels/max_key.cuh"

namespace {

__global__ void gather_kernel(float *out, const float *__restrict__ x, const int32_t *__restrict__ rows, int dim,
                              bool early) {
    mxg_grid_wait_release(early);  // a dependent launch: nothing before reads what earlier kernels wrote
    const float *src = x + (int64_t)rows[blockIdx.x] * dim;
    float *dst = out + (int64_t)blockIdx.x * dim;
    for (int d = threadIdx.x; d < dim; d += blockDim.x) dst[d] = src[d];
}

// Argmax in one pass over the logits with many blocks per row: each block reduces its slice to a
// (value, index) pair and merges it into a 64-bit key per row (kernels/max_key.cuh: equal values
// prefer the smaller index) with atomicMax; the last block of the row to finish (counted with an atomic ticket) writes the
// index. The keys and tickets live in L->small_scratch and are cleared by a memset node first.
// `rest` (MLXCEL_GPU_PDL=3, L->pdl_rest): a dependent launch straight after the output head's
// product, without the memset node, which would end the chain of dependent launches (a memset
// waits for the full completion of the kernel before it, and the kernel after it for the memset's):
// the grid wait comes first, then the release, and the last block of each row leaves its key and
// ticket zeroed again for the next launch (mxg_rt_malloc zeroes the scratch at the start; every
// block has added its key and taken its ticket before the last one's ticket).
template <int W>
__global__ void argmax_kernel(int32_t *ids, const float *__restrict__ logits, int vocab,
                              unsigned long long *keys, unsigned int *tickets, bool rest) {
    __shared__ unsigned long long sk[1024 / W];
    mxg_grid_wait_release(rest);  // MLXCEL_GPU_PDL=3: nothing before reads what earlier kernels wrote
    const int row = blockIdx.y;
    const float *l = logits + (int64_t)row * vocab;
    const int per = (vocab + gridDim.x - 1) / gridDim.x;
    const int lo = blockIdx.x * per, hi = min(vocab, lo + per);
    unsigned long long best = 0;
    for (int i = lo + threadIdx.x; i < hi; i += blockDim.x) {
        unsigned long long k = pick_key(l[i], i);
        best = k > best ? k : best;
    }
    const int lane = threadIdx.x % W, warp = threadIdx.x / W, nw = blockDim.x / W;
    best = warp_max_key<W>(best);
    if (lane == 0) sk[warp] = best;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < nw; w++) best = sk[w] > best ? sk[w] : best;
        atomicMax(&keys[row], best);
        __threadfence();
        if (atomicAdd(&tickets[row], 1u) == gridDim.x - 1) {
            const unsigned long long k = atomicMax(&keys[row], 0ull);
            ids[row] = key_index(k);
            if (rest) keys[row] = 0ull, tickets[row] = 0u;
        }
    }
}

}  // namespace

extern "C" void mxg_gather_rows(const mxg_launch *L, float *out, const float *x, const int32_t *rows, int n,
                                int dim) {
    if (n <= 0) return;
    int threads = dim > 256 ? 256 : (dim + 31) / 32 * 32;
    mxg_launch_dep(gather_kernel, dim3((unsigned)n), dim3(threads), 0, (gpuStream_t)L->stream, L->pdl_early, out, x, rows,
                   dim, L->pdl_early);
}

extern "C" void mxg_argmax(const mxg_launch *L, int32_t *ids, const float *logits, int n, int vocab) {
    const int per_launch = (int)(L->small_scratch_bytes / (sizeof(unsigned long long) + sizeof(unsigned int)));
    unsigned blocks = (unsigned)((vocab + 4095) / 4096);
    blocks = blocks < 1 ? 1 : blocks > 128 ? 128 : blocks;
    for (int r0 = 0; r0 < n; r0 += per_launch) {
        const int rows = n - r0 < per_launch ? n - r0 : per_launch;
        unsigned long long *keys = (unsigned long long *)L->small_scratch;
        unsigned int *tickets = (unsigned int *)(keys + rows);
        if (!L->pdl_rest)  // else zero already: the previous launch's last blocks cleared them
            (void)gpuMemsetAsync(keys, 0, (sizeof *keys + sizeof *tickets) * (size_t)rows, (gpuStream_t)L->stream);
        MXG_WARP_DISPATCH(L->warp, {
            mxg_launch_dep(argmax_kernel<W>, dim3(blocks, (unsigned)rows), dim3(256), 0, (gpuStream_t)L->stream,
                           L->pdl_rest, ids + r0, logits + (int64_t)r0 * vocab, vocab, keys, tickets, L->pdl_rest);
        });
    }
}
