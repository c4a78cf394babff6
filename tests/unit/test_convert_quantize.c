// SPDX-License-Identifier: MIT
// Unit tests of the convert quantizer math on small vectors: affine groups (exact edges, the sign
// trick, round-half-to-even ties, all-zero and constant groups, every bit width round-tripping
// through the reference dequantizer), the fp4/fp8 element encoders (ties to even, saturation, +0)
// and the E8M0 scale, and the mixed recipe's layer choice.
#include <math.h>
#include <string.h>

#include "check.h"
#include "convert/quantize.h"
#include "convert/recipe.h"
#include "core/quant.h"

static void test_affine_basic(void) {
    // 0..15 in one group of 32 (twice): 4 bits represent it exactly with scale 1, bias 0... but the
    // edge with the larger magnitude is the max (15), so the scale is negative: s = -1, bias = 15.
    float w[32];
    for (int i = 0; i < 32; i++) w[i] = (float)(i % 16);
    uint8_t packed[16];
    float s, b;
    cv_quantize_affine_row(w, 32, 4, 32, packed, &s, &b);
    CHECK(s == -1.0f);
    CHECK(b == 15.0f);
    for (int i = 0; i < 32; i++) CHECK(mx_quant_code(packed, 4, i) == (uint32_t)(15 - i % 16));
    // Negative edge larger in magnitude: the min is the edge, the scale positive.
    for (int i = 0; i < 32; i++) w[i] = -(float)(i % 16);
    cv_quantize_affine_row(w, 32, 4, 32, packed, &s, &b);
    CHECK(s == 1.0f);
    CHECK(b == -15.0f);
    CHECK(mx_quant_code(packed, 4, 0) == 15);
    CHECK(mx_quant_code(packed, 4, 15) == 0);
}

static void test_affine_zero_and_constant(void) {
    float w[32] = {0};
    uint8_t packed[32];
    float s, b;
    cv_quantize_affine_row(w, 32, 4, 32, packed, &s, &b);
    CHECK(b == 0.0f);
    CHECK(s == -1e-7f);  // eps with the sign of the max edge
    for (int i = 0; i < 16; i++) CHECK(packed[i] == 0);
    // A constant group: range 0, so scale is eps; q0 = rint(c / -eps) is huge, scale = c / q0.
    for (int i = 0; i < 32; i++) w[i] = 0.5f;
    cv_quantize_affine_row(w, 32, 8, 32, packed, &s, &b);
    float deq = s * (float)mx_quant_code(packed, 8, 3) + b;
    CHECK(fabsf(deq - 0.5f) < 1e-6f);
}

static void test_affine_ties(void) {
    // Values 0, 1.5, 2.5, 3: s chosen by the edge; (w - bias) / s = 0 .. with halves rounding to even.
    float w[32];
    for (int i = 0; i < 32; i++) w[i] = 0.0f;
    w[0] = -3.0f;  // min edge, |min| > |max|: s = 3/3 = 1 for 2 bits, bias = -3
    w[1] = -1.5f;  // (w - b) / s = 1.5 -> 2 (even)
    w[2] = -2.5f;  // 0.5 -> 0 (even)
    w[3] = -0.5f;  // 2.5 -> 2 (even)
    uint8_t packed[8];
    float s, b;
    cv_quantize_affine_row(w, 32, 2, 32, packed, &s, &b);
    CHECK(s == 1.0f);
    CHECK(b == -3.0f);
    CHECK(mx_quant_code(packed, 2, 0) == 0);
    CHECK(mx_quant_code(packed, 2, 1) == 2);
    CHECK(mx_quant_code(packed, 2, 2) == 0);
    CHECK(mx_quant_code(packed, 2, 3) == 2);
    CHECK(mx_quant_code(packed, 2, 4) == 3);  // 0 -> 3, clamped to n
}

static void test_affine_roundtrip_all_bits(void) {
    static const int bits[] = {2, 3, 4, 5, 6, 8};
    float w[128];
    for (int i = 0; i < 128; i++) w[i] = sinf((float)i * 0.37f) * 0.1f;
    for (int k = 0; k < 6; k++) {
        uint8_t packed[128];
        float s[2], b[2];
        cv_quantize_affine_row(w, 128, bits[k], 64, packed, s, b);
        uint16_t sb[2], bb[2];
        for (int g = 0; g < 2; g++) {
            sb[g] = mx_f32_to_bf16(s[g]);
            bb[g] = mx_f32_to_bf16(b[g]);
        }
        mx_matrix m = {{MX_QUANT_AFFINE, bits[k], 64}, MX_DTYPE_U32, MX_DTYPE_BF16, 1, 1, 128, packed, sb, bb};
        float out[128], max_err = 0;
        mx_matrix_dequant_row(&m, 0, out);
        for (int i = 0; i < 128; i++) max_err = fmaxf(max_err, fabsf(out[i] - w[i]));
        float step = 0.2f / (float)((1 << bits[k]) - 1);
        // The adjusted scale (edge / q0) can stretch the grid, so allow one step.
        CHECK_MSG(max_err <= step + 2e-3f, "bits %d: max error %g (step %g)", bits[k], max_err, step);
    }
}

