// SPDX-License-Identifier: MIT
// `mlxcel download REPO [--revision R] [--include GLOB]... [--local-dir DIR]`: brings a Hugging
// Face repo into the local hub cache (or a plain folder) and prints the folder on stdout, like
// `huggingface-cli download`. Progress goes to stderr. See src/hub/hub.h.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "commands.h"
#include "hub/hub.h"

#define CMD "download"

static void usage(FILE *to) {
    fprintf(to,
            "usage: mlxcel download REPO [options]\n\n"
            "Downloads what is missing of a Hugging Face repo (ORG/NAME) into the Hugging Face cache\n"
            "($HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub) and prints its folder.\n\n"
            "  --revision R      branch, tag or commit (default: main)\n"
            "  --include GLOB    download only files matching GLOB (repeatable); default: *.safetensors,\n"
            "                    *.json, *.jinja, *.txt, tokenizer.model, *.tiktoken, tiktoken.model\n"
            "  --local-dir DIR   put the files in DIR instead of the cache\n\n"
            "Environment: HF_ENDPOINT, HF_TOKEN (or the token file $HF_HOME/token), HF_HUB_OFFLINE=1,\n"
            "HF_HUB_CACHE, HF_HOME.\n");
}

int cmd_download(int argc, char **argv) {
    mx_hub_download_opts o = {.progress = stderr};
    const char **include = calloc((size_t)argc + 1, sizeof *include);
    int n_include = 0, rc = MX_EXIT_USAGE;
    if (!include) {
        cli_error(CMD, "out of memory");
        return MX_EXIT_RUNTIME;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (cli_is(a, "-h", "--help")) {
            usage(stdout);
            rc = MX_EXIT_OK;
            goto done;
        } else if (cli_is(a, NULL, "--revision")) {
            if (!(v = cli_value(CMD, argc, argv, &i))) goto done;
            o.revision = v;
        } else if (cli_is(a, NULL, "--include")) {
            if (!(v = cli_value(CMD, argc, argv, &i))) goto done;
            include[n_include++] = v;
        } else if (cli_is(a, NULL, "--local-dir")) {
            if (!(v = cli_value(CMD, argc, argv, &i))) goto done;
            o.local_dir = v;
        } else if (a[0] == '-') {
            cli_error(CMD, "unknown option '%s' (see mlxcel download --help)", a);
            goto done;
        } else if (o.repo) {
            cli_error(CMD, "one repo at a time (got '%s' and '%s')", o.repo, a);
            goto done;
        } else {
            o.repo = a;
        }
    }
    if (!o.repo) {
        cli_error(CMD, "missing the repo id (ORG/NAME)");
        usage(stderr);
        goto done;
    }
    mx_error err = {{0}};
    if (mx_hub_download_check_repo(o.repo, &err) != 0) {
        cli_error(CMD, "%s", err.msg);
        goto done;
    }
    o.include = n_include ? include : NULL;
    char folder[4600];
    if (mx_hub_download(&o, folder, sizeof folder, &err) != 0) {
        cli_error(CMD, "%s", err.msg);
        rc = MX_EXIT_RUNTIME;
        goto done;
    }
    printf("%s\n", folder);
    rc = MX_EXIT_OK;
done:
    free(include);
    return rc;
}
