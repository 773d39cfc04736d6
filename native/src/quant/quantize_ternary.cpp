// Reference quantizers of the ternary types TQ1_0 and TQ2_0 (ggml's quantize_row_tq1_0_ref and
// quantize_row_tq2_0_ref, which quantize_tq1_0 / quantize_tq2_0 and so llama-quantize run; they take
// no importance matrix).
//
// Per super-block of 256: d = amax (the largest magnitude), each element t = lroundf(x / d) + 1 in
// {0, 1, 2} (x * (1 / d), rounded half away from zero; an all-zero block gives d = 0 and t = 1).
// TQ2_0 stores t in 2 bits; TQ1_0 packs five digits into a byte as the base-3 number v (the first
// element most significant), then stores ceil(v * 256 / 243), the fraction v / 243 in 8 bits, so the
// kernels read digit k by multiplying by 3^k (quant/blocks.h). The arithmetic is ggml's, in uint8_t
// where its is (a digit out of range wraps as there).
#include <cmath>
#include <cstdint>

#include "common/fp16.h"
#include "quant/blocks.h"
#include "quant/quantize.h"

namespace ei {
namespace qref {

namespace {

// d = amax with ggml's MAX(a, b) = a > b ? a : b (a NaN element is skipped unless it comes last);
// returns 1 / d, or 0 for an all-zero block.
float ternary_scale(const float* x, uint16_t* d_out) {
    float amax = 0.0f;
    for (int j = 0; j < QK_K; ++j) {
        const float v = std::fabs(x[j]);
        amax = amax > v ? amax : v;
    }
    *d_out = fp32_to_fp16(amax);
    return amax != 0.0f ? 1.0f / amax : 0.0f;
}

inline int trit(float x, float id) { return (int)(lroundf(x * id) + 1); }  // -1, 0, 1 -> 0, 1, 2

// The base-3 number of `count` digits (x[0], x[stride], ...; first most significant), as a
// fraction of 3^5 in 8 bits, rounded up.
uint8_t pack_trits(const float* x, int stride, int count, float id) {
    uint8_t v = 0;
    for (int k = 0; k < count; ++k) v = (uint8_t)(v * 3 + trit(x[k * stride], id));
    for (int k = count; k < 5; ++k) v = (uint8_t)(v * 3);  // fewer than 5 digits: shift them to the top
    return (uint8_t)(((uint16_t)v * 256 + (243 - 1)) / 243);
}

}  // namespace

void quantize_row_tq1_0(const float* x, void* vy, int64_t n) {
    block_tq1_0* y = (block_tq1_0*)vy;
    for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
        const float id = ternary_scale(x, &y[i].d);
        for (int m = 0; m < 32; ++m) y[i].qs[m] = pack_trits(x + m, 32, 5, id);             // elements 32k + m
        for (int m = 0; m < 16; ++m) y[i].qs[32 + m] = pack_trits(x + 160 + m, 16, 5, id);  // 160 + 16k + m
        for (int m = 0; m < 4; ++m) y[i].qh[m] = pack_trits(x + 240 + m, 4, 4, id);         // 240 + 4k + m
    }
}

void quantize_row_tq2_0(const float* x, void* vy, int64_t n) {
    block_tq2_0* y = (block_tq2_0*)vy;
    for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
        const float id = ternary_scale(x, &y[i].d);
        for (int c = 0; c < 2; ++c)
            for (int m = 0; m < 32; ++m) {
                uint8_t q = 0;
                for (int l = 0; l < 4; ++l) q = (uint8_t)(q + ((trit(x[128 * c + 32 * l + m], id) & 3) << 2 * l));
                y[i].qs[32 * c + m] = q;
            }
    }
}

}  // namespace qref
}  // namespace ei
