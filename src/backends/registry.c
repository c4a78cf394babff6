// SPDX-License-Identifier: MIT
// Backend registry: maps a name ("cpu", "cuda", "rocm", "auto") to a backend constructor. In a GPU
// build "auto" means the GPU, and a machine without a usable GPU gets a clear error rather than a
// silent switch to the CPU; `--backend cpu` always works.
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

mx_backend *mx_backend_create(const mx_backend_options *opt, mx_error *err) {
    const char *name = opt && opt->name ? opt->name : "auto";
    int threads = opt ? opt->threads : 0;
    if (strcmp(name, "cpu") == 0) return mx_cpu_backend_create(threads, err);
#ifdef MLXCEL_HAVE_GPU
    if (strcmp(name, "auto") == 0 || strcmp(name, "gpu") == 0 || strcmp(name, mx_gpu_backend_name()) == 0) {
        mx_backend *be = mx_gpu_backend_create(opt, err);
        if (!be) mx_fail_prefix(err, "GPU backend '%s': ", mx_gpu_backend_name());
        if (!be && err) {
            size_t len = strlen(err->msg);
            snprintf(err->msg + len, sizeof err->msg - len, " (use --backend cpu to run on the CPU)");
        }
        return be;
    }
#else
    if (strcmp(name, "auto") == 0) return mx_cpu_backend_create(threads, err);
#endif
    mx_fail(err, "unknown or unavailable backend '%s' (this build has: %s)", name, mx_backend_compiled());
    return NULL;
}

void mx_backend_free(mx_backend *be) {
    if (be) be->ops->destroy(be);
}
