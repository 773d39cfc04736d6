// NEON dot products of the i-quants with a non-linear 4-bit table (IQ4_NL against Q8_0, IQ4_XS
// against Q8_K), for the NEON unit (neon.cpp, built with -march=armv8.2-a+dotprod+fp16).
//
// Unlike quants_neon.h and kquants_neon.h, which follow the scalar reference's float order, these
// follow ggml-cpu's ARM vec_dots (ggml/src/ggml-cpu/arch/arm/quants.c, its __ARM_NEON path: the
// only vector path these two functions have, so a dotprod+fp16 build compiles exactly it), as
// iquants_256.h follows ggml's x86 ones. The integers: a block's 16 bytes of nibbles are looked up
// in the table with TBL (low nibbles give elements 0..15, high ones 16..31), and SDOT sums the
// products with the activations, 4 adjacent ones per int32 lane; lanes added across once per
// (sub-)block. These sums are exact (|sum| < 2^31, see below), so any lane split gives the same
// integer, and the build without dotprod (dot_s8's widening fallback) gives the same results.
//
// The floats, as GCC 12 compiles ggml's C for AArch64 (-O3 -std=gnu11: -ffp-contract=fast, and no
// FMA-chain avoidance on this target), read from the disassembly of that build with these flags
// and checked bit for bit against it under qemu (an ad-hoc harness: it needs llama.cpp's source):
//   IQ4_NL: blocks in pairs; sumf += fma(d_0, (float)sumi_0, d_1 * (float)sumi_1),
//           d_k = d_x * d_y (ggml writes d_x * d_y * sumi_0 + d_x * d_y * sumi_1, and GCC fuses
//           the first product into the sum, then adds that to sumf unfused).
//           The last block of an odd count goes through ggml's scalar C tail,
//           sumf += d * (sumi1 + sumi2), which GCC contracts here: sumf = fma(d, (float)sumi, sumf).
//           On x86 the same C line is not fused (iquants_256.h): that build's -march=native tunes
//           for Zen, whose --param avoid-fma-max-bits=256 makes GCC leave loop-carried a * b + c
//           chains unfused; AArch64's default is 0, so nothing holds the contraction back.
//   IQ4_XS: per super-block the exact sum over its 8 sub-blocks of (ls - 32) * dot, then
//           sumf = fma(d_x * d_y, (float)sumi, sumf): one rounding chain per 256 elements.
// A build of ggml by another compiler may round differently; these are GCC's bits. (ggml's ARM
// matmul repacks IQ4_NL weights with a multiple of 4 rows, iq4_nl_4x4_q8_0, and sums in that
// GEMV's order instead; the tables have no such order for IQ4_NL yet.)
// Ranges: a block's dot is at most 32 * 127 * 127 < 2^19, times |ls - 32| <= 32 and 8 sub-blocks
// < 2^27; (float)sumi rounds above 2^24 for IQ4_XS, as ggml's conversion does.
//
// The scalar references (quant/ref_iquants.cpp) sum in float per (sub-)block, so they differ from
// these by float order only; dequantization stays the reference's (the table keeps to_float).
#pragma once
#include <arm_neon.h>

#include <cmath>

#include "cpu/arm/quants_neon.h"
#include "cpu/kernels.h"
#include "quant/blocks.h"

