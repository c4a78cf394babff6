#!/bin/sh
# SPDX-License-Identifier: MIT
# Checks the GPU's KV cache kernels without a GPU: converts kernels/rope_kv.cu, attention.cu,
# attn_decode.cu, latent.cu and vendor/cuda/attn_mma.cu to host C++ (to_host.py), builds them with
# the host emulation (emu.h) and test_kv_emulated.cpp against the CPU build's library, and runs it (every cache byte and attention
# output against the CPU backend); then the same for moe.cu's router (test_moe_emulated.cpp: the
# experts and weights against the CPU backend's, NaN and infinite router logits included) and
# moe_stream.cu's fused decode kernels (against the tests' double-precision reference, gpu_ref.c) and
# moe_router.cu's router launch (the CPU backend's routing on its logits; then two planted faults of
# level 3 that must fail; the warp routing against the block form's bits and MLXCEL_GPU_PDL=3's
# down prefetch, with planted faults), the decode attention with RoPE folded in against two planted faults, and
# the streaming kernel's lean one-token form (test_stream_lean_emulated.cpp: bit for bit today's,
# within the float32 bound of the reference, and a planted fault that must fail); and MLXCEL_GPU_PDL=3's
# order (the q/k launch, the decode attention and its combine as dependent launches under emu.h's
# emulated order) against three planted faults.
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
for f in rope_kv qk_norm_rope attention attn_decode latent moe moe_stream moe_router; do
    python3 tests/gpu/kv_emulation/to_host.py "src/backends/gpu/kernels/$f.cu" >"$out/$f.cpp"
done
python3 tests/gpu/kv_emulation/to_host.py src/backends/gpu/vendor/cuda/attn_mma.cu >"$out/attn_mma.cpp"
python3 tests/gpu/kv_emulation/to_host.py src/backends/gpu/kernels/matvec_fused.cu >"$out/matvec_fused.cpp"
# The streaming kernel lives in headers (matvec_fused.cu's launches): converted copies of them first
# on the include path of the builds that link matvec_fused.cpp.
mkdir -p "$out/inc/backends/gpu/kernels" "$out/fault_lean/backends/gpu/kernels" "$out/fault_prefetch/backends/gpu/kernels" \
    "$out/fault_past/backends/gpu/kernels"
for h in matvec_stream matvec_stream_lean; do
    python3 tests/gpu/kv_emulation/to_host.py "src/backends/gpu/kernels/$h.cuh" >"$out/inc/backends/gpu/kernels/$h.cuh"
done
flags="-std=c++20 -O1 -w -Isrc -Iinclude -I$lib/generated -Itests/gpu/kv_emulation"
arg=""
if [ "${1:-}" = --asan ]; then flags="$flags -g -fsanitize=address"; arg=quick; shift; fi
[ "${1:-}" = quick ] && arg=quick
# test_kv_emulated's objects, built once: the planted faults below link the same ones but one.
for f in tests/gpu/kv_emulation/emu.cpp tests/gpu/kv_emulation/test_kv_emulated.cpp "$out/rope_kv.cpp" \
    "$out/qk_norm_rope.cpp" "$out/attention.cpp" "$out/attn_mma.cpp" "$out/attn_decode.cpp" "$out/latent.cpp"; do
    # shellcheck disable=SC2086
    g++ $flags -c "$f" -o "$out/kv_$(basename "$f" .cpp).o"
done
# kv_link NAME QK_OBJ DECODE_OBJ: a test_kv_emulated binary with those objects for qk_norm_rope and attn_decode.
kv_link() {
    # shellcheck disable=SC2086,SC2046
    g++ $flags -o "$out/$1" "$out/kv_emu.o" "$out/kv_test_kv_emulated.o" "$out/kv_rope_kv.o" "$2" "$out/kv_attention.o" \
        "$out/kv_attn_mma.o" "$3" "$out/kv_latent.o" "$lib/libmlxcel_lib.a" \
        $(pkg-config --libs jansson libpcre2-8 libutf8proc libmicrohttpd) -lcurl -lm -lpthread
}
kv_link test_kv_emulated "$out/kv_qk_norm_rope.o" "$out/kv_attn_decode.o"
gcc -std=c11 -O1 -Isrc -Iinclude -c tests/gpu/gpu_ref.c -o "$out/gpu_ref.o"
# shellcheck disable=SC2086,SC2046
g++ -I"$out/inc" $flags -Itests/gpu -o "$out/test_moe_emulated" tests/gpu/kv_emulation/emu.cpp tests/gpu/kv_emulation/test_moe_emulated.cpp \
    "$out/moe.cpp" "$out/moe_stream.cpp" "$out/moe_router.cpp" "$out/gpu_ref.o" \
    "$lib/libmlxcel_lib.a" $(pkg-config --libs jansson libpcre2-8 libutf8proc libmicrohttpd) -lcurl -lm -lpthread
