// SPDX-License-Identifier: MIT
// Shared command-line plumbing for the subcommands: flag values with range checks (a bad value is
// a usage error naming the flag), the model/backend options every model command takes, and opening
// a model with them. Errors go to stderr prefixed with "mlxcel <command>:".
#ifndef MX_APP_CLI_H
#define MX_APP_CLI_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "backends/backend.h"
#include "models/model.h"
#include "sample/sampler.h"

void cli_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

// True when argv[*i] is one of the names (NULL-terminated list given as two names; short may be NULL).
bool cli_is(const char *arg, const char *short_name, const char *long_name);
// Takes the value after a flag (advancing *i); NULL (with a message) when missing.
const char *cli_value(const char *cmd, int argc, char **argv, int *i);
int cli_int(const char *cmd, const char *flag, const char *v, long lo, long hi, int *out);
int cli_float(const char *cmd, const char *flag, const char *v, double lo, double hi, float *out);
int cli_u64(const char *cmd, const char *flag, const char *v, uint64_t *out);

typedef struct cli_model_opts {
    const char *model;    // -m; NULL: the bundled demo model
    const char *backend;  // --backend; NULL: auto
    int threads;          // --threads; 0: all cores
    int ctx;              // --ctx; 0: command default
    int kv_bits;          // --kv-bits 4|8|16; 0: the backend's default (mx_backend_options.kv_bits)
} cli_model_opts;

// Consumes a model option at argv[*i]: returns 1 if consumed, 0 if not a model option, -1 on a
// bad value (message printed).
int cli_model_opt(const char *cmd, int argc, char **argv, int *i, cli_model_opts *o);
// Consumes a sampling option (--temp, --top-k, --top-p, --min-p, --repetition-penalty,
// --repetition-context-size, --presence-penalty, --frequency-penalty, --seed).
int cli_sampling_opt(const char *cmd, int argc, char **argv, int *i, mx_sampling *s);
extern const char cli_model_help[];
// The sampling options' help: --temp with the command's default (defaults->temp), then the rest
// (cli_sampling_help, whose defaults are mx_sampling_defaults()'s).
void cli_sampling_usage(FILE *to, const mx_sampling *defaults);
extern const char cli_sampling_help[];

// The flags every model command shares, tried at the top of its flag loop by cli_common_opt.
typedef struct cli_common_opts {
    cli_model_opts *model;    // model and backend options (cli_model_opt)
    mx_sampling *sampling;    // sampling options (cli_sampling_opt); NULL: the command takes none
    bool *sampling_given;     // NULL, or set to true when a sampling option is taken
    void (*usage)(FILE *to);  // the command's help, which -h/--help prints to stdout
} cli_common_opts;

// What cli_common_opt says besides an exit status (statuses are >= 0, these are not).
enum { CLI_OPT_OWN = -1, CLI_OPT_TAKEN = -2 };

// Takes argv[*i] when it is a model option, a sampling option or -h/--help, in that order. Returns
// CLI_OPT_TAKEN when it was taken with its value (*i advanced past the value: go on to the next
// argument), CLI_OPT_OWN when it is none of them (the command parses its own flag), or the status
// the command exits with: MX_EXIT_USAGE after a bad value (message printed), MX_EXIT_OK after help.
int cli_common_opt(const char *cmd, int argc, char **argv, int *i, const cli_common_opts *c);

// Resolves the model path, creates the backend and loads the model; prints the error and returns -1
// on failure. *dir_out receives the resolved folder (caller frees).
int cli_open_model(const char *cmd, const cli_model_opts *o, mx_backend **be, mx_model **m, char **dir_out);

// Peak resident memory of the process in bytes.
int64_t cli_peak_rss(void);

#endif
