// Half -> float by table lookup, for the hot loops of the x86 dot products.
//
// Why a table when F16C has an instruction: per 32-element block the q4_1/q5_1 dot products
// convert four halves (d_x, m_x, d_y, s_y) and q8_0/q5_0 two, and on cores where VCVTPH2PS runs on
// a single FP pipe (AMD Zen 1 splits it into two µops there) those conversions, not the memory
// stream, set the decode speed (a profile: docs/PERFORMANCE.md). A lookup is two
// integer-side µops (load the half, load the float) and keeps the FP pipes for the dot product.
// It is what ggml-cpu does on x86 (ggml_table_f32_f16). The values are fp16_to_fp32's, exact, so
// the results do not change.
#pragma once
#include <cstdint>

namespace ei {

// g_fp16_to_fp32[h] == fp16_to_fp32(h) for every half h; filled before main (fp16_table.cpp).
extern float g_fp16_to_fp32[1 << 16];

static inline float fp16_to_fp32_lookup(uint16_t h) { return g_fp16_to_fp32[h]; }

}  // namespace ei
