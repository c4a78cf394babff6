// SPDX-License-Identifier: MIT
// Random models for `mlxcel bench` (see bench_model.h): named shapes, and random weights for any
// config.json written once as an ordinary MLX folder (config.json + model.safetensors with U32
// packed weights and BF16 scales/biases) that the normal loader then reads, so the benchmark
// measures exactly the path a downloaded model takes. The writer streams: an 8B model (~4.5 GB)
// never sits in memory, and its content is a cheap counter-based hash of (seed, tensor, offset), so
// the same name always gives the same bytes. Weights are random but never all zero: codes are
// uniform, scales are positive with a random mantissa, biases centre the codes.
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_model.h"
#include "cli.h"
#include "convert/st_writer.h"
#include "core/sample_noise.h"
#include "io/folders.h"
#include "io/hf_config.h"
#include "io/mapped_file.h"
#include "io/write_file.h"
#include "models/family.h"

static const char *cmd = "bench";

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

// A random model's sizes come from a config file: a tensor or a model past this is refused (and
// their products stay far from int64's range).
#define SPEC_MAX_BYTES ((int64_t)1 << 50)

typedef struct spec_list {
    tensor_spec *v;
    int n, cap;
    int64_t total;        // bytes of the tensors so far
    char too_large[200];  // the tensor that passed SPEC_MAX_BYTES (alone or in the total), else ""
} spec_list;

uint64_t bench_splitmix(uint64_t x) { return mx_noise_mix(x + 0x9e3779b97f4a7c15ULL); }

uint64_t bench_hash_str(const char *s) {
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
    for (int i = 0; i < ndim; i++)
        if (__builtin_mul_overflow(numel, t->shape[i] = shape[i], &numel) || numel > SPEC_MAX_BYTES) {
            snprintf(l->too_large, sizeof l->too_large, "%s", name);
            return -1;
        }
    t->bytes = numel * elem_bits / 8;
    if ((l->total += t->bytes) > SPEC_MAX_BYTES) {
        snprintf(l->too_large, sizeof l->too_large, "%s", name);
        return -1;
    }
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
        uint64_t key = bench_splitmix(BENCH_SEED ^ bench_hash_str(t->name));
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
int bench_random_model(const char *dir, const char *config_text) {
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
        if (l.too_large[0])
            cli_error(cmd, "config.json: the model it describes passes %lld TiB at tensor '%s'",
                      (long long)(SPEC_MAX_BYTES >> 40), l.too_large);
        else
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
    rc = write_safetensors(tmp_path, &l, &err);
    if (rc == 0 && rename(tmp_path, st_path) != 0)
        rc = mx_fail(&err, "cannot rename %s to %s: %s", tmp_path, st_path, strerror(errno));
    if (rc == 0) rc = mx_write_text_file(cfg_path, config_text, &err);
    if (rc != 0) {
        cli_error(cmd, "%s", err.msg);
        unlink(tmp_path);
    }
    free(l.v);
    return rc;
}

// Appends `"quantization": {...}` (and its copy) to a config's top-level object.
char *bench_config_with_quant(const char *text, int bits, int group, const char *mode) {
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

const char *bench_shape_config(const char *name) {
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++)
        if (!strcmp(shapes[k].name, name)) return shapes[k].config;
    return NULL;
}
