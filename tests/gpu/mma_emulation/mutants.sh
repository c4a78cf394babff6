#!/bin/sh
# SPDX-License-Identifier: MIT
# The mutation check of the wgmma prefill product's emulation (test_matmul_wgmma_emulated.cpp):
# plants one fault at a time in the host copy of vendor/cuda/matmul_wgmma.cu (a planted fault: a
# fragment set written while its products are in flight, a copy wait one step short, a ring stage
# refilled while read, the activations' k order, the scratch chunk an activation copy reads, the
# scale group of a lane, the descriptor's two byte offsets swapped, the A fragment registers of a
# slice swapped, the slot a wide scale word is read from, the scales a wide copy reads), builds the test against it and wants it to fail (its "mutant" cases: the first case of each scale format and an f16 one on the wide scale copies). Exits 1 if a
# fault passes or is no longer found in the source (the kernel changed: update the list). Needs
# gcc and g++ (C++20); about 1 minute on two cores (ctest runs it as gpu_wgmma_mutants).
# Usage: tests/gpu/mma_emulation/mutants.sh   (the build goes to $MLXCEL_EMU_OUT/mutants)
set -eu
cd "$(dirname "$0")/../../.."
out=${MLXCEL_EMU_OUT:-build/mma_emulation}/mutants
mkdir -p "$out"
python3 tests/gpu/kv_emulation/to_host.py src/backends/gpu/vendor/cuda/matmul_wgmma.cu >"$out/matmul_wgmma.cpp"
flags="-std=c++20 -O1 -w -Isrc -Iinclude -Itests/gpu/kv_emulation"
for f in quant dtype; do gcc -std=c11 -O2 -Isrc -Iinclude -c "src/core/$f.c" -o "$out/$f.o"; done
# shellcheck disable=SC2086
g++ $flags -include tests/gpu/mma_emulation/emu_wgmma.h -c -o "$out/emu.o" tests/gpu/kv_emulation/emu.cpp
# shellcheck disable=SC2086
g++ $flags -include tests/gpu/mma_emulation/emu_wgmma.h -c -o "$out/test.o" tests/gpu/mma_emulation/test_matmul_wgmma_emulated.cpp
status=0
i=0
while IFS='|' read -r old new; do
    i=$((i + 1))
    if ! python3 - "$out/matmul_wgmma.cpp" "$out/mutant$i.cpp" "$old" "$new" <<'PY'
import sys
src = open(sys.argv[1]).read()
if src.count(sys.argv[3]) != 1:
    sys.exit(1)
open(sys.argv[2], 'w').write(src.replace(sys.argv[3], sys.argv[4]))
PY
    then
        echo "FAIL: mutant $i: '$old' not found once in matmul_wgmma.cu"
        status=1
        continue
    fi
    # shellcheck disable=SC2086
    g++ $flags -include tests/gpu/mma_emulation/emu_wgmma.h -o "$out/mutant$i" "$out/emu.o" "$out/test.o" \
        "$out/mutant$i.cpp" "$out/quant.o" "$out/dtype.o" -lm
    if "$out/mutant$i" mutant >"$out/mutant$i.log" 2>&1; then
        echo "FAIL: mutant $i passed: '$old' -> '$new'"
        status=1
    else
        echo "caught: mutant $i ('$old' -> '$new'): $(grep -m1 -E 'FAIL|emu' "$out/mutant$i.log" | cut -c1-100)"
    fi
done <<'LIST'
dequant((kt + 1) % kStages, kt + 1, nxt);|dequant((kt + 1) % kStages, kt + 1, cur);
mxg_cp_async_wait<kStages - 3>();|mxg_cp_async_wait<kStages - 2>();
issue((kt + kStages - 1) % kStages, kt + kStages - 1);|issue(kt % kStages, kt + kStages - 1);
const int k = 16 * j + 8 * (c % 2) + c / 2;|const int k = 16 * j + 8 * (c / 4) + c % 4;
const int h = two_groups ? t >> 1 : 0;|const int h = 0;
MXG_WG_LBO, MXG_WG_LBO, MXG_WG_SBO)|MXG_WG_LBO, MXG_WG_SBO, MXG_WG_LBO)
a[s][j + 2 * e] = mxg_bf16x2_fma(|a[s][2 * j + e] = mxg_bf16x2_fma(
+ xc * 8 + tid % 8) * 8;|+ (tid % 8) * 8 + xc) * 8;
2 * ((kt / kSbSteps) % 2) * T::stage_bytes|2 * ((kt / kSbSteps + 1) % 2) * T::stage_bytes
(const uint16_t *)sb_base + cr * m.groups + kt);|(const uint16_t *)sb_base + cr * m.groups + kt / 2);
LIST
[ $status = 0 ] && echo "every planted fault caught"
exit $status
