// SPDX-License-Identifier: MIT
// The one place that knows which GPU vendor we compile for. Kernel files include this instead of
// cuda_runtime.h or hip_runtime.h and use the neutral names below (gpu* for the runtime, mxg_* for
// device helpers). nvcc builds define MXG_VENDOR_CUDA, hipcc builds MXG_VENDOR_HIP (cmake/gpu*.cmake);
// anything else is an error, never a silent default.
//
// Warp width: NVIDIA and AMD RDNA run 32-lane warps, AMD CDNA (gfx9) 64-lane wavefronts. Kernels take
// the width as a template parameter W; host code picks the instantiation from the device's reported
// width with MXG_WARP_DISPATCH. CUDA builds only instantiate W = 32 (MXG_WARP_MAX).
#ifndef MXG_COMPAT_H
#define MXG_COMPAT_H

#if defined(MXG_VENDOR_HIP)
#include <hip/hip_fp16.h>
#include <hip/hip_runtime.h>

typedef hipStream_t gpuStream_t;
typedef hipError_t gpuError_t;
typedef hipEvent_t gpuEvent_t;
typedef hipGraph_t gpuGraph_t;
typedef hipGraphExec_t gpuGraphExec_t;
typedef hipDeviceProp_t gpuDeviceProp_t;
#define gpuSuccess hipSuccess
#define gpuGetErrorString hipGetErrorString
#define gpuGetLastError hipGetLastError
#define gpuGetDeviceCount hipGetDeviceCount
#define gpuGetDeviceProperties hipGetDeviceProperties
#define gpuSetDevice hipSetDevice
#define gpuRuntimeGetVersion hipRuntimeGetVersion
#define gpuDriverGetVersion hipDriverGetVersion
#define gpuMalloc hipMalloc
#define gpuFree hipFree
#define gpuHostAlloc(p, n) hipHostMalloc((p), (n), 0)
#define gpuFreeHost hipHostFree
#define gpuMemsetAsync hipMemsetAsync
#define gpuMemcpyAsync hipMemcpyAsync
#define gpuMemcpy2DAsync hipMemcpy2DAsync
#define gpuMemcpyDeviceToDevice hipMemcpyDeviceToDevice
#define gpuMemcpyHostToDevice hipMemcpyHostToDevice
#define gpuMemcpyDeviceToHost hipMemcpyDeviceToHost
#define gpuMemcpyDeviceToDevice hipMemcpyDeviceToDevice
#define gpuMemGetInfo hipMemGetInfo
#define gpuStreamCreateWithFlags hipStreamCreateWithFlags
#define gpuStreamNonBlocking hipStreamNonBlocking
#define gpuStreamDestroy hipStreamDestroy
#define gpuStreamSynchronize hipStreamSynchronize
#define gpuEventCreate hipEventCreate
#define gpuEventDestroy hipEventDestroy
#define gpuEventRecord hipEventRecord
#define gpuEventSynchronize hipEventSynchronize
#define gpuEventElapsedTime hipEventElapsedTime
#define gpuStreamBeginCapture hipStreamBeginCapture
#define gpuStreamCaptureModeThreadLocal hipStreamCaptureModeThreadLocal
#define gpuStreamEndCapture hipStreamEndCapture
#define gpuGraphInstantiate(exec, graph) hipGraphInstantiate((exec), (graph), NULL, NULL, 0)
#define gpuGraphLaunch hipGraphLaunch
#define gpuGraphExecDestroy hipGraphExecDestroy
#define gpuGraphDestroy hipGraphDestroy
#define gpuFuncGetAttributes hipFuncGetAttributes
typedef hipFuncAttributes gpuFuncAttributes;
#define gpuFuncSetAttribute hipFuncSetAttribute
#define gpuFuncAttributeMaxDynamicSharedMemorySize hipFuncAttributeMaxDynamicSharedMemorySize
#define MXG_PROP_SMEM_OPTIN(p) ((size_t)(p).sharedMemPerBlock)
#define MXG_WARP_MAX 64
#define MXG_VENDOR_NAME "rocm"

template <int W>
__device__ __forceinline__ float mxg_shfl_xor(float v, int mask) { return __shfl_xor(v, mask, W); }
template <int W>
__device__ __forceinline__ int mxg_shfl_xor(int v, int mask) { return __shfl_xor(v, mask, W); }
template <int W>
__device__ __forceinline__ float mxg_shfl(float v, int lane) { return __shfl(v, lane, W); }

