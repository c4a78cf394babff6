// SPDX-License-Identifier: MIT
// `mlxcel bench`: prompt-processing (prefill of -p tokens) and generation (-n decode steps) speed,
// the median of --reps repetitions after one warm-up, and the peak resident memory. With --batch B
// it runs B sequences through the generation engine as the server does instead (app/bench_batch.c).
//
// The model is a real folder (-m), or random weights of a named shape (--shape) or of any
// config.json (--config), so no download is needed. Random models are written once as ordinary
// MLX folders (config.json + model.safetensors with U32 packed weights and BF16 scales/biases) under
// $XDG_CACHE_HOME/mlxcel/bench/<name> (or ~/.cache/...) and then loaded with the normal loader, so
// the benchmark measures exactly the path a downloaded model takes. The writer streams: an 8B model
// (~4.5 GB) never sits in memory, and its content is a cheap counter-based hash of (seed, tensor,
// offset), so the same name always gives the same bytes. Weights are random but never all zero:
// codes are uniform, scales are positive with a random mantissa, biases centre the codes.
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench_batch.h"
#include "cli.h"
#include "core/clock.h"
#include "commands.h"
#include "convert/st_writer.h"
#include "core/mem_bandwidth.h"
#include "core/thread_pool.h"
#include "io/folders.h"
#include "io/hf_config.h"
#include "io/mapped_file.h"
#include "models/family.h"

#define BENCH_SEED 0x6d6c7863656cULL  // "mlxcel"
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

// ---- Named shapes ------------------------------------------------------------------------------

typedef struct bench_shape {
    const char *name;
    const char *config;  // config.json without quantization
} bench_shape;

#define QWEN3_CONFIG(H, I, L, NH, NKV, TIE)                                                                   \
    "{\n  \"architectures\": [\"Qwen3ForCausalLM\"],\n  \"model_type\": \"qwen3\",\n"                          \
    "  \"vocab_size\": 151936,\n  \"hidden_size\": " #H ",\n  \"intermediate_size\": " #I ",\n"                \
    "  \"num_hidden_layers\": " #L ",\n  \"num_attention_heads\": " #NH ",\n  \"num_key_value_heads\": " #NKV \
    ",\n  \"head_dim\": 128,\n  \"max_position_embeddings\": 40960,\n  \"rms_norm_eps\": 1e-06,\n"             \
    "  \"rope_theta\": 1000000,\n  \"tie_word_embeddings\": " #TIE ",\n  \"attention_bias\": false,\n"        \
    "  \"bos_token_id\": 151643,\n  \"eos_token_id\": 151645,\n  \"torch_dtype\": \"bfloat16\"\n}\n"

// Qwen3-30B-A3B: 48 layers of 128 experts (8 per token, 768 wide) behind 32/4 heads of 128.
#define QWEN3_MOE_30B_A3B_CONFIG                                                                             \
    "{\n  \"architectures\": [\"Qwen3MoeForCausalLM\"],\n  \"model_type\": \"qwen3_moe\",\n"                \
    "  \"vocab_size\": 151936,\n  \"hidden_size\": 2048,\n  \"intermediate_size\": 6144,\n"                 \
    "  \"moe_intermediate_size\": 768,\n  \"num_experts\": 128,\n  \"num_experts_per_tok\": 8,\n"          \
    "  \"norm_topk_prob\": true,\n  \"decoder_sparse_step\": 1,\n  \"mlp_only_layers\": [],\n"             \
    "  \"num_hidden_layers\": 48,\n  \"num_attention_heads\": 32,\n  \"num_key_value_heads\": 4,\n"       \
    "  \"head_dim\": 128,\n  \"max_position_embeddings\": 40960,\n  \"rms_norm_eps\": 1e-06,\n"           \
    "  \"rope_theta\": 1000000,\n  \"tie_word_embeddings\": false,\n  \"attention_bias\": false,\n"       \
    "  \"bos_token_id\": 151643,\n  \"eos_token_id\": 151645,\n  \"torch_dtype\": \"bfloat16\"\n}\n"

