// SPDX-License-Identifier: MIT
// `mlxcel convert`: flags as mlx-lm's convert (--hf-path, --mlx-path, -q, --q-bits, --q-group-size,
// --q-mode, --dtype, --quant-predicate) plus --q-experts-mode, --force, --threads and --max-shard-size. The work is
// done by the library (src/convert/convert.h); this file parses flags and draws a progress bar on
// stderr when it is a terminal.
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "core/clock.h"
#include "commands.h"
#include "convert/convert.h"
#include "convert/recipe.h"
#include "io/model_path.h"

static const char *const CMD = "convert";

static void usage(FILE *to) {
    fprintf(to,
            "usage: mlxcel convert --hf-path DIR --mlx-path OUT [options]\n\n"
            "Converts a Hugging Face checkpoint (config.json + model*.safetensors) into an MLX model\n"
            "folder, optionally quantized exactly as mlx-lm does.\n\n"
            "  --hf-path, --model DIR   source folder, or a Hugging Face repo id (ORG/NAME; downloaded\n"
            "                           into the Hugging Face cache when missing)\n"
            "  --mlx-path OUT           output folder (default mlx_model)\n"
            "  -q, --quantize           quantize Linear and Embedding weights\n"
            "  --q-bits N               2, 3, 4, 5, 6 or 8 (default 4; mxfp8: 8)\n"
            "  --q-group-size N         32, 64 or 128 (default 64; mxfp4/mxfp8: 32)\n"
            "  --q-mode MODE            affine (default), mxfp4 or mxfp8\n"
            "  --dtype T                bfloat16, float16 or float32 (default: config torch_dtype)\n"
            "  --quant-predicate R      mixed-bit recipe: mixed_2_6, mixed_3_4, mixed_3_5,\n"
            "                           mixed_3_6, mixed_3_8, mixed_4_6, mixed_4_8\n"
            "  --q-experts-mode MODE    MoE experts in mxfp4 or mxfp8 (group 32), the rest as the\n"
            "                           flags above say (gpt-oss as mlx-community ships it:\n"
            "                           -q --q-bits 8 --q-experts-mode mxfp4)\n"
            "  --force                  replace OUT if it exists\n"
            "  --threads N              worker threads (default: all cores)\n"
            "  --max-shard-size SIZE    bytes per shard, suffix K/M/G allowed (default 5G)\n");
}

typedef struct bar {
    double start;
    int last_pct;
} bar;

static void draw_bar(void *user, int64_t done, int64_t total) {
    bar *b = user;
    int pct = total > 0 ? (int)(done * 100 / total) : 100;
    if (pct == b->last_pct) return;
    b->last_pct = pct;
    int width = 40, fill = pct * width / 100;
    char cells[64];
    for (int i = 0; i < width; i++) cells[i] = i < fill ? '#' : '.';
    cells[width] = '\0';
    double el = mx_now() - b->start;
    fprintf(stderr, "\r[%s] %3d%%  %.1f/%.1f MB  %.1fs", cells, pct, done / 1e6, total / 1e6, el);
    if (pct == 100) fputc('\n', stderr);
    fflush(stderr);
}

static int parse_size(const char *v, int64_t *out) {
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (end == v || errno || x <= 0) return -1;
    double mul = 1;
    if (*end == 'K' || *end == 'k') mul = 1024.0, end++;
    else if (*end == 'M' || *end == 'm') mul = 1024.0 * 1024, end++;
    else if (*end == 'G' || *end == 'g') mul = 1024.0 * 1024 * 1024, end++;
    if (*end == 'B' || *end == 'b') end++;
    if (*end) return -1;
    *out = (int64_t)(x * mul);
    return *out > 0 ? 0 : -1;
}

