// SPDX-License-Identifier: MIT
// config.json parsing variants: rope_theta at top level or in rope_parameters, llama3 scaling,
// eos as int or list (generation_config wins), tied defaults, quantization with per-layer
// overrides (dict or false, missing mode = affine), and malformed inputs naming the field.
#include <math.h>
#include <string.h>

#include "check.h"
#include "io/hf_config.h"

#define BASE "\"model_type\":\"llama\",\"vocab_size\":512,\"hidden_size\":128,\"num_hidden_layers\":2,\"num_attention_heads\":4"

// DeepSeek-V3 with YaRN as published configs write it (the sizes of the deepseek_v3 fixtures).
#define DEEPSEEK                                                                                             \
    "\"model_type\":\"deepseek_v3\",\"vocab_size\":512,\"hidden_size\":128,\"num_hidden_layers\":2,"     \
    "\"num_attention_heads\":4,\"num_key_value_heads\":4,\"kv_lora_rank\":64,\"q_lora_rank\":64,"            \
    "\"qk_nope_head_dim\":64,\"qk_rope_head_dim\":32,\"v_head_dim\":64,\"n_routed_experts\":8,"              \
    "\"num_experts_per_tok\":2,\"n_group\":2,\"topk_group\":1,\"moe_intermediate_size\":192,"               \
    "\"intermediate_size\":256,\"first_k_dense_replace\":1,\"max_position_embeddings\":163840,"                \
    "\"rope_scaling\":{\"type\":\"yarn\",\"factor\":40,\"beta_fast\":32,\"beta_slow\":1,\"mscale\":1.0,"   \
    "\"mscale_all_dim\":1.0,\"original_max_position_embeddings\":4096}"

// gpt-oss-20b's config.json with the fixture's sizes (layer_types and swiglu_limit left out here).
#define GPT_OSS                                                                                          \
    "\"model_type\":\"gpt_oss\",\"vocab_size\":512,\"hidden_size\":64,\"num_hidden_layers\":4,"        \
    "\"num_attention_heads\":4,\"num_key_value_heads\":2,\"head_dim\":32,\"intermediate_size\":128,"       \
    "\"num_local_experts\":4,\"num_experts_per_tok\":2,\"experts_per_token\":2,\"sliding_window\":8,"     \
    "\"max_position_embeddings\":131072,\"rope_theta\":150000,\"attention_bias\":true,"                    \
    "\"rope_scaling\":{\"beta_fast\":32.0,\"beta_slow\":1.0,\"factor\":32.0,"                              \
    "\"original_max_position_embeddings\":4096,\"rope_type\":\"yarn\",\"truncate\":false}"

static int parse(const char *json, const char *gen, mx_config *c, mx_error *e) {
    return mx_config_parse(json, gen, "config.json", c, e);
}

// config.json (with generation_config.json gen, when not NULL) must be refused with a message that
// contains `want`.
static void check_refused(const char *json, const char *gen, const char *want) {
    mx_config c;
    mx_error e = {{0}};
    int rc = parse(json, gen, &c, &e);
    CHECK_MSG(rc != 0 && strstr(e.msg, want) != NULL, "wanted a refusal naming \"%s\", got %s: %s", want,
              rc ? "a refusal" : "success", e.msg);
    if (rc == 0) mx_config_free(&c);
}

