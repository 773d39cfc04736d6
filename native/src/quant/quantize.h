// Weight quantizers: float rows -> blocks of a GGUF tensor type, as `edgeinfer quantize` writes
// them. Each is ggml's reference quantizer (quantize_row_*_ref, what llama-quantize runs without
// an importance matrix), re-implemented with the same float operations in the same order, so the
// blocks come out bit-identical; the tests compare against the `gguf` package and llama.cpp.
//
// With an importance matrix (llama-quantize --imatrix: one weight per column, the same for every
// row) ggml runs other quantizers for the 4- and 5-bit legacy types, the k-quants and the IQ4
// types (quantize_row_*_impl): weighted fits of the same block formats, re-implemented here in
// the same way (quantize_rows' `imatrix`); IQ3_XXS and IQ3_S run one search, its weights x^2
// without an imatrix. The other types ignore the weights, in ggml and here. IQ2_XXS, IQ2_XS and
// IQ1_S have only an imatrix quantizer (ggml asserts the weights); IQ2_S and IQ1_M have both.
//
// These are not the activation quantizers of the kernel table (cpu/kernels.h): ggml-cpu's
// runtime q8_0 rounds half to even with id = 127/amax, its reference rounds half away from zero
// with id = 1/d, and files must carry the reference's bytes.
#pragma once
#include <cstdint>

