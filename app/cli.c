// SPDX-License-Identifier: MIT
// Command-line plumbing shared by the subcommands (see cli.h): error lines in one format, flag and
// value parsing with range checks (exit 2 on misuse), the model and sampling options every
// generating command takes, opening the model on the chosen backend, and the peak-memory figure.
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "commands.h"
#include "io/model_path.h"

#ifndef MLXCEL_DEFAULT_MODEL
#define MLXCEL_DEFAULT_MODEL "models/qwen3-demo-44m-4bit"
#endif

void cli_error(const char *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "mlxcel %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

bool cli_is(const char *arg, const char *short_name, const char *long_name) {
    return (short_name && strcmp(arg, short_name) == 0) || (long_name && strcmp(arg, long_name) == 0);
}

const char *cli_value(const char *cmd, int argc, char **argv, int *i) {
    if (*i + 1 >= argc) {
        cli_error(cmd, "option %s needs a value", argv[*i]);
        return NULL;
    }
    return argv[++*i];
}

int cli_int(const char *cmd, const char *flag, const char *v, long lo, long hi, int *out) {
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi) {
        cli_error(cmd, "%s: '%s' is not an integer in [%ld, %ld]", flag, v, lo, hi);
        return -1;
    }
    *out = (int)x;
    return 0;
}

int cli_float(const char *cmd, const char *flag, const char *v, double lo, double hi, float *out) {
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || end == v || *end || !isfinite(x) || x < lo || x > hi) {
        cli_error(cmd, "%s: '%s' is not a number in [%g, %g]", flag, v, lo, hi);
        return -1;
    }
    *out = (float)x;
    return 0;
}

int cli_u64(const char *cmd, const char *flag, const char *v, uint64_t *out) {
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (errno || end == v || *end || v[0] == '-') {
        cli_error(cmd, "%s: '%s' is not a non-negative integer", flag, v);
        return -1;
    }
    *out = x;
    return 0;
}

const char cli_model_help[] =
    "  -m, --model PATH        model folder, or Hugging Face repo id (ORG/NAME: from the local\n"
    "                          cache, downloaded when missing; default: the bundled demo model)\n"
    "  --backend NAME          cpu, cuda, rocm or auto (default: auto)\n"
    "  -t, --threads N         CPU threads (default: all cores)\n"
    "  -c, --ctx N             context length in tokens\n"
    "  --kv-bits 4|8|16        KV cache codes: 16 (int16, the default), 8 (int8, half the cache's\n"
    "                          bytes, slightly less accurate) or 4 (a quarter of the int16 cache's\n"
    "                          bytes, less accurate again); 4 and 8: cpu backend only, others refuse\n";

void cli_sampling_usage(FILE *to, const mx_sampling *defaults) {
    fprintf(to, "  --temp T                temperature; 0 is greedy (default %g)\n%s", (double)defaults->temp,
            cli_sampling_help);
}

const char cli_sampling_help[] =
    "  --top-k K               keep the K most likely tokens (0: off)\n"
    "  --top-p P               nucleus sampling (1: off)\n"
    "  --min-p P               drop tokens below P x the best probability (0: off)\n"
    "  --repetition-penalty R  penalize recent tokens (1: off)\n"
    "  --repetition-context-size N  tokens the repetition penalty looks at (default 20)\n"
    "  --presence-penalty X, --frequency-penalty X  OpenAI-style penalties (0: off)\n"
    "  --seed S                random seed (same seed, same output)\n";

int cli_model_opt(const char *cmd, int argc, char **argv, int *i, cli_model_opts *o) {
    const char *a = argv[*i], *v;
    if (cli_is(a, "-m", "--model")) {
        if (!(v = cli_value(cmd, argc, argv, i))) return -1;
        o->model = v;
        return 1;
    }
    if (cli_is(a, NULL, "--backend")) {
        if (!(v = cli_value(cmd, argc, argv, i))) return -1;
        o->backend = v;
        return 1;
    }
    if (cli_is(a, "-t", "--threads")) {
        if (!(v = cli_value(cmd, argc, argv, i))) return -1;
        return cli_int(cmd, a, v, 0, 1024, &o->threads) ? -1 : 1;
    }
    if (cli_is(a, "-c", "--ctx")) {
        if (!(v = cli_value(cmd, argc, argv, i))) return -1;
        return cli_int(cmd, a, v, 1, 1 << 20, &o->ctx) ? -1 : 1;
    }
    if (cli_is(a, NULL, "--kv-bits")) {
        if (!(v = cli_value(cmd, argc, argv, i))) return -1;
        if (strcmp(v, "4") != 0 && strcmp(v, "8") != 0 && strcmp(v, "16") != 0) {
            cli_error(cmd, "--kv-bits must be 4, 8 or 16 (got '%s')", v);
            return -1;
        }
        o->kv_bits = atoi(v);
        return 1;
    }
    return 0;
}

