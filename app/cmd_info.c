// SPDX-License-Identifier: MIT
// `mlxcel info`: version, backends compiled in, CPU features and threads, GPU devices when built.
#include <stdio.h>
#include <string.h>

#include "backends/backend.h"
#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/cpu_weight_arena.h"
#include "cli.h"
#include "commands.h"
#include "core/cpu_features.h"
#include "core/thread_pool.h"
#include "models/model.h"
#ifdef MLXCEL_HAVE_GPU
#include "backends/gpu_entry.h"
#endif


int cmd_info(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (cli_is(argv[i], "-h", "--help")) {
            printf("usage: mlxcel info\n");
            return MX_EXIT_OK;
        }
        cli_error("info", "unknown option '%s'", argv[i]);
        return MX_EXIT_USAGE;
    }
    printf("mlxcel %s\n", MLXCEL_VERSION);
    printf("backends: %s\n", mx_backend_compiled());
    printf("models: %s\n", mx_model_supported_types());
#if defined(__x86_64__)
    __builtin_cpu_init();
    printf("cpu features:%s%s%s%s%s%s\n", __builtin_cpu_supports("avx2") ? " avx2" : "",
           __builtin_cpu_supports("fma") ? " fma" : "", mx_cpu_has_f16c() ? " f16c" : "",
           __builtin_cpu_supports("avx512f") ? " avx512f" : "", __builtin_cpu_supports("avx512bw") ? " avx512bw" : "",
           mx_cpu_has_avx512vnni() ? " avx512vnni" : "");
#endif
    mx_error err = {{0}};
    if (cpu_kernels_env_check(&err) != 0) {
        cli_error("info", "%s", err.msg);
        return MX_EXIT_RUNTIME;
    }
    printf("cpu kernels: %s\n", cpu_kernels_name());
    cpu_weight_arena *arena = cpu_weight_arena_create(&err);
    if (!arena) {
        cli_error("info", "%s", err.msg);
        return MX_EXIT_RUNTIME;
    }
    printf("cpu weights: %s\n", cpu_weight_arena_on(arena) ? "copied onto huge pages at load" : "file mapping");
    cpu_weight_arena_free(arena);
    printf("cpu threads: %d\n", mx_cpu_count());
#ifdef MLXCEL_HAVE_GPU
    char buf[4096];
    mx_gpu_describe(buf, sizeof buf);
    printf("%s", buf);
    if (buf[0] && buf[strlen(buf) - 1] != '\n') putchar('\n');
#endif
    return MX_EXIT_OK;
}