static const bench_shape shapes[] = {
    {"qwen3-0.6b", QWEN3_CONFIG(1024, 3072, 28, 16, 8, true)},
    {"qwen3-1.7b", QWEN3_CONFIG(2048, 6144, 28, 16, 8, true)},
    {"qwen3-4b", QWEN3_CONFIG(2560, 9728, 36, 32, 8, true)},
    {"qwen3-8b", QWEN3_CONFIG(4096, 12288, 36, 32, 8, false)},
    {"qwen3-30b-a3b", QWEN3_MOE_30B_A3B_CONFIG},
};

// ---- Random tensor content ---------------------------------------------------------------------

typedef enum fill_kind {
    FILL_BITS,      // uniform random bits (packed codes of any width)
    FILL_SCALE,     // bf16, positive, exponent of `nominal`, random mantissa
    FILL_BIAS,      // bf16, negative, exponent of `nominal`, random mantissa
    FILL_ONES,      // bf16 1.0 (norm weights)
    FILL_DENSE,     // bf16, random sign and mantissa, exponent of `nominal`
    FILL_E8M0,      // u8 scale exponents near `nominal`
} fill_kind;

typedef struct tensor_spec {
    char name[160];
    const char *dtype;  // safetensors dtype name
    int ndim;
    int64_t shape[3];
    int64_t bytes;
    fill_kind fill;
    float nominal;
} tensor_spec;

typedef struct spec_list {
    tensor_spec *v;
    int n, cap;
} spec_list;

uint64_t bench_splitmix(uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

static uint64_t hash_str(const char *s) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 0x100000001b3ULL;
    return h;
}

static uint16_t bf16_exp_bits(float nominal) {
    uint32_t u;
    memcpy(&u, &nominal, 4);
    return (uint16_t)((u >> 16) & 0x7f80);
}

// Fills buf (n bytes, a multiple of 8) with bytes [off, off+n) of the tensor's content.
static void fill_chunk(const tensor_spec *t, uint64_t key, int64_t off, uint8_t *buf, int64_t n) {
    uint16_t ex = bf16_exp_bits(t->nominal);
    for (int64_t i = 0; i < n; i += 8) {
        uint64_t r = bench_splitmix(key + (uint64_t)(off + i));
        switch (t->fill) {
        case FILL_BITS:
            break;
        case FILL_SCALE:
            r = (r & 0x007f007f007f007fULL) | (uint64_t)ex * 0x0001000100010001ULL;
            break;
        case FILL_BIAS:
            r = (r & 0x007f007f007f007fULL) | (uint64_t)(ex | 0x8000) * 0x0001000100010001ULL;
            break;
        case FILL_ONES:
            r = 0x3f803f803f803f80ULL;
            break;
        case FILL_DENSE:
            r = (r & 0x807f807f807f807fULL) | (uint64_t)ex * 0x0001000100010001ULL;
            break;
        case FILL_E8M0: {
            int e = (int)lroundf(log2f(t->nominal)) + 127;
            uint64_t base = (uint64_t)(e - 1) * 0x0101010101010101ULL;
            r = base + (r & 0x0101010101010101ULL) + ((r >> 1) & 0x0101010101010101ULL);  // e-1 .. e+1
            break;
        }
        }
        int64_t take = n - i < 8 ? n - i : 8;
        memcpy(buf + i, &r, (size_t)take);
    }
}

static int spec_add(spec_list *l, const char *name, const char *dtype, int ndim, const int64_t *shape, int64_t elem_bits,
                    fill_kind fill, float nominal) {
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 256;
        tensor_spec *g = realloc(l->v, sizeof *g * cap);
        if (!g) return -1;
        l->v = g;
        l->cap = cap;
    }
    tensor_spec *t = &l->v[l->n++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->dtype = dtype;
    t->ndim = ndim;
    int64_t numel = 1;
    for (int i = 0; i < ndim; i++) numel *= t->shape[i] = shape[i];
    t->bytes = numel * elem_bits / 8;
    t->fill = fill;
    t->nominal = nominal;
    return 0;
}

