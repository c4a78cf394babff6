# SPDX-License-Identifier: MIT
# shellcheck shell=bash
# Sourced by the one-purpose device checks (sample_, batch_ and ab_on_device.sh): what each of
# them does first and last, and the A/B step of a knob, written once. Sources tests/gpu/steps.sh
# (step, verdict, steps_finish) and tests/gpu/devdeps.sh, then gives:
#   check_start SCRIPT           installs the carried C libraries when the machine lacks them (a
#                                verdict) and writes the GPU's name into the summary; SCRIPT names
#                                the script's section of LAST_RUN.md.
#   check_build LIMIT TARGET...  configures the cuda preset for sm_90 alone ($check_arch: a suite
#                                may set 90a, the arch-specific Hopper code) and builds the targets,
#                                the build within LIMIT seconds (a failure ends the script); with
#                                MLXCEL_SKIP_BUILD=1 it neither removes nor reconfigures build/cuda
#                                and only checks that the targets are there (another device script
#                                built them earlier in the same call).
#   check_run NAME LIMIT PATTERN [VAR=VALUE...] -- CMD...
#                                step NAME: CMD with the variables set (env), within LIMIT
#                                seconds; the log's lines matching PATTERN (grep -E, the first 40)
#                                and its last line go into the summary, each as "NAME: line".
#   check_bench NAME LIMIT [VAR=VALUE...] -- ARGS...
#                                check_run of `build/cuda/mlxcel bench ARGS --backend cuda`: its
#                                rep, pp, tg and bench lines into the summary. An A/B of a knob is
#                                one check_bench per value.
#   check_ab NAME OFF_LIMIT ON_LIMIT OFF ON -- ARGS...
#                                the A/B of one knob on one bench: check_bench NAME_off_1 (the knob's
#                                VAR=VALUE OFF, within OFF_LIMIT: the first of a shape makes its
#                                model), NAME_on_1 (ON, within ON_LIMIT), then NAME_off_2, NAME_on_2.
#   sum                          appends its input to $OUT/summary.txt and prints it.
#   finish                       writes $OUT/all.log (the tail of every step's log) and ends the
#                                script through steps_finish.
. tests/gpu/steps.sh
. tests/gpu/devdeps.sh
check_script=device_check
check_arch=90

sum() { tee -a "$OUT/summary.txt"; }

finish() {
    for f in "$LOGS"/*.log; do printf '\n===== %s\n' "$(basename "$f")"; tail -c 100000 "$f"; done >"$OUT/all.log"
    steps_finish "$check_script"
}

check_start() {  # check_start SCRIPT
    check_script=$1
    if mxg_install_devdeps; then
        verdict dependencies OK "C libraries present"
    else
        verdict dependencies FAIL "C libraries missing and no build/devdeps carried"
    fi
    nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader 2>&1 | sum
}

check_build() {  # check_build LIMIT TARGET...
    local limit=$1 t
    shift
    if [ "${MLXCEL_SKIP_BUILD:-0}" = 1 ]; then
        for t in "$@"; do
            [ -x "build/cuda/$t" ] || verdict "build/cuda/$t present" FAIL "MLXCEL_SKIP_BUILD=1 but it was not built"
        done
        return 0
    fi
    rm -rf build/cuda
    # shellcheck disable=SC2046  # the hub flag is nothing or one word
    step configure 120 cmake --preset cuda -DMLXCEL_CUDA_ARCHITECTURES="$check_arch" -DMLXCEL_WERROR=ON -DMLXCEL_SERVER_TESTS=OFF \
        $(mxg_hub_flag) || { tail -20 "$LOGS/configure.log"; finish; }
    step build "$limit" cmake --build build/cuda -j"$(nproc)" --target "$@" ||
        { grep -E "error" "$LOGS/build.log" | head -20; finish; }
}

check_run() {  # check_run NAME LIMIT PATTERN [VAR=VALUE...] -- CMD...
    local name=$1 limit=$2 pattern=$3 vars=() rc
    shift 3
    while [ $# -gt 0 ] && [ "$1" != -- ]; do
        vars+=("$1")
        shift
    done
    if [ $# -lt 2 ]; then
        verdict "$name" FAIL "script error: check_run wants VAR=VALUE... -- CMD..."
        return 2
    fi
    shift
    rm -f "$LOGS/$name.log"  # a step left out for the deadline writes none: no stale lines
    step "$name" "$limit" env ${vars[@]+"${vars[@]}"} "$@"
    rc=$?
    [ -f "$LOGS/$name.log" ] &&
        { grep -E "$pattern" "$LOGS/$name.log" | head -40; tail -1 "$LOGS/$name.log"; } | awk '!seen[$0]++' |
        sed "s/^/$name: /" | sum
    return $rc
}

check_bench() {  # check_bench NAME LIMIT [VAR=VALUE...] -- ARGS...
    local name=$1 limit=$2 a args=()
    shift 2
    for a in "$@"; do
        if [ "$a" = -- ]; then args+=(-- build/cuda/mlxcel bench); else args+=("$a"); fi
    done
    check_run "$name" "$limit" 'pp[0-9]+|tg[0-9]+|^bench' "${args[@]}" --backend cuda
}

check_ab() {  # check_ab NAME OFF_LIMIT ON_LIMIT OFF ON -- ARGS...
    local name=$1 off_limit=$2 on_limit=$3 off=$4 on=$5 i
    shift 5
    for i in 1 2; do
        check_bench "${name}_off_$i" "$off_limit" "$off" "$@"
        check_bench "${name}_on_$i" "$on_limit" "$on" "$@"
    done
}
