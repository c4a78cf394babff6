#!/bin/sh
# SPDX-License-Identifier: MIT
# Checks GPU kernels without a GPU: converts them to host C++ (to_host.py), builds each emulation
# test (emu_test below) with the host emulation (emu.h) against the CPU build's library, runs it,
# then builds and runs it again with each of its planted faults, each of which must fail:
# - test_stream_lean_emulated.cpp: the streaming kernel's lean one-token form (matvec_fused.cu and
#   the kernel's headers) bit for bit today's and within the float32 bound of the reference, and
#   MLXCEL_GPU_PDL=2's prefetch ranges; faults: a chunk's sum of x from its neighbour, the prefetch
#   budget ignored;
# - test_res_early_emulated.cpp: the residual epilogue with its reads ahead (MLXCEL_GPU_STREAM_RES_EARLY,
#   kernels/matvec_res_early.cuh) bit for bit today's, also with the residual guarded until the
#   grid wait; faults: a lane picking its neighbour's row sum, the held residual read before the wait;
# - test_moe_emulated.cpp: moe.cu's router (the experts and weights against the CPU backend's, NaN
#   and infinite router logits included), moe_stream.cu's fused decode kernels (against the tests'
#   double-precision reference, gpu_ref.c) and moe_router.cu's router launch (the CPU backend's
#   routing on its logits), the warp routing against the block form's bits; faults of level 3, of
#   the routing, of MLXCEL_GPU_PDL=3's down prefetch and of the full-lane down form;
# - test_kv_emulated.cpp: kernels/rope_kv.cu, qk_norm_rope.cu, attention.cu, attn_decode.cu,
#   latent.cu and vendor/cuda/attn_mma.cu (every cache byte and attention output against the CPU
#   backend), the decode attention with RoPE folded in and MLXCEL_GPU_PDL=3's order (the q/k launch,
#   the decode attention and its combine as dependent launches under emu.h's emulated order);
#   faults of the RoPE fold and of level 3's grid waits.
# A check of index arithmetic and logic before a device run, not a replacement for it
# (tests/gpu/run_on_device.sh). Needs g++ (C++20) and the CPU build (made here when build/cpu has
# no library). Takes about 15 minutes on two cores in its quick form (--asan: longer).
# Usage: tests/gpu/kv_emulation/run.sh [--asan] [quick]   (--asan: AddressSanitizer; both: fewer cases)
# With MLXCEL_EMU_LIB (a CPU build's directory; ctest's gpu_kv_emulation_*) it links that build's
# library and builds into $MLXCEL_EMU_OUT (default build/kv_emulation); MLXCEL_EMU_ONLY names the
# tests to run (ctest runs each in a test of its own, so two cores share them).
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
mkdir -p "$out/inc/backends/gpu/kernels" "$out/obj"
for h in matvec_stream matvec_stream_lean; do
    python3 tests/gpu/kv_emulation/to_host.py "src/backends/gpu/kernels/$h.cuh" >"$out/inc/backends/gpu/kernels/$h.cuh"
done
flags="-std=c++20 -O1 -w -Isrc -Iinclude -I$lib/generated -Itests/gpu/kv_emulation"
arg=""
if [ "${1:-}" = --asan ]; then flags="$flags -g -fsanitize=address"; arg=quick; shift; fi
[ "${1:-}" = quick ] && arg=quick
cflags="-I$out/inc $flags -Itests/gpu"
libs="$lib/libmlxcel_lib.a $(pkg-config --libs jansson libpcre2-8 libutf8proc libmicrohttpd) -lcurl -lm -lpthread"
gcc -std=c11 -O1 -Isrc -Iinclude -c tests/gpu/gpu_ref.c -o "$out/gpu_ref.o"
built=""  # the sources compiled into $out/obj in this run, by name
ran=""    # the tests run (emu_test)

# emu_build BIN FAULT_DIR SOURCE...: links BIN from the SOURCEs (C++ files, compiled here, and
# objects) and the CPU library. FAULT_DIR empty: each C++ file compiled once a run into $out/obj.
# Else a fault's directory (emu_test): its copies of sources replace them, and where it holds
# header copies (FAULT_DIR/inc, first on the include path) every C++ file is compiled again.
emu_build() {
    eb_bin=$1 eb_dir=$2
    shift 2
    eb_objs=""
    for eb_src in "$@"; do
        case $eb_src in *.o) eb_objs="$eb_objs $eb_src"; continue ;; esac
        eb_name=$(basename "$eb_src" .cpp)
        if [ -n "$eb_dir" ] && { [ -f "$eb_dir/headers" ] || [ -f "$eb_dir/$eb_name.cpp" ]; }; then
            if [ -f "$eb_dir/$eb_name.cpp" ]; then eb_src="$eb_dir/$eb_name.cpp"; fi
            # shellcheck disable=SC2086
            g++ -I"$eb_dir/inc" $cflags -c "$eb_src" -o "$eb_dir/$eb_name.o"
            eb_objs="$eb_objs $eb_dir/$eb_name.o"
            continue
        fi
        case " $built " in
        *" $eb_name "*) ;;
        *)
            # shellcheck disable=SC2086
            g++ $cflags -c "$eb_src" -o "$out/obj/$eb_name.o"
            built="$built $eb_name"
            ;;
        esac
        eb_objs="$eb_objs $out/obj/$eb_name.o"
    done
    # shellcheck disable=SC2086
    g++ $flags -o "$eb_bin" $eb_objs $libs
}