static void test_fp4(void) {
    CHECK(cv_f32_to_e2m1(0.25f) == 0);   // tie 0 / 0.5 -> 0
    CHECK(cv_f32_to_e2m1(0.75f) == 2);   // tie 0.5 / 1 -> 1 (even code)
    CHECK(cv_f32_to_e2m1(1.25f) == 2);   // tie 1 / 1.5 -> 1
    CHECK(cv_f32_to_e2m1(1.75f) == 4);   // tie 1.5 / 2 -> 2
    CHECK(cv_f32_to_e2m1(2.5f) == 4);    // tie 2 / 3 -> 2
    CHECK(cv_f32_to_e2m1(3.5f) == 6);    // tie 3 / 4 -> 4
    CHECK(cv_f32_to_e2m1(5.0f) == 6);    // tie 4 / 6 -> 4
    CHECK(cv_f32_to_e2m1(100.0f) == 7);  // saturates at 6
    CHECK(cv_f32_to_e2m1(-3.0f) == 0xd);
    CHECK(cv_f32_to_e2m1(-0.1f) == 0);   // zero magnitude is +0
    for (unsigned c = 0; c < 16; c++)
        if (c != 8) CHECK(cv_f32_to_e2m1(mx_e2m1_to_f32(c)) == c);
}

static void test_fp8(void) {
    for (unsigned c = 0; c < 0x7f; c++) {
        CHECK(cv_f32_to_e4m3(mx_e4m3_to_f32((uint8_t)c)) == c);
        if (c) CHECK(cv_f32_to_e4m3(mx_e4m3_to_f32((uint8_t)(c | 0x80))) == (c | 0x80));
    }
    CHECK(cv_f32_to_e4m3(108.0f) == cv_f32_to_e4m3(112.0f));   // tie 104/112 -> 112 (even mantissa)
    CHECK(cv_f32_to_e4m3(100.0f) == cv_f32_to_e4m3(96.0f));    // tie 96/104 -> 96
    CHECK(cv_f32_to_e4m3(460.0f) == 0x7e);                      // below 464 rounds to 448
    CHECK(cv_f32_to_e4m3(1e6f) == 0x7e);                        // saturates
    CHECK(cv_f32_to_e4m3(-1e6f) == 0xfe);
    CHECK(cv_f32_to_e4m3(0.0009765625f) == 0);                  // 2^-10: tie 0 / 2^-9 -> 0
    CHECK(cv_f32_to_e4m3(0.0029296875f) == 2);                  // 1.5 * 2^-9 -> 2 * 2^-9 (even)
    CHECK(cv_f32_to_e4m3(-0.0f) == 0);
}

static void test_mx_scale_and_row(void) {
    CHECK(cv_e8m0_from_absmax(6.0f, 4) == 127);
    CHECK(cv_e8m0_from_absmax(12.0f, 4) == 128);
    CHECK(cv_e8m0_from_absmax(448.0f, 8) == 127);
    CHECK(cv_e8m0_from_absmax(0.0f, 4) == 127);  // all-zero group
    CHECK(cv_e8m0_from_absmax(6.0f * 1.5f, 4) == 128);  // log2(1.5) = 0.58 rounds up
    CHECK(cv_e8m0_from_absmax(6.0f * 1.4f, 4) == 127);
    float w[32];
    for (int i = 0; i < 32; i++) w[i] = (float)(i % 8) * 0.25f - 1.0f;  // -1 .. 0.75, absmax 1
    uint8_t packed[16], sc;
    cv_quantize_mx_row(w, 32, 4, packed, &sc);
    CHECK(sc == 127 - 3);  // 1/6 -> 2^round(-2.58) = 2^-3
    mx_matrix m = {{MX_QUANT_MXFP4, 4, 32}, MX_DTYPE_U32, MX_DTYPE_U8, 1, 1, 32, packed, &sc, NULL};
    float out[32];
    mx_matrix_dequant_row(&m, 0, out);
    // -1 / 2^-3 = -8 saturates to -6: round(log2(absmax / 6)) can pick a scale below absmax / 6.
    for (int i = 0; i < 32; i++) {
        float want = w[i] == -1.0f ? -0.75f : w[i];
        CHECK_MSG(fabsf(out[i] - want) <= 0.0625f, "elem %d: %g vs %g", i, out[i], want);
    }
}

static void test_recipe(void) {
    const char *mods[] = {"model.embed_tokens.weight", "model.layers.0.mlp.down_proj.weight"};
    cv_recipe r;
    mx_error err;
    CHECK(cv_recipe_init(&r, "mixed_3_6", mods, 2, 16, &err) == 0);
    CHECK(r.layer_location == 2);
    CHECK(cv_recipe_bits(&r, "model.layers.0.self_attn.v_proj", 128) == 6);  // first eighth
    CHECK(cv_recipe_bits(&r, "model.layers.0.self_attn.q_proj", 128) == 3);
    CHECK(cv_recipe_bits(&r, "model.layers.4.mlp.down_proj", 128) == 6);    // (4 - 2) % 3 == 2
    CHECK(cv_recipe_bits(&r, "model.layers.5.mlp.down_proj", 128) == 3);
    CHECK(cv_recipe_bits(&r, "model.layers.14.mlp.down_proj", 128) == 6);   // last eighth
    CHECK(cv_recipe_bits(&r, "lm_head", 128) == 6);
    CHECK(cv_recipe_bits(&r, "model.embed_tokens", 128) == 6);
    CHECK(cv_recipe_bits(&r, "model.layers.5.mlp.up_proj", 100) == 0);     // not a multiple of 64
    CHECK(cv_recipe_init(&r, "mixed_9_9", mods, 2, 16, &err) != 0);
    CHECK(cv_recipe_init(&r, "mixed_3_6", mods, 1, 16, &err) != 0);  // no down_proj
}

int main(void) {
    test_affine_basic();
    test_affine_zero_and_constant();
    test_affine_ties();
    test_affine_roundtrip_all_bits();
    test_fp4();
    test_fp8();
    test_mx_scale_and_row();
    test_recipe();
    return check_finish();
}