# The streaming kernel's lean form (MLXCEL_GPU_STREAM_LEAN=1; test_stream_lean_emulated.cpp) through
# matvec_fused.cu, whose streaming kernel lives in headers: converted copies of them come first on the
# include path. Then against a planted fault: each chunk's sum of x read from the neighbouring chunk
# (sums[c ^ 1]), which moves every bias term: it must fail.
# MLXCEL_GPU_PDL=2's planted fault: the per-warp prefetch budget ignored (common.cuh, prefetch_span).
sed 's/const unsigned n = hi - lo < budget ? (unsigned)(hi - lo) : budget;/const unsigned n = (unsigned)(hi - lo);/' \
    src/backends/gpu/common.cuh >"$out/fault_prefetch/backends/gpu/common.cuh"
! cmp -s src/backends/gpu/common.cuh "$out/fault_prefetch/backends/gpu/common.cuh" ||
    { echo "run.sh: the planted prefetch fault did not apply"; exit 1; }
# MLXCEL_GPU_PREFETCH_PAST=1's planted fault: each row's codes prefetched from its start (matvec.cuh,
# prefetch_rows).
sed 's/prefetch_span(m.data + (r0 + j) \* m.row_bytes + past, m.row_bytes - past, b);/prefetch_span(m.data + (r0 + j) * m.row_bytes, m.row_bytes - past, b);/' \
    src/backends/gpu/kernels/matvec.cuh >"$out/fault_past/backends/gpu/kernels/matvec.cuh"
! cmp -s src/backends/gpu/kernels/matvec.cuh "$out/fault_past/backends/gpu/kernels/matvec.cuh" ||
    { echo "run.sh: the planted prefetch past fault did not apply"; exit 1; }
sed 's/const float xs = sums\[c\];/const float xs = sums[c ^ 1];/' "$out/inc/backends/gpu/kernels/matvec_stream_lean.cuh" \
    >"$out/fault_lean/backends/gpu/kernels/matvec_stream_lean.cuh"
! cmp -s "$out/inc/backends/gpu/kernels/matvec_stream_lean.cuh" "$out/fault_lean/backends/gpu/kernels/matvec_stream_lean.cuh" ||
    { echo "run.sh: the planted stream lean fault did not apply"; exit 1; }
for variant in good fault fault_prefetch fault_past; do
    inc="-I$out/inc"
    [ $variant = fault ] && inc="-I$out/fault_lean $inc"
    [ $variant = fault_prefetch ] && inc="-I$out/fault_prefetch $inc"
    [ $variant = fault_past ] && inc="-I$out/fault_past $inc"
    # shellcheck disable=SC2086,SC2046
    g++ $inc $flags -Itests/gpu -o "$out/test_stream_lean_$variant" tests/gpu/kv_emulation/emu.cpp \
        tests/gpu/kv_emulation/test_stream_lean_emulated.cpp "$out/matvec_fused.cpp" "$out/gpu_ref.o" \
        "$lib/libmlxcel_lib.a" $(pkg-config --libs jansson libpcre2-8 libutf8proc libmicrohttpd) -lcurl -lm -lpthread
done
"$out/test_stream_lean_good" $arg
if "$out/test_stream_lean_fault" quick >"$out/stream_lean_fault.log" 2>&1; then
    echo "stream lean: the planted sum fault passed the emulation: FAIL"; exit 1
