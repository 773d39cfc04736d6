// NEON dot product of MXFP4 against Q8_0, for the NEON unit (neon.cpp, built with
// -march=armv8.2-a+dotprod+fp16).
//
// ggml-cpu's ARM ggml_vec_dot_mxfp4_q8_0 (arch/arm/quants.c, its __ARM_NEON path) is IQ4_NL's
// loop with kvalues_mxfp4 for the table and 2^(e - 128) for the block's scale, written the same
// way (scale_x * d_y * sumi for each block of a pair, then the scalar C tail), so it runs
// iquants_neon.h's vec_dot_table4_q8_0_neon with those, in the float order GCC 12 gives ggml's C
// for AArch64 (-O3 -std=gnu11 -march=armv8.2-a+dotprod+fp16), read from the disassembly: per pair
// sumf += fma(d_1, sumi_1, d_0 * sumi_0) (the second product fused, where IQ4_NL's build fuses the
// first), an odd count's last block sumf = fma(d, sumi, sumf). Checked against that object bit for
// bit under qemu (an ad-hoc harness, as for IQ4_NL: it needs llama.cpp's source). Products by 2^(e - 128) are exact unless they leave the normal range, so only the
// sums round. (ggml's ARM matmul repacks MXFP4 weights with a multiple of 4 rows,
// mxfp4_4x4_q8_0, and sums in that GEMV's order instead; the tables have no such order for it.)
#pragma once
#include "common/e8m0.h"
#include "cpu/arm/iquants_neon.h"
#include "cpu/kernels.h"
#include "quant/blocks.h"

namespace ei {
namespace {

inline float mxfp4_scale(const block_mxfp4& b) { return e8m0_to_fp32_half(b.e); }

void vec_dot_mxfp4_q8_0_neon(int64_t n, float* s, const void* vx, const void* vy) {
    vec_dot_table4_q8_0_neon<block_mxfp4, mxfp4_scale, false>(n, s, vx, vy, kMxfp4Values);
}

// Dequantization stays the scalar reference's (one exact product per element).
inline void fill_kernels_mxfp4_neon(KernelTable& t) { t.types[TYPE_MXFP4].vec_dot = vec_dot_mxfp4_q8_0_neon; }

}  // namespace
}  // namespace ei
