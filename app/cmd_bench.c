// SPDX-License-Identifier: MIT
// `mlxcel bench`: prompt-processing (prefill of -p tokens) and generation (-n decode steps) speed,
// the median of --reps repetitions after one warm-up, and the peak resident memory. With --batch B
// it runs B sequences through the generation engine as the server does instead (app/bench_batch.c).
// The model is a real folder (-m), or random weights of a named shape (--shape) or of any
// config.json (--config), written once under the cache folder by app/bench_model.c and then loaded
// with the normal loader, so no download is needed.
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench_batch.h"
#include "bench_model.h"
#include "cli.h"
#include "core/clock.h"
#include "commands.h"
#include "core/mem_bandwidth.h"
#include "core/thread_pool.h"
#include "io/hf_config.h"
#include "io/mapped_file.h"

#define PROBE_BYTES ((size_t)1 << 30)  // bandwidth probe buffer: larger than any last-level cache
#define PROBE_PASSES 5

static const char *cmd = "bench";

static void usage(FILE *to) {
    fprintf(to,
            "usage: mlxcel bench [-m MODEL | --shape NAME | --config FILE] [options]\n"
            "  -p, --prompt-tokens N   tokens to prefill (default 512)\n"
            "  -n, --gen-tokens N      tokens to generate after the prefill (default 128; 0 skips)\n"
            "  --reps N                repetitions; the median is reported (default 3)\n"
            "  --shape NAME            random weights of a named shape: qwen3-0.6b, qwen3-8b, qwen3-30b-a3b (MoE)\n"
            "  --config FILE           random weights of the model a config.json describes\n"
            "  --q-bits B              random weights: affine bits 2,3,4,5,6,8, or 0 for bf16 (default 4,\n"
            "                          or the config's own quantization)\n"
            "  --q-group-size G        random weights: 32, 64 or 128 (default 64)\n"
            "  --q-mode MODE           random weights: affine, mxfp4 or mxfp8 (default affine)\n"
            "  --bandwidth             CPU backend: also measure the memory read rate with the same threads\n"
            "                          and give decode's share of it\n"
            "  --batch B               decode B sequences together through the generation engine, as the server's\n"
            "                          scheduler does (same step, token choice, paged KV cache; no HTTP): prints\n"
            "                          the aggregate decode tok/s, the mean step time and its phases\n"
            "  --print-ids             print the generated token ids (of sequence 0 with --batch)\n"
            "  sampling (--batch only): --temp, --top-p, --top-k, --min-p, --seed and the penalties of `generate`\n"
            "%s"
            "Without -m, --shape or --config the bundled demo model is used. Random models are written\n"
            "once under $XDG_CACHE_HOME/mlxcel/bench (default ~/.cache/mlxcel/bench).\n",
            cli_model_help);
}

// ---- Timing ------------------------------------------------------------------------------------

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double bench_median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// One repetition: prefill n_pp tokens, then n_tg greedy decode steps; returns the seconds of each.
// ids (NULL: not kept) receives the n_tg + 1 chosen ids.
static int bench_once(mx_ctx *ctx, const int32_t *prompt, int32_t *pos, int32_t *slot, int n_pp, int n_tg,
                      double *t_pp, double *t_tg, int32_t *ids, mx_error *err) {
    int32_t last = n_pp - 1, id = 0;
    mx_batch b = {n_pp, prompt, pos, slot, 1, &last};
    double t0 = mx_now();
    if (mx_ctx_forward(ctx, &b, NULL, &id, err) != 0) return -1;
    double t1 = mx_now();
    if (ids) ids[0] = id;
    for (int i = 0; i < n_tg; i++) {
        int32_t p = n_pp + i, zero = 0, row = 0;
        mx_batch step = {1, &id, &p, &zero, 1, &row};
        if (mx_ctx_forward(ctx, &step, NULL, &id, err) != 0) return -1;
        if (ids) ids[i + 1] = id;
    }
    *t_pp = t1 - t0;
    *t_tg = mx_now() - t1;
    return 0;
}

