// NEON (+dotprod) kernels for AArch64. Not written yet: the scalar reference entries that
// dispatch.cpp fills first stay in place, so selecting "neon" is correct, just not fast.
// TODO(neon): vec_dot for Q4_0/Q4_1/Q5_0/Q5_1/Q8_0 with vdotq_s32, F16 with fp16 FMA,
// and the Q8_0/Q8_1 quantizers (must give the scalar reference's bytes).
#include "cpu/kernels.h"

namespace ei {

#if defined(__aarch64__)
void fill_kernels_neon(KernelTable& t) { (void)t; }
#endif

}  // namespace ei