int cli_sampling_opt(const char *cmd, int argc, char **argv, int *i, mx_sampling *s) {
    const char *a = argv[*i], *v;
    struct {
        const char *name;
        float *dst;
        double lo, hi;
    } floats[] = {
        {"--temp", &s->temp, 0, 100},
        {"--top-p", &s->top_p, 0, 1},
        {"--min-p", &s->min_p, 0, 1},
        {"--repetition-penalty", &s->repetition_penalty, 0.01, 100},
        {"--presence-penalty", &s->presence_penalty, -2, 2},
        {"--frequency-penalty", &s->frequency_penalty, -2, 2},
    };
    for (size_t k = 0; k < sizeof floats / sizeof floats[0]; k++) {
        if (strcmp(a, floats[k].name) != 0) continue;
        if (!(v = cli_value(cmd, argc, argv, i))) return -1;
        return cli_float(cmd, a, v, floats[k].lo, floats[k].hi, floats[k].dst) ? -1 : 1;
    }
    if (strcmp(a, "--top-k") == 0) {
        if (!(v = cli_value(cmd, argc, argv, i))) return -1;
        return cli_int(cmd, a, v, 0, 1 << 24, &s->top_k) ? -1 : 1;
    }
    if (strcmp(a, "--repetition-context-size") == 0) {
        if (!(v = cli_value(cmd, argc, argv, i))) return -1;
        return cli_int(cmd, a, v, 1, 1 << 20, &s->repetition_context) ? -1 : 1;
    }
    if (strcmp(a, "--seed") == 0) {
        if (!(v = cli_value(cmd, argc, argv, i))) return -1;
        s->has_seed = true;
        return cli_u64(cmd, a, v, &s->seed) ? -1 : 1;
    }
    return 0;
}

int cli_common_opt(const char *cmd, int argc, char **argv, int *i, const cli_common_opts *c) {
    int r = cli_model_opt(cmd, argc, argv, i, c->model);
    if (r == 0 && c->sampling && (r = cli_sampling_opt(cmd, argc, argv, i, c->sampling)) > 0 && c->sampling_given)
        *c->sampling_given = true;
    if (r < 0) return MX_EXIT_USAGE;
    if (r > 0) return CLI_OPT_TAKEN;
    if (cli_is(argv[*i], "-h", "--help")) {
        c->usage(stdout);
        return MX_EXIT_OK;
    }
    return CLI_OPT_OWN;
}

int cli_open_model(const char *cmd, const cli_model_opts *o, mx_backend **be, mx_model **m, char **dir_out) {
    mx_error err = {{0}};
    char dir[4096];
    *be = NULL;
    *m = NULL;
    if (mx_model_path_resolve(o->model ? o->model : MLXCEL_DEFAULT_MODEL, dir, sizeof dir, &err) != 0) {
        cli_error(cmd, "%s", err.msg);
        return -1;
    }
    mx_backend_options bo = {.name = o->backend, .threads = o->threads, .device_index = 0, .kv_bits = o->kv_bits};
    *be = mx_backend_create(&bo, &err);
    if (!*be) {
        cli_error(cmd, "%s", err.msg);
        return -1;
    }
    *m = mx_model_load(dir, *be, &err);
    if (!*m) {
        cli_error(cmd, "loading %s: %s", dir, err.msg);
        mx_backend_free(*be);
        *be = NULL;
        return -1;
    }
    if (mx_model_config(*m)->tensor_prefix[0])
        fprintf(stderr, "mlxcel %s: note: %s is multimodal; its language model runs, the vision tower is not loaded "
                        "(text only)\n",
                cmd, dir);
    if (dir_out) *dir_out = strdup(dir);
    return 0;
}

int64_t cli_peak_rss(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (int64_t)ru.ru_maxrss * 1024;
}
