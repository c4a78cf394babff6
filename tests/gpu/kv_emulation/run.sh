#!/bin/sh
# SPDX-License-Identifier: MIT
# Checks the GPU's KV cache kernels without a GPU: converts kernels/rope_kv.cu, attention.cu,
# attn_decode.cu, latent.cu and vendor/cuda/attn_mma.cu to host C++ (to_host.py), builds them with
# the host emulation (emu.h) and test_kv_emulated.cpp against the CPU build's library, and runs it (every cache byte and attention
# output against the CPU backend); then the same for moe.cu's router (test_moe_emulated.cpp: the
# experts and weights against the CPU backend's, NaN and infinite router logits included) and
# moe_stream.cu's fused decode kernels (against the tests' double-precision reference, gpu_ref.c).
# A check of index arithmetic and logic before a device run, not a
# replacement for it (tests/gpu/run_on_device.sh). Needs g++ (C++20) and the CPU build (made here
# when build/cpu has no library). Takes under a minute on two cores (--asan: several minutes).
# Usage: tests/gpu/kv_emulation/run.sh [--asan] [quick]   (--asan: AddressSanitizer; both: fewer cases)
# With MLXCEL_EMU_LIB (a CPU build's directory; ctest's gpu_kv_emulation) it links that build's
# library and builds into $MLXCEL_EMU_OUT (default build/kv_emulation).
set -eu
cd "$(dirname "$0")/../../.."
lib=${MLXCEL_EMU_LIB:-build/cpu}
[ -f "$lib/libmlxcel_lib.a" ] || { cmake --preset cpu >/dev/null && cmake --build --preset cpu --target mlxcel_lib -j2; }
out=${MLXCEL_EMU_OUT:-build/kv_emulation}
mkdir -p "$out"
for f in rope_kv qk_norm_rope attention attn_decode latent moe moe_stream; do
    python3 tests/gpu/kv_emulation/to_host.py "src/backends/gpu/kernels/$f.cu" >"$out/$f.cpp"
done
python3 tests/gpu/kv_emulation/to_host.py src/backends/gpu/vendor/cuda/attn_mma.cu >"$out/attn_mma.cpp"
flags="-std=c++20 -O1 -w -Isrc -Iinclude -I$lib/generated -Itests/gpu/kv_emulation"
arg=""
if [ "${1:-}" = --asan ]; then flags="$flags -g -fsanitize=address"; arg=quick; shift; fi
[ "${1:-}" = quick ] && arg=quick
# shellcheck disable=SC2086,SC2046
g++ $flags -o "$out/test_kv_emulated" tests/gpu/kv_emulation/emu.cpp tests/gpu/kv_emulation/test_kv_emulated.cpp \
    "$out/rope_kv.cpp" "$out/qk_norm_rope.cpp" "$out/attention.cpp" "$out/attn_mma.cpp" "$out/attn_decode.cpp" "$out/latent.cpp" "$lib/libmlxcel_lib.a" \
    $(pkg-config --libs jansson libpcre2-8 libutf8proc libmicrohttpd) -lcurl -lm -lpthread
gcc -std=c11 -O1 -Isrc -Iinclude -c tests/gpu/gpu_ref.c -o "$out/gpu_ref.o"
# shellcheck disable=SC2086,SC2046
g++ $flags -Itests/gpu -o "$out/test_moe_emulated" tests/gpu/kv_emulation/emu.cpp tests/gpu/kv_emulation/test_moe_emulated.cpp \
    "$out/moe.cpp" "$out/moe_stream.cpp" "$out/gpu_ref.o" "$lib/libmlxcel_lib.a" \
    $(pkg-config --libs jansson libpcre2-8 libutf8proc libmicrohttpd) -lcurl -lm -lpthread
"$out/test_moe_emulated"
exec "$out/test_kv_emulated" $arg