# emu_plant DIR FILE EXPRESSION SOURCE...: applies the sed EXPRESSION to DIR's copy of FILE (made
# from the original at the first edit): a source of SOURCE... by its file name, else a header by its
# include path (the converted copy in $out/inc where there is one, else src/), copied under DIR/inc.
# The edit must change the file.
emu_plant() {
    ep_dir=$1 ep_file=$2 ep_expr=$3
    shift 3
    ep_orig="" ep_copy="$ep_dir/$ep_file"
    for ep_src in "$@"; do
        if [ "$(basename "$ep_src")" = "$ep_file" ]; then ep_orig=$ep_src; fi
    done
    if [ -z "$ep_orig" ]; then
        ep_orig="src/$ep_file"
        if [ -f "$out/inc/$ep_file" ]; then ep_orig="$out/inc/$ep_file"; fi
        ep_copy="$ep_dir/inc/$ep_file"
        mkdir -p "$(dirname "$ep_copy")"
        : >"$ep_dir/headers"
    fi
    if [ -f "$ep_copy" ]; then ep_orig=$ep_copy; fi
    sed -e "$ep_expr" "$ep_orig" >"$ep_copy.new"
    if cmp -s "$ep_orig" "$ep_copy.new"; then
        echo "run.sh: the planted fault's edit of $ep_file did not apply: $ep_expr"; exit 1
    fi
    mv "$ep_copy.new" "$ep_copy"
}

# emu_test TEST GOOD_ARGS FAULT_ARGS SOURCES, its faults on stdin: builds $out/TEST from SOURCES
# (emu_build) and runs it with GOOD_ARGS; then for each fault builds $out/TEST_FAULT with it and
# runs that with FAULT_ARGS: it must fail, print at least one line of each pattern the fault
# expects (grep's basic patterns; the counts are reported with its count of FAIL lines) and none
# of those it rejects. The fault list, one line each (empty lines and # comments skipped):
#   fault NAME               starts the fault NAME (its files in $out/fault_TEST_NAME)
#   edit FILE EXPRESSION     a sed edit of FILE in the fault's copies (emu_plant)
#   expect PATTERN           a pattern that must match lines of the fault's run
#   reject PATTERN           a pattern that must match none
# With MLXCEL_EMU_ONLY set (test names, space-separated), the other tests are passed over.
emu_test() {
    et_test=$1 et_good=$2 et_args=$3 et_srcs=$4
    case " ${MLXCEL_EMU_ONLY:-$et_test} " in
    *" $et_test "*) ran="$ran $et_test" ;;
    *) cat >/dev/null; return 0 ;;
    esac
    et_names="" et_dir=""
    while IFS= read -r et_line; do
        et_rest=${et_line#* }
        case $et_line in
        "" | "#"*) ;;
        "fault "*)
            et_dir="$out/fault_${et_test}_$et_rest"
            rm -rf "$et_dir"
            mkdir -p "$et_dir"
            : >"$et_dir/expect"
            : >"$et_dir/reject"
            et_names="$et_names $et_rest"
            ;;
        "edit "*)
            # shellcheck disable=SC2086
            emu_plant "$et_dir" "${et_rest%% *}" "${et_rest#* }" $et_srcs
            ;;
        "expect "*) printf '%s\n' "$et_rest" >>"$et_dir/expect" ;;
        "reject "*) printf '%s\n' "$et_rest" >>"$et_dir/reject" ;;
        *) echo "run.sh: a fault line of $et_test not understood: $et_line"; exit 1 ;;
        esac
    done
    # shellcheck disable=SC2086
    emu_build "$out/$et_test" "" $et_srcs
    for et_name in $et_names; do
        # shellcheck disable=SC2086
        emu_build "$out/${et_test}_$et_name" "$out/fault_${et_test}_$et_name" $et_srcs
    done
    # shellcheck disable=SC2086
    "$out/$et_test" $et_good </dev/null
    for et_name in $et_names; do
        et_dir="$out/fault_${et_test}_$et_name"
        et_log="$out/${et_test}_$et_name.log"
        # shellcheck disable=SC2086
        if "$out/${et_test}_$et_name" $et_args </dev/null >"$et_log" 2>&1; then
            echo "$et_test: the planted $et_name fault passed the emulation: FAIL"; exit 1
        fi
        et_counts=""
        while IFS= read -r et_p; do
            et_n=$(grep -c -- "$et_p" "$et_log" || true)
            if [ "$et_n" -eq 0 ]; then
                echo "$et_test: no line '$et_p' from the planted $et_name fault: FAIL"; exit 1
            fi
            et_counts="$et_counts; $et_n '$et_p'"
        done <"$et_dir/expect"
        while IFS= read -r et_p; do
            if grep -q -- "$et_p" "$et_log"; then
                echo "$et_test: the planted $et_name fault moved what it must not ('$et_p'): FAIL"; exit 1
            fi
        done <"$et_dir/reject"
        echo "$et_test: the planted $et_name fault fails the emulation ($(grep -c FAIL "$et_log") FAIL lines$et_counts): ok"
    done
}

