#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The whole GPU check in one call on a machine with an NVIDIA GPU: configure the cuda preset (the
# architecture comes from nvidia-smi, which tests the detection), build, then run the GPU op suite,
# the build-contract tests, the model parity fixtures on --backend cuda, the demo generation with
# LD_LIBRARY_PATH unset (compared with --backend cpu), `mlxcel bench` and the backend decode bench.
# Logs go to $OUT (default /tmp/mlxcel-device); a summary table is printed last.
# If the machine lacks the C libraries (jansson, pcre2, utf8proc, libmicrohttpd, pkg-config), the
# Debian packages in build/devdeps/*.deb are unpacked under /tmp/devdeps and used from there.
# Usage: tests/gpu/run_on_device.sh [--quick]   (--quick: skip the 8B benches)
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/mlxcel-device}
mkdir -p "$OUT"
quick=${1:-}
summary=()
note() { summary+=("$(printf '%-44s %s' "$1" "$2")"); }
run() {  # run NAME TIMEOUT CMD...: logs to $OUT/NAME.log, records ok/FAIL
    local name=$1 limit=$2
    shift 2
    local t0=$SECONDS
    timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
    local rc=$?
    local what="ok"
    [ $rc -eq 0 ] || what="FAIL (rc $rc)"
    [ $rc -eq 77 ] && what="skipped"
    note "$name" "$what, $((SECONDS - t0)) s"
    return $rc
}

echo "== machine"
nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv,noheader | tee "$OUT/machine.txt"
git log -1 --format='commit %h %s' 2>/dev/null | tee -a "$OUT/machine.txt"
nproc | sed 's/^/cores: /' | tee -a "$OUT/machine.txt"

if ! pkg-config --exists jansson libpcre2-8 libutf8proc libmicrohttpd 2>/dev/null; then
    if ls build/devdeps/*.deb >/dev/null 2>&1; then
        echo "== unpacking build/devdeps into /tmp/devdeps (system lacks the C libraries or pkg-config)"
        for f in build/devdeps/*.deb; do dpkg-deb -x "$f" /tmp/devdeps; done
        export PATH=/tmp/devdeps/usr/bin:$PATH
        export PKG_CONFIG_PATH=/tmp/devdeps/usr/lib/x86_64-linux-gnu/pkgconfig:/tmp/devdeps/usr/share/pkgconfig
        export PKG_CONFIG_SYSROOT_DIR=/tmp/devdeps
        export LIBRARY_PATH=/tmp/devdeps/usr/lib/x86_64-linux-gnu
        # libmicrohttpd.pc names gnutls (Requires.private); the runtime library is the system's.
        if ! pkg-config --exists gnutls; then
            printf 'Name: gnutls\nDescription: stub for pkg-config\nVersion: 3.7.9\nLibs: -lgnutls\n' \
                >/tmp/devdeps/usr/lib/x86_64-linux-gnu/pkgconfig/gnutls.pc
        fi
        ls /usr/lib/x86_64-linux-gnu/libgnutls.so* 2>&1 | head -2
        # Runtime: the programs find these through their RUNPATH (CMake adds the folders of the
        # libraries it linked by full path), not through LD_LIBRARY_PATH.
        note "dependencies" "from build/devdeps"
    else
        note "dependencies" "MISSING (no build/devdeps)"
    fi
fi

echo "== configure + build"
rm -rf build/cuda
run configure 300 cmake --preset cuda -DMLXCEL_WERROR=ON && grep -E "mlxcel:" "$OUT/configure.log"
run build 480 cmake --build build/cuda -j"$(nproc)" || tail -30 "$OUT/build.log"

echo "== GPU op suite"
run gpu_ops 300 build/cuda/test_gpu_ops
tail -16 "$OUT/gpu_ops.log"
grep -E "check failed" "$OUT/gpu_ops.log" | head -20

echo "== build-contract tests"
run ctest_gpu 300 ctest --test-dir build/cuda -R "gpu_runpath|gpu_arch_parse|spdx_headers" --output-on-failure

echo "== model parity on cuda"
if [ -x build/cuda/test_model_parity ]; then
    MLXCEL_TEST_BACKEND=cuda run parity_cuda 300 build/cuda/test_model_parity
    tail -3 "$OUT/parity_cuda.log"
    MLXCEL_TEST_BACKEND=cuda MLXCEL_GPU_NO_MMA=1 run parity_cuda_nomma 300 build/cuda/test_model_parity
    tail -2 "$OUT/parity_cuda_nomma.log"
fi

echo "== demo generation (LD_LIBRARY_PATH unset)"
gen=(generate -m models/qwen3-demo-44m-4bit -p "Hello" -n 50 --temp 0)
run generate_cuda 120 env -u LD_LIBRARY_PATH build/cuda/mlxcel "${gen[@]}" --backend cuda
run generate_cpu 120 env -u LD_LIBRARY_PATH build/cuda/mlxcel "${gen[@]}" --backend cpu
cat "$OUT/generate_cuda.log"
if diff <(grep -v -E "tokens-per-sec|Peak memory" "$OUT/generate_cuda.log") \
        <(grep -v -E "tokens-per-sec|Peak memory" "$OUT/generate_cpu.log") >/dev/null; then
    note "generate cuda == cpu text" "same"
else
    note "generate cuda == cpu text" "DIFFERENT (see generate_*.log)"
fi
run info 60 env -u LD_LIBRARY_PATH build/cuda/mlxcel info
cat "$OUT/info.log"

echo "== benches"
run bench_backend_0.6b 300 build/cuda/bench_gpu_decode qwen3-0.6b 512 512 300
cat "$OUT/bench_backend_0.6b.log"
if [ "$quick" != "--quick" ]; then
    run bench_backend_8b 300 build/cuda/bench_gpu_decode qwen3-8b 512 512 100
    cat "$OUT/bench_backend_8b.log"
fi
run mlxcel_bench_0.6b 300 build/cuda/mlxcel bench --shape qwen3-0.6b -p 512 -n 128 --backend cuda
tail -4 "$OUT/mlxcel_bench_0.6b.log"
if [ "$quick" != "--quick" ]; then
    run mlxcel_bench_8b 400 build/cuda/mlxcel bench --shape qwen3-8b -p 512 -n 128 --backend cuda
    tail -4 "$OUT/mlxcel_bench_8b.log"
fi

echo
echo "== summary ($(head -1 "$OUT/machine.txt"))"
printf '%s\n' "${summary[@]}" | tee "$OUT/summary.txt"
