#!/bin/sh
# SPDX-License-Identifier: MIT
# Runs a command only when the GPU backend can start on this machine; otherwise exits 77 (ctest:
# skipped) with the reason. Usage: if_gpu.sh <mlxcel program> <command...>
prog=$1
shift
info=$("$prog" info 2>&1)
if ! printf '%s\n' "$info" | grep -q ': supported$'; then
    printf 'skipped: no usable GPU\n%s\n' "$info"
    exit 77
fi
exec "$@"
