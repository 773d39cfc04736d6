// AVX-512 (F/BW/VL/DQ + VNNI) kernels. For now these are the 256-bit kernels of quants_256.h
// compiled with this unit's flags, which turns each block's maddubs+madd pair into one VNNI
// dpbusd; the integer sums, and so the results, are identical to the AVX2 unit's, and to a
// llama.cpp build with -march=native on an AVX-512 VNNI machine (ggml uses the same 256-bit
// code there).
// TODO(perf): 512-bit kernels processing two blocks per register (changes the float
// summation order relative to llama.cpp; measure before and after).
#include "cpu/x86/quants_256.h"
#include "cpu/x86/iquants_256.h"
#include "cpu/x86/kquants_256.h"
#include "cpu/x86/mxfp4_256.h"
#include "cpu/x86/iq1_tq_256.h"
#include "cpu/x86/iq23_256.h"
#include "cpu/x86/gemm_float_256.h"

namespace ei {

void fill_kernels_avx512(KernelTable& t) {
    fill_kernels_256(t);
    fill_kernels_kquants_256(t);
    fill_kernels_iquants_256(t);
    fill_kernels_mxfp4_256(t);
    fill_kernels_iq1_tq_256(t);
    fill_kernels_iq23_256(t);
    fill_gemm_float_256(t);
}

}  // namespace ei