fi
echo "stream lean: the planted sum fault (sums[c ^ 1]) fails the emulation ($(grep -c FAIL "$out/stream_lean_fault.log") failures): ok"
"$out/test_stream_lean_fault_prefetch" quick >"$out/stream_prefetch_fault.log" 2>&1 || true
n=$(grep -c "FAIL.*bad prefetch" "$out/stream_prefetch_fault.log" || true)
[ "$n" -gt 0 ] || { echo "stream pdl=2: the planted fault (prefetch budget ignored) passed the emulation: FAIL"; exit 1; }
echo "stream pdl=2: the planted fault (prefetch budget ignored) fails the emulation ($n failures): ok"
"$out/test_stream_lean_fault_past" quick >"$out/stream_past_fault.log" 2>&1 || true
n=$(grep -c "FAIL.*prefetched what the first step loads" "$out/stream_past_fault.log" || true)
[ "$n" -gt 0 ] || { echo "stream prefetch past: the planted fault (codes from the row's start) passed the emulation: FAIL"; exit 1; }
echo "stream prefetch past: the planted fault (codes from the row's start) fails the emulation ($n failures): ok"
"$out/test_moe_emulated"
# Level 3's planted faults (test_moe_emulated.cpp must fail with them): the router's last ticket one
# early (a block routes before the token's last logits are written, and the counter is left set),
# and the down launch's early combine weights read for the neighbouring expert (j ^ 1).
sed 's/(unsigned)a.blocks_per_token - 1;/(unsigned)a.blocks_per_token - 2;/' "$out/moe_router.cpp" >"$out/moe_router_fault.cpp"
sed 's/wts\[j\] = j < k ? a.weights\[(int64_t)t \* k + j\]/wts[j] = j < k ? a.weights[(int64_t)t * k + (j ^ 1)]/' \
    "$out/moe_stream.cpp" >"$out/moe_stream_fault.cpp"
for f in moe_router moe_stream; do
    ! cmp -s "$out/$f.cpp" "$out/${f}_fault.cpp" || { echo "run.sh: the planted $f fault did not apply"; exit 1; }
done
# shellcheck disable=SC2086,SC2046
g++ -I"$out/inc" $flags -Itests/gpu -o "$out/test_moe_fault" tests/gpu/kv_emulation/emu.cpp tests/gpu/kv_emulation/test_moe_emulated.cpp \
    "$out/moe.cpp" "$out/moe_stream_fault.cpp" "$out/moe_router_fault.cpp" "$out/gpu_ref.o" \
    "$lib/libmlxcel_lib.a" $(pkg-config --libs jansson libpcre2-8 libutf8proc libmicrohttpd) -lcurl -lm -lpthread
"$out/test_moe_fault" >"$out/moe_fault.log" 2>&1 && { echo "moe level 3: the planted faults passed the emulation: FAIL"; exit 1; }
for w in "moe router" "level 3 down differs"; do
    grep -q "$w.*FAIL" "$out/moe_fault.log" || { echo "moe level 3: no failure from the planted fault ($w): FAIL"; exit 1; }
done
echo "moe level 3: the planted ticket and early-weight faults fail the emulation ($(grep -c FAIL "$out/moe_fault.log") failures): ok"
# The warp routing's and MLXCEL_GPU_PDL=3's planted faults (test_moe_emulated.cpp must fail with each,
# and each where it should): ties broken toward the larger index (moe_route.cuh, included by every
# MoE kernel: a faulty copy first on the include path), the block form's warp sums added in reverse
# order (the same experts, other weight bits), and the down launch's prefetch budget ignored.
mkdir -p "$out/fault_route/backends/gpu/kernels"
sed -e 's/return v_nan ? i < bi : v > bv || (v == bv \&\& i < bi);/return v_nan ? i < bi : v > bv || (v == bv \&\& i > bi);/' \
    -e 's/for (int p = 0; p < P; p++) sum += warp_sum<W>(part\[p\]);/for (int p = P - 1; p >= 0; p--) sum += warp_sum<W>(part[p]);/' \
    src/backends/gpu/kernels/moe_route.cuh >"$out/fault_route/backends/gpu/kernels/moe_route.cuh"
[ "$(diff src/backends/gpu/kernels/moe_route.cuh "$out/fault_route/backends/gpu/kernels/moe_route.cuh" | grep -c '^>')" = 2 ] ||
    { echo "run.sh: the planted routing faults did not both apply"; exit 1; }
