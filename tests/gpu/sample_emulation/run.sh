#!/bin/sh
# SPDX-License-Identifier: MIT
# Checks the GPU's token choice kernels without a GPU: converts kernels/sample.cu (one block per row),
# kernels/sample_split.cu (a row split over many blocks), kernels/sample_fast.cu (the split form's
# fast form) and kernels/rows.cu (the argmax of greedy steps) to host C++ (kv_emulation/to_host.py), builds them with the host emulation
# (kv_emulation/emu.h) and test_sample_emulated.cpp against the CPU build's library (the host rule,
# core/sample_rows.c), and runs it. A check of the split form's
# logic (with its fast form, MLXCEL_GPU_SAMPLE_FAST, bit for bit against it) and of its agreement
# with the one-block form before a device run, not a replacement for it
# (tests/gpu/sample_on_device.sh). Then MLXCEL_GPU_PDL=3's planted faults (the test's "pdl" cases
# must fail with each): the stats kernel's grid wait moved below its first reads of the logits,
# split_cut's wait left out, and the argmax's clearing of its scratch for the next launch left out.
# Needs g++ (C++20) and the CPU build (made here when build/cpu has
# no library). About five minutes on two cores (quick: two to three).
# Usage: tests/gpu/sample_emulation/run.sh [--asan] [quick]   (--asan: AddressSanitizer, fewer cases)
set -eu
cd "$(dirname "$0")/../../.."
[ -f build/cpu/libmlxcel_lib.a ] || { cmake --preset cpu >/dev/null && cmake --build --preset cpu --target mlxcel_lib -j2; }
out=build/sample_emulation
mkdir -p "$out"
for f in sample sample_split sample_fast rows; do
    python3 tests/gpu/kv_emulation/to_host.py "src/backends/gpu/kernels/$f.cu" >"$out/$f.cpp"
done
flags="-std=c++20 -O2 -w -Isrc -Iinclude -Ibuild/cpu/generated -Itests/gpu/kv_emulation"
arg=""
if [ "${1:-}" = --asan ]; then flags="$flags -g -O1 -fsanitize=address"; arg=quick; shift; fi
[ "${1:-}" = quick ] && arg=quick
# shellcheck disable=SC2086
wait_line='    mxg_grid_wait_release(rest);  // MLXCEL_GPU_PDL=3: nothing before reads what earlier kernels wrote'
mkdir -p "$out/fault_stats" "$out/fault_cut" "$out/fault_argmax"
for d in fault_stats fault_cut fault_argmax; do cp "$out/sample.cpp" "$out/sample_split.cpp" "$out/sample_fast.cpp" "$out/rows.cpp" "$out/$d/"; done
# The stats kernel's wait (its first) moved below the loops that read the slice's logits.
awk -v w="$wait_line" '$0 == w && !done { done = 1; next } { print } /the slice.s raw values are read before its edits/ { print w }' \
    "$out/sample_split.cpp" >"$out/fault_stats/sample_split.cpp"
# split_cut's wait (the second in the file) left out.
awk -v w="$wait_line" '$0 == w && ++n == 2 { next } { print }' "$out/sample_fast.cpp" >"$out/fault_cut/sample_fast.cpp"
sed '/if (rest) keys\[row\] = 0ull, tickets\[row\] = 0u;/d' "$out/rows.cpp" >"$out/fault_argmax/rows.cpp"
for f in fault_stats/sample_split fault_cut/sample_fast fault_argmax/rows; do
    ! cmp -s "$out/$f.cpp" "$out/${f#*/}.cpp" || { echo "run.sh: the planted fault $f did not apply"; exit 1; }
done
for d in . fault_stats fault_cut fault_argmax; do
    # shellcheck disable=SC2086,SC2046
    g++ $flags -o "$out/$d/test_sample_emulated" tests/gpu/kv_emulation/emu.cpp tests/gpu/sample_emulation/test_sample_emulated.cpp \
        "$out/$d/sample.cpp" "$out/$d/sample_split.cpp" "$out/$d/sample_fast.cpp" "$out/$d/rows.cpp" build/cpu/libmlxcel_lib.a \
        $(pkg-config --libs jansson libpcre2-8 libutf8proc libmicrohttpd) -lcurl -lm -lpthread
done
for d in fault_stats fault_cut fault_argmax; do
    if "$out/$d/test_sample_emulated" pdl >"$out/$d.log" 2>&1; then
        echo "MLXCEL_GPU_PDL=3: the planted fault $d passed the emulation: FAIL"; exit 1
    fi
    echo "MLXCEL_GPU_PDL=3: the planted fault $d fails the emulation ($(grep -c FAIL "$out/$d.log") failures): ok"
done
exec "$out/test_sample_emulated" $arg
