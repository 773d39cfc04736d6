// NEON kernels for AArch64 with the dot-product extension (compiled with
// -march=armv8.2-a+dotprod+fp16; dispatch.cpp selects them only where HWCAP_ASIMDDP is set).
// The kernels live in quants_neon.h (32-element block types, float types, Q8_0/Q8_1
// quantizers), kquants_neon.h (k-quants), iquants_neon.h (IQ4_NL, IQ4_XS), mxfp4_neon.h
// (MXFP4), iq1_tq_neon.h (IQ1_S, IQ1_M, TQ1_0, TQ2_0) and iq23_neon.h (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS,
// IQ3_S) and packed_neon.h (the packed 16-row-group GEMV); every entry they do not set keeps the scalar reference that build_table fills first.
// native/tests/kernel_test.cpp (run under qemu by scripts/test_neon.sh) checks each one against
// that reference.
#if defined(__aarch64__)
#include "cpu/arm/iq1_tq_neon.h"
#include "cpu/arm/iquants_neon.h"
#include "cpu/arm/kquants_neon.h"
#include "cpu/arm/mxfp4_neon.h"
#include "cpu/arm/iq23_neon.h"
#include "cpu/arm/packed_neon.h"
#include "cpu/arm/quants_neon.h"
#endif
#include <initializer_list>

#include "cpu/kernels.h"

namespace ei {

#if defined(__aarch64__)
void fill_kernels_neon(KernelTable& t) {
    fill_kernels_quants_neon(t);
    fill_kernels_kquants_neon(t);
    fill_kernels_iquants_neon(t);
    fill_kernels_mxfp4_neon(t);
    fill_kernels_iq1_tq_neon(t);
    fill_kernels_iq23_neon(t);
    // ggml's tiled k-quant GEMM (the float order of vec_dot_ggml_tiled) runs on x86 only; on ARM it
    // multiplies every batch with its vec_dot, so the NEON table has no tiled order (matmul
    // then uses vec_dot) rather than inheriting the slow scalar one.
    for (uint32_t type : {TYPE_Q2_K, TYPE_Q3_K, TYPE_Q4_K, TYPE_Q5_K, TYPE_Q6_K, TYPE_IQ2_XXS, TYPE_IQ2_XS, TYPE_IQ2_S,
                          TYPE_IQ3_XXS, TYPE_IQ3_S, TYPE_IQ1_S, TYPE_IQ1_M, TYPE_IQ4_XS})
        t.types[type].vec_dot_ggml_tiled = nullptr;
    fill_packed_neon(t);
}

void fill_gemm_packed_fast_neon(KernelTable& t) { fill_packed_fast_neon(t); }
#endif

}  // namespace ei
