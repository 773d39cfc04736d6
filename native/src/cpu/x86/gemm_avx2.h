// The AVX2 tiled GEMM (cpu/x86/gemm_avx2.cpp) over Q4_1 or Q5_0 weights repacked into 16-row
// groups (cpu/repack.h): the packed GEMMs' prompt chunks (cpu/x86/gemm_packed_avx2.cpp). Every
// output is the AVX2 vec_dot's bits, as with the rows stored as they are.
// Also the fast order's packed Q3_K, Q6_K, IQ4_XS, Q4_K and Q5_K kernels (cpu/x86/gemm_packed_q236k_avx2.cpp,
// gemm_packed_iq4xs_avx2.cpp, gemm_packed_q45k_avx2.cpp), which fill_gemm_packed_fast_avx2
// registers.
#pragma once
#include <cstddef>
#include <cstdint>

namespace ei {

struct KernelTable;

// gemm_16row_groups's signature (kernels.h) after the type: w points at a group, group_bytes =
// packed_group_bytes(type, k).
void gemm_grouped_avx2(uint32_t type, int64_t k, int64_t m, int64_t n, const void* w, size_t group_bytes,
                       const void* a, size_t a_stride, float* y, int64_t ldy);

// Sets the AVX2 table's Q3_K and Q6_K gemm_16row_groups in FloatOrder::fast (cpu/repack.h).
void fill_gemm_packed_fast_q236k_avx2(KernelTable& t);
// Sets its IQ4_XS gemm_16row_groups in FloatOrder::fast (cpu/x86/gemm_packed_iq4xs_avx2.cpp).
void fill_gemm_packed_fast_iq4xs_avx2(KernelTable& t);
// Sets its Q4_K and Q5_K gemm_16row_groups in FloatOrder::fast (cpu/x86/gemm_packed_q45k_avx2.cpp).
void fill_gemm_packed_fast_q45k_avx2(KernelTable& t);

}  // namespace ei