namespace ei {
namespace {

// sum(v(q[j]) * y[j]) over the 32 elements whose nibbles are qs[0..15] (element j in the low
// nibble of byte j, element j + 16 in its high nibble); `table` holds the 16 values (kIq4nlValues,
// or kMxfp4Values for mxfp4_neon.h).
inline int table4_dot_32(const uint8_t* qs, const int8_t* y, int8x16_t table) {
    const uint8x16_t b = vld1q_u8(qs);
    const int8x16_t lo = vqtbl1q_s8(table, vandq_u8(b, vdupq_n_u8(0x0F)));
    const int8x16_t hi = vqtbl1q_s8(table, vshrq_n_u8(b, 4));
    return dot_block_32(lo, hi, y);
}

// The 8 sub-block scales of an IQ4_XS super-block, minus 32: low 4 bits in nibble k % 2 of
// scales_l[k / 2], high 2 bits at bits 2k..2k+1 of scales_h.
inline void iq4_xs_scales_neon(const block_iq4_xs& b, int ls[8]) {
    for (int k = 0; k < 8; k++)
        ls[k] = (((b.scales_l[k / 2] >> (4 * (k % 2))) & 15) | (((b.scales_h >> (2 * k)) & 3) << 4)) - 32;
}

// ggml's ARM loop for blocks of 32 4-bit indices into a 16-entry int8 table with one scale per
// block, against Q8_0: IQ4_NL here, MXFP4 (cpu/arm/mxfp4_neon.h), whose ggml vec_dots differ only
// in the table and in how a block's scale is read (x_scale: its float value; ggml writes both as
// scale_x * d_y * sumi_0 + scale_x * d_y * sumi_1). The float order is the header comment's, but
// which product of the pair GCC fuses into the other differs between the two functions (read from
// each one's disassembly): kFuseFirst gives fma(d_0, sumi_0, d_1 * sumi_1) (IQ4_NL), else
// fma(d_1, sumi_1, d_0 * sumi_0) (MXFP4).
template <class Block, float (*x_scale)(const Block&), bool kFuseFirst>
void vec_dot_table4_q8_0_neon(int64_t n, float* s, const void* vx, const void* vy, const int8_t* values) {
    const Block* x = (const Block*)vx;
    const block_q8_0* y = (const block_q8_0*)vy;
    const int64_t nb = n / QK8_0;
    const int8x16_t table = vld1q_s8(values);
    float sumf = 0.0f;
    int64_t i = 0;
    for (; i + 1 < nb; i += 2) {
        const float sumi0 = (float)table4_dot_32(x[i].qs, y[i].qs, table);
        const float sumi1 = (float)table4_dot_32(x[i + 1].qs, y[i + 1].qs, table);
        const float d0 = x_scale(x[i]) * h2f(y[i].d);
        const float d1 = x_scale(x[i + 1]) * h2f(y[i + 1].d);
        // the pair's two terms with one rounding saved, then one plain add into sumf
        sumf += kFuseFirst ? std::fma(d0, sumi0, d1 * sumi1) : std::fma(d1, sumi1, d0 * sumi0);
    }
    for (; i < nb; i++)  // ggml's scalar tail (an odd count's last block), contracted
        sumf = std::fma(h2f(y[i].d) * x_scale(x[i]), (float)table4_dot_32(x[i].qs, y[i].qs, table), sumf);
    *s = sumf;
}

inline float iq4_nl_scale(const block_iq4_nl& b) { return h2f(b.d); }

void vec_dot_iq4_nl_q8_0_neon(int64_t n, float* s, const void* vx, const void* vy) {
    vec_dot_table4_q8_0_neon<block_iq4_nl, iq4_nl_scale, true>(n, s, vx, vy, kIq4nlValues);
}

void vec_dot_iq4_xs_q8_K_neon(int64_t n, float* s, const void* vx, const void* vy) {
    const block_iq4_xs* x = (const block_iq4_xs*)vx;
    const block_q8_K* y = (const block_q8_K*)vy;
    const int8x16_t table = vld1q_s8(kIq4nlValues);
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int ls[8];
        iq4_xs_scales_neon(x[i], ls);
        int sumi = 0;
        for (int k = 0; k < QK_K / 32; k++) sumi += ls[k] * table4_dot_32(x[i].qs + 16 * k, y[i].qs + 32 * k, table);
        sumf = std::fma(h2f(x[i].d) * y[i].d, (float)sumi, sumf);
    }
    *s = sumf;
}

// The entries this file accelerates (dequantization stays the scalar reference's).
inline void fill_kernels_iquants_neon(KernelTable& t) {
    t.types[TYPE_IQ4_NL].vec_dot = vec_dot_iq4_nl_q8_0_neon;
    t.types[TYPE_IQ4_XS].vec_dot = vec_dot_iq4_xs_q8_K_neon;
}

}  // namespace
}  // namespace ei
