#!/bin/sh
# SPDX-License-Identifier: MIT
# Checks the tensor-core decode product, the pipelined prefill product and the wgmma prefill product
# without a GPU: converts vendor/cuda/matvec_mma.cu, matmul_pipe.cu and matmul_wgmma.cu to host C++
# (kv_emulation/to_host.py), builds each with the host emulation (kv_emulation/emu.h, which carries
# an mma.sync m16n8k16 by the PTX ISA's fragment layout; emu_pipe.h: cp.async and packed bf16 math,
# for both prefill products; emu_wgmma.h: wgmma.mma_async with A in registers, by the PTX ISA's
# descriptor and fragment rules) and its test (test_matvec_mma_emulated.cpp, test_matmul_pipe_emulated.cpp,
# test_matmul_wgmma_emulated.cpp) against the CPU build's library (the reference dequantization),
# and runs them. A check of the fragment and index
# arithmetic before a device run, not a replacement for it (tests/gpu/batch_on_device.sh). Needs gcc
# and g++ (C++20); links only the two core files it uses (quant.c, dtype.c), so it needs no build.
# About a minute on two cores, quick form (ctest runs it as gpu_mma_emulation; the wgmma
# product's mutation check is mutants.sh, ctest's gpu_wgmma_mutants).
# Usage: tests/gpu/mma_emulation/run.sh [--asan] [quick]   (--asan: AddressSanitizer, fewer cases)
# The build goes to $MLXCEL_EMU_OUT (default build/mma_emulation).
set -eu
cd "$(dirname "$0")/../../.."
out=${MLXCEL_EMU_OUT:-build/mma_emulation}
mkdir -p "$out"
python3 tests/gpu/kv_emulation/to_host.py src/backends/gpu/vendor/cuda/matvec_mma.cu >"$out/matvec_mma.cpp"
python3 tests/gpu/kv_emulation/to_host.py src/backends/gpu/vendor/cuda/matmul_pipe.cu >"$out/matmul_pipe.cpp"
python3 tests/gpu/kv_emulation/to_host.py src/backends/gpu/vendor/cuda/matmul_wgmma.cu >"$out/matmul_wgmma.cpp"
flags="-std=c++20 -O2 -w -Isrc -Iinclude -Itests/gpu/kv_emulation"
arg=""
if [ "${1:-}" = --asan ]; then flags="$flags -g -O1 -fsanitize=address"; arg=quick; shift; fi
[ "${1:-}" = quick ] && arg=quick
for f in quant dtype; do gcc -std=c11 -O2 -Isrc -Iinclude -c "src/core/$f.c" -o "$out/$f.o"; done
# shellcheck disable=SC2086
g++ $flags -o "$out/test_matvec_mma_emulated" tests/gpu/kv_emulation/emu.cpp \
    tests/gpu/mma_emulation/test_matvec_mma_emulated.cpp "$out/matvec_mma.cpp" "$out/quant.o" "$out/dtype.o" -lm
# shellcheck disable=SC2086
g++ $flags -include tests/gpu/mma_emulation/emu_pipe.h -o "$out/test_matmul_pipe_emulated" tests/gpu/kv_emulation/emu.cpp \
    tests/gpu/mma_emulation/test_matmul_pipe_emulated.cpp "$out/matmul_pipe.cpp" "$out/quant.o" "$out/dtype.o" -lm
# shellcheck disable=SC2086
g++ $flags -include tests/gpu/mma_emulation/emu_wgmma.h -o "$out/test_matmul_wgmma_emulated" tests/gpu/kv_emulation/emu.cpp \
    tests/gpu/mma_emulation/test_matmul_wgmma_emulated.cpp "$out/matmul_wgmma.cpp" "$out/quant.o" "$out/dtype.o" -lm
"$out/test_matmul_pipe_emulated" $arg
"$out/test_matmul_wgmma_emulated" $arg
exec "$out/test_matvec_mma_emulated" $arg
