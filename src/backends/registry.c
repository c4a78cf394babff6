// SPDX-License-Identifier: MIT
// Backend registry: maps a name ("cpu", "cuda", "rocm", "auto") to a backend constructor. In a GPU
// build "auto" means the GPU, and a machine without a usable GPU gets a clear error rather than a
// silent switch to the CPU; `--backend cpu` always works. --kv-bits (mx_backend_options.kv_bits)
// picks the KV cache's codes; a backend without the asked width refuses to start.
#include <string.h>

#include "backends/backend.h"
#include "backends/cpu/cpu_backend.h"
#ifdef MLXCEL_HAVE_GPU
#include "backends/gpu_entry.h"
#endif

const char *mx_backend_compiled(void) {
#ifdef MLXCEL_HAVE_GPU
    static char names[32];
    if (!names[0]) snprintf(names, sizeof names, "cpu,%s", mx_gpu_backend_name());
    return names;
#else
    return "cpu";
#endif
}

// The CPU backend with the KV cache codes of --kv-bits (0: its default).
static mx_backend *cpu_create(int threads, int kv_bits, mx_error *err) {
    mx_backend *be = mx_cpu_backend_create(threads, err);
    if (be && kv_bits && mx_cpu_backend_set_kv_bits(be, kv_bits, err)) {
        mx_backend_free(be);
        return NULL;
    }
    return be;
}

mx_backend *mx_backend_create(const mx_backend_options *opt, mx_error *err) {
    const char *name = opt && opt->name ? opt->name : "auto";
    int threads = opt ? opt->threads : 0, kv_bits = opt ? opt->kv_bits : 0;
    if (strcmp(name, "cpu") == 0) return cpu_create(threads, kv_bits, err);
#ifdef MLXCEL_HAVE_GPU
    if (strcmp(name, "auto") == 0 || strcmp(name, "gpu") == 0 || strcmp(name, mx_gpu_backend_name()) == 0) {
        // The GPU kernels read int16 (or MLXCEL_GPU_KV=f16) caches only: an 8-bit or 4-bit cache is
        // refused here, before the device starts, rather than ignored.
        if (kv_bits && kv_bits != 16) {
            mx_fail(err, "--kv-bits %d: the %s backend has no %d-bit KV cache (only the cpu backend has; use "
                         "--backend cpu, or leave --kv-bits out for the int16 cache)",
                    kv_bits, mx_gpu_backend_name(), kv_bits);
            return NULL;
        }
        mx_backend *be = mx_gpu_backend_create(opt, err);
        if (be && kv_bits == 16 && be->kv_dtype != MX_DTYPE_I16) {
            mx_fail(err, "--kv-bits 16: the %s backend's KV cache is %s here (MLXCEL_GPU_KV)", mx_gpu_backend_name(),
                    mx_dtype_name(be->kv_dtype));
            mx_backend_free(be);
            return NULL;
        }
        if (!be) mx_fail_prefix(err, "GPU backend '%s': ", mx_gpu_backend_name());
        if (!be && err) {
            size_t len = strlen(err->msg);
            snprintf(err->msg + len, sizeof err->msg - len, " (use --backend cpu to run on the CPU)");
        }
        return be;
    }
#else
    if (strcmp(name, "auto") == 0) return cpu_create(threads, kv_bits, err);
#endif
    mx_fail(err, "unknown or unavailable backend '%s' (this build has: %s)", name, mx_backend_compiled());
    return NULL;
}

void mx_backend_free(mx_backend *be) {
    if (be) be->ops->destroy(be);
}