// A Linear weight `path` [E?, rows, cols] in the format the config gives it.
static int spec_linear(spec_list *l, const mx_config *cfg, const char *path, int64_t experts, int64_t rows,
                       int64_t cols) {
    char name[200];
    mx_quant q = mx_config_quant_for(cfg, path, cfg->quantized);
    int nd = experts > 0 ? 3 : 2;
    int64_t lead[3] = {experts, rows, cols};
    const int64_t *sh = experts > 0 ? lead : lead + 1;
    int64_t shape[3];
    memcpy(shape, sh, sizeof(int64_t) * nd);
    if (q.mode == MX_QUANT_NONE) {
        snprintf(name, sizeof name, "%s.weight", path);
        return spec_add(l, name, "BF16", nd, shape, 16, FILL_DENSE, 1.0f / sqrtf((float)cols));
    }
    int64_t cols_in = shape[nd - 1];
    shape[nd - 1] = cols_in * q.bits / 32;
    snprintf(name, sizeof name, "%s.weight", path);
    if (spec_add(l, name, "U32", nd, shape, 32, FILL_BITS, 0)) return -1;
    shape[nd - 1] = cols_in / q.group_size;
    snprintf(name, sizeof name, "%s.scales", path);
    if (q.mode == MX_QUANT_AFFINE) {
        float levels = (float)((1 << q.bits) - 1);
        float s = 3.4f / (levels * sqrtf((float)cols));  // uniform codes: std about 1/sqrt(cols)
        if (spec_add(l, name, "BF16", nd, shape, 16, FILL_SCALE, s)) return -1;
        snprintf(name, sizeof name, "%s.biases", path);
        return spec_add(l, name, "BF16", nd, shape, 16, FILL_BIAS, s * levels / 2);
    }
    float elem_rms = q.mode == MX_QUANT_MXFP4 ? 3.0f : 60.0f;  // rough rms of a random E2M1 / E4M3 code
    return spec_add(l, name, "U8", nd, shape, 8, FILL_E8M0, 1.0f / (elem_rms * sqrtf((float)cols)));
}

static int spec_vector(spec_list *l, const char *name, int64_t n, fill_kind fill) {
    return spec_add(l, name, "BF16", 1, &n, 16, fill, 0.01f);
}

// Multi-head latent attention (deepseek_v3) in mlx-lm's layout: q LoRA (or q_proj), the latent
// projection and norm, embed_q / unembed_out stacked per head, o_proj.
static int spec_latent(spec_list *l, const mx_config *c, int i) {
    int64_t H = c->hidden_size, NH = c->n_heads, QD = c->qk_nope_head_dim + c->qk_rope_head_dim,
            KL = c->kv_lora_rank, QL = c->q_lora_rank;
    char name[260];
#define NAME(suffix) (snprintf(name, sizeof name, "model.layers.%d.self_attn.%s", i, suffix), name)
    if (QL > 0 ? spec_linear(l, c, NAME("q_a_proj"), 0, QL, H) ||
                     spec_vector(l, NAME("q_a_layernorm.weight"), QL, FILL_ONES) ||
                     spec_linear(l, c, NAME("q_b_proj"), 0, NH * QD, QL)
               : spec_linear(l, c, NAME("q_proj"), 0, NH * QD, H))
        return -1;
    return spec_linear(l, c, NAME("kv_a_proj_with_mqa"), 0, KL + c->qk_rope_head_dim, H) ||
           spec_vector(l, NAME("kv_a_layernorm.weight"), KL, FILL_ONES) ||
           spec_linear(l, c, NAME("embed_q"), NH, KL, c->qk_nope_head_dim) ||
           spec_linear(l, c, NAME("unembed_out"), NH, c->v_head_dim, KL) ||
           spec_linear(l, c, NAME("o_proj"), 0, H, NH * c->v_head_dim);
#undef NAME
}

