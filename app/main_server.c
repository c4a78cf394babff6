// SPDX-License-Identifier: MIT
// main() of `mlxcel-server`: the same program as `mlxcel serve`.
#include "commands.h"

int main(int argc, char **argv) { return cmd_serve(argc, argv); }