// Programmatic dependent launch and the L2 prefetch are CUDA-only: on HIP the launch is ordinary
// and the device calls do nothing (see the CUDA branch).
__device__ __forceinline__ void mxg_grid_wait() {}
__device__ __forceinline__ void mxg_grid_release() {}
__device__ __forceinline__ void mxg_prefetch_l2(const void *p, unsigned bytes) { (void)p, (void)bytes; }
template <class... P, class... A>
static inline void mxg_launch_dep(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, gpuStream_t stream,
                                  bool dependent, A... args) {
    (void)dependent;
    kernel<<<grid, block, smem, stream>>>(((P)args)...);
}

#elif defined(MXG_VENDOR_CUDA)
#include <cuda_fp16.h>
#include <cuda_runtime.h>

typedef cudaStream_t gpuStream_t;
typedef cudaError_t gpuError_t;
typedef cudaEvent_t gpuEvent_t;
typedef cudaGraph_t gpuGraph_t;
typedef cudaGraphExec_t gpuGraphExec_t;
typedef cudaDeviceProp gpuDeviceProp_t;
#define gpuSuccess cudaSuccess
#define gpuGetErrorString cudaGetErrorString
#define gpuGetLastError cudaGetLastError
#define gpuGetDeviceCount cudaGetDeviceCount
#define gpuGetDeviceProperties cudaGetDeviceProperties
#define gpuSetDevice cudaSetDevice
#define gpuRuntimeGetVersion cudaRuntimeGetVersion
#define gpuDriverGetVersion cudaDriverGetVersion
#define gpuMalloc cudaMalloc
#define gpuFree cudaFree
#define gpuHostAlloc(p, n) cudaMallocHost((p), (n))
#define gpuFreeHost cudaFreeHost
#define gpuMemsetAsync cudaMemsetAsync
#define gpuMemcpyAsync cudaMemcpyAsync
#define gpuMemcpy2DAsync cudaMemcpy2DAsync
#define gpuMemcpyDeviceToDevice cudaMemcpyDeviceToDevice
#define gpuMemcpyHostToDevice cudaMemcpyHostToDevice
#define gpuMemcpyDeviceToHost cudaMemcpyDeviceToHost
#define gpuMemcpyDeviceToDevice cudaMemcpyDeviceToDevice
#define gpuMemGetInfo cudaMemGetInfo
#define gpuStreamCreateWithFlags cudaStreamCreateWithFlags
#define gpuStreamNonBlocking cudaStreamNonBlocking
#define gpuStreamDestroy cudaStreamDestroy
#define gpuStreamSynchronize cudaStreamSynchronize
#define gpuEventCreate cudaEventCreate
#define gpuEventDestroy cudaEventDestroy
#define gpuEventRecord cudaEventRecord
#define gpuEventSynchronize cudaEventSynchronize
#define gpuEventElapsedTime cudaEventElapsedTime
#define gpuStreamBeginCapture cudaStreamBeginCapture
#define gpuStreamCaptureModeThreadLocal cudaStreamCaptureModeThreadLocal
#define gpuStreamEndCapture cudaStreamEndCapture
#define gpuGraphInstantiate(exec, graph) cudaGraphInstantiate((exec), (graph), 0)
#define gpuGraphLaunch cudaGraphLaunch
#define gpuGraphExecDestroy cudaGraphExecDestroy
#define gpuGraphDestroy cudaGraphDestroy
#define gpuFuncGetAttributes cudaFuncGetAttributes
typedef cudaFuncAttributes gpuFuncAttributes;
#define gpuFuncSetAttribute cudaFuncSetAttribute
#define gpuFuncAttributeMaxDynamicSharedMemorySize cudaFuncAttributeMaxDynamicSharedMemorySize
#define MXG_PROP_SMEM_OPTIN(p) ((size_t)((p).sharedMemPerBlockOptin ? (p).sharedMemPerBlockOptin : (p).sharedMemPerBlock))
#define MXG_WARP_MAX 32
#define MXG_VENDOR_NAME "cuda"

template <int W>
__device__ __forceinline__ float mxg_shfl_xor(float v, int mask) { return __shfl_xor_sync(0xffffffffu, v, mask, W); }
template <int W>
__device__ __forceinline__ int mxg_shfl_xor(int v, int mask) { return __shfl_xor_sync(0xffffffffu, v, mask, W); }
template <int W>
__device__ __forceinline__ float mxg_shfl(float v, int lane) { return __shfl_sync(0xffffffffu, v, lane, W); }

