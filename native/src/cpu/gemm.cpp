// Scalar references of the tiled matmul kernels (GemmFn, cpu/kernels.h): one vec_dot of the
// scalar table per output, so they are bit-identical to it by construction. They are what the
// ISA kernels (cpu/x86/gemm_avx512.cpp) are tested against; the forward pass on the scalar
// table gains nothing from them and matmul() only uses a gemm entry when the ISA unit set it.
#include "cpu/kernels.h"
#include "quant/ref.h"

namespace ei {

namespace {

template <VecDotFn dot>
void gemm_ref(int64_t k, int64_t m, int64_t n, const void* w, size_t w_stride, const void* a, size_t a_stride,
              float* y, int64_t ldy) {
    const uint8_t* wb = static_cast<const uint8_t*>(w);
    const uint8_t* ab = static_cast<const uint8_t*>(a);
    for (int64_t c = 0; c < n; ++c)
        for (int64_t r = 0; r < m; ++r) dot(k, &y[c * ldy + r], wb + r * w_stride, ab + c * a_stride);
}

}  // namespace

void fill_gemm_scalar(KernelTable& t) {
    t.types[TYPE_Q4_0].gemm = gemm_ref<ref::vec_dot_q4_0_q8_0>;
    t.types[TYPE_Q4_1].gemm = gemm_ref<ref::vec_dot_q4_1_q8_1>;
    t.types[TYPE_Q5_0].gemm = gemm_ref<ref::vec_dot_q5_0_q8_0>;
    t.types[TYPE_Q5_1].gemm = gemm_ref<ref::vec_dot_q5_1_q8_1>;
    t.types[TYPE_Q8_0].gemm = gemm_ref<ref::vec_dot_q8_0_q8_0>;
}

}  // namespace ei
