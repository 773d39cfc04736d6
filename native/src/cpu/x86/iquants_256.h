// 256-bit x86 dot products of the i-quants with a non-linear 4-bit table (IQ4_NL against Q8_0,
// IQ4_XS against Q8_K), shared by the AVX2 and AVX-512 units as quants_256.h is.
//
// ggml-cpu's x86 vec_dots, operation for operation (ggml/src/ggml-cpu/arch/x86/quants.c; llama.cpp
// has no 512-bit version, so an AVX-512 build runs these too): a block's 16 bytes of nibbles are
// looked up in the table with PSHUFB (low nibbles give elements 0..15, high ones 16..31), multiplied
// by the activations as signed bytes and summed in 8 int32 lanes of 4 adjacent products.
//   IQ4_NL: blocks in pairs, the even block's lanes FMA'd by d_y * d_x into one accumulator, the
//           odd block's into another; the two added and reduced (hsum_float_8); a last block
//           of an odd count is added after, its product rounded apart from the sum (ggml's C
//           tail: GCC's Zen tuning, which a -march=native build gets on the AMD machines this
//           was checked on against that build's libggml-cpu, does not fuse a loop-carried sum;
//           an Intel-tuned build may, and would differ in the last bit for odd block counts).
//           MXFP4's vec_dot is the same loop with another table and scale (cpu/x86/mxfp4_256.h).
//   IQ4_XS: per super-block, the sub-blocks' int32 lanes times their scale (ls - 32), even and
//           odd sub-blocks summed apart, then added; one FMA per super-block by d_x * d_y.
//           For batches of 8 rows and more llama.cpp multiplies IQ4_XS (which it does not
//           repack) with ggml-cpu's tiled GEMM (tiled.cpp; x86 only), whose order
//           vec_dot_ggml_tiled gives: the same lanes summed exactly, r = (float)isum * d_x,
//           acc = fma(r, d_y, acc) (quant/ref_iquants.cpp). IQ4_NL has none: ggml repacks it.
// The integer sums are exact (a pair of products is at most 2 * 127 * 127 < 2^15), so the
// scalar references (quant/ref_iquants.cpp) differ from these by float order only.
#pragma once
#include <immintrin.h>

#include <cmath>

#include "common/fp16.h"
#include "cpu/kernels.h"
#include "cpu/x86/quants_256.h"
#include "quant/blocks.h"
#include "quant/ref.h"

namespace ei {
namespace {

// The 32 table values of a block's 16 bytes of nibbles (`table`: 16 int8 values, kIq4nlValues or
// kMxfp4Values): elements 0..15 (low nibbles) in bytes 0..15, elements 16..31 (high nibbles) in
// bytes 16..31.
inline __m256i table4_values_32(const uint8_t* qs, __m128i table) {
    const __m128i bits = _mm_loadu_si128((const __m128i*)qs);
    const __m128i m4 = _mm_set1_epi8(0x0F);
    return _mm256_set_m128i(_mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16(bits, 4), m4)),
                            _mm_shuffle_epi8(table, _mm_and_si128(bits, m4)));
}

// 8 int32 lanes, each the sum of 4 adjacent products x[i] * y[i] of signed bytes (exact).
inline __m256i dot_i8_lanes(__m256i x, __m256i y) {
    const __m256i ax = _mm256_sign_epi8(x, x), sy = _mm256_sign_epi8(y, x);
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), ax, sy);
#else
    return _mm256_madd_epi16(_mm256_maddubs_epi16(ax, sy), _mm256_set1_epi16(1));
#endif
}

// The same lanes times a sub-block scale ls (|ls| <= 32; exact in int32).
inline __m256i dot_i8_lanes_scaled(__m256i x, __m256i y, int ls) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
    return _mm256_mullo_epi32(dot_i8_lanes(x, y), _mm256_set1_epi32(ls));
#else
    const __m256i ax = _mm256_sign_epi8(x, x), sy = _mm256_sign_epi8(y, x);
    return _mm256_madd_epi16(_mm256_maddubs_epi16(ax, sy), _mm256_set1_epi16((int16_t)ls));
#endif
}

inline __m128i iq4_table() { return _mm_loadu_si128((const __m128i*)kIq4nlValues); }

