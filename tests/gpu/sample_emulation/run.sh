#!/bin/sh
# SPDX-License-Identifier: MIT
# Checks the GPU's token choice kernels without a GPU: converts kernels/sample.cu (one block per row),
# kernels/sample_split.cu (a row split over many blocks) and kernels/sample_fast.cu (the split form's
# fast form) to host C++ (kv_emulation/to_host.py), builds them with the host emulation
# (kv_emulation/emu.h) and test_sample_emulated.cpp against the CPU build's library (the host rule,
# core/sample_rows.c), and runs it. A check of the split form's
# logic (with its fast form, MLXCEL_GPU_SAMPLE_FAST, bit for bit against it) and of its agreement
# with the one-block form before a device run, not a replacement for it
# (tests/gpu/sample_on_device.sh). Needs g++ (C++20) and the CPU build (made here when build/cpu has
# no library). About five minutes on two cores (quick: two to three).
# Usage: tests/gpu/sample_emulation/run.sh [--asan] [quick]   (--asan: AddressSanitizer, fewer cases)
set -eu
cd "$(dirname "$0")/../../.."
[ -f build/cpu/libmlxcel_lib.a ] || { cmake --preset cpu >/dev/null && cmake --build --preset cpu --target mlxcel_lib -j2; }
out=build/sample_emulation
mkdir -p "$out"
for f in sample sample_split sample_fast; do
    python3 tests/gpu/kv_emulation/to_host.py "src/backends/gpu/kernels/$f.cu" >"$out/$f.cpp"
done
flags="-std=c++20 -O2 -w -Isrc -Iinclude -Ibuild/cpu/generated -Itests/gpu/kv_emulation"
arg=""
if [ "${1:-}" = --asan ]; then flags="$flags -g -O1 -fsanitize=address"; arg=quick; shift; fi
[ "${1:-}" = quick ] && arg=quick
# shellcheck disable=SC2086
g++ $flags -o "$out/test_sample_emulated" tests/gpu/kv_emulation/emu.cpp tests/gpu/sample_emulation/test_sample_emulated.cpp \
    "$out/sample.cpp" "$out/sample_split.cpp" "$out/sample_fast.cpp" build/cpu/libmlxcel_lib.a \
    $(pkg-config --libs jansson libpcre2-8 libutf8proc libmicrohttpd) -lcurl -lm -lpthread
exec "$out/test_sample_emulated" $arg