sed 's/unsigned budget = a.prefetch;/unsigned budget = 1u << 30;/' "$out/moe_stream.cpp" >"$out/moe_stream_pdl_fault.cpp"
! cmp -s "$out/moe_stream.cpp" "$out/moe_stream_pdl_fault.cpp" || { echo "run.sh: the planted pdl=3 prefetch fault did not apply"; exit 1; }
# shellcheck disable=SC2086,SC2046
g++ -I"$out/fault_route" -I"$out/inc" $flags -Itests/gpu -o "$out/test_moe_route_fault" tests/gpu/kv_emulation/emu.cpp \
    tests/gpu/kv_emulation/test_moe_emulated.cpp "$out/moe.cpp" "$out/moe_stream_pdl_fault.cpp" "$out/moe_router.cpp" \
    "$out/gpu_ref.o" "$lib/libmlxcel_lib.a" $(pkg-config --libs jansson libpcre2-8 libutf8proc libmicrohttpd) -lcurl -lm -lpthread
"$out/test_moe_route_fault" >"$out/moe_route_fault.log" 2>&1 && { echo "moe routing: the planted faults passed the emulation: FAIL"; exit 1; }
for w in "moe_route ties.*differs from the CPU's.*FAIL" "moe_route random.*bits differ from the block form.*FAIL" \
    "moe fused .*pdl=3.*cap.*FAIL"; do
    grep -q "$w" "$out/moe_route_fault.log" || { echo "moe routing / pdl=3: no failure from a planted fault ($w): FAIL"; exit 1; }
done
grep -q "moe_route random.*differs from the CPU's" "$out/moe_route_fault.log" &&
    { echo "moe routing: the planted summation-order fault moved the choices: FAIL"; exit 1; }
echo "moe routing / pdl=3: the planted tie, summation-order and prefetch-budget faults fail the emulation ($(grep -c FAIL "$out/moe_route_fault.log") failures): ok"
# The decode attention with RoPE folded in (MLXCEL_GPU_ATTN_ROPE=1) against two planted faults, each
# of which must fail its cases (test_kv_emulated rope: outputs and cache bytes against the two
# launches): the token's own position read from the cache (which holds the slot's old row until the
# launch's end) instead of the row the launch made, and the cache write left to split 1 instead of
# split 0 (no write where the step has one split).
sed 's/if (ROPE \&\& p == hi) {/if (ROPE \&\& p == hi \&\& false) {/' "$out/attn_decode.cpp" >"$out/attn_rope_fault_read.cpp"
sed 's/if (split == 0 \&\& g0 == 0) {/if (split == 1 \&\& g0 == 0) {/' "$out/attn_decode.cpp" >"$out/attn_rope_fault_store.cpp"
for f in read store; do
    ! cmp -s "$out/attn_decode.cpp" "$out/attn_rope_fault_$f.cpp" || { echo "run.sh: the planted attn rope $f fault did not apply"; exit 1; }
    # shellcheck disable=SC2086
    g++ $flags -c "$out/attn_rope_fault_$f.cpp" -o "$out/attn_rope_fault_$f.o"
    kv_link "test_attn_rope_$f" "$out/kv_qk_norm_rope.o" "$out/attn_rope_fault_$f.o"
    "$out/test_attn_rope_$f" rope >"$out/attn_rope_fault_$f.log" 2>&1 && { echo "attn rope: the planted $f fault passed the emulation: FAIL"; exit 1; }
    n=$(grep -c "FAIL" "$out/attn_rope_fault_$f.log" || true)
    [ "$n" -gt 0 ] || { echo "attn rope: no failure from the planted $f fault: FAIL"; exit 1; }
    echo "attn rope: the planted $f fault fails the emulation ($n failures): ok"
done
# MLXCEL_GPU_PDL=3's planted faults, each of which must fail its own check of test_kv_emulated rope
# (the level 3 steps under emu.h's emulated order of dependent launches): the fused attention's grid
# wait moved below its reads of the raw q, k and v (its outputs differ), the q/k launch's wait moved
# below its reads of q and k (the two launches' outputs differ), the combine's wait left out (blocks
# without their wait).
sed -e '/mxg_grid_wait_release(a.early);  \/\/ level 3: nothing above/d' \
    -e 's/^\( *\)float q\[G\]\[8\];/\1mxg_grid_wait_release(a.early);\n&/' "$out/attn_decode.cpp" >"$out/pdl3_fault_attn.cpp"
