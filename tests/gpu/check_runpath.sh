#!/bin/sh
# SPDX-License-Identifier: MIT
# Build-contract test of GPU builds: each program's dynamic section has a RUNPATH holding the GPU
# runtime's library folder(s), and every shared library resolves with LD_LIBRARY_PATH unset.
# Usage: check_runpath.sh "<dir>[;<dir>...]" <program>...
set -u
dirs=$1
shift
status=0
for prog in "$@"; do
    runpath=$(readelf -d "$prog" | sed -n 's/.*(RUNPATH).*\[\(.*\)\].*/\1/p')
    if [ -z "$runpath" ]; then
        echo "FAIL: $prog has no RUNPATH (readelf -d shows: $(readelf -d "$prog" | grep -E 'RPATH|RUNPATH'))"
        status=1
        continue
    fi
    old_ifs=$IFS
    IFS=';'
    for d in $dirs; do
        case ":$runpath:" in
        *":$d:"*) echo "ok: $prog RUNPATH has $d" ;;
        *) echo "FAIL: $prog RUNPATH '$runpath' lacks $d"; status=1 ;;
        esac
    done
    IFS=$old_ifs
    missing=$(env -u LD_LIBRARY_PATH ldd "$prog" | grep 'not found')
    if [ -n "$missing" ]; then
        echo "FAIL: with LD_LIBRARY_PATH unset, $prog cannot find: $missing"
        status=1
    else
        echo "ok: $prog resolves all libraries with LD_LIBRARY_PATH unset"
    fi
done
exit $status