namespace ei {

// Quantizes one row of n elements (n a multiple of the type's block size) into dst.
using QuantizeRowFn = void (*)(const float* src, void* dst, int64_t n);

// The reference quantizer of `type`, or nullptr if it has none: f32, f16, bf16, q4_0, q4_1,
// q5_0, q5_1, q8_0, q2_K, q3_K, q4_K, q5_K, q6_K, iq4_nl, iq4_xs, mxfp4, tq1_0, tq2_0.
QuantizeRowFn quantize_row_fn(uint32_t type);

// Quantizes one row of n elements with importance weights imatrix[0..n-1] into dst.
using QuantizeRowImatrixFn = void (*)(const float* src, void* dst, int64_t n, const float* imatrix);

// The imatrix quantizer of `type`, or nullptr if ggml's quantizer for it ignores the weights:
// q4_0, q4_1, q5_0, q5_1, q2_K, q3_K, q4_K, q5_K, q6_K, iq4_nl, iq4_xs, iq2_xxs, iq2_xs, iq2_s,
// iq1_s, iq1_m, iq3_xxs, iq3_s have one.
QuantizeRowImatrixFn quantize_row_imatrix_fn(uint32_t type);

// Whether an importance matrix changes what quantize_rows writes for `type`.
bool quantizer_uses_imatrix(uint32_t type);

// Whether quantize_rows can write `type` (with an importance matrix, if it needs one).
bool has_quantizer(uint32_t type);

// Whether quantize_rows refuses `type` without an importance matrix (ggml's quantizer asserts one).
bool quantizer_needs_imatrix(uint32_t type);

// Quantizes nrows rows of n_per_row floats (row-major) into `type`, rows split over n_threads
// threads (each row is independent, so the bytes do not depend on the thread count). imatrix:
// n_per_row importance weights for every row, or nullptr (the reference quantizer); a type that
// does not use them ignores them. Throws ei::Error for a type without a quantizer, a type that
// needs an imatrix called without one, or a row length that is not a whole number of blocks.
void quantize_rows(uint32_t type, const float* src, void* dst, int64_t nrows, int64_t n_per_row, int n_threads,
                   const float* imatrix = nullptr);

namespace qref {
// quantize_legacy.cpp: 32-element blocks.
void quantize_row_q4_0(const float* x, void* y, int64_t n);
void quantize_row_q4_1(const float* x, void* y, int64_t n);
void quantize_row_q5_0(const float* x, void* y, int64_t n);
void quantize_row_q5_1(const float* x, void* y, int64_t n);
void quantize_row_q8_0(const float* x, void* y, int64_t n);
// quantize_kquants.cpp: 256-element super-blocks.
void quantize_row_q2_K(const float* x, void* y, int64_t n);
void quantize_row_q3_K(const float* x, void* y, int64_t n);
void quantize_row_q4_K(const float* x, void* y, int64_t n);
void quantize_row_q5_K(const float* x, void* y, int64_t n);
void quantize_row_q6_K(const float* x, void* y, int64_t n);
// quantize_iquants.cpp: the non-linear 4-bit types.
void quantize_row_iq4_nl(const float* x, void* y, int64_t n);
void quantize_row_iq4_xs(const float* x, void* y, int64_t n);
// quantize_iq3.cpp: 3-bit codes of 4 elements on a grid (IQ3_XXS: 256 points, IQ3_S: 512).
void quantize_row_iq3_xxs(const float* x, void* y, int64_t n);
void quantize_row_iq3_s(const float* x, void* y, int64_t n);
// quantize_mxfp4.cpp: E2M1 codes with an E8M0 block exponent.
void quantize_row_mxfp4(const float* x, void* y, int64_t n);
// quantize_ternary.cpp: base-3 and 2-bit digits of -1, 0, 1 times the block's largest magnitude.
void quantize_row_tq1_0(const float* x, void* y, int64_t n);
void quantize_row_tq2_0(const float* x, void* y, int64_t n);

// The imatrix quantizers (ggml's quantize_row_*_impl), beside their reference versions.
void quantize_row_q4_0_imatrix(const float* x, void* y, int64_t n, const float* imatrix);
void quantize_row_q4_1_imatrix(const float* x, void* y, int64_t n, const float* imatrix);
void quantize_row_q5_0_imatrix(const float* x, void* y, int64_t n, const float* imatrix);
void quantize_row_q5_1_imatrix(const float* x, void* y, int64_t n, const float* imatrix);
void quantize_row_q2_K_imatrix(const float* x, void* y, int64_t n, const float* imatrix);
void quantize_row_q3_K_imatrix(const float* x, void* y, int64_t n, const float* imatrix);
void quantize_row_q4_K_imatrix(const float* x, void* y, int64_t n, const float* imatrix);
void quantize_row_q5_K_imatrix(const float* x, void* y, int64_t n, const float* imatrix);
void quantize_row_q6_K_imatrix(const float* x, void* y, int64_t n, const float* imatrix);
void quantize_row_iq4_nl_imatrix(const float* x, void* y, int64_t n, const float* imatrix);
void quantize_row_iq4_xs_imatrix(const float* x, void* y, int64_t n, const float* imatrix);

// quantize_iq2.cpp and quantize_iq1.cpp: the lattice i-quants. IQ2_XXS, IQ2_XS and IQ1_S need
// `imatrix`; IQ2_S and IQ1_M take nullptr for their reference versions.
void quantize_row_iq2_xxs_imatrix(const float* x, void* y, int64_t n, const float* imatrix);
void quantize_row_iq2_xs_imatrix(const float* x, void* y, int64_t n, const float* imatrix);
void quantize_row_iq2_s_imatrix(const float* x, void* y, int64_t n, const float* imatrix);
void quantize_row_iq2_s(const float* x, void* y, int64_t n);
void quantize_row_iq1_s_imatrix(const float* x, void* y, int64_t n, const float* imatrix);
void quantize_row_iq1_m_imatrix(const float* x, void* y, int64_t n, const float* imatrix);
void quantize_row_iq1_m(const float* x, void* y, int64_t n);
// quantize_iq3.cpp: IQ3_XXS and IQ3_S with importance weights.
void quantize_row_iq3_xxs_imatrix(const float* x, void* y, int64_t n, const float* imatrix);
void quantize_row_iq3_s_imatrix(const float* x, void* y, int64_t n, const float* imatrix);
}  // namespace qref

}  // namespace ei
