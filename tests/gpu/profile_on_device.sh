#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Hardware-counter profiles (Nsight Compute, clocks left alone) of the main GPU kernels on a Qwen3-8B
# shape: the first tensor-core prefill matmul, the first matrix-vector product (the lm_head of the
# prefill's last token) and the first prefill attention. Builds the cuda preset first if needed
# (dependencies as in run_on_device.sh). Output: $OUT/ncu.txt and the tail on stdout. Each build and
# profile is a step (tests/gpu/steps.sh): "N passed, M failed" at the end, recorded in
# tests/gpu/LAST_RUN.md; exit 1 when any failed.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
. tests/gpu/steps.sh
if [ ! -x build/cuda/bench_gpu_decode ]; then
    . tests/gpu/devdeps.sh
    mxg_install_devdeps || verdict dependencies FAIL "C libraries missing and no build/devdeps carried"
    # shellcheck disable=SC2046,SC2015  # the hub flag is nothing or one word; the build runs after configure
    step configure 300 cmake --preset cuda -DMLXCEL_SERVER_TESTS=OFF $(mxg_hub_flag) &&
        step build 420 cmake --build build/cuda -j"$(nproc)" --target bench_gpu_decode ||
        steps_finish profile_on_device.sh
fi
sections=(--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats
          --section SchedulerStats --section MemoryWorkloadAnalysis)
: >"$OUT/ncu.txt"
for k in mma_kernel matvec_kernel attn_kernel; do
    step "ncu_$k" 240 ncu --clock-control none -k "regex:$k" -c 1 "${sections[@]}" \
        build/cuda/bench_gpu_decode qwen3-8b 512 512 5
    { echo "===== $k"; grep -vE "^==PROF==|^(prefill|decode|per-op|  [a-z])" "$LOGS/ncu_$k.log"; } >>"$OUT/ncu.txt"
done
grep -E "=====|Duration|Throughput|Registers|Achieved Occupancy|Theoretical Occupancy|Issued Warp|No Eligible|Stall|Warp Cycles Per Issued|One or More|Block Limit|Dynamic Shared|Bank" "$OUT/ncu.txt" | head -120
# Instruction mix of the 4-bit (bf16 scales) instantiations, from the compiled objects.
sass_mix() {  # sass_mix OBJECT FUNCTION-REGEX TITLE: the 25 commonest SASS instructions of the functions matched
    local obj
    obj=$(find build/cuda -name "$1" | head -1)
    { [ -n "$obj" ] && command -v cuobjdump >/dev/null; } || return 0
    echo "===== SASS instruction mix, $3" | tee -a "$OUT/ncu.txt"
    cuobjdump -sass "$obj" | awk -v re="Function : .*$2" '$0 ~ re {f=1;next} /Function : /{f=0} f' |
        grep -oE '^\s+/\*[0-9a-f]{4}\*/\s+[A-Z][A-Z0-9_]*' | awk '{print $2}' | sort | uniq -c | sort -rn | head -25 |
        tee -a "$OUT/ncu.txt"
}
sass_mix matmul_mma.cu.o 'mma_kernel.*Fmt.*Li1ELi4ELi2E' "mma_kernel<affine 4-bit, bf16 scales>"
sass_mix matvec.cu.o 'matvec_kernel.*Li1ELi4ELi2EEELi1ELi4ELb0' "matvec_kernel<affine 4-bit, bf16, NT 1, R 4>"
steps_finish profile_on_device.sh
