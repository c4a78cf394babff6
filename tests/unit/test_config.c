// SPDX-License-Identifier: MIT
// config.json parsing variants: rope_theta at top level or in rope_parameters, llama3 scaling,
// eos as int or list (generation_config wins), tied defaults, quantization with per-layer
// overrides (dict or false, missing mode = affine), and malformed inputs naming the field.
#include <string.h>

#include "check.h"
#include "io/hf_config.h"

#define BASE "\"model_type\":\"llama\",\"vocab_size\":512,\"hidden_size\":128,\"num_hidden_layers\":2,\"num_attention_heads\":4"

static int parse(const char *json, const char *gen, mx_config *c, mx_error *e) {
    return mx_config_parse(json, gen, "config.json", c, e);
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
    CHECK(parse("{" BASE ",\"max_position_embeddings\":1000000000000000019884624838656}", NULL, &c, &e) != 0);
    CHECK_MSG(strstr(e.msg, "'max_position_embeddings'") != NULL, "%s", e.msg);

    // Errors name what was wrong.
    CHECK(parse("{" BASE ",\"quantization\":{\"group_size\":64,\"bits\":4,\"mode\":\"nf4\"}}", NULL, &c, &e) != 0);
    CHECK_MSG(strstr(e.msg, "nf4") != NULL, "%s", e.msg);
    CHECK(parse("{" BASE ",\"quantization\":{\"group_size\":48,\"bits\":4}}", NULL, &c, &e) != 0);
    CHECK_MSG(strstr(e.msg, "group_size") != NULL, "%s", e.msg);
    CHECK(parse("{\"vocab_size\":5}", NULL, &c, &e) != 0);
    CHECK_MSG(strstr(e.msg, "model_type") != NULL, "%s", e.msg);
    CHECK(parse("[1,2]", NULL, &c, &e) != 0);
    CHECK(parse("{" BASE ",\"eos_token_id\":\"x\"}", NULL, &c, &e) != 0);
    CHECK_MSG(strstr(e.msg, "eos_token_id") != NULL, "%s", e.msg);
    CHECK(parse("{" BASE ",\"num_key_value_heads\":3}", NULL, &c, &e) != 0);
    CHECK_MSG(strstr(e.msg, "multiple") != NULL, "%s", e.msg);
    CHECK(parse("{" BASE ",\"rope_scaling\":{\"type\":\"yarn\",\"factor\":4}}", NULL, &c, &e) != 0);
    CHECK_MSG(strstr(e.msg, "yarn") != NULL, "%s", e.msg);
    CHECK(parse("{" BASE "}", "not json", &c, &e) != 0);
    CHECK_MSG(strstr(e.msg, "generation_config.json") != NULL, "%s", e.msg);
    CHECK(parse("{\"model_type\":\"llama\",\"hidden_size\":128}", NULL, &c, &e) != 0);
    CHECK_MSG(strstr(e.msg, "vocab_size") != NULL, "%s", e.msg);
    return check_finish();
}
