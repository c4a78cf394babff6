#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# CI for the GPU presets on a machine without a GPU (called by .ci/run):
#  - CUDA preset with nvcc for sm_90 (MLXCEL_CUDA_ARCHITECTURES=90: there is no GPU to ask);
#  - ROCm preset with Debian 12's ROCm 5.2 (hipcc, libamdhip64-dev, rocminfo; installed here when
#    missing) for gfx90a (wave64: the warp width CUDA builds never take; a second architecture
#    doubles the ~8 minutes its kernels take on two cores; `-DMLXCEL_ROCM_ARCHITECTURES=gfx1030`
#    builds the wave32 form the same way);
#  - in each: the GPU ctest group (build contract: RUNPATH, parsers, refusals; the op suite skips
#    without a device), and the no-device path of the programs: `mlxcel info` lists what was built
#    and that no GPU was found, `generate` fails with a clear message and exit 1, `--backend cpu`
#    still generates;
#  - scripts/check_build_contract.sh on both folders (CPU build compiles no .cu, nothing is
#    downloaded, incremental rebuilds and reconfigure behave).
# Set MLXCEL_CI_SKIP_CUDA=1 or MLXCEL_CI_SKIP_ROCM=1 to leave one out.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)
args=${MLXCEL_CMAKE_ARGS:-}
folders=()

no_device_checks() {  # no_device_checks <build folder> <vendor word>
    local dir=$1 vendor=$2 out rc
    out=$(env -u LD_LIBRARY_PATH "$dir/mlxcel" info 2>&1) || { echo "$out"; echo "FAIL: $dir/mlxcel info"; return 1; }
    echo "$out"
    grep -q "no $vendor GPU found" <<<"$out" || { echo "FAIL: info does not say that no $vendor GPU was found"; return 1; }
    grep -qE "built with .* for architectures" <<<"$out" || { echo "FAIL: info does not list the built architectures"; return 1; }
    set +e
    out=$(env -u LD_LIBRARY_PATH "$dir/mlxcel" generate -p Hello -n 4 --temp 0 2>&1)
    rc=$?
    set -e
    echo "$out"
    [ $rc -eq 1 ] && grep -q "no $vendor GPU found" <<<"$out" && grep -q -- "--backend cpu" <<<"$out" ||
        { echo "FAIL: generate without a GPU should exit 1 naming the missing GPU and --backend cpu (rc $rc)"; return 1; }
    out=$(env -u LD_LIBRARY_PATH "$dir/mlxcel" generate --backend cpu -p Hello -n 4 --temp 0 2>&1) ||
        { echo "$out"; echo "FAIL: --backend cpu does not work in $dir"; return 1; }
    echo "$out" | tail -3
    echo "ok: $dir no-device path"
}

if [ "${MLXCEL_CI_SKIP_CUDA:-0}" != 1 ]; then
    echo "== CUDA preset (nvcc, sm_90)"
    export PATH=$PATH:/usr/local/cuda/bin
    cmake --preset cuda -DMLXCEL_CUDA_ARCHITECTURES=90 $args
    cmake --build --preset cuda -j"$jobs"
    ctest --test-dir build/cuda --output-on-failure -R '^(gpu_|spdx)'
    no_device_checks build/cuda NVIDIA
    folders+=(build/cuda)
fi

if [ "${MLXCEL_CI_SKIP_ROCM:-0}" != 1 ]; then
    echo "== ROCm preset (hipcc, gfx90a)"
    if ! command -v hipcc >/dev/null && [ ! -x "${ROCM_PATH:-/opt/rocm}/bin/hipcc" ]; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq hipcc libamdhip64-dev rocminfo >/dev/null
    fi
    cmake --preset rocm -DMLXCEL_ROCM_ARCHITECTURES=gfx90a $args
    cmake --build --preset rocm -j"$jobs"
    ctest --test-dir build/rocm --output-on-failure -R '^(gpu_|spdx)'
    no_device_checks build/rocm AMD
    folders+=(build/rocm)
fi

echo "== build contract"
scripts/check_build_contract.sh "${folders[@]}"
