// Quantizers of IQ4_NL and IQ4_XS (ggml's quantize_iq4_nl / quantize_iq4_xs, which llama-quantize
// runs, with or without an importance matrix; both go through quantize_row_iq4_nl_impl with 7
// tries a block).
//
// Per block of 32 the scale is searched: start from d = -max / values[0] (max the signed element
// of largest magnitude, so the extreme element maps to the table's -127 end), take the
// least-squares scale for the indices it gives, then try the 15 scales (itry + values[0]) / max,
// itry = -7..7, keeping the one maximising (sum w x q)^2 / (sum w q^2), weights w = x^2 (or, with
// an importance matrix, qw * sqrt(sigma2 + x^2)). IQ4_NL stores that scale as fp16; IQ4_XS
// quantizes its 8 block scales to 6 bits against d = -max_scale / 32 and re-picks every index
// with the scale it will be decoded with.
//
// Every float operation is written in ggml's order, unfused (this unit is built for the baseline
// target), because the chosen indices depend on exact comparisons.
#include <cmath>
#include <cstring>

#include "common/fp16.h"
#include "quant/blocks.h"
#include "quant/quantize.h"
#include "quant/quantize_math.h"

namespace ei {
namespace qref {

namespace {

constexpr int kTries = 7;

// quantize_row_iq4_nl_impl for one super-block of `n` elements (32 for IQ4_NL, 256 for IQ4_XS)
// in blocks of 32. Writes the fp16 scale to *dh, the nibbles to q4 (n / 2 bytes) and, when
// n > 32, the 6-bit block scales to scales_h / scales_l.
void quantize_iq4_super_block(int n, const float* x, const float* quant_weights, uint16_t* dh, uint8_t* q4,
                              uint16_t* scales_h, uint8_t* scales_l) {
    constexpr int kBlock = 32;
    const int8_t* values = kIq4nlValues;
    float scales[QK_K / kBlock];
    float weight[kBlock];
    uint8_t L[QK_K];

    float sigma2 = sum_of_squares(x, n);
    sigma2 *= 2.f / n;

    std::memset(q4, 0, n / 2);
    *dh = fp32_to_fp16(0.f);

    float max_scale = 0, amax_scale = 0;
    for (int ib = 0; ib < n / kBlock; ++ib) {
        const float* xb = x + ib * kBlock;
        uint8_t* Lb = L + ib * kBlock;
        if (quant_weights) {
            importance_weights(kBlock, xb, quant_weights + ib * kBlock, sigma2, weight);
        } else {
            for (int j = 0; j < kBlock; ++j) weight[j] = xb[j] * xb[j];
        }
        float amax = 0, max = 0;
        for (int j = 0; j < kBlock; ++j) {
            const float ax = std::fabs(xb[j]);
            if (ax > amax) {
                amax = ax;
                max = xb[j];
            }
        }
        if (amax < kGroupMaxEps) {
            scales[ib] = 0;
            continue;
        }
        float d = -max / values[0];
        float id = 1 / d;
        float sumqx = 0, sumq2 = 0;
        for (int j = 0; j < kBlock; ++j) {
            const float al = id * xb[j];
            const int l = best_index_int8(16, values, al);
            Lb[j] = (uint8_t)l;
            const float q = values[l];
            const float w = weight[j];
            sumqx += w * q * xb[j];
            sumq2 += w * q * q;
        }
        d = sumq2 > 0 ? sumqx / sumq2 : 0.f;
        float best = d * sumqx;
        for (int itry = -kTries; itry <= kTries; ++itry) {
            id = (itry + values[0]) / max;
            sumqx = sumq2 = 0;
            for (int j = 0; j < kBlock; ++j) {
                const float al = id * xb[j];
                const int l = best_index_int8(16, values, al);
                const float q = values[l];
                const float w = weight[j];
                sumqx += w * q * xb[j];
                sumq2 += w * q * q;
            }
            if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
                d = sumqx / sumq2;
                best = d * sumqx;
            }
        }
        scales[ib] = d;
        const float abs_d = std::fabs(d);
        if (abs_d > amax_scale) {
            amax_scale = abs_d;
            max_scale = d;
        }
    }

    if (n > kBlock) {
        *scales_h = 0;
        const float d = -max_scale / 32;
        *dh = fp32_to_fp16(d);
        const float id = d != 0.f ? 1 / d : 0.f;
        for (int ib = 0; ib < n / kBlock; ++ib) {
            int l = nearest_int(id * scales[ib]);
            l = l < -32 ? -32 : (l > 31 ? 31 : l);
            const float dl = d * l;
            const float idl = dl != 0.f ? 1 / dl : 0.f;
            uint8_t* Lb = L + ib * kBlock;
            const float* xb = x + ib * kBlock;
            for (int j = 0; j < kBlock; ++j) Lb[j] = (uint8_t)best_index_int8(16, values, idl * xb[j]);
            l += 32;
            if (ib % 2 == 0) scales_l[ib / 2] = (uint8_t)(l & 15);
            else scales_l[ib / 2] |= (uint8_t)((l & 15) << 4);
            *scales_h |= (uint16_t)((l >> 4) << 2 * (ib % 8));
        }
    } else {
        *dh = fp32_to_fp16(scales[0]);
        const float id = scales[0] != 0.f ? 1 / scales[0] : 0;
        for (int j = 0; j < n; ++j) L[j] = (uint8_t)best_index_int8(16, values, id * x[j]);
    }

    for (int i = 0; i < n / kBlock; ++i)
        for (int j = 0; j < 16; ++j) q4[16 * i + j] = (uint8_t)(L[32 * i + j] | L[32 * i + 16 + j] << 4);
}

}  // namespace

void quantize_row_iq4_nl(const float* x, void* vy, int64_t n) { quantize_row_iq4_nl_imatrix(x, vy, n, nullptr); }

void quantize_row_iq4_xs(const float* x, void* vy, int64_t n) { quantize_row_iq4_xs_imatrix(x, vy, n, nullptr); }

void quantize_row_iq4_nl_imatrix(const float* x, void* vy, int64_t n, const float* imatrix) {
    block_iq4_nl* y = (block_iq4_nl*)vy;
    for (int64_t i = 0; i < n / QK4_NL; ++i)
        quantize_iq4_super_block(QK4_NL, x + i * QK4_NL, imatrix ? imatrix + i * QK4_NL : nullptr, &y[i].d, y[i].qs,
                                 nullptr, nullptr);
}

void quantize_row_iq4_xs_imatrix(const float* x, void* vy, int64_t n, const float* imatrix) {
    block_iq4_xs* y = (block_iq4_xs*)vy;
    for (int64_t i = 0; i < n / QK_K; ++i)
        quantize_iq4_super_block(QK_K, x + i * QK_K, imatrix ? imatrix + i * QK_K : nullptr, &y[i].d, y[i].qs,
                                 &y[i].scales_h, y[i].scales_l);
}

}  // namespace qref
}  // namespace ei
