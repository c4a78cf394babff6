#!/bin/sh
# SPDX-License-Identifier: MIT
# Stands in for rocminfo or nvidia-smi in configure tests: prints the recorded output named by
# MLXCEL_FAKE_TOOL_OUTPUT and ignores its arguments.
cat "$MLXCEL_FAKE_TOOL_OUTPUT"