// ggml's x86 loop for blocks of 32 4-bit indices into a 16-entry int8 table with one scale per
// block, against Q8_0: IQ4_NL here, MXFP4 (cpu/x86/mxfp4_256.h), whose ggml vec_dots differ only
// in the table and in how a block's scale is read (x_scale: its float value). Per pair of blocks,
// each block's 8 lanes FMA'd by d_y * x_scale into its own accumulator (even, odd); the two added
// and reduced; the last block of an odd count in ggml's C tail, (d_y * x_scale) * isum added to
// the sum as a separate rounding (see the header's comment: ggml's build does not fuse it).
template <class Block, float (*x_scale)(const Block&)>
void vec_dot_table4_q8_0_256(int64_t n, float* s, const void* vx, const void* vy, const int8_t* values) {
    const Block* x = (const Block*)vx;
    const block_q8_0* y = (const block_q8_0*)vy;
    const int64_t nb = n / QK8_0;
    const __m128i table = _mm_loadu_si128((const __m128i*)values);
    __m256 acc_even = _mm256_setzero_ps(), acc_odd = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 1 < nb; i += 2) {
        const __m256i p0 = dot_i8_lanes(table4_values_32(x[i].qs, table), _mm256_loadu_si256((const __m256i*)y[i].qs));
        const __m256i p1 =
            dot_i8_lanes(table4_values_32(x[i + 1].qs, table), _mm256_loadu_si256((const __m256i*)y[i + 1].qs));
        acc_even = _mm256_fmadd_ps(_mm256_set1_ps(h2f(y[i].d) * x_scale(x[i])), _mm256_cvtepi32_ps(p0), acc_even);
        acc_odd = _mm256_fmadd_ps(_mm256_set1_ps(h2f(y[i + 1].d) * x_scale(x[i + 1])), _mm256_cvtepi32_ps(p1), acc_odd);
    }
    float sum = hsum_float_8(_mm256_add_ps(acc_even, acc_odd));
    for (; i < nb; ++i) {
        float term = h2f(y[i].d) * x_scale(x[i]) * (float)ref::table4_dot_32(x[i].qs, y[i].qs, values);
        __asm__("" : "+x"(term));  // a separate rounding, as ggml's build computes it (above): no FMA
        sum += term;
    }
    *s = sum;
}

inline float iq4_nl_scale(const block_iq4_nl& b) { return h2f(b.d); }

void vec_dot_iq4_nl_q8_0_256(int64_t n, float* s, const void* vx, const void* vy) {
    vec_dot_table4_q8_0_256<block_iq4_nl, iq4_nl_scale>(n, s, vx, vy, kIq4nlValues);
}

// A super-block's 8 int32 lanes (the header's): each sub-block's lanes times ls - 32, even and odd
// sub-blocks summed apart, then added.
inline __m256i iq4_xs_lanes(const block_iq4_xs& x, const block_q8_K& y, __m128i table) {
    __m256i sum_even = _mm256_setzero_si256(), sum_odd = _mm256_setzero_si256();
    unsigned sh = x.scales_h;
    for (int ib = 0; ib < QK_K / 32; ib += 2) {
        const int ls0 = ((x.scales_l[ib / 2] & 15) | ((sh << 4) & 0x30)) - 32;
        const int ls1 = ((x.scales_l[ib / 2] >> 4) | ((sh << 2) & 0x30)) - 32;
        sh >>= 4;
        sum_even = _mm256_add_epi32(sum_even, dot_i8_lanes_scaled(table4_values_32(x.qs + 16 * ib, table),
                                        _mm256_loadu_si256((const __m256i*)(y.qs + 32 * ib)), ls0));
        sum_odd = _mm256_add_epi32(sum_odd, dot_i8_lanes_scaled(table4_values_32(x.qs + 16 * ib + 16, table),
                                        _mm256_loadu_si256((const __m256i*)(y.qs + 32 * ib + 32)), ls1));
    }
    return _mm256_add_epi32(sum_even, sum_odd);
}

void vec_dot_iq4_xs_q8_K_256(int64_t n, float* s, const void* vx, const void* vy) {
    const block_iq4_xs* x = (const block_iq4_xs*)vx;
    const block_q8_K* y = (const block_q8_K*)vy;
    const __m128i table = iq4_table();
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; ++i)
        acc = _mm256_fmadd_ps(_mm256_set1_ps(h2f(x[i].d) * y[i].d), _mm256_cvtepi32_ps(iq4_xs_lanes(x[i], y[i], table)),
                              acc);
    *s = hsum_float_8(acc);
}

// ggml's tiled GEMM order (the header): the lanes' exact sum times d_x, one FMA by d_y.
void vec_dot_iq4_xs_q8_K_tiled_256(int64_t n, float* s, const void* vx, const void* vy) {
    const block_iq4_xs* x = (const block_iq4_xs*)vx;
    const block_q8_K* y = (const block_q8_K*)vy;
    const __m128i table = iq4_table();
    float acc = 0.0f;
    for (int64_t i = 0; i < n / QK_K; ++i)
        acc = std::fma((float)hsum_i32_8(iq4_xs_lanes(x[i], y[i], table)) * h2f(x[i].d), y[i].d, acc);
    *s = acc;
}

inline void fill_kernels_iquants_256(KernelTable& t) {
    t.types[TYPE_IQ4_NL].vec_dot = vec_dot_iq4_nl_q8_0_256;
    t.types[TYPE_IQ4_XS].vec_dot = vec_dot_iq4_xs_q8_K_256;
    t.types[TYPE_IQ4_XS].vec_dot_ggml_tiled = vec_dot_iq4_xs_q8_K_tiled_256;
}

}  // namespace
}  // namespace ei
