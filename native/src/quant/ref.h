// The scalar reference kernels (quant/ref_*.cpp): plain C++ with ggml's exact semantics, the
// oracle every ISA's kernels are tested against. Signatures are those of cpu/kernels.h.
// Compiled for the baseline target only; ISA units may call them (e.g. for a row tail).
#pragma once
#include <cstdint>

namespace ei {
struct block_q6_K;
namespace ref {

// ---- plain types (ref_float.cpp) ----
void to_float_f32(const void* src, float* dst, int64_t n);
void to_float_f16(const void* src, float* dst, int64_t n);
void to_float_bf16(const void* src, float* dst, int64_t n);
void from_float_f32(const float* src, void* dst, int64_t n);
void from_float_f16(const float* src, void* dst, int64_t n);
void from_float_bf16(const float* src, void* dst, int64_t n);
void vec_dot_f32(int64_t n, float* s, const void* x, const void* y);
void vec_dot_f16(int64_t n, float* s, const void* x, const void* y);
void vec_dot_bf16(int64_t n, float* s, const void* x, const void* y);

// ---- 32-element block types (ref_legacy.cpp) ----
void to_float_q4_0(const void* src, float* dst, int64_t n);
void to_float_q4_1(const void* src, float* dst, int64_t n);
void to_float_q5_0(const void* src, float* dst, int64_t n);
void to_float_q5_1(const void* src, float* dst, int64_t n);
void to_float_q8_0(const void* src, float* dst, int64_t n);
void to_float_q8_1(const void* src, float* dst, int64_t n);
// Activation quantizers; byte-identical with ggml-cpu's x86 quantize_row_q8_0 / q8_1.
void from_float_q8_0(const float* src, void* dst, int64_t n);
void from_float_q8_1(const float* src, void* dst, int64_t n);
void vec_dot_q4_0_q8_0(int64_t n, float* s, const void* x, const void* y);
void vec_dot_q4_1_q8_1(int64_t n, float* s, const void* x, const void* y);
void vec_dot_q5_0_q8_0(int64_t n, float* s, const void* x, const void* y);
void vec_dot_q5_1_q8_1(int64_t n, float* s, const void* x, const void* y);
void vec_dot_q8_0_q8_0(int64_t n, float* s, const void* x, const void* y);

// ---- k-quants, 256-element super-blocks (ref_kquants.cpp) ----
void to_float_q2_K(const void* src, float* dst, int64_t n);
void to_float_q3_K(const void* src, float* dst, int64_t n);
void to_float_q4_K(const void* src, float* dst, int64_t n);
void to_float_q5_K(const void* src, float* dst, int64_t n);
void to_float_q6_K(const void* src, float* dst, int64_t n);
void to_float_q8_K(const void* src, float* dst, int64_t n);
// Activation quantizer; byte-identical with ggml's quantize_row_q8_K_ref, which ggml-cpu's x86
// quantize_row_q8_K calls (there is no SIMD version), so every ISA uses this one.
void from_float_q8_K(const float* src, void* dst, int64_t n);
void vec_dot_q2_K_q8_K(int64_t n, float* s, const void* x, const void* y);
void vec_dot_q3_K_q8_K(int64_t n, float* s, const void* x, const void* y);
void vec_dot_q4_K_q8_K(int64_t n, float* s, const void* x, const void* y);
void vec_dot_q5_K_q8_K(int64_t n, float* s, const void* x, const void* y);
void vec_dot_q6_K_q8_K(int64_t n, float* s, const void* x, const void* y);
// Element j (0..255) of a q6_K block as stored, 0..63 (it weighs d * scale * (value - 32)): the
// one reading of the 4 + 2 bit packing (the 16-row repacking, cpu/repack.cpp, moves four values at
// a time the same way).
int q6_K_value(const block_q6_K& b, int j);
// The 16 sub-block scales of a q3_K block, less 32 (-32..31), which the 16-row repacking shares.
void unpack_scales_q3(const uint8_t s[12], int sc[16]);
// The 8 6-bit sub-block scales and 8 6-bit minimums of a q4_K / q5_K block (ggml's
// get_scale_min_k4 for every sub-block), which the 16-row repacking shares too.
void unpack_scales_k4(const uint8_t s[12], uint8_t sc[8], uint8_t mn[8]);
// The same dot products in the order of ggml-cpu's tiled GEMM (per super-block: the integer
// sums scaled, the minimum subtracted in one FMA, then accumulated with one FMA).
void vec_dot_q2_K_q8_K_tiled(int64_t n, float* s, const void* x, const void* y);
void vec_dot_q3_K_q8_K_tiled(int64_t n, float* s, const void* x, const void* y);
void vec_dot_q4_K_q8_K_tiled(int64_t n, float* s, const void* x, const void* y);
void vec_dot_q5_K_q8_K_tiled(int64_t n, float* s, const void* x, const void* y);
void vec_dot_q6_K_q8_K_tiled(int64_t n, float* s, const void* x, const void* y);

// ---- i-quants with a non-linear 4-bit table (ref_iquants.cpp) ----
void to_float_iq4_nl(const void* src, float* dst, int64_t n);
void to_float_iq4_xs(const void* src, float* dst, int64_t n);
void vec_dot_iq4_nl_q8_0(int64_t n, float* s, const void* x, const void* y);
void vec_dot_iq4_xs_q8_K(int64_t n, float* s, const void* x, const void* y);
// IQ4_XS in the order of ggml-cpu's tiled GEMM (exact integer per super-block times d_x, then one
// FMA by d_y).
void vec_dot_iq4_xs_q8_K_tiled(int64_t n, float* s, const void* x, const void* y);
// sum_j values[q[j]] * a[j] over the 32 elements whose 4-bit codes are qs[0..15] (element j in the
// low nibble of byte j, element j + 16 in its high one): a block's exact integer dot product for
// the types with a 16-entry table (IQ4_NL, IQ4_XS's sub-blocks, MXFP4).
int table4_dot_32(const uint8_t* qs, const int8_t* a, const int8_t* values);

// ---- MXFP4, E2M1 codes with an E8M0 block exponent (ref_mxfp4.cpp) ----
void to_float_mxfp4(const void* src, float* dst, int64_t n);
void vec_dot_mxfp4_q8_0(int64_t n, float* s, const void* x, const void* y);

// ---- 1-bit i-quants and ternary types, against Q8_K (ref_iq1_tq.cpp) ----
void to_float_iq1_s(const void* src, float* dst, int64_t n);
void to_float_iq1_m(const void* src, float* dst, int64_t n);
void to_float_tq1_0(const void* src, float* dst, int64_t n);
void to_float_tq2_0(const void* src, float* dst, int64_t n);
void vec_dot_iq1_s_q8_K(int64_t n, float* s, const void* x, const void* y);
void vec_dot_iq1_m_q8_K(int64_t n, float* s, const void* x, const void* y);
// IQ1_S, IQ1_M in the order of ggml-cpu's tiled GEMM (the exact integer 8 sumi + sumi_delta per
// super-block times d_x / 8, then one FMA by d_y).
void vec_dot_iq1_s_q8_K_tiled(int64_t n, float* s, const void* x, const void* y);
void vec_dot_iq1_m_q8_K_tiled(int64_t n, float* s, const void* x, const void* y);
void vec_dot_tq1_0_q8_K(int64_t n, float* s, const void* x, const void* y);
void vec_dot_tq2_0_q8_K(int64_t n, float* s, const void* x, const void* y);
// ---- 2- and 3-bit lattice i-quants, against Q8_K (ref_iq23.cpp) ----
void to_float_iq2_xxs(const void* src, float* dst, int64_t n);
void to_float_iq2_xs(const void* src, float* dst, int64_t n);
void to_float_iq2_s(const void* src, float* dst, int64_t n);
void to_float_iq3_xxs(const void* src, float* dst, int64_t n);
void to_float_iq3_s(const void* src, float* dst, int64_t n);
void vec_dot_iq2_xxs_q8_K(int64_t n, float* s, const void* x, const void* y);
void vec_dot_iq2_xs_q8_K(int64_t n, float* s, const void* x, const void* y);
void vec_dot_iq2_s_q8_K(int64_t n, float* s, const void* x, const void* y);
void vec_dot_iq3_xxs_q8_K(int64_t n, float* s, const void* x, const void* y);
void vec_dot_iq3_s_q8_K(int64_t n, float* s, const void* x, const void* y);
// The same in the order of ggml-cpu's tiled GEMM (per super-block the exact integer sum times
// d_x's scale, then one FMA by d_y).
void vec_dot_iq2_xxs_q8_K_tiled(int64_t n, float* s, const void* x, const void* y);
void vec_dot_iq2_xs_q8_K_tiled(int64_t n, float* s, const void* x, const void* y);
void vec_dot_iq2_s_q8_K_tiled(int64_t n, float* s, const void* x, const void* y);
void vec_dot_iq3_xxs_q8_K_tiled(int64_t n, float* s, const void* x, const void* y);
void vec_dot_iq3_s_q8_K_tiled(int64_t n, float* s, const void* x, const void* y);

}  // namespace ref

}  // namespace ei