# The streaming kernel's lean form (MLXCEL_GPU_STREAM_LEAN=1) through matvec_fused.cu, whose streaming
# kernel lives in headers (their converted copies in $out/inc). Faults: each chunk's sum of x read
# from the neighbouring chunk (sums[c ^ 1]), which moves every bias term; MLXCEL_GPU_PDL=2's
# per-warp prefetch budget ignored (common.cuh, prefetch_span).
emu_test test_stream_lean_emulated "$arg" quick "tests/gpu/kv_emulation/emu.cpp \
    tests/gpu/kv_emulation/test_stream_lean_emulated.cpp $out/matvec_fused.cpp $out/gpu_ref.o" <<'EOF'
fault sum
edit backends/gpu/kernels/matvec_stream_lean.cuh s/const float xs = sums\[c\];/const float xs = sums[c ^ 1];/
expect FAIL
fault prefetch
edit backends/gpu/common.cuh s/const unsigned n = hi - lo < budget ? (unsigned)(hi - lo) : budget;/const unsigned n = (unsigned)(hi - lo);/
expect FAIL.*bad prefetch
EOF
# The residual epilogue with its reads ahead (MLXCEL_GPU_STREAM_RES_EARLY=1; test_res_early_emulated.cpp:
# bit for bit today's, also as a dependent launch with the residual guarded until the grid wait).
# Faults: each lane picking its neighbour's row sum (kernels/matvec_res_early.cuh, lane ^ 1); the
# lean form's first held residual read before the grid wait (only the guarded check sees it: the
# unguarded outputs stay today's).
emu_test test_res_early_emulated "$arg" quick "tests/gpu/kv_emulation/emu.cpp \
    tests/gpu/kv_emulation/test_res_early_emulated.cpp $out/matvec_fused.cpp $out/gpu_ref.o" <<'EOF'
fault pick
edit backends/gpu/kernels/matvec_res_early.cuh s/if (lane == j) s = sum(j);/if ((lane ^ 1) == j) s = sum(j);/
expect FAIL.*outputs or residual stream are not today's
fault wait
edit backends/gpu/kernels/matvec_stream_lean.cuh /^ *ResHeld held = {}, nheld = {};$/d
edit backends/gpu/kernels/matvec_stream_lean.cuh /^ *if (EPI == EPI_RESIDUAL_EARLY && task < ntasks) held = /d
edit backends/gpu/kernels/matvec_stream_lean.cuh s/^\( *\)mxg_grid_wait_release(a.early);/\1ResHeld held = {}, nheld = {};\n\1if (EPI == EPI_RESIDUAL_EARLY \&\& task < ntasks) held = stream_res_load<R>(a, mi, r0, lane);\n\1mxg_grid_wait_release(a.early);/
expect FAIL.*with the residual guarded: outputs DIFFER
reject bit-equal NO
EOF
# MoE decode (its full cases, quick or not). Faults:
# - level 3: the router's last ticket one early (a block routes before the token's last logits are
#   written, and the counter is left set), and the down launch's early combine weights read for the
#   neighbouring expert (j ^ 1);
# - the warp routing and MLXCEL_GPU_PDL=3, each failing where it should: ties broken toward the
#   larger index (moe_route.cuh, included by every MoE kernel), the block form's warp sums added in
#   reverse order (the same experts, other weight bits), and the down launch's prefetch budget ignored;
# - the full-lane down form's products added into the neighbouring expert's sum (the warp-per-row
#   form unmoved);
# - the rank form of the routing (MLXCEL_GPU_MOE_ROUTE_RANK=1): ties ranked toward the larger index
#   (the CPU's order broken) and the picks' sum taken in reverse rank order (other weight bits), the
#   warp form unmoved.
emu_test test_moe_emulated "" "" "tests/gpu/kv_emulation/emu.cpp tests/gpu/kv_emulation/test_moe_emulated.cpp \
    $out/moe.cpp $out/moe_stream.cpp $out/moe_router.cpp $out/gpu_ref.o" <<'EOF'
