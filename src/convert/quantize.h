// SPDX-License-Identifier: MIT
// The quantizer math of `mlxcel convert`, one row at a time, bit-exact with MLX (mlx 0.32):
// affine 2-8 bit groups (the edge/sign trick, float32 arithmetic, round half to even) and the
// microscaling formats mxfp4/mxfp8 (E8M0 scale = 2^round(log2(absmax / 6 or 448)); elements rounded
// to nearest, ties to even, saturating; a zero magnitude is always coded +0). Rows are little-endian
// LSB-first bit streams exactly as FORMAT.md describes. Pure functions, no allocation, thread-safe.
#ifndef MX_CONVERT_QUANTIZE_H
#define MX_CONVERT_QUANTIZE_H

#include <stdint.h>

// Affine: quantizes w[n] (n a multiple of group_size) into packed[n * bits / 8] and writes one
// scale and bias per group into scales[n / group_size], biases[n / group_size] (float32; the caller
// casts them to the weight dtype as MLX does).
void cv_quantize_affine_row(const float *w, int64_t n, int bits, int group_size, uint8_t *packed,
                            float *scales, float *biases);

// Microscaling: bits 4 (E2M1) or 8 (E4M3), groups of 32. packed[n * bits / 8], scales[n / 32] holds
// E8M0 bytes.
void cv_quantize_mx_row(const float *w, int64_t n, int bits, uint8_t *packed, uint8_t *scales);

// Element encoders (exposed for the unit tests): nearest, ties to even, saturating; NaN saturates.
uint8_t cv_f32_to_e2m1(float x);
uint8_t cv_f32_to_e4m3(float x);
// E8M0 exponent byte of a group's absolute maximum divided by the element format's maximum.
uint8_t cv_e8m0_from_absmax(float absmax, int bits);

#endif
