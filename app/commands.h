// SPDX-License-Identifier: MIT
// The subcommands of `mlxcel`, one file each (app/cmd_<name>.c). Each takes the arguments after the
// subcommand name (argv[0] is the subcommand) and returns the process exit code:
// 0 ok, 1 runtime error (bad file, model, request...), 2 usage error (bad flag or value).
#ifndef MX_APP_COMMANDS_H
#define MX_APP_COMMANDS_H

enum { MX_EXIT_OK = 0, MX_EXIT_RUNTIME = 1, MX_EXIT_USAGE = 2 };

int cmd_generate(int argc, char **argv);
int cmd_chat(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_perplexity(int argc, char **argv);
int cmd_logits(int argc, char **argv);
int cmd_convert(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_download(int argc, char **argv);

#endif