sed -e '/mxg_grid_wait_release(early);    \/\/ level 3: nothing before/d' \
    -e 's/^\( *\)if (j < half) a = v\[j\], b = v\[j + half\];/&\n\1mxg_grid_wait_release(early);/' \
    "$out/qk_norm_rope.cpp" >"$out/pdl3_fault_qk.cpp"
sed '/mxg_grid_wait_release(early);  \/\/ level 3: a dependent launch; the partials/d' "$out/attn_decode.cpp" \
    >"$out/pdl3_fault_combine.cpp"
for f in attn:attn_decode qk:qk_norm_rope combine:attn_decode; do
    ! cmp -s "$out/${f#*:}.cpp" "$out/pdl3_fault_${f%%:*}.cpp" || { echo "run.sh: the planted level 3 ${f%%:*} fault did not apply"; exit 1; }
done
for f in attn qk combine; do
    # shellcheck disable=SC2086
    g++ $flags -c "$out/pdl3_fault_$f.cpp" -o "$out/pdl3_fault_$f.o"
done
kv_link test_pdl3_attn "$out/kv_qk_norm_rope.o" "$out/pdl3_fault_attn.o"
kv_link test_pdl3_qk "$out/pdl3_fault_qk.o" "$out/kv_attn_decode.o"
kv_link test_pdl3_combine "$out/kv_qk_norm_rope.o" "$out/pdl3_fault_combine.o"
for f in "attn:level 3: two launches same, fused DIFFER" "qk:level 3: two launches DIFFER" \
    "combine:blocks without their wait [0-9]* and [1-9]"; do
    "$out/test_pdl3_${f%%:*}" rope >"$out/pdl3_fault_${f%%:*}.log" 2>&1 &&
        { echo "pdl=3: the planted ${f%%:*} fault passed the emulation: FAIL"; exit 1; }
    n=$(grep -c "${f#*:}.*FAIL" "$out/pdl3_fault_${f%%:*}.log" || true)
    [ "$n" -gt 0 ] || { echo "pdl=3: no failure of its own check from the planted ${f%%:*} fault: FAIL"; exit 1; }
    echo "pdl=3: the planted ${f%%:*} fault fails the emulation ($n failures of its check): ok"
done
# The full-lane down form's planted fault: its products added into the neighbouring expert's sum.
sed 's/if (q == slot) acc\[q\] += d;/if (q == (slot ^ 1)) acc[q] += d;/' "$out/moe_stream.cpp" >"$out/moe_stream_flat_fault.cpp"
! cmp -s "$out/moe_stream.cpp" "$out/moe_stream_flat_fault.cpp" || { echo "run.sh: the planted full-lane down fault did not apply"; exit 1; }
# shellcheck disable=SC2086,SC2046
g++ -I"$out/inc" $flags -Itests/gpu -o "$out/test_moe_flat_fault" tests/gpu/kv_emulation/emu.cpp tests/gpu/kv_emulation/test_moe_emulated.cpp \
    "$out/moe.cpp" "$out/moe_stream_flat_fault.cpp" "$out/moe_router.cpp" "$out/gpu_ref.o" \
    "$lib/libmlxcel_lib.a" $(pkg-config --libs jansson libpcre2-8 libutf8proc libmicrohttpd) -lcurl -lm -lpthread
"$out/test_moe_flat_fault" >"$out/moe_flat_fault.log" 2>&1 && { echo "moe full-lane down: the planted fault passed the emulation: FAIL"; exit 1; }
grep -q "full-lane down differs.*FAIL" "$out/moe_flat_fault.log" || { echo "moe full-lane down: no failure from the planted fault: FAIL"; exit 1; }
grep -q "moe fused .*level 3 down differs" "$out/moe_flat_fault.log" &&
    { echo "moe full-lane down: the planted fault moved the warp-per-row form: FAIL"; exit 1; }
echo "moe full-lane down: the planted slot fault fails the emulation ($(grep -c FAIL "$out/moe_flat_fault.log") failures): ok"
exec "$out/test_kv_emulated" $arg
