// 256-bit x86 dot product of MXFP4 against Q8_0, shared by the AVX2 and AVX-512 units as
// iquants_256.h is.
//
// ggml-cpu's x86 ggml_vec_dot_mxfp4_q8_0 (arch/x86/quants.c, its AVX2 path; llama.cpp has no
// 512-bit one) is IQ4_NL's loop with kvalues_mxfp4 for the table and 2^(e - 128) for the block's
// scale, so it runs iquants_256.h's vec_dot_table4_q8_0_256 with those: blocks in pairs into two
// accumulators of 8 FMAs by d_y * 2^(e - 128), added, hsum_float_8; an odd count's last block
// through ggml's scalar C tail, not fused. That last point read from the disassembly of the
// llama.cpp build's libggml-cpu.so on this Zen 4 (-march=native): the tail is VMULSS (d_y times
// the scale from ggml's E8M0 table), VMULSS by (float)isum, VADDSS into the sum; tests/test_mxfp4.py
// compares with that library's vec_dot bit for bit, odd block counts included.
// (ggml's CPU matmul repacks MXFP4 weights with a multiple of 8 rows on AVX2, mxfp4_8x8_q8_0, and
// sums in that GEMV's order instead; these tables have no such order for MXFP4.)
#pragma once
#include "common/e8m0.h"
#include "cpu/kernels.h"
#include "cpu/x86/iquants_256.h"
#include "quant/blocks.h"

namespace ei {
namespace {

inline float mxfp4_scale(const block_mxfp4& b) { return e8m0_to_fp32_half(b.e); }

void vec_dot_mxfp4_q8_0_256(int64_t n, float* s, const void* vx, const void* vy) {
    vec_dot_table4_q8_0_256<block_mxfp4, mxfp4_scale>(n, s, vx, vy, kMxfp4Values);
}

// Dequantization stays the scalar reference's (one exact product per element).
inline void fill_kernels_mxfp4_256(KernelTable& t) { t.types[TYPE_MXFP4].vec_dot = vec_dot_mxfp4_q8_0_256; }

}  // namespace
}  // namespace ei
