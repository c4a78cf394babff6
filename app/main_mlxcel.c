// SPDX-License-Identifier: MIT
// main() of `mlxcel`: dispatches to the subcommand named by argv[1].
#include <stdio.h>
#include <string.h>

#include "commands.h"

typedef struct command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *help;
} command;

static const command commands[] = {
    {"generate", cmd_generate, "generate text from a prompt"},
    {"chat", cmd_chat, "interactive multi-turn chat in the terminal"},
    {"serve", cmd_serve, "OpenAI-compatible HTTP server (same as mlxcel-server)"},
    {"bench", cmd_bench, "prompt-processing and generation speed"},
    {"perplexity", cmd_perplexity, "perplexity of a text file"},
    {"logits", cmd_logits, "write the logits of a token sequence to a safetensors file"},
    {"convert", cmd_convert, "convert a Hugging Face checkpoint to an MLX (quantized) folder"},
    {"inspect", cmd_inspect, "describe a model folder"},
    {"download", cmd_download, "download a model from the Hugging Face Hub into the local cache"},
    {"info", cmd_info, "version, backends, CPU features and devices"},
};

static void usage(FILE *to) {
    fprintf(to, "usage: mlxcel <command> [options]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(to, "  %-11s %s\n", commands[i].name, commands[i].help);
    fprintf(to, "\nRun 'mlxcel <command> --help' for the options of a command.\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return MX_EXIT_USAGE;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "help") == 0) {
        usage(stdout);
        return MX_EXIT_OK;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("mlxcel %s\n", MLXCEL_VERSION);
        return MX_EXIT_OK;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
        if (strcmp(argv[1], commands[i].name) != 0) continue;
        return commands[i].run(argc - 1, argv + 1);
    }
    fprintf(stderr, "mlxcel: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return MX_EXIT_USAGE;
}
