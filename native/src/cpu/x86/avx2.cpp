// AVX2 + FMA + F16C kernels (compiled with -mavx2 -mfma -mf16c; only called when dispatch.cpp
// has checked that the CPU and OS support them). The kernels themselves live in quants_256.h,
// shared with the AVX-512 unit.
#include "cpu/x86/quants_256.h"
#include "cpu/x86/iquants_256.h"
#include "cpu/x86/kquants_256.h"
#include "cpu/x86/mxfp4_256.h"
#include "cpu/x86/iq1_tq_256.h"
#include "cpu/x86/iq23_256.h"
#include "cpu/x86/gemm_float_256.h"

namespace ei {

void fill_kernels_avx2(KernelTable& t) {
    fill_kernels_256(t);
    fill_kernels_kquants_256(t);
    fill_kernels_iquants_256(t);
    fill_kernels_mxfp4_256(t);
    fill_kernels_iq1_tq_256(t);
    fill_kernels_iq23_256(t);
    fill_gemm_float_256(t);
}

}  // namespace ei
