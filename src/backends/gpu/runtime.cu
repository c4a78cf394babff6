// SPDX-License-Identifier: MIT
// gpu_rt.h over compat.h: the only file that calls the vendor runtime for devices, streams, memory,
// copies, graphs and events. Errors are turned into mx_error messages naming the call.
#include "backends/gpu/compat.h"

#include <stdio.h>
#include <string.h>

#include "backends/gpu/gpu_rt.h"

static int rt_fail(mx_error *err, const char *what, gpuError_t e) {
    return mx_fail(err, "%s: %s (%s error %d)", what, gpuGetErrorString(e), MXG_VENDOR_NAME, (int)e);
}

#define RT_CHECK(call, what)                      \
    do {                                          \
        gpuError_t e_ = (call);                   \
        if (e_ != gpuSuccess) {                   \
            (void)gpuGetLastError();              \
            return rt_fail(err, what, e_);        \
        }                                         \
    } while (0)

extern "C" void mxg_rt_versions(char *buf, size_t cap) {
    int rt = 0, drv = 0;
    (void)gpuRuntimeGetVersion(&rt);
    (void)gpuDriverGetVersion(&drv);
    (void)gpuGetLastError();
#if defined(MXG_VENDOR_HIP)
    // HIP encodes versions as major * 10000000 + minor * 100000 + patch.
    snprintf(buf, cap, "HIP runtime %d.%d", rt / 10000000, (rt / 100000) % 100);
#else
    snprintf(buf, cap, "CUDA runtime %d.%d, driver %d.%d", rt / 1000, (rt % 1000) / 10, drv / 1000,
             (drv % 1000) / 10);
#endif
}

extern "C" int mxg_rt_device_count(int *count, char *why, size_t why_cap) {
    int n = 0;
    gpuError_t e = gpuGetDeviceCount(&n);
    *count = 0;
    int drv = 0;
    if (e != gpuSuccess && gpuDriverGetVersion(&drv) == gpuSuccess && drv == 0) {
        snprintf(why, why_cap, "no GPU driver is loaded: %s", gpuGetErrorString(e));
        (void)gpuGetLastError();
        return 0;
    }
    if (e != gpuSuccess) {
        snprintf(why, why_cap, "%s", gpuGetErrorString(e));
        (void)gpuGetLastError();
        return 0;
    }
    if (n == 0) snprintf(why, why_cap, "the runtime reports no device");
    *count = n;
    return 0;
}

extern "C" int mxg_rt_device_info(int dev, mxg_device_info *info, mx_error *err) {
    gpuDeviceProp_t p;
    RT_CHECK(gpuGetDeviceProperties(&p, dev), "reading device properties");
    memset(info, 0, sizeof *info);
    snprintf(info->name, sizeof info->name, "%.127s", p.name);
#if defined(MXG_VENDOR_HIP)
    snprintf(info->arch, sizeof info->arch, "%.63s", p.gcnArchName);
    char *colon = strchr(info->arch, ':');
    if (colon) *colon = '\0';
    info->cc = 0;
#else
    snprintf(info->arch, sizeof info->arch, "%d%d", p.major, p.minor);
    info->cc = p.major * 10 + p.minor;
#endif
    info->warp = p.warpSize;
    info->sm_count = p.multiProcessorCount;
    info->l2_bytes = p.l2CacheSize > 0 ? (size_t)p.l2CacheSize : 0;
    info->total_mem = p.totalGlobalMem;
    info->smem_optin = MXG_PROP_SMEM_OPTIN(p);
    return 0;
}

extern "C" int mxg_rt_set_device(int dev, mx_error *err) {
    RT_CHECK(gpuSetDevice(dev), "selecting the device");
    return 0;
}

__global__ void mxg_probe_kernel(int *p) {
    if (p) *p = 1;
}

extern "C" int mxg_rt_probe_kernels(mx_error *err) {
    gpuFuncAttributes a;
    RT_CHECK(gpuFuncGetAttributes(&a, (const void *)mxg_probe_kernel), "loading this build's kernels on the device");
    return 0;
}

extern "C" int mxg_rt_stream_create(void **stream, mx_error *err) {
    gpuStream_t s;
    RT_CHECK(gpuStreamCreateWithFlags(&s, gpuStreamNonBlocking), "creating a stream");
    *stream = (void *)s;
    return 0;
}

extern "C" void mxg_rt_stream_destroy(void *stream) {
    if (stream) (void)gpuStreamDestroy((gpuStream_t)stream);
}

