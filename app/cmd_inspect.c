// SPDX-License-Identifier: MIT
// `mlxcel inspect`: loads a model on the CPU (weights stay mapped) and describes it.
#include <stdio.h>
#include <stdlib.h>

#include "cli.h"
#include "commands.h"

static void usage(FILE *to) { fprintf(to, "usage: mlxcel inspect [-m MODEL]\n%s", cli_model_help); }

int cmd_inspect(int argc, char **argv) {
    const char *cmd = "inspect";
    cli_model_opts mo = {0};
    const cli_common_opts common = {.model = &mo, .usage = usage};
    for (int i = 1; i < argc; i++) {
        int r = cli_common_opt(cmd, argc, argv, &i, &common);
        if (r == CLI_OPT_TAKEN) continue;
        if (r != CLI_OPT_OWN) return r;
        cli_error(cmd, "unknown option '%s'", argv[i]);
        return MX_EXIT_USAGE;
    }
    if (!mo.backend) mo.backend = "cpu";
    mx_backend *be;
    mx_model *m;
    if (cli_open_model(cmd, &mo, &be, &m, NULL) != 0) return MX_EXIT_RUNTIME;
    char *buf = malloc(1 << 16);
    if (buf) {
        mx_model_describe(m, buf, 1 << 16);
        fputs(buf, stdout);
    }
    free(buf);
    mx_model_free(m);
    mx_backend_free(be);
    return MX_EXIT_OK;
}
