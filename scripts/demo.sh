#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Set-up, build, then generate text with the bundled demo model on the CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
build/cpu/mlxcel generate -p "${1:-Hello}" -n 50 --temp 0
