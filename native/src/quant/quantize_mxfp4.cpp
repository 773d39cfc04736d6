// Reference quantizer of MXFP4 (ggml's quantize_row_mxfp4_ref, which quantize_mxfp4 and so
// llama-quantize run; it takes no importance matrix).
//
// Per block of 32: e = floor(log2(amax)) - 2 + 127 scales the block's largest magnitude amax to
// [4, 8) units of 2^(e - 127), where E2M1's largest value is 6 (so the top of that range clips),
// and each element takes the table entry v minimising |v * 2^(e - 128) - x| (v the doubled
// values), the first on a tie (code 0 before code 8, the two zeros). Written with ggml's float
// operations in its order (log2f is the C library's, as ggml's), unfused (this unit is built for
// the baseline target).
#include <cmath>
#include <cstdint>

#include "common/e8m0.h"
#include "quant/blocks.h"
#include "quant/quantize.h"

namespace ei {
namespace qref {

namespace {

// ggml casts the float exponent to uint8_t; x86 compiles that to CVTTSS2SI into 32 bits and keeps
// the low byte (a block with amax below 2^-125 gets a negative exponent and wraps: 2^-130 gives -5, so 251),
// and a value out of int32's range (amax = inf) converts to 0x80000000, so 0. Done portably here:
// x86's bytes on every target (ggml's own differ on ARM for those inputs).
uint8_t e8m0_from_float(float f) {
    if (!(f > -2147483648.0f && f < 2147483648.0f)) return 0;
    return (uint8_t)(uint32_t)(int32_t)f;
}

// The index of the table entry nearest x / e, as |v * e - x| (ggml's best_index_mxfp4).
int best_index_mxfp4(float x, float e) {
    int best = 0;
    float best_err = std::fabs((float)kMxfp4Values[0] * e - x);
    for (int i = 1; i < 16; ++i) {
        const float err = std::fabs((float)kMxfp4Values[i] * e - x);
        if (err < best_err) {
            best = i;
            best_err = err;
        }
    }
    return best;
}

}  // namespace

void quantize_row_mxfp4(const float* x, void* vy, int64_t n) {
    block_mxfp4* y = (block_mxfp4*)vy;
    for (int64_t i = 0; i < n / QK_MXFP4; ++i, x += QK_MXFP4) {
        float amax = 0.0f;
        for (int j = 0; j < QK_MXFP4; ++j)
            if (amax < std::fabs(x[j])) amax = std::fabs(x[j]);
        const uint8_t e = amax > 0.0f ? e8m0_from_float(std::floor(std::log2(amax)) - 2.0f + 127.0f) : 0;
        const float d = e8m0_to_fp32_half(e);
        y[i].e = e;
        for (int j = 0; j < QK_MXFP4 / 2; ++j)
            y[i].qs[j] = (uint8_t)(best_index_mxfp4(x[j], d) | best_index_mxfp4(x[j + QK_MXFP4 / 2], d) << 4);
    }
}

}  // namespace qref
}  // namespace ei
