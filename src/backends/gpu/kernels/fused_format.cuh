// SPDX-License-Identifier: MIT
// The weight formats that have fused one-token kernels (kernels/matvec_fused.cu):
// dispatch_fused_format calls fn with the matrix's Fmt (dequant.cuh) for dense bf16, mxfp4 and
// affine 4/8-bit with bf16/f16 scales in groups of 32, 64 or 128, the common decode formats; false
// for any other (those run record by record).
#ifndef MXG_FUSED_FORMAT_CUH
#define MXG_FUSED_FORMAT_CUH

#include "backends/gpu/dequant.cuh"

namespace mxg {

template <class Fn>
bool dispatch_fused_format(const mx_matrix *w, Fn &&fn) {
    if (w->q.mode == MX_QUANT_NONE) {
        if (w->dtype != MX_DTYPE_BF16) return false;
        fn(Fmt<KIND_DENSE, 16, ST_BF16>{});
        return true;
    }
    if (w->q.mode == MX_QUANT_MXFP4 && w->q.bits == 4 && w->q.group_size == 32) {
        fn(Fmt<KIND_MXFP4, 4, ST_F32>{});
        return true;
    }
    if (w->q.mode != MX_QUANT_AFFINE || (w->q.bits != 4 && w->q.bits != 8)) return false;
    if (w->q.group_size != 32 && w->q.group_size != 64 && w->q.group_size != 128) return false;
    const int st = w->scale_dtype == MX_DTYPE_BF16 ? ST_BF16 : w->scale_dtype == MX_DTYPE_F16 ? ST_F16 : -1;
    if (st < 0) return false;
    if (w->q.bits == 4) {
        if (st == ST_BF16) fn(Fmt<KIND_AFFINE, 4, ST_BF16>{});
        else fn(Fmt<KIND_AFFINE, 4, ST_F16>{});
    } else {
        if (st == ST_BF16) fn(Fmt<KIND_AFFINE, 8, ST_BF16>{});
        else fn(Fmt<KIND_AFFINE, 8, ST_F16>{});
    }
    return true;
}

}  // namespace mxg

#endif
