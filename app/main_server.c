// SPDX-License-Identifier: MIT
// main() of `mlxcel-server`: the same program as `mlxcel serve`.
#include <stdio.h>

#include "commands.h"

#pragma weak cmd_serve

int main(int argc, char **argv) {
    if (!cmd_serve) {
        fprintf(stderr, "mlxcel-server: the server is not available in this build\n");
        return MX_EXIT_RUNTIME;
    }
    return cmd_serve(argc, argv);
}
