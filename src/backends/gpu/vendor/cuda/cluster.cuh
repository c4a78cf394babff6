// SPDX-License-Identifier: MIT
// Thread-block clusters (sm_90+): what vendor/cuda/matvec_mma.cu needs of them, in five functions,
// so that the host emulation (tests/gpu/kv_emulation/emu.h, which defines this header's guard) can
// put its own in their place. A cluster's blocks run at once on one GPU processing cluster and can
// read each other's shared memory (distributed shared memory). Device code for sm_80-89 compiles
// (the functions trap there); the host launches clusters only where mxg_cluster_max_blocks allows.
#ifndef MXG_CLUSTER_CUH
#define MXG_CLUSTER_CUH
#include <cooperative_groups.h>

// Waits until every thread of every block of the cluster has arrived (and their shared-memory
// writes are visible to the cluster).
__device__ __forceinline__ void mxg_cluster_sync() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    cooperative_groups::this_cluster().sync();
#else
    __trap();
#endif
}

// p (this block's shared memory) at the same offset in the shared memory of the cluster's block
// `rank` (for cluster dims (1, S, 1): the block whose blockIdx.y % S is rank).
template <class T>
__device__ __forceinline__ T *mxg_cluster_map(T *p, unsigned rank) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    return cooperative_groups::this_cluster().map_shared_rank(p, rank);
#else
    (void)rank;
    __trap();
    return p;
#endif
}

// Lets `kernel` run in clusters of more than 8 blocks (the non-portable sizes, up to 16 on an H100
// or H200): a per-kernel attribute, so each kernel launched that way sets it once before its first
// launch. false where the device refuses it.
template <class... P>
bool mxg_cluster_allow_large(void (*kernel)(P...)) {
    if (cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) == cudaSuccess) return true;
    (void)cudaGetLastError();
    return false;
}

// The largest cluster of `kernel` (launched with `smem` bytes of dynamic shared memory and `threads`
// per block) this device schedules: 16 where it allows that non-portable size and has room for at
// least one such cluster, else 8; 0 where the kernel's binary is not sm_90 code (an sm_80 build
// run on a newer GPU) or the queries fail.
template <class... P>
int mxg_cluster_max_blocks(void (*kernel)(P...), size_t smem, int threads) {
    cudaFuncAttributes attr;
    if (cudaFuncGetAttributes(&attr, kernel) != cudaSuccess || attr.binaryVersion < 90) return 0;
    if (!mxg_cluster_allow_large(kernel)) return 8;
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeClusterDimension;
    at[0].val.clusterDim.x = 1, at[0].val.clusterDim.y = 16, at[0].val.clusterDim.z = 1;
    cfg.gridDim = dim3(1, 16, 1), cfg.blockDim = dim3((unsigned)threads), cfg.dynamicSmemBytes = smem;
    cfg.attrs = at, cfg.numAttrs = 1;
    int clusters = 0;
    if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg) != cudaSuccess) {
        (void)cudaGetLastError();
        return 8;
    }
    return clusters > 0 ? 16 : 8;
}

// kernel<<<grid, block, smem, stream>>>(args) with blocks grouped in clusters of `cluster` blocks
// (grid a multiple of it); enqueued like any launch, so it is recorded under stream capture.
template <class... P, class... A>
void mxg_launch_cluster(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream, dim3 cluster,
                        A... args) {
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeClusterDimension;
    at[0].val.clusterDim.x = cluster.x, at[0].val.clusterDim.y = cluster.y, at[0].val.clusterDim.z = cluster.z;
    cfg.gridDim = grid, cfg.blockDim = block, cfg.dynamicSmemBytes = smem, cfg.stream = stream;
    cfg.attrs = at, cfg.numAttrs = 1;
    (void)cudaLaunchKernelEx(&cfg, kernel, (P)args...);
}
#endif