extern "C" int mxg_rt_malloc(void **p, size_t bytes, void *stream, mx_error *err) {
    *p = NULL;
    void *q = NULL;
    gpuError_t e = gpuMalloc(&q, bytes ? bytes : 1);
    if (e != gpuSuccess) {
        (void)gpuGetLastError();
        size_t fr = 0, tot = 0;
        (void)gpuMemGetInfo(&fr, &tot);
        (void)gpuGetLastError();
        return mx_fail(err, "allocating %zu bytes of device memory: %s (%zu of %zu MiB free)", bytes,
                       gpuGetErrorString(e), fr >> 20, tot >> 20);
    }
    e = gpuMemsetAsync(q, 0, bytes, (gpuStream_t)stream);
    if (e == gpuSuccess) e = gpuStreamSynchronize((gpuStream_t)stream);
    if (e != gpuSuccess) {
        (void)gpuFree(q);
        return rt_fail(err, "clearing new device memory", e);
    }
    *p = q;
    return 0;
}

extern "C" void mxg_rt_free(void *p) {
    if (p) (void)gpuFree(p);
}

extern "C" int mxg_rt_upload(void *dst, const void *src, size_t bytes, void *stream, mx_error *err) {
    if (!bytes) return 0;
    RT_CHECK(gpuMemcpyAsync(dst, src, bytes, gpuMemcpyHostToDevice, (gpuStream_t)stream), "copying to the device");
#if defined(MXG_VENDOR_HIP)
    // HIP does not promise that a pageable source may be reused when the async copy returns.
    RT_CHECK(gpuStreamSynchronize((gpuStream_t)stream), "copying to the device");
#endif
    return 0;
}

extern "C" int mxg_rt_copy_runs(void *dst, const void *src, size_t bytes, size_t count, size_t stride, void *stream,
                                mx_error *err) {
    if (bytes && count)
        RT_CHECK(gpuMemcpy2DAsync(dst, stride, src, stride, bytes, count, gpuMemcpyDeviceToDevice, (gpuStream_t)stream),
                 "copying within the device");
    return 0;
}

extern "C" int mxg_rt_download(void *dst, const void *src, size_t bytes, void *stream, mx_error *err) {
    if (bytes) RT_CHECK(gpuMemcpyAsync(dst, src, bytes, gpuMemcpyDeviceToHost, (gpuStream_t)stream), "copying from the device");
    RT_CHECK(gpuStreamSynchronize((gpuStream_t)stream), "waiting for the device");
    RT_CHECK(gpuGetLastError(), "a kernel launch");
    return 0;
}

extern "C" int mxg_rt_sync(void *stream, mx_error *err) {
    RT_CHECK(gpuStreamSynchronize((gpuStream_t)stream), "waiting for the device");
    RT_CHECK(gpuGetLastError(), "a kernel launch");
    return 0;
}

extern "C" int mxg_rt_mem_info(size_t *free_bytes, size_t *total_bytes) {
    gpuError_t e = gpuMemGetInfo(free_bytes, total_bytes);
    if (e != gpuSuccess) {
        (void)gpuGetLastError();
        return -1;
    }
    return 0;
}

extern "C" int mxg_rt_graph_begin(void *stream, mx_error *err) {
    RT_CHECK(gpuStreamBeginCapture((gpuStream_t)stream, gpuStreamCaptureModeThreadLocal), "starting graph capture");
    return 0;
}

extern "C" int mxg_rt_graph_end(void *stream, void **exec, mx_error *err) {
    gpuGraph_t g = NULL;
    gpuGraphExec_t x = NULL;
    *exec = NULL;
    RT_CHECK(gpuStreamEndCapture((gpuStream_t)stream, &g), "ending graph capture");
    gpuError_t e = gpuGraphInstantiate(&x, g);
    (void)gpuGraphDestroy(g);
    if (e != gpuSuccess) return rt_fail(err, "instantiating the captured graph", e);
    *exec = (void *)x;
    return 0;
}

extern "C" int mxg_rt_graph_launch(void *exec, void *stream, mx_error *err) {
    RT_CHECK(gpuGraphLaunch((gpuGraphExec_t)exec, (gpuStream_t)stream), "replaying a graph");
    return 0;
}

extern "C" void mxg_rt_graph_destroy(void *exec) {
    if (exec) (void)gpuGraphExecDestroy((gpuGraphExec_t)exec);
}

extern "C" int mxg_rt_event_create(void **ev, mx_error *err) {
    gpuEvent_t e;
    RT_CHECK(gpuEventCreate(&e), "creating an event");
    *ev = (void *)e;
    return 0;
}

extern "C" void mxg_rt_event_destroy(void *ev) {
    if (ev) (void)gpuEventDestroy((gpuEvent_t)ev);
}

extern "C" int mxg_rt_event_record(void *ev, void *stream, mx_error *err) {
    RT_CHECK(gpuEventRecord((gpuEvent_t)ev, (gpuStream_t)stream), "recording an event");
    return 0;
}

extern "C" int mxg_rt_event_elapsed_ms(void *start, void *stop, float *ms, mx_error *err) {
    RT_CHECK(gpuEventSynchronize((gpuEvent_t)stop), "waiting for an event");
    RT_CHECK(gpuEventElapsedTime(ms, (gpuEvent_t)start, (gpuEvent_t)stop), "reading event times");
    return 0;
}