// Programmatic dependent launch (sm_90+): a kernel launched with mxg_launch_dep(..., true, ...) may
// start while the previous kernel of the stream is still running; it must call mxg_grid_wait()
// before it reads anything an earlier kernel wrote or writes anything (weights may be loaded
// before). mxg_grid_release() lets the next dependent kernel start early. Both are no-ops on
// older architectures and for kernels launched without the attribute.
// Where the release sits does not weaken the wait: the CUDA Programming Guide ("Programmatic
// Dependent Launch and Synchronization", cudaGridDependencySynchronize, which is
// griddepcontrol.wait) has the dependent grid wait until the prerequisite grids have completed and
// their memory operations are flushed and visible, whether they triggered early or not; the trigger
// (griddepcontrol.launch_dependents, cudaTriggerProgrammaticLaunchCompletion) only lets the
// dependent grid be scheduled, and a block's repeated triggers count once. So a kernel may release
// right after its own wait (MLXCEL_GPU_PDL=2) and still release again at its end.
__device__ __forceinline__ void mxg_grid_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void mxg_grid_release() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
// A hint that [p, p + bytes) will be read soon: sm_90's bulk prefetch into L2
// (cp.async.bulk.prefetch.L2.global, PTX ISA 8.0), which asks p 16-byte aligned and bytes a
// non-zero multiple of 16 (callers shrink their ranges to that: prefetch_span, common.cuh).
// No completion to wait for, no registers held; a no-op on other architectures.
__device__ __forceinline__ void mxg_prefetch_l2(const void *p, unsigned bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(__cvta_generic_to_global(p)), "r"(bytes) : "memory");
#else
    (void)p, (void)bytes;
#endif
}
template <class... P, class... A>
static inline void mxg_launch_dep(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, gpuStream_t stream,
                                  bool dependent, A... args) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = dependent ? 1 : 0;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    (void)cudaLaunchKernelEx(&cfg, kernel, ((P)args)...);
}

#else
#error "compat.h: define MXG_VENDOR_CUDA (nvcc) or MXG_VENDOR_HIP (hipcc); see cmake/gpu.cmake"
#endif

// Where a dependent kernel starts reading what earlier kernels wrote: the grid wait, then, with
// `early` (MLXCEL_GPU_PDL=2), the release of the next dependent kernel, whose blocks may then come
// and prefetch while this one works (the release does not weaken that kernel's own wait, above).
__device__ __forceinline__ void mxg_grid_wait_release(bool early) {
    mxg_grid_wait();
    if (early) mxg_grid_release();
}

// Wraps a kernel body templated on W: in the device pass for one AMD target the instantiation for
// the other warp width can never be launched (the host picks by the device's width), so its body is
// dropped there, which halves the device code hipcc compiles. Elsewhere it expands to nothing.
#if defined(MXG_VENDOR_HIP) && defined(__HIP_DEVICE_COMPILE__) && defined(__AMDGCN_WAVEFRONT_SIZE__)
#define MXG_WARP_ONLY(W) if constexpr ((W) != __AMDGCN_WAVEFRONT_SIZE__) { return; } else
#elif defined(MXG_VENDOR_HIP) && defined(__HIP_DEVICE_COMPILE__) && defined(__AMDGCN_WAVEFRONT_SIZE)
#define MXG_WARP_ONLY(W) if constexpr ((W) != __AMDGCN_WAVEFRONT_SIZE) { return; } else
#else
#define MXG_WARP_ONLY(W)
#endif

// Runs the statement list with `W` bound to the device's warp width (a compile-time constant).
#if MXG_WARP_MAX == 64
#define MXG_WARP_DISPATCH(warp, ...)          \
    do {                                      \
        if ((warp) == 64) {                   \
            constexpr int W = 64;             \
            __VA_ARGS__;                      \
        } else {                              \
            constexpr int W = 32;             \
            __VA_ARGS__;                      \
        }                                     \
    } while (0)
#else
#define MXG_WARP_DISPATCH(warp, ...)          \
    do {                                      \
        (void)(warp);                         \
        constexpr int W = 32;                 \
        __VA_ARGS__;                          \
    } while (0)
#endif

#endif
