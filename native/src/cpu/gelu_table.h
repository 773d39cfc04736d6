// ggml's F16 GELU lookup table and the GEGLU loop that reads it. ggml-cpu defines GGML_GELU_FP16,
// so its f32 GELU ops never evaluate the formula per element: the input is rounded to F16 and
// looked up in a table of gelu_tanh over every F16 value, built once at start-up by
// ggml_cpu_init with
//     0.5f*x*(1.0f + tanhf(SQRT_2_OVER_PI*x*(1.0f + GELU_COEF_A*x*x)))
// compiled as C with GCC's default contraction. Where the target has FMA, GCC fuses
// `1.0f + (GELU_COEF_A*x)*x` into one fma; that is the only contractible spot. Each ISA unit
// instantiates the table with its own inner term (Fused = true for FMA targets), so a table
// entry can differ by one F16 rounding between units, exactly as between ggml builds.
//
// Anonymous namespace: each translation unit gets its own copy (see cpu/attn_online.h).
#pragma once
#include <cmath>
#include <cstdint>
#include <vector>

#include "common/fp16.h"

namespace ei {
namespace {

template <bool Fused>
const uint16_t* gelu_f16_table() {
    static const std::vector<uint16_t> table = [] {
        constexpr float kCoefA = 0.044715f;
        constexpr float kSqrt2OverPi = 0.79788456080286535587989211986876f;
        // One entry of padding: a vector gather reads 4 bytes per index, the entry and the next.
        std::vector<uint16_t> t((1 << 16) + 1, 0);
        for (uint32_t i = 0; i < (1u << 16); ++i) {
            const float x = fp16_to_fp32((uint16_t)i);
            const float inner = Fused ? std::fma(kCoefA * x, x, 1.0f) : 1.0f + kCoefA * x * x;
            t[i] = fp32_to_fp16(0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * x * inner)));
        }
        return t;
    }();
    return table.data();
}

// ggml_vec_geglu_f32 (GGML_GELU_FP16 variant): a plain scalar loop in every ggml build.
inline void geglu_with_table(const uint16_t* table, int64_t n, const float* gate, const float* up, float* out) {
    for (int64_t i = 0; i < n; ++i) {
        const float x = gate[i];
        if (x <= -10.0f) out[i] = 0.0f;
        else if (x >= 10.0f) out[i] = x * up[i];
        else out[i] = fp16_to_fp32(table[fp32_to_fp16(x)]) * up[i];
    }
}

}  // namespace
}  // namespace ei