int main(void) {
    mx_config c;
    mx_error e = {{0}};

    CHECK(parse("{" BASE ",\"rope_theta\":500000.0,\"eos_token_id\":7}", NULL, &c, &e) == 0);
    CHECK(c.rope_theta == 500000.0 && c.n_eos == 1 && c.eos_ids[0] == 7);
    CHECK(c.n_kv_heads == 4 && c.head_dim == 32 && c.tie_word_embeddings && !c.quantized);
    mx_config_free(&c);

    CHECK(parse("{" BASE ",\"rope_parameters\":{\"rope_theta\":1000.0,\"rope_type\":\"default\"},"
                "\"eos_token_id\":[1,2,3],\"tie_word_embeddings\":false}", NULL, &c, &e) == 0);
    CHECK(c.rope_theta == 1000.0 && c.n_eos == 3 && c.eos_ids[2] == 3 && !c.tie_word_embeddings && c.tie_set);
    mx_config_free(&c);

    CHECK(parse("{" BASE ",\"eos_token_id\":[1,2]}", "{\"eos_token_id\":9}", &c, &e) == 0);
    CHECK(c.n_eos == 1 && c.eos_ids[0] == 9);
    mx_config_free(&c);

    CHECK(parse("{" BASE ",\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":8.0,\"low_freq_factor\":1.0,"
                "\"high_freq_factor\":4.0,\"original_max_position_embeddings\":8192}}", NULL, &c, &e) == 0);
    CHECK(c.rope_type == MX_ROPE_LLAMA3 && c.rope_factor == 8.0 && c.rope_original_max_pos == 8192);
    mx_config_free(&c);

    CHECK(parse("{" BASE ",\"quantization\":{\"group_size\":64,\"bits\":4,"
                "\"model.layers.0.mlp.down_proj\":{\"group_size\":32,\"bits\":6},"
                "\"model.layers.1.mlp.gate\":false,"
                "\"lm_head\":{\"group_size\":32,\"bits\":8,\"mode\":\"affine\"}}}", NULL, &c, &e) == 0);
    CHECK(c.quantized && c.quant.mode == MX_QUANT_AFFINE && c.quant.bits == 4 && c.n_overrides == 3);
    mx_quant q = mx_config_quant_for(&c, "model.layers.0.mlp.down_proj", true);
    CHECK(q.bits == 6 && q.group_size == 32 && q.mode == MX_QUANT_AFFINE);
    CHECK(mx_config_quant_for(&c, "model.layers.1.mlp.gate", true).mode == MX_QUANT_NONE);
    CHECK(mx_config_quant_for(&c, "model.layers.1.mlp.up_proj", true).bits == 4);
    CHECK(mx_config_quant_for(&c, "model.norm", false).mode == MX_QUANT_NONE);
    mx_config_free(&c);

    CHECK(parse("{" BASE ",\"quantization_config\":{\"group_size\":32,\"bits\":4,\"mode\":\"mxfp4\"}}", NULL, &c, &e) == 0);
    CHECK(c.quant.mode == MX_QUANT_MXFP4 && c.quant.group_size == 32);
    mx_config_free(&c);

    // Integers beyond 64 bits in keys mlxcel does not read never stop a load; in a key it reads they
    // are an error naming the key.
    CHECK(parse("{" BASE ",\"model_max_length\":1000000000000000019884624838656,\"x\":-99999999999999999999}",
                "{\"eos_token_id\":3,\"max_length\":1000000000000000019884624838656}", &c, &e) == 0);
    CHECK(c.n_eos == 1 && c.eos_ids[0] == 3);
    mx_config_free(&c);
    check_refused("{" BASE ",\"max_position_embeddings\":1000000000000000019884624838656}", NULL,
                  "'max_position_embeddings'");

    // Phi-3 longrope with a partial rotary factor: 24 of 32 dimensions rotate, 12 factors each.
    const char *factors = "[1,1,1,1,1,1,1,1,1,1,1,2]";
    char phi[1024];
    snprintf(phi, sizeof phi,
             "{" BASE ",\"max_position_embeddings\":4096,\"original_max_position_embeddings\":512,"
             "\"partial_rotary_factor\":0.75,\"rope_scaling\":{\"type\":\"longrope\",\"short_factor\":%s,"
             "\"long_factor\":%s}}",
             factors, factors);
    CHECK_MSG(parse(phi, NULL, &c, &e) == 0, "%s", e.msg);
    CHECK(c.rope_type == MX_ROPE_LONGROPE && c.rope_dim == 24 && c.rope_short_factor[11] == 2.0f);
    CHECK(fabs(c.rope_attn_factor - sqrt(1.0 + log(8.0) / log(512.0))) < 1e-12 && c.rope_original_max_pos == 512);
    mx_config_free(&c);
    snprintf(phi, sizeof phi,
             "{" BASE ",\"original_max_position_embeddings\":512,\"rope_scaling\":{\"type\":\"su\","
             "\"short_factor\":%s,\"long_factor\":%s}}",
             factors, factors);  // 32 rotary dims want 16 factors
    CHECK(parse(phi, NULL, &c, &e) != 0);
    CHECK_MSG(strstr(e.msg, "short_factor") && strstr(e.msg, "16"), "%s", e.msg);
    check_refused("{" BASE ",\"partial_rotary_factor\":0.3}", NULL, "partial_rotary_factor");

    // Phi-3-mini-4k's sliding_window applies to every layer (as transformers does); null means none.
    CHECK(parse("{\"model_type\":\"phi3\",\"vocab_size\":512,\"hidden_size\":128,\"num_hidden_layers\":2,"
                "\"num_attention_heads\":4,\"sliding_window\":2047}",
                NULL, &c, &e) == 0);
    CHECK(c.sliding_window == 2047 && c.layer_sliding && c.layer_sliding[0] && c.layer_sliding[1]);
    mx_config_free(&c);
    CHECK(parse("{\"model_type\":\"phi3\",\"vocab_size\":512,\"hidden_size\":128,\"num_hidden_layers\":2,"
                "\"num_attention_heads\":4,\"sliding_window\":null}",
                NULL, &c, &e) == 0);
    CHECK(c.sliding_window == 0 && c.layer_sliding == NULL);
    mx_config_free(&c);

    // Gemma 3: a multimodal checkpoint's text_config (with Gemma3TextConfig's defaults for what it
    // omits), quantization and eos from the top level, tensors under language_model.
    CHECK(parse("{\"model_type\":\"gemma3\",\"eos_token_id\":[1,106],\"quantization\":{\"group_size\":64,\"bits\":4},"
                "\"text_config\":{\"model_type\":\"gemma3_text\",\"hidden_size\":2560,\"intermediate_size\":10240,"
                "\"num_hidden_layers\":8,\"sliding_window\":1024,\"rope_scaling\":{\"factor\":8.0,\"rope_type\":\"linear\"}},"
                "\"vision_config\":{\"hidden_size\":1152}}",
                NULL, &c, &e) == 0);
    CHECK_MSG(strcmp(c.model_type, "gemma3_text") == 0 && strcmp(c.tensor_prefix, "language_model.") == 0, "%s", c.model_type);
    CHECK(c.vocab_size == 262208 && c.n_heads == 8 && c.n_kv_heads == 4 && c.head_dim == 256 && c.quantized);
    CHECK(c.query_pre_attn_scalar == 256 && c.sliding_window == 1024 && c.rope_local_theta == 10000.0);
    CHECK(c.rope_type == MX_ROPE_LINEAR && c.rope_factor == 8.0 && c.n_eos == 2 && c.eos_ids[1] == 106);
    CHECK(c.layer_sliding && c.layer_sliding[0] && c.layer_sliding[4] && !c.layer_sliding[5] && c.layer_sliding[6]);
    mx_config_free(&c);
    CHECK(parse("{\"model_type\":\"gemma3_text\",\"vocab_size\":512,\"hidden_size\":128,\"num_hidden_layers\":3,"
                "\"num_attention_heads\":4,\"head_dim\":32,\"query_pre_attn_scalar\":32,\"sliding_window\":8,"
                "\"layer_types\":[\"full_attention\",\"sliding_attention\",\"full_attention\"]}",
                NULL, &c, &e) == 0);
    CHECK(!c.layer_sliding[0] && c.layer_sliding[1] && !c.layer_sliding[2] && c.tensor_prefix[0] == 0);
    mx_config_free(&c);
    check_refused("{\"model_type\":\"gemma3_text\",\"vocab_size\":512,\"hidden_size\":128,\"num_hidden_layers\":3,"
                  "\"layer_types\":[\"full_attention\"]}",
                  NULL, "layer_types");
    check_refused("{\"model_type\":\"gemma3\",\"vision_config\":{}}", NULL, "text_config");

    // DeepSeek-V3: latent sizes, routing, YaRN (mscale / mscale_all_dim = 1: no cos/sin factor).
    CHECK(parse("{" DEEPSEEK "}", NULL, &c, &e) == 0);
    CHECK(c.kv_lora_rank == 64 && c.q_lora_rank == 64 && c.head_dim == 96 && c.rope_dim == 32 && c.v_head_dim == 64);
    CHECK(c.num_experts == 8 && c.n_group == 2 && c.topk_group == 1 && c.first_k_dense_replace == 1 && c.norm_topk_prob);
    CHECK(c.routed_scaling_factor == 2.5 && c.n_shared_experts == 1);
    CHECK(c.rope_type == MX_ROPE_YARN && c.rope_factor == 40 && c.rope_original_max_pos == 4096);
    CHECK_MSG(fabs(c.rope_attn_factor - 1.0) < 1e-12 && c.rope_mscale_all_dim == 1.0, "%g", c.rope_attn_factor);
    mx_config_free(&c);
    CHECK(parse("{" DEEPSEEK ",\"q_lora_rank\":null}", NULL, &c, &e) == 0);
    CHECK(c.q_lora_rank == 0);
    mx_config_free(&c);
    // YaRN without mscale: cos/sin times 0.1 ln(factor) + 1; factor from the context ratio when absent.
    CHECK(parse("{" BASE ",\"max_position_embeddings\":16384,\"rope_scaling\":{\"rope_type\":\"yarn\","
                "\"original_max_position_embeddings\":4096}}", NULL, &c, &e) == 0);
    CHECK_MSG(c.rope_factor == 4 && fabs(c.rope_attn_factor - (0.1 * log(4.0) + 1)) < 1e-12 && c.rope_truncate,
              "%g %g", c.rope_factor, c.rope_attn_factor);
    mx_config_free(&c);

    // Errors name what was wrong.
    check_refused("{" BASE ",\"quantization\":{\"group_size\":64,\"bits\":4,\"mode\":\"nf4\"}}", NULL, "nf4");
    check_refused("{" BASE ",\"quantization\":{\"group_size\":48,\"bits\":4}}", NULL, "group_size");
    check_refused("{\"vocab_size\":5}", NULL, "model_type");
    CHECK(parse("[1,2]", NULL, &c, &e) != 0);
    check_refused("{" BASE ",\"eos_token_id\":\"x\"}", NULL, "eos_token_id");
    check_refused("{" BASE ",\"num_key_value_heads\":3}", NULL, "multiple");
    check_refused("{" BASE ",\"rope_scaling\":{\"type\":\"dynamic\",\"factor\":4}}", NULL, "dynamic");
    check_refused("{" DEEPSEEK ",\"scoring_func\":\"softmax\"}", NULL, "scoring_func");
    check_refused("{" DEEPSEEK ",\"n_group\":3}", NULL, "n_group");
    // gpt_oss: experts of intermediate_size, softmax over the top k (norm_topk), swiglu_limit 7 by
    // default, every other layer sliding from layer 0 without layer_types, YaRN without truncation
    // and its attention factor 0.1 ln(32) + 1.
    CHECK(parse("{" GPT_OSS "}", NULL, &c, &e) == 0);
    CHECK(c.num_experts == 4 && c.num_experts_per_tok == 2 && c.moe_intermediate_size == 128 && c.norm_topk_prob);
    CHECK(c.swiglu_limit == 7.0 && c.sliding_window == 8 && c.head_dim == 32 && c.attention_bias);
    CHECK(c.layer_sliding && c.layer_sliding[0] && !c.layer_sliding[1] && c.layer_sliding[2] && !c.layer_sliding[3]);
    CHECK(c.rope_type == MX_ROPE_YARN && !c.rope_truncate && c.rope_factor == 32 && c.rope_original_max_pos == 4096);
    CHECK_MSG(fabs(c.rope_attn_factor - (0.1 * log(32.0) + 1.0)) < 1e-12, "%g", c.rope_attn_factor);
    mx_config_free(&c);
    CHECK(parse("{" GPT_OSS ",\"swiglu_limit\":5.5,\"layer_types\":[\"full_attention\",\"sliding_attention\","
                "\"full_attention\",\"full_attention\"]}", NULL, &c, &e) == 0);
    CHECK(c.swiglu_limit == 5.5 && !c.layer_sliding[0] && c.layer_sliding[1] && !c.layer_sliding[2] && !c.layer_sliding[3]);
    mx_config_free(&c);
    // OpenAI's own checkpoints: quant_method mxfp4 (the `_blocks` experts) is no MLX quantization;
    // other families with it are refused by name.
    CHECK(parse("{" GPT_OSS ",\"quantization_config\":{\"quant_method\":\"mxfp4\",\"modules_to_not_convert\":"
                "[\"model.layers.*.self_attn\",\"model.layers.*.mlp.router\",\"model.embed_tokens\",\"lm_head\"]}}",
                NULL, &c, &e) == 0);
    CHECK(!c.quantized && c.n_overrides == 0);
    mx_config_free(&c);
    check_refused("{" BASE ",\"quantization_config\":{\"quant_method\":\"mxfp4\"}}", NULL,
                  "'mxfp4' is not an MLX format");
    check_refused("{" GPT_OSS ",\"num_local_experts\":null}", NULL, "num_local_experts");
    check_refused("{" GPT_OSS ",\"swiglu_limit\":0}", NULL, "swiglu_limit");
    check_refused("{" GPT_OSS ",\"layer_types\":[\"full_attention\"]}", NULL, "layer_types");

    // Fields that size allocations or are cast as the config is read are bounded by name: layer
    // tables, int32 token ids, a latent head's width, longrope's switch position.
    check_refused("{\"model_type\":\"gemma3_text\",\"vocab_size\":512,\"hidden_size\":128,\"num_hidden_layers\":16385,"
                  "\"num_attention_heads\":4}",
                  NULL, "'num_hidden_layers' = 16385 is more than 16384");
    check_refused("{" BASE ",\"eos_token_id\":4294967301}", NULL, "eos_token_id 4294967301 is not a token id");
    check_refused("{" BASE "}", "{\"eos_token_id\":[2,-7]}",
                  "generation_config.json: eos_token_id[1] is not a token id");
    check_refused("{" DEEPSEEK ",\"qk_nope_head_dim\":600}", NULL,
                  "qk_nope_head_dim (600) + qk_rope_head_dim (32) is more than 512");
    check_refused("{" BASE ",\"rope_scaling\":{\"type\":\"longrope\",\"original_max_position_embeddings\":1e20,"
                  "\"short_factor\":[],\"long_factor\":[]}}",
                  NULL, "original_max_position_embeddings (2..2^30), not 1e+20");
    check_refused("{" BASE ",\"partial_rotary_factor\":1e21}", NULL, "partial_rotary_factor 1e+21 of head_dim 32");
    // A head_dim derived from hidden_size says so.
    check_refused("{\"model_type\":\"llama\",\"vocab_size\":512,\"hidden_size\":12,\"num_hidden_layers\":2,"
                  "\"num_attention_heads\":4}",
                  NULL, "head_dim 3 (hidden_size 12 / num_attention_heads 4) is odd");

    check_refused("{" BASE "}", "not json", "generation_config.json");
    check_refused("{\"model_type\":\"llama\",\"hidden_size\":128}", NULL, "vocab_size");
    return check_finish();
}