fault level3
edit moe_router.cpp s/(unsigned)a.blocks_per_token - 1;/(unsigned)a.blocks_per_token - 2;/
edit moe_stream.cpp s/wts\[j\] = j < k ? a.weights\[(int64_t)t \* k + j\]/wts[j] = j < k ? a.weights[(int64_t)t * k + (j ^ 1)]/
expect moe router.*FAIL
expect level 3 down differs.*FAIL
fault route
edit backends/gpu/kernels/moe_route.cuh s/return v_nan ? i < bi : v > bv || (v == bv \&\& i < bi);/return v_nan ? i < bi : v > bv || (v == bv \&\& i > bi);/
edit backends/gpu/kernels/moe_route.cuh s/for (int p = 0; p < P; p++) sum += warp_sum<W>(part\[p\]);/for (int p = P - 1; p >= 0; p--) sum += warp_sum<W>(part[p]);/
edit moe_stream.cpp s/unsigned budget = a.prefetch;/unsigned budget = 1u << 30;/
expect moe_route ties.*differs from the CPU's.*FAIL
expect moe_route random.*bits differ from the block form.*FAIL
expect moe fused .*pdl=3.*cap.*FAIL
reject moe_route random.*differs from the CPU's
fault flat
edit moe_stream.cpp s/if (q == slot) acc\[q\] += d;/if (q == (slot ^ 1)) acc[q] += d;/
expect full-lane down differs.*FAIL
reject moe fused .*level 3 down differs
fault rank
edit backends/gpu/kernels/moe_route.cuh s/rank += u > v || (u == v \&\& o < e);/rank += u > v || (u == v \&\& o > e);/
edit backends/gpu/kernels/moe_route.cuh s/for (int j = 0; j < k; j++) picked += sel_v\[j\];/for (int j = k - 1; j >= 0; j--) picked += sel_v[j];/
expect moe_route ties rank form.*differs from the CPU's.*FAIL
expect moe_route random rank form.*bits differ from the block form.*FAIL
reject moe_route random:.*FAIL
EOF
# The KV cache and attention kernels; the faults run its RoPE cases (`rope`):
# - the decode attention with RoPE folded in (MLXCEL_GPU_ATTN_ROPE=1; outputs and cache bytes
#   against the two launches): the token's own position read from the cache (which holds the slot's
#   old row until the launch's end) instead of the row the launch made, and the cache write left to
#   split 1 instead of split 0 (no write where the step has one split);
# - MLXCEL_GPU_PDL=3 (the level 3 steps under emu.h's emulated order of dependent launches), each
#   failing its own check: the fused attention's grid wait moved below its reads of the raw q, k and
#   v (its outputs differ), the q/k launch's wait moved below its reads of q and k (the two
#   launches' outputs differ), the combine's wait left out (blocks without their wait).
emu_test test_kv_emulated "$arg" rope "tests/gpu/kv_emulation/emu.cpp tests/gpu/kv_emulation/test_kv_emulated.cpp \
    $out/rope_kv.cpp $out/qk_norm_rope.cpp $out/attention.cpp $out/attn_mma.cpp $out/attn_decode.cpp \
    $out/latent.cpp" <<'EOF'
fault rope_read
edit attn_decode.cpp s/if (ROPE \&\& p == hi) {/if (ROPE \&\& p == hi \&\& false) {/
expect FAIL
fault rope_store
edit attn_decode.cpp s/if (split == 0 \&\& g0 == 0) {/if (split == 1 \&\& g0 == 0) {/
expect FAIL
fault pdl3_attn
edit attn_decode.cpp /mxg_grid_wait_release(a.early);  \/\/ level 3: nothing above/d
edit attn_decode.cpp s/^\( *\)float q\[G\]\[8\];/\1mxg_grid_wait_release(a.early);\n&/
expect level 3: two launches same, fused DIFFER.*FAIL
fault pdl3_qk
edit qk_norm_rope.cpp /mxg_grid_wait_release(early);    \/\/ level 3: nothing before/d
edit qk_norm_rope.cpp s/^\( *\)if (j < half) a = v\[j\], b = v\[j + half\];/&\n\1mxg_grid_wait_release(early);/
expect level 3: two launches DIFFER.*FAIL
fault pdl3_combine
edit attn_decode.cpp /mxg_grid_wait_release(early);  \/\/ level 3: a dependent launch; the partials/d
expect blocks without their wait [0-9]* and [1-9].*FAIL
EOF
for only in ${MLXCEL_EMU_ONLY:-}; do
    case " $ran " in *" $only "*) ;; *) echo "run.sh: MLXCEL_EMU_ONLY names no test of this script: $only"; exit 1 ;; esac
done
