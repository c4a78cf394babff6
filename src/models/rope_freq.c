// SPDX-License-Identifier: MIT
// RoPE's inverse frequencies, one table at a time: the main table with the config's scaling
// (linear, llama3, YaRN's blend, longrope's short factors), Gemma's unscaled sliding-window table
// and longrope's long-context one, computed in double as transformers does.
#include <math.h>

#include "models/model_internal.h"

// YaRN's correction range (transformers' find_correction_range): the dimensions whose wavelength
// makes beta_fast and beta_slow rotations over the original context, floored/ceiled when truncating.
static void yarn_range(const mx_config *cfg, double *low, double *high) {
    int d = cfg->rope_dim;
    double base = cfg->rope_theta, orig = cfg->rope_original_max_pos;
    double lo = d * log(orig / (cfg->rope_beta_fast * 2 * M_PI)) / (2 * log(base));
    double hi = d * log(orig / (cfg->rope_beta_slow * 2 * M_PI)) / (2 * log(base));
    if (cfg->rope_truncate) lo = floor(lo), hi = ceil(hi);
    *low = lo > 0 ? lo : 0;
    *high = hi < d - 1 ? hi : d - 1;
    if (*low == *high) *high += 0.001;  // transformers' guard against a zero-width ramp
}

void mx_rope_inv_freq(const mx_config *cfg, mx_rope_table table, float *out) {
    int d = cfg->rope_dim;
    double theta = table == MX_ROPE_TABLE_LOCAL ? cfg->rope_local_theta : cfg->rope_theta;
    double yarn_low = 0, yarn_high = 1;
    if (cfg->rope_type == MX_ROPE_YARN) yarn_range(cfg, &yarn_low, &yarn_high);
    for (int i = 0; i < d / 2; i++) {
        double inv = pow(theta, -(2.0 * i) / d);
        if (table == MX_ROPE_TABLE_LOCAL) {
        } else if (cfg->rope_type == MX_ROPE_YARN) {
            // Blend: extrapolated (original) frequencies below the ramp, interpolated (/ factor) above.
            double ramp = (i - yarn_low) / (yarn_high - yarn_low);
            double extrapolate = 1.0 - (ramp < 0 ? 0 : ramp > 1 ? 1 : ramp);
            inv = inv / cfg->rope_factor * (1.0 - extrapolate) + inv * extrapolate;
        } else if (cfg->rope_type == MX_ROPE_LINEAR && cfg->rope_factor > 0) {
            inv /= cfg->rope_factor;
        } else if (cfg->rope_type == MX_ROPE_LONGROPE) {
            inv /= table == MX_ROPE_TABLE_LONG ? cfg->rope_long_factor[i] : cfg->rope_short_factor[i];
        } else if (cfg->rope_type == MX_ROPE_LLAMA3) {
            double f = cfg->rope_factor, lo = cfg->rope_low_freq_factor, hi = cfg->rope_high_freq_factor;
            double old = cfg->rope_original_max_pos, wavelen = 2.0 * M_PI / inv;
            if (wavelen > old / lo) {
                inv = inv / f;
            } else if (wavelen >= old / hi) {
                double smooth = (old / wavelen - lo) / (hi - lo);
                inv = (1.0 - smooth) * inv / f + smooth * inv;
            }
        }
        out[i] = (float)inv;
    }
}