// Every tensor the loader expects for this config and family, in file order.
static int spec_model(spec_list *l, const mx_config *c, const mx_family *fam) {
    int64_t H = c->hidden_size, D = c->head_dim, q_out = (int64_t)c->n_heads * D, kv_out = (int64_t)c->n_kv_heads * D;
    bool qk_norm = fam->qk_norm;
    bool qkv_bias = fam->qkv_bias || c->attention_bias;
    char p[200], name[260];
    if (spec_linear(l, c, "model.embed_tokens", 0, c->vocab_size, H)) return -1;
    for (int i = 0; i < c->n_layers; i++) {
#define NAME(suffix) (snprintf(name, sizeof name, "model.layers.%d.%s", i, suffix), name)
        if (spec_vector(l, NAME("input_layernorm.weight"), H, FILL_ONES) ||
            spec_vector(l, NAME("post_attention_layernorm.weight"), H, FILL_ONES))
            return -1;
        if (fam->latent_attention) {
            if (spec_latent(l, c, i)) return -1;
        } else if (spec_linear(l, c, NAME("self_attn.o_proj"), 0, H, q_out)) {
            return -1;
        }
        if (fam->gemma && (spec_vector(l, NAME("pre_feedforward_layernorm.weight"), H, FILL_ONES) ||
                           spec_vector(l, NAME("post_feedforward_layernorm.weight"), H, FILL_ONES)))
            return -1;
        if (fam->latent_attention) {
        } else if (fam->fused_qkv_gate_up ? spec_linear(l, c, NAME("self_attn.qkv_proj"), 0, q_out + 2 * kv_out, H)
                                   : spec_linear(l, c, NAME("self_attn.q_proj"), 0, q_out, H) ||
                                         spec_linear(l, c, NAME("self_attn.k_proj"), 0, kv_out, H) ||
                                         spec_linear(l, c, NAME("self_attn.v_proj"), 0, kv_out, H))
            return -1;
        if (qkv_bias && (spec_vector(l, NAME("self_attn.q_proj.bias"), q_out, FILL_DENSE) ||
                         spec_vector(l, NAME("self_attn.k_proj.bias"), kv_out, FILL_DENSE) ||
                         spec_vector(l, NAME("self_attn.v_proj.bias"), kv_out, FILL_DENSE)))
            return -1;
        if (qk_norm && (spec_vector(l, NAME("self_attn.q_norm.weight"), D, FILL_ONES) ||
                        spec_vector(l, NAME("self_attn.k_norm.weight"), D, FILL_ONES)))
            return -1;
        if (fam->o_bias && spec_vector(l, NAME("self_attn.o_proj.bias"), H, FILL_DENSE)) return -1;
        if (fam->attn_sinks && spec_vector(l, NAME("self_attn.sinks"), c->n_heads, FILL_DENSE)) return -1;
        if (mx_family_layer_is_moe(fam, c, i)) {
            int64_t E = c->num_experts, I = c->moe_intermediate_size;
            if (spec_linear(l, c, NAME(mx_family_router(fam)), 0, E, H)) return -1;
            if (fam->expert_biases) {  // gpt_oss: a router bias, experts stacked under mlp.experts with biases
                snprintf(p, sizeof p, "model.layers.%d.%s.bias", i, mx_family_router(fam));
                if (spec_vector(l, p, E, FILL_DENSE)) return -1;
                const char *proj[3] = {"gate_proj", "up_proj", "down_proj"};
                for (int k = 0; k < 3; k++) {
                    int64_t bias_shape[2] = {E, k == 2 ? H : I};
                    snprintf(p, sizeof p, "model.layers.%d.mlp.experts.%s", i, proj[k]);
                    if (spec_linear(l, c, p, E, k == 2 ? H : I, k == 2 ? I : H)) return -1;
                    snprintf(p, sizeof p, "model.layers.%d.mlp.experts.%s.bias", i, proj[k]);
                    if (spec_add(l, p, "BF16", 2, bias_shape, 16, FILL_DENSE, 0.01f)) return -1;
                }
                continue;
            }
            if (c->n_group > 0 && spec_vector(l, NAME("mlp.gate.e_score_correction_bias"), E, FILL_DENSE)) return -1;
            int64_t IS = I * c->n_shared_experts;
            if (IS > 0 && (spec_linear(l, c, NAME("mlp.shared_experts.gate_proj"), 0, IS, H) ||
                           spec_linear(l, c, NAME("mlp.shared_experts.up_proj"), 0, IS, H) ||
                           spec_linear(l, c, NAME("mlp.shared_experts.down_proj"), 0, H, IS)))
                return -1;
            const char *proj[3] = {"gate_proj", "up_proj", "down_proj"};
            for (int k = 0; k < 3; k++) {
                snprintf(p, sizeof p, "model.layers.%d.mlp.switch_mlp.%s", i, proj[k]);
                if (spec_linear(l, c, p, E, k == 2 ? H : I, k == 2 ? I : H)) return -1;
            }
        } else {
            int64_t I = c->intermediate_size;
            if (fam->fused_qkv_gate_up ? spec_linear(l, c, NAME("mlp.gate_up_proj"), 0, 2 * I, H)
                                       : spec_linear(l, c, NAME("mlp.gate_proj"), 0, I, H) ||
                                             spec_linear(l, c, NAME("mlp.up_proj"), 0, I, H))
                return -1;
            if (spec_linear(l, c, NAME("mlp.down_proj"), 0, H, I)) return -1;
            if (c->mlp_bias && (spec_vector(l, NAME("mlp.gate_proj.bias"), I, FILL_DENSE) ||
                                spec_vector(l, NAME("mlp.up_proj.bias"), I, FILL_DENSE) ||
                                spec_vector(l, NAME("mlp.down_proj.bias"), H, FILL_DENSE)))
                return -1;
        }
#undef NAME
    }
    if (spec_vector(l, "model.norm.weight", H, FILL_ONES)) return -1;
    if (!c->tie_word_embeddings && spec_linear(l, c, "lm_head", 0, c->vocab_size, H)) return -1;
    return 0;
}

