#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Build-contract checks that need real builds (run by .ci/gpu_builds.sh; each prints ok/FAIL and the
# script exits 1 if any failed):
#  1. a fresh CPU build compiles no GPU file: its verbose log names no .cu file, nvcc or hipcc;
#  2. the build downloads nothing: no FetchContent/ExternalProject/file(DOWNLOAD) in the CMake
#     sources, and the CPU configure + build succeed with networking off (unshare -rn) where the
#     machine allows a network namespace;
#  3. for each GPU build folder given: touching a kernel rebuilds exactly that kernel; touching a
#     header it includes rebuilds its dependents; a second build is a no-op; touching cmake/gpu.cmake
#     reconfigures cleanly, keeps the cached architecture list and probes nothing.
# Usage: scripts/check_build_contract.sh [GPU build folder ...]   (e.g. build/cuda build/rocm)
set -uo pipefail
cd "$(dirname "$0")/.."
fail=0
ok() { echo "ok: $*"; }
bad() {
    echo "FAIL: $*"
    fail=1
}
jobs=$(nproc 2>/dev/null || echo 2)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# 1 + 2: fresh CPU build, verbose, without network when possible.
net=""
if unshare -rn true 2>/dev/null; then net="unshare -rn"; fi
if $net cmake -S . -B "$tmp/cpu" -DCMAKE_BUILD_TYPE=Release ${MLXCEL_CMAKE_ARGS:-} >"$tmp/cpu-configure.log" 2>&1 &&
    $net cmake --build "$tmp/cpu" -j"$jobs" --verbose --target mlxcel mlxcel-server >"$tmp/cpu-build.log" 2>&1; then
    ok "fresh CPU build${net:+ with networking off ($net)}"
else
    bad "fresh CPU build failed (log tail below)"
    tail -20 "$tmp/cpu-configure.log" "$tmp/cpu-build.log"
fi
if grep -nE '\.cu([^a-z]|$)|\.cuh|nvcc|hipcc' "$tmp/cpu-configure.log" "$tmp/cpu-build.log" | head -5 | grep -q .; then
    bad "the CPU build log mentions GPU sources or compilers:"
    grep -nE '\.cu([^a-z]|$)|\.cuh|nvcc|hipcc' "$tmp/cpu-build.log" | head -5
else
    ok "CPU build compiled no GPU file ($(grep -c -- ' -c ' "$tmp/cpu-build.log") compile commands, none for .cu)"
fi
if grep -rnE 'FetchContent|ExternalProject|file\(DOWNLOAD|CPMAddPackage' CMakeLists.txt cmake tests/*.cmake tests/cmake; then
    bad "a CMake file downloads at configure/build time"
else
    ok "no download commands in the CMake sources"
fi

# 3: incremental behaviour of each GPU build folder.
for dir in "$@"; do
    [ -f "$dir/CMakeCache.txt" ] || { bad "$dir is not a configured build folder"; continue; }
    cmake --build "$dir" -j"$jobs" >/dev/null 2>&1 || { bad "$dir does not build"; continue; }
    log=$tmp/incr.log
    touch src/backends/gpu/kernels/rmsnorm.cu
    cmake --build "$dir" -j"$jobs" --verbose --target mlxcel >"$log" 2>&1 || bad "$dir: rebuild after touching a kernel failed"
    n_cu=$(grep -cE '(nvcc|hipcc).* -c ' "$log")
    if grep -qE '(nvcc|hipcc).*rmsnorm\.cu' "$log" && [ "$n_cu" -eq 1 ]; then
        ok "$dir: touching kernels/rmsnorm.cu recompiled it and nothing else"
    else
        bad "$dir: touching kernels/rmsnorm.cu recompiled $n_cu GPU files (want exactly it)"
        grep -E '(nvcc|hipcc).* -c ' "$log" | head -3
    fi
    touch src/backends/gpu/gpu_rt.h
    cmake --build "$dir" -j"$jobs" --verbose --target mlxcel >"$log" 2>&1 || bad "$dir: rebuild after touching a header failed"
    if grep -qE '(nvcc|hipcc).*runtime\.cu' "$log" && grep -qE 'gpu_backend\.c' "$log"; then
        ok "$dir: touching gpu_rt.h recompiled its dependents (runtime.cu, gpu_backend.c)"
    else
        bad "$dir: touching gpu_rt.h did not recompile runtime.cu and gpu_backend.c"
    fi
    cmake --build "$dir" -j"$jobs" --verbose --target mlxcel >"$log" 2>&1
    if grep -qE '(nvcc|hipcc|cc|gcc) .* -c ' "$log"; then
        bad "$dir: a second build recompiled something"
        grep -E ' -c ' "$log" | head -3
    else
        ok "$dir: a second build is a no-op"
    fi
    touch cmake/gpu.cmake
    cmake --build "$dir" -j"$jobs" --target mlxcel >"$log" 2>&1 || bad "$dir: build after touching cmake/gpu.cmake failed"
    if grep -q "Configuring done" "$log" && grep -qE "architectures .*\(from MLXCEL_(CUDA|ROCM)_ARCHITECTURES\)" "$log"; then
        ok "$dir: touching cmake/gpu.cmake reconfigured cleanly with the cached architecture list"
    else
        bad "$dir: reconfigure after touching cmake/gpu.cmake did not go as expected"
        tail -5 "$log"
    fi
done
exit $fail
