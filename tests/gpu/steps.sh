# SPDX-License-Identifier: MIT
# shellcheck shell=bash
# Sourced by the device scripts (run_on_device.sh, check_sampling_on_device.sh, check_script.sh,
# profile_on_device.sh): they are the gate for the GPU code (CI has no GPU, so there the GPU tests
# are skipped), so every step counts and the script's exit status says whether all passed.
#   step NAME LIMIT CMD...   runs CMD with a time limit, output to $LOGS/NAME.log; exit 0 passes,
#                            (MLXCEL_DEVICE_DEADLINE=S: no step runs past S seconds of the run;
#                            a step left out for it fails as "not run", and the summary is written)
#                            anything else (77 "skipped" included: on the device it means the GPU
#                            was not usable) fails. Returns CMD's status.
#   verdict NAME OK|FAIL DETAIL   records a check the script made itself.
#   steps_finish SCRIPT      prints every step and one line "N passed, M failed", writes them with
#                            the commit and the machine into $OUT/LAST_RUN.md and
#                            tests/gpu/LAST_RUN.md (the section of SCRIPT, other sections kept),
#                            and exits 1 if anything failed, else 0.
# The commit: $MLXCEL_COMMIT when the caller names it (a tree copied to a device machine may carry
# no .git or a stale one), else `git rev-parse`, else "unknown".
OUT=${OUT:-/tmp/mlxcel-device}
LOGS=${LOGS:-/tmp/mlxcel-logs}
mkdir -p "$OUT" "$LOGS"
steps_passed=0
steps_failed=0
steps_lines=()

verdict() {  # verdict NAME OK|FAIL DETAIL
    if [ "$2" = OK ]; then
        steps_passed=$((steps_passed + 1))
        steps_lines+=("$(printf '%-40s ok   %s' "$1" "$3")")
    else
        steps_failed=$((steps_failed + 1))
        steps_lines+=("$(printf '%-40s FAIL %s' "$1" "$3")")
    fi
}

step() {  # step NAME LIMIT CMD...
    local name=$1 limit=$2 t0=$SECONDS rc
    shift 2
    if [ "${MLXCEL_DEVICE_DEADLINE:-0}" -gt 0 ]; then  # the whole run's budget, seconds from its start
        local left=$((MLXCEL_DEVICE_DEADLINE - SECONDS))
        if [ $left -le 5 ]; then
            verdict "$name" FAIL "not run: MLXCEL_DEVICE_DEADLINE (${MLXCEL_DEVICE_DEADLINE} s) reached"
            return 124
        fi
        [ $left -lt "$limit" ] && limit=$left
    fi
    timeout "$limit" "$@" >"$LOGS/$name.log" 2>&1
    rc=$?
    case $rc in
    0) verdict "$name" OK "$((SECONDS - t0)) s" ;;
    77) verdict "$name" FAIL "skipped (rc 77) on the device: $(grep -m1 -i skip "$LOGS/$name.log")" ;;
    124 | 137) verdict "$name" FAIL "timed out after $limit s" ;;
    *) verdict "$name" FAIL "rc $rc, $((SECONDS - t0)) s (log $LOGS/$name.log)" ;;
    esac
    return $rc
}

steps_commit() {
    local c
    if [ -n "${MLXCEL_COMMIT:-}" ]; then  # named by the caller: a copied tree's .git may be stale
        echo "$MLXCEL_COMMIT"
    elif c=$(git rev-parse --short HEAD 2>/dev/null); then
        git diff --quiet HEAD 2>/dev/null || c="$c (with uncommitted changes)"
        echo "$c"
    else
        echo "${MLXCEL_COMMIT:-unknown (no git; set MLXCEL_COMMIT)}"
    fi
}

steps_finish() {  # steps_finish SCRIPT
    local script=$1 line section file gpu
    gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
    [ $((steps_passed + steps_failed)) -gt 0 ] || verdict "steps" FAIL "no step ran"
    line="$steps_passed passed, $steps_failed failed"
    echo
    echo "== $script: $line"
    printf '%s\n' "${steps_lines[@]}"
    echo "$line"
    section=$(
        echo "<!-- $script -->"
        echo "## $script"
        echo "$(date -u '+%Y-%m-%d %H:%M UTC'), commit $(steps_commit), ${gpu:-no GPU found by nvidia-smi}"
        echo
        echo '```'
        printf '%s\n' "${steps_lines[@]}"
        echo "$line"
        echo '```'
        echo "<!-- end $script -->"
    )
    file=tests/gpu/LAST_RUN.md
    if [ ! -f "$file" ]; then
        printf '# Last device runs\n\nWritten by the device scripts (tests/gpu/steps.sh); commit it after a run.\n' >"$file"
    fi
    # Drop this script's previous section and the "no run yet" note, keep the rest.
    awk -v s="<!-- $script -->" -v e="<!-- end $script -->" \
        '$0 == s || $0 == "<!-- none -->" {skip = 1} !skip {print} $0 == e || $0 == "<!-- end none -->" {skip = 0}' \
        "$file" >"$file.tmp" && printf '\n%s\n' "$section" >>"$file.tmp" && cat -s "$file.tmp" >"$file" && rm -f "$file.tmp"
    cp "$file" "$OUT/LAST_RUN.md"
    [ "$steps_failed" -eq 0 ]
    exit $?
}