// ---- Writing the folder ------------------------------------------------------------------------

// A whole text file, or NULL when it cannot be read (the callers treat that as absent).
static char *read_text(const char *path) {
    mx_error ignored = {{0}};
    return mx_read_text_file(path, NULL, &ignored);
}

static int write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t n = strlen(text);
    int bad = fwrite(text, 1, n, f) != n;
    return (fclose(f) != 0 || bad) ? -1 : 0;
}

// The random weights as one safetensors file, streamed tensor by tensor in 4 MiB pieces through
// convert's writer (st_writer.h).
static int write_safetensors(const char *path, const spec_list *l, mx_error *err) {
    cv_st_writer *w = cv_st_writer_new();
    uint8_t *buf = malloc(1 << 22);
    int rc = -1;
    if (!w || !buf) {
        mx_fail(err, "out of memory");
        goto done;
    }
    for (int i = 0; i < l->n; i++) {
        const tensor_spec *t = &l->v[i];
        mx_dtype dt;
        if (mx_dtype_parse(t->dtype, &dt) != 0) {
            mx_fail(err, "%s: unknown dtype %s", t->name, t->dtype);
            goto done;
        }
        if (cv_st_writer_declare(w, t->name, dt, t->ndim, t->shape, err) < 0) goto done;
    }
    if (cv_st_writer_open(w, path, err) != 0) goto done;
    for (int i = 0; i < l->n; i++) {
        const tensor_spec *t = &l->v[i];
        uint64_t key = bench_splitmix(BENCH_SEED ^ hash_str(t->name));
        for (int64_t o = 0; o < t->bytes; o += 1 << 22) {
            int64_t len = t->bytes - o < (1 << 22) ? t->bytes - o : (1 << 22);
            fill_chunk(t, key, o, buf, (len + 7) & ~(int64_t)7);
            if (cv_st_writer_put(w, (size_t)i, o, buf, (size_t)len, err) != 0) goto done;
        }
    }
    rc = cv_st_writer_close(w, err);
done:
    cv_st_writer_free(w);
    free(buf);
    return rc;
}

