#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Installs what the build and the tests need (Debian 12 packages only) when it is missing, then
# configures and builds the CPU preset in build/cpu. Used by scripts/demo.sh, scripts/test.sh and CI.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(build-essential cmake pkg-config libjansson-dev libpcre2-dev libutf8proc-dev libmicrohttpd-dev
          libcurl4-openssl-dev python3 curl clang libclang-rt-14-dev)
# clang with its compiler-rt (libFuzzer, sanitizers) builds the fuzz targets (scripts/fuzz.sh).
# Node.js (server tests use the openai npm package) may come from elsewhere than Debian: ask apt
# for it only when no node is on PATH.
command -v node >/dev/null && command -v npm >/dev/null || packages+=(nodejs npm)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi

cmake --preset cpu ${MLXCEL_CMAKE_ARGS:-}
cmake --build --preset cpu -j"$(nproc)"