// ---- Command -----------------------------------------------------------------------------------

int cmd_bench(int argc, char **argv) {
    int n_pp = 512, n_tg = 128, reps = 3, q_bits = -1, q_group = 64, batch = 0;
    const char *shape_name = NULL, *config_file = NULL, *q_mode = "affine";
    bool probe = false, print_ids = false, sampling_given = false;
    cli_model_opts mo = {0};
    mx_sampling sp = mx_sampling_defaults();
    const cli_common_opts common = {.model = &mo, .sampling = &sp, .sampling_given = &sampling_given, .usage = usage};
    for (int i = 1; i < argc; i++) {
        int r = cli_common_opt(cmd, argc, argv, &i, &common);
        if (r == CLI_OPT_TAKEN) continue;
        if (r != CLI_OPT_OWN) return r;
        const char *a = argv[i], *v;
        if (cli_is(a, "-p", "--prompt-tokens")) {
            if (!(v = cli_value(cmd, argc, argv, &i)) || cli_int(cmd, a, v, 1, 1 << 20, &n_pp)) return MX_EXIT_USAGE;
        } else if (cli_is(a, "-n", "--gen-tokens")) {
            if (!(v = cli_value(cmd, argc, argv, &i)) || cli_int(cmd, a, v, 0, 1 << 20, &n_tg)) return MX_EXIT_USAGE;
        } else if (cli_is(a, NULL, "--reps")) {
            if (!(v = cli_value(cmd, argc, argv, &i)) || cli_int(cmd, a, v, 1, 1000, &reps)) return MX_EXIT_USAGE;
        } else if (cli_is(a, NULL, "--shape")) {
            if (!(shape_name = cli_value(cmd, argc, argv, &i))) return MX_EXIT_USAGE;
        } else if (cli_is(a, NULL, "--config")) {
            if (!(config_file = cli_value(cmd, argc, argv, &i))) return MX_EXIT_USAGE;
        } else if (cli_is(a, NULL, "--q-bits")) {
            if (!(v = cli_value(cmd, argc, argv, &i)) || cli_int(cmd, a, v, 0, 8, &q_bits)) return MX_EXIT_USAGE;
        } else if (cli_is(a, NULL, "--q-group-size")) {
            if (!(v = cli_value(cmd, argc, argv, &i)) || cli_int(cmd, a, v, 16, 128, &q_group)) return MX_EXIT_USAGE;
        } else if (cli_is(a, NULL, "--bandwidth")) {
            probe = true;
        } else if (cli_is(a, NULL, "--batch")) {
            if (!(v = cli_value(cmd, argc, argv, &i)) || cli_int(cmd, a, v, 1, 4096, &batch)) return MX_EXIT_USAGE;
        } else if (cli_is(a, NULL, "--print-ids")) {
            print_ids = true;
        } else if (cli_is(a, NULL, "--q-mode")) {
            if (!(q_mode = cli_value(cmd, argc, argv, &i))) return MX_EXIT_USAGE;
        } else {
            cli_error(cmd, "unknown option '%s'", a);
            usage(stderr);
            return MX_EXIT_USAGE;
        }
    }
    if (sampling_given && !batch) {
        cli_error(cmd, "sampling options apply only to --batch (the plain bench decodes greedily)");
        return MX_EXIT_USAGE;
    }
    if (batch && probe) {
        cli_error(cmd, "--bandwidth applies to the plain bench, not to --batch");
        return MX_EXIT_USAGE;
    }
    if (batch && reps > 64) {
        cli_error(cmd, "--batch takes at most 64 repetitions (--reps %d)", reps);
        return MX_EXIT_USAGE;
    }
    if (batch && n_tg < 1) {
        cli_error(cmd, "--batch measures decoding: -n must be at least 1");
        return MX_EXIT_USAGE;
    }
    if ((mo.model != NULL) + (shape_name != NULL) + (config_file != NULL) > 1) {
        cli_error(cmd, "give only one of -m, --shape and --config");
        return MX_EXIT_USAGE;
    }
    const char *shape_config = shape_name ? bench_shape_config(shape_name) : NULL;
    if (shape_name) {
        if (!shape_config) {
            cli_error(cmd, "unknown shape '%s' (known: qwen3-0.6b, qwen3-1.7b, qwen3-4b, qwen3-8b, qwen3-30b-a3b)", shape_name);
            return MX_EXIT_USAGE;
        }
    }
    bool random = shape_config || config_file;
    bool q_given = q_bits >= 0 || strcmp(q_mode, "affine") != 0;
    if (!random && (q_given || q_group != 64)) {
        cli_error(cmd, "--q-bits, --q-group-size and --q-mode apply only to --shape or --config");
        return MX_EXIT_USAGE;
    }
    mx_quant_mode qm;
    if (mx_quant_mode_parse(q_mode, &qm) != 0 || (qm != MX_QUANT_AFFINE && qm != MX_QUANT_MXFP4 && qm != MX_QUANT_MXFP8)) {
        cli_error(cmd, "--q-mode must be affine, mxfp4 or mxfp8 (got '%s')", q_mode);
        return MX_EXIT_USAGE;
    }
    if (qm != MX_QUANT_AFFINE) {
        if (q_bits >= 0 && q_bits != (qm == MX_QUANT_MXFP4 ? 4 : 8)) {
            cli_error(cmd, "--q-mode %s has %d-bit elements", q_mode, qm == MX_QUANT_MXFP4 ? 4 : 8);
            return MX_EXIT_USAGE;
        }
        q_bits = qm == MX_QUANT_MXFP4 ? 4 : 8;
        q_group = 32;
    } else if (q_bits > 0) {
        char why[128];
        mx_quant q = {MX_QUANT_AFFINE, q_bits, q_group};
        if (!mx_quant_valid(q, why, sizeof why)) {
            cli_error(cmd, "--q-bits %d --q-group-size %d: %s", q_bits, q_group, why);
            return MX_EXIT_USAGE;
        }
    }

    char dir[4096], label[200];
    char *config_text = NULL;
    if (random) {
        mx_error ignored = {{0}};
        char *base = shape_config ? strdup(shape_config) : mx_read_text_file(config_file, NULL, &ignored);
        if (!base) {
            cli_error(cmd, "cannot read %s", config_file ? config_file : "shape");
            return MX_EXIT_RUNTIME;
        }
        mx_config cfg;
        mx_error err = {{0}};
        if (mx_config_parse(base, NULL, config_file ? config_file : shape_name, &cfg, &err) != 0) {
            cli_error(cmd, "%s", err.msg);
            free(base);
            return MX_EXIT_RUNTIME;
        }
        bool had_quant = cfg.quantized;
        mx_config_free(&cfg);
        if (had_quant && q_given) {
            cli_error(cmd, "%s already has a quantization section; drop --q-bits/--q-mode", config_file);
            free(base);
            return MX_EXIT_USAGE;
        }
        if (had_quant || q_bits == 0) {
            config_text = base;
        } else {
            config_text = bench_config_with_quant(base, q_bits < 0 ? 4 : q_bits, q_group, q_mode);
            free(base);
            if (!config_text) {
                cli_error(cmd, "%s: no top-level JSON object", config_file);
                return MX_EXIT_RUNTIME;
            }
        }
        const char *cache = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
        char root[3000];
        if (cache && *cache)
            snprintf(root, sizeof root, "%s/mlxcel/bench", cache);
        else
            snprintf(root, sizeof root, "%s/.cache/mlxcel/bench", home && *home ? home : "/tmp");
        char qdesc[64];
        if (had_quant)
            snprintf(qdesc, sizeof qdesc, "cfgq");
        else if (q_bits == 0)
            snprintf(qdesc, sizeof qdesc, "bf16");
        else if (qm == MX_QUANT_AFFINE)
            snprintf(qdesc, sizeof qdesc, "q%dg%d", q_bits < 0 ? 4 : q_bits, q_group);
        else
            snprintf(qdesc, sizeof qdesc, "%s", q_mode);
        if (shape_config)
            snprintf(label, sizeof label, "%s-%s", shape_name, qdesc);
        else
            snprintf(label, sizeof label, "config-%016llx-%s", (unsigned long long)bench_hash_str(config_text), qdesc);
        snprintf(dir, sizeof dir, "%s/%s", root, label);
        if (bench_random_model(dir, config_text) != 0) {
            free(config_text);
            return MX_EXIT_RUNTIME;
        }
        free(config_text);
        mo.model = dir;
    }

    int rc = MX_EXIT_RUNTIME;
    mx_backend *be = NULL;
    mx_model *m = NULL;
    char *mdir = NULL;
    mx_ctx *ctx = NULL;
    int32_t *prompt = NULL, *pos = NULL, *slot = NULL, *ids = NULL;
    double *tpp = NULL, *ttg = NULL;
    mx_error err = {{0}};
    double t_load = mx_now();
    if (cli_open_model(cmd, &mo, &be, &m, &mdir) != 0) goto done;
    t_load = mx_now() - t_load;
    const mx_config *cfg = mx_model_config(m);
    int max_ctx = n_pp + n_tg + 1;
    if (mo.ctx && mo.ctx < max_ctx) {
        cli_error(cmd, "--ctx %d is smaller than -p + -n + 1 = %d", mo.ctx, max_ctx);
        rc = MX_EXIT_USAGE;
        goto done;
    }
    if (mo.ctx) max_ctx = mo.ctx;
    if (batch) {
        bench_batch_opts bo = {.batch = batch, .n_pp = n_pp, .n_tg = n_tg, .reps = reps, .max_ctx = max_ctx,
                               .threads = mo.threads, .sampling = sp, .print_ids = print_ids, .prompt_seed = BENCH_SEED};
        rc = bench_batch(cmd, be, m, mdir, random ? label : mdir, &bo);
        goto done;
    }
    if (!(ctx = mx_ctx_create(m, 1, max_ctx, n_pp < 512 ? n_pp : 512, &err))) {
        cli_error(cmd, "%s", err.msg);
        goto done;
    }
    prompt = malloc(sizeof(int32_t) * n_pp);
    pos = malloc(sizeof(int32_t) * n_pp);
    slot = calloc((size_t)n_pp, sizeof(int32_t));
    tpp = malloc(sizeof(double) * reps);
    ttg = malloc(sizeof(double) * reps);
    ids = malloc(sizeof(int32_t) * ((size_t)n_tg + 1));
    if (!prompt || !pos || !slot || !tpp || !ttg || !ids) {
        cli_error(cmd, "out of memory");
        goto done;
    }
    for (int i = 0; i < n_pp; i++) {
        prompt[i] = bench_prompt_token(BENCH_SEED, 0, i, cfg->vocab_size);
        pos[i] = i;
    }
    int threads = mo.threads ? mo.threads : mx_cpu_count();
    const char *model_label = random ? label : mdir;
    fprintf(stderr, "model: %s (%.2f GB of weights, loaded in %.2f s)\n", model_label, mx_model_weight_bytes(m) / 1e9,
            t_load);
    fprintf(stderr, "backend: %s, %s, KV cache %s\n", be->ops->name, be->device_name, mx_dtype_name(be->kv_dtype));
    if (probe && strcmp(be->ops->name, "cpu") != 0) {
        cli_error(cmd, "--bandwidth measures host memory, so it applies to the CPU backend only (this is %s)",
                  be->ops->name);
        rc = MX_EXIT_USAGE;
        goto done;
    }
    double w_pp, w_tg;
    if (bench_once(ctx, prompt, pos, slot, n_pp, n_tg < 16 ? n_tg : 16, &w_pp, &w_tg, NULL, &err) != 0) {  // warm-up
        cli_error(cmd, "%s", err.msg);
        goto done;
    }
    for (int r = 0; r < reps; r++) {
        if (bench_once(ctx, prompt, pos, slot, n_pp, n_tg, &tpp[r], &ttg[r], r == 0 && print_ids ? ids : NULL, &err) != 0) {
            cli_error(cmd, "%s", err.msg);
            goto done;
        }
        if (r == 0 && print_ids) {  // the tokens a sequence of -n tokens makes: the prefill's, then n - 1 steps'
            printf("ids:");
            for (int k = 0; k < n_tg; k++) printf(" %d", ids[k]);
            printf("\n");
        }
        tpp[r] = n_pp / tpp[r];
        ttg[r] = n_tg ? n_tg / ttg[r] : 0.0;
        fprintf(stderr, "rep %d: pp%d %.2f tok/s, tg%d %.2f tok/s\n", r + 1, n_pp, tpp[r], n_tg, ttg[r]);
    }
    double lo_pp = tpp[0], hi_pp = tpp[0], lo_tg = ttg[0], hi_tg = ttg[0];
    for (int r = 1; r < reps; r++) {
        lo_pp = fmin(lo_pp, tpp[r]), hi_pp = fmax(hi_pp, tpp[r]);
        lo_tg = fmin(lo_tg, ttg[r]), hi_tg = fmax(hi_tg, ttg[r]);
    }
    double pp = bench_median(tpp, reps), tg = bench_median(ttg, reps);
    double peak_mb = cli_peak_rss() / (1024.0 * 1024.0);  // before the probe's buffer
    double bw = 0.0;
    if (probe) {
        mx_pool *pool = mx_pool_create(threads);
        bw = pool ? mx_mem_read_bandwidth(pool, PROBE_BYTES, PROBE_PASSES) : -1.0;
        mx_pool_free(pool);
        if (bw <= 0.0) {
            cli_error(cmd, "out of memory for the bandwidth probe (%zu MB)", PROBE_BYTES >> 20);
            goto done;
        }
    }
    printf("prompt processing (pp%d): %.2f tok/s (median of %d, range %.2f-%.2f)\n", n_pp, pp, reps, lo_pp, hi_pp);
    // Bytes one decode step reads: the weights it uses and the KV cache up to its position; step i
    // (position n_pp + i) reads n_pp + i + 1 positions, n_pp + (n_tg + 1) / 2 on average.
    double kv_per_pos = (double)mx_ctx_kv_bytes(ctx) / max_ctx;  // one slot
    double mean_ctx = n_pp + (n_tg + 1) / 2.0;
    double w_mb = mx_model_decode_weight_bytes(m) / 1e6, kv_mb = kv_per_pos * mean_ctx / 1e6;
    double gbs = (w_mb + kv_mb) * tg / 1e3;
    if (n_tg) {
        printf("generation (tg%d): %.2f tok/s (median of %d, range %.2f-%.2f)\n", n_tg, tg, reps, lo_tg, hi_tg);
        printf("  read per token: %.1f MB (weights %.1f MB + KV cache %.1f MB at mean context %.0f), %.2f GB/s\n",
               w_mb + kv_mb, w_mb, kv_mb, mean_ctx, gbs);
    }
    if (probe)
        printf("memory read bandwidth (%d threads, best of %d passes over %zu MB): %.2f GB/s; generation used %.0f%%\n",
               threads, PROBE_PASSES, PROBE_BYTES >> 20, bw, n_tg ? 100.0 * gbs / bw : 0.0);
    printf("peak memory: %.1f MB\n", peak_mb);
    printf("bench: %s=%s backend=%s threads=%d pp%d=%.2f tg%d=%.2f mb_per_tok=%.1f gbs=%.2f", random ? "shape" : "model",
           model_label, be->ops->name, threads, n_pp, pp, n_tg, tg, w_mb + kv_mb, gbs);
    if (probe) printf(" bw_gbs=%.2f bw_pct=%.1f", bw, n_tg ? 100.0 * gbs / bw : 0.0);
    printf(" peak_mb=%.0f\n", peak_mb);
    rc = MX_EXIT_OK;
done:
    free(prompt);
    free(pos);
    free(slot);
    free(tpp);
    free(ttg);
    free(ids);
    free(mdir);
    mx_ctx_free(ctx);
    mx_model_free(m);
    mx_backend_free(be);
    return rc;
}
