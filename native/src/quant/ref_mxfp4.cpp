// Scalar reference kernels of MXFP4 (32-element blocks of 4-bit E2M1 codes with an E8M0 shared
// exponent, against Q8_0 activations: ggml-cpu's vec_dot_type for it).
//
// Dequantization is bit-identical with gguf.quants.dequantize (and ggml's dequantize_row_mxfp4):
// x = (float)kMxfp4Values[q] * 2^(e - 128), one rounding (none at all unless the power of two
// takes the product out of the normal range). The dot product forms each block's exact integer
// sum and combines in float in ggml's generic order (ggml_vec_dot_mxfp4_q8_0_generic):
//   s += (d_y * 2^(e - 128)) * sum(v(q_x) * q_y)      per block
// The ISA kernels (cpu/x86/mxfp4_256.h, cpu/arm/mxfp4_neon.h) take ggml's x86 / ARM orders, so
// they differ from this by float order only.
#include "common/e8m0.h"
#include "common/fp16.h"
#include "quant/blocks.h"
#include "quant/ref.h"

namespace ei {
namespace ref {

void to_float_mxfp4(const void* src, float* dst, int64_t n) {
    const block_mxfp4* x = (const block_mxfp4*)src;
    for (int64_t i = 0; i < n / QK_MXFP4; ++i, dst += QK_MXFP4) {
        const float d = e8m0_to_fp32_half(x[i].e);
        for (int j = 0; j < QK_MXFP4 / 2; ++j) {
            dst[j] = (float)kMxfp4Values[x[i].qs[j] & 15] * d;
            dst[j + QK_MXFP4 / 2] = (float)kMxfp4Values[x[i].qs[j] >> 4] * d;
        }
    }
}

void vec_dot_mxfp4_q8_0(int64_t n, float* s, const void* vx, const void* vy) {
    const block_mxfp4* x = (const block_mxfp4*)vx;
    const block_q8_0* y = (const block_q8_0*)vy;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QK_MXFP4; ++i) {
        const float d = fp16_to_fp32(y[i].d) * e8m0_to_fp32_half(x[i].e);
        sumf += d * (float)table4_dot_32(x[i].qs, y[i].qs, kMxfp4Values);
    }
    *s = sumf;
}

}  // namespace ref
}  // namespace ei