// Makes sure DIR holds a random model for config_text (written when missing or different).
static int ensure_random_model(const char *dir, const char *config_text) {
    char cfg_path[4200], st_path[4200], tmp_path[4200];
    snprintf(cfg_path, sizeof cfg_path, "%s/config.json", dir);
    snprintf(st_path, sizeof st_path, "%s/model.safetensors", dir);
    snprintf(tmp_path, sizeof tmp_path, "%s/model.safetensors.tmp%ld", dir, (long)getpid());
    char *have = read_text(cfg_path);
    bool same = have && strcmp(have, config_text) == 0 && access(st_path, R_OK) == 0;
    free(have);
    if (same) return 0;
    mx_config cfg;
    mx_error err = {{0}};
    if (mx_config_parse(config_text, NULL, "config.json", &cfg, &err) != 0) {
        cli_error(cmd, "%s", err.msg);
        return -1;
    }
    const mx_family *fam = mx_family_find(cfg.model_type);
    if (!fam || !fam->runs) {
        cli_error(cmd, "config.json: unsupported model_type '%s' (supported: %s)", cfg.model_type, mx_family_names(true));
        mx_config_free(&cfg);
        return -1;
    }
    spec_list l = {0};
    int rc = spec_model(&l, &cfg, fam);
    mx_config_free(&cfg);
    if (rc) {
        free(l.v);
        cli_error(cmd, "out of memory");
        return -1;
    }
    int64_t total = 0;
    for (int i = 0; i < l.n; i++) total += l.v[i].bytes;
    fprintf(stderr, "mlxcel bench: writing random weights (%.2f GB) to %s\n", total / 1e9, dir);
    if (mx_make_dirs(dir, 0755, &err) != 0) {
        cli_error(cmd, "%s", err.msg);
        free(l.v);
        return -1;
    }
    unlink(cfg_path);  // an interrupted rewrite leaves no config, so it is redone next time
    if (write_safetensors(tmp_path, &l, &err) != 0) {
        cli_error(cmd, "%s", err.msg);
        unlink(tmp_path);
        free(l.v);
        return -1;
    }
    if (rename(tmp_path, st_path) != 0 || write_text(cfg_path, config_text) != 0) {
        cli_error(cmd, "writing %s: %s", dir, strerror(errno));
        unlink(tmp_path);
        free(l.v);
        return -1;
    }
    free(l.v);
    return 0;
}

// Appends `"quantization": {...}` (and its copy) to a config's top-level object.
static char *with_quant(const char *text, int bits, int group, const char *mode) {
    const char *end = strrchr(text, '}');
    if (!end) return NULL;
    size_t head = (size_t)(end - text);
    while (head > 0 && (text[head - 1] == ' ' || text[head - 1] == '\n' || text[head - 1] == '\r' || text[head - 1] == '\t'))
        head--;
    char q[160];
    snprintf(q, sizeof q, "{\"group_size\": %d, \"bits\": %d, \"mode\": \"%s\"}", group, bits, mode);
    size_t cap = head + 2 * strlen(q) + 128;
    char *out = malloc(cap);
    if (!out) return NULL;
    snprintf(out, cap, "%.*s,\n  \"quantization\": %s,\n  \"quantization_config\": %s\n}\n", (int)head, text, q, q);
    return out;
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
    for (int i = 1; i < argc; i++) {
        int r = cli_model_opt(cmd, argc, argv, &i, &mo);
        if (r == 0 && (r = cli_sampling_opt(cmd, argc, argv, &i, &sp)) > 0) sampling_given = true;
        if (r < 0) return MX_EXIT_USAGE;
        if (r > 0) continue;
        const char *a = argv[i], *v;
        if (cli_is(a, "-h", "--help")) {
            usage(stdout);
            return MX_EXIT_OK;
        } else if (cli_is(a, "-p", "--prompt-tokens")) {
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
    const bench_shape *shape = NULL;
    if (shape_name) {
        for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++)
            if (!strcmp(shapes[k].name, shape_name)) shape = &shapes[k];
        if (!shape) {
            cli_error(cmd, "unknown shape '%s' (known: qwen3-0.6b, qwen3-1.7b, qwen3-4b, qwen3-8b, qwen3-30b-a3b)", shape_name);
            return MX_EXIT_USAGE;
        }
    }
    bool random = shape || config_file;
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
        char *base = shape ? strdup(shape->config) : read_text(config_file);
        if (!base) {
            cli_error(cmd, "cannot read %s", config_file ? config_file : "shape");
            return MX_EXIT_RUNTIME;
        }
        mx_config cfg;
        mx_error err = {{0}};
        if (mx_config_parse(base, NULL, config_file ? config_file : shape->name, &cfg, &err) != 0) {
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
            config_text = with_quant(base, q_bits < 0 ? 4 : q_bits, q_group, q_mode);
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
        if (shape)
            snprintf(label, sizeof label, "%s-%s", shape->name, qdesc);
        else
            snprintf(label, sizeof label, "config-%016llx-%s", (unsigned long long)hash_str(config_text), qdesc);
        snprintf(dir, sizeof dir, "%s/%s", root, label);
        if (ensure_random_model(dir, config_text) != 0) {
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
    fprintf(stderr, "backend: %s, %s\n", be->ops->name, be->device_name);
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