int cmd_convert(int argc, char **argv) {
    mx_convert_opts o;
    mx_convert_opts_init(&o);
    o.mlx_path = "mlx_model";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (cli_is(a, "-h", "--help")) {
            usage(stdout);
            return MX_EXIT_OK;
        } else if (cli_is(a, NULL, "--hf-path") || cli_is(a, NULL, "--model")) {
            if (!(v = cli_value(CMD, argc, argv, &i))) return MX_EXIT_USAGE;
            o.hf_path = v;
        } else if (cli_is(a, NULL, "--mlx-path")) {
            if (!(v = cli_value(CMD, argc, argv, &i))) return MX_EXIT_USAGE;
            o.mlx_path = v;
        } else if (cli_is(a, "-q", "--quantize")) {
            o.quantize = true;
        } else if (cli_is(a, NULL, "--q-bits")) {
            if (!(v = cli_value(CMD, argc, argv, &i)) || cli_int(CMD, a, v, 1, 64, &o.q_bits) != 0)
                return MX_EXIT_USAGE;
            if (o.q_bits != 2 && o.q_bits != 3 && o.q_bits != 4 && o.q_bits != 5 && o.q_bits != 6 && o.q_bits != 8) {
                cli_error(CMD, "--q-bits must be 2, 3, 4, 5, 6 or 8 (got %s)", v);
                return MX_EXIT_USAGE;
            }
        } else if (cli_is(a, NULL, "--q-group-size")) {
            if (!(v = cli_value(CMD, argc, argv, &i)) || cli_int(CMD, a, v, 1, 4096, &o.q_group_size) != 0)
                return MX_EXIT_USAGE;
            if (o.q_group_size != 32 && o.q_group_size != 64 && o.q_group_size != 128) {
                cli_error(CMD, "--q-group-size must be 32, 64 or 128 (got %s)", v);
                return MX_EXIT_USAGE;
            }
        } else if (cli_is(a, NULL, "--q-mode")) {
            if (!(v = cli_value(CMD, argc, argv, &i))) return MX_EXIT_USAGE;
            if (mx_quant_mode_parse(v, &o.q_mode) != 0 || o.q_mode == MX_QUANT_NVFP4) {
                cli_error(CMD, "--q-mode must be affine, mxfp4 or mxfp8 (got '%s')", v);
                return MX_EXIT_USAGE;
            }
        } else if (cli_is(a, NULL, "--q-experts-mode")) {
            if (!(v = cli_value(CMD, argc, argv, &i))) return MX_EXIT_USAGE;
            if (mx_quant_mode_parse(v, &o.experts_q_mode) != 0 ||
                (o.experts_q_mode != MX_QUANT_MXFP4 && o.experts_q_mode != MX_QUANT_MXFP8)) {
                cli_error(CMD, "--q-experts-mode must be mxfp4 or mxfp8 (got '%s')", v);
                return MX_EXIT_USAGE;
            }
        } else if (cli_is(a, NULL, "--dtype")) {
            if (!(v = cli_value(CMD, argc, argv, &i))) return MX_EXIT_USAGE;
            if (strcmp(v, "bfloat16") == 0) o.dtype = MX_DTYPE_BF16;
            else if (strcmp(v, "float16") == 0) o.dtype = MX_DTYPE_F16;
            else if (strcmp(v, "float32") == 0) o.dtype = MX_DTYPE_F32;
            else {
                cli_error(CMD, "--dtype must be bfloat16, float16 or float32 (got '%s')", v);
                return MX_EXIT_USAGE;
            }
        } else if (cli_is(a, NULL, "--quant-predicate")) {
            if (!(v = cli_value(CMD, argc, argv, &i))) return MX_EXIT_USAGE;
            o.recipe = v;
        } else if (cli_is(a, NULL, "--force")) {
            o.force = true;
        } else if (cli_is(a, NULL, "--threads")) {
            if (!(v = cli_value(CMD, argc, argv, &i)) || cli_int(CMD, a, v, 1, 1024, &o.threads) != 0)
                return MX_EXIT_USAGE;
        } else if (cli_is(a, NULL, "--max-shard-size")) {
            if (!(v = cli_value(CMD, argc, argv, &i))) return MX_EXIT_USAGE;
            if (parse_size(v, &o.max_shard_bytes) != 0) {
                cli_error(CMD, "--max-shard-size: bad size '%s'", v);
                return MX_EXIT_USAGE;
            }
        } else {
            cli_error(CMD, "unknown option '%s' (see mlxcel convert --help)", a);
            return MX_EXIT_USAGE;
        }
    }
    if (!o.hf_path) {
        cli_error(CMD, "missing --hf-path");
        return MX_EXIT_USAGE;
    }
    mx_error err = {{0}};
    char hf_dir[4600];
    struct stat hf_st;
    if (stat(o.hf_path, &hf_st) != 0 && strchr(o.hf_path, '/')) {  // a repo id: cache, else download
        if (mx_model_path_resolve(o.hf_path, hf_dir, sizeof hf_dir, &err) != 0) {
            cli_error(CMD, "%s", err.msg);
            return MX_EXIT_RUNTIME;
        }
        o.hf_path = hf_dir;
    }
    if (mx_convert_check_opts(&o, &err) != 0) {
        cli_error(CMD, "%s", err.msg);
        return MX_EXIT_USAGE;
    }
    bar b = {mx_now(), -1};
    if (isatty(STDERR_FILENO)) {
        o.progress = draw_bar;
        o.progress_user = &b;
    }
    if (mx_convert(&o, &err) != 0) {
        if (b.last_pct >= 0 && b.last_pct < 100) fputc('\n', stderr);
        cli_error(CMD, "%s", err.msg);
        return MX_EXIT_RUNTIME;
    }
    fprintf(stderr, "mlxcel convert: wrote %s in %.1fs\n", o.mlx_path, mx_now() - b.start);
    return MX_EXIT_OK;
}
