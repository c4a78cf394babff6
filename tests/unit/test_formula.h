// SPDX-License-Identifier: MIT
// For unit tests that hold a CPU record to its formula written out in double (test_family_ops.c,
// test_gpt_oss_ops.c): the largest absolute difference over the largest |want|, so one bound
// covers outputs of any scale (the absolute difference where every want is zero).
#ifndef MLXCEL_TEST_FORMULA_H
#define MLXCEL_TEST_FORMULA_H

#include <math.h>

static inline double max_rel(const float *got, const double *want, int n) {
    double md = 0, mw = 0;
    for (int i = 0; i < n; i++) {
        md = fmax(md, fabs(got[i] - want[i]));
        mw = fmax(mw, fabs(want[i]));
    }
    return mw > 0 ? md / mw : md;
}

#endif
