// Quantizers of the 32-element block types: ggml's reference (quantize_row_q{4_0,4_1,5_0,5_1,8_0}_ref)
// and, for the 4- and 5-bit types, its imatrix path (quantize_row_q{4_0,4_1,5_0,5_1}_impl).
//
// Per block of 32 floats:
//   q4_0: m = the element of largest magnitude (first one on ties), d = m / -8,
//         q = min(15, trunc(x / d + 8.5))            -> x ~ d * (q - 8)
//   q5_0: as q4_0 with d = m / -16, q = min(31, trunc(x / d + 16.5))
//   q4_1: d = (max - min) / 15, q = min(15, trunc((x - min) / d + 0.5))   -> x ~ d * q + min
//   q5_1: as q4_1 with 31 levels
//   q8_0: d = amax / 127, q = roundf(x / d) (half away from zero)
// "x / d" is x * id with id = 1 / d computed once (0 when d == 0), as ggml does: the rounding of
// the product, not of a quotient, is what the bytes depend on.
#include <cfloat>
#include <cmath>
#include <cstring>

#include "common/fp16.h"
#include "quant/blocks.h"
#include "quant/quantize.h"
#include "quant/quantize_math.h"

namespace ei {
namespace qref {

namespace {

// The signed element of largest magnitude (the first of equal magnitudes).
float signed_absmax(const float* x, int n) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < n; j++) {
        if (amax < std::fabs(x[j])) {
            amax = std::fabs(x[j]);
            max = x[j];
        }
    }
    return max;
}

void min_max(const float* x, int n, float* lo, float* hi) {
    float mn = FLT_MAX, mx = -FLT_MAX;
    for (int j = 0; j < n; j++) {
        if (x[j] < mn) mn = x[j];
        if (x[j] > mx) mx = x[j];
    }
    *lo = mn;
    *hi = mx;
}

// Nibble packing shared by the 4- and 5-bit types: element j low, element j + 16 high.
void pack_nibbles(const uint8_t q[32], uint8_t qs[16]) {
    for (int j = 0; j < 16; j++) qs[j] = (uint8_t)((q[j] & 0x0F) | ((q[j + 16] & 0x0F) << 4));
}

// Fifth bits: bit j of the little-endian uint32 is bit 4 of element j.
void pack_fifth_bits(const uint8_t q[32], uint8_t qh[4]) {
    uint32_t h = 0;
    for (int j = 0; j < 32; j++) h |= (uint32_t)((q[j] >> 4) & 1) << j;
    std::memcpy(qh, &h, 4);
}

// Symmetric types: q = min(qmax, trunc(x * id + offset)), offset = levels/2 + 0.5.
void quantize_symmetric(const float* x, float d, int qmax, float offset, uint8_t q[32]) {
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int j = 0; j < 32; j++) {
        const float v = x[j] * id;
        const int l = (int8_t)(v + offset);
        q[j] = (uint8_t)(l < qmax ? l : qmax);
    }
}

// Types with a minimum: q = min(qmax, trunc((x - min) * id + 0.5)).
void quantize_affine(const float* x, float mn, float d, int qmax, uint8_t q[32]) {
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int j = 0; j < 32; j++) {
        const float v = (x[j] - mn) * id;
        const int l = (int8_t)(v + 0.5f);
        q[j] = (uint8_t)(l < qmax ? l : qmax);
    }
}

// The imatrix fits of one block, weights qw * sqrt(sigma2 + x^2) with qw the block's slice of
// the importance matrix. Symmetric: q in 0..2 nmax - 1, returns d (x ~ d * (q - nmax)).
float fit_symmetric(const float* xb, const float* qw, float sigma2, int nmax, uint8_t q[32]) {
    float w[32];
    int8_t L[32];
    importance_weights(32, xb, qw, sigma2, w);
    const float d = make_qx_quants(32, nmax, xb, L, w);
    std::memcpy(q, L, 32);
    return d;
}

// Affine: q in 0..nmax, returns d and sets *neg_min (x ~ d * q - *neg_min).
float fit_affine(const float* xb, const float* qw, float sigma2, int nmax, uint8_t q[32], float* neg_min) {
    float w[32];
    uint8_t Laux[32];
    importance_weights(32, xb, qw, sigma2, w);
    return make_qkx3_quants(32, nmax, xb, w, q, neg_min, Laux);
}

// The mean square of a row, which every block's imatrix weights include.
float row_sigma2(const float* x, int64_t n) { return sum_of_squares(x, n) / n; }

}  // namespace

void quantize_row_q4_0(const float* x, void* vy, int64_t n) {
    block_q4_0* y = (block_q4_0*)vy;
    for (int64_t i = 0; i < n / QK4_0; i++, x += QK4_0) {
        const float d = signed_absmax(x, QK4_0) / -8;
        uint8_t q[32];
        quantize_symmetric(x, d, 15, 8.5f, q);
        y[i].d = fp32_to_fp16(d);
        pack_nibbles(q, y[i].qs);
    }
}

void quantize_row_q5_0(const float* x, void* vy, int64_t n) {
    block_q5_0* y = (block_q5_0*)vy;
    for (int64_t i = 0; i < n / QK5_0; i++, x += QK5_0) {
        const float d = signed_absmax(x, QK5_0) / -16;
        uint8_t q[32];
        quantize_symmetric(x, d, 31, 16.5f, q);
        y[i].d = fp32_to_fp16(d);
        pack_fifth_bits(q, y[i].qh);
        pack_nibbles(q, y[i].qs);
    }
}

void quantize_row_q4_1(const float* x, void* vy, int64_t n) {
    block_q4_1* y = (block_q4_1*)vy;
    for (int64_t i = 0; i < n / QK4_1; i++, x += QK4_1) {
        float mn, mx;
        min_max(x, QK4_1, &mn, &mx);
        const float d = (mx - mn) / 15;
        uint8_t q[32];
        quantize_affine(x, mn, d, 15, q);
        y[i].d = fp32_to_fp16(d);
        y[i].m = fp32_to_fp16(mn);
        pack_nibbles(q, y[i].qs);
    }
}

void quantize_row_q5_1(const float* x, void* vy, int64_t n) {
    block_q5_1* y = (block_q5_1*)vy;
    for (int64_t i = 0; i < n / QK5_1; i++, x += QK5_1) {
        float mn, mx;
        min_max(x, QK5_1, &mn, &mx);
        const float d = (mx - mn) / 31;
        uint8_t q[32];
        quantize_affine(x, mn, d, 31, q);
        y[i].d = fp32_to_fp16(d);
        y[i].m = fp32_to_fp16(mn);
        pack_fifth_bits(q, y[i].qh);
        pack_nibbles(q, y[i].qs);
    }
}

void quantize_row_q8_0(const float* x, void* vy, int64_t n) {
    block_q8_0* y = (block_q8_0*)vy;
    for (int64_t i = 0; i < n / QK8_0; i++, x += QK8_0) {
        float amax = 0.0f;
        for (int j = 0; j < QK8_0; j++) amax = amax > std::fabs(x[j]) ? amax : std::fabs(x[j]);
        const float d = amax / 127;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = fp32_to_fp16(d);
        for (int j = 0; j < QK8_0; j++) y[i].qs[j] = (int8_t)std::round(x[j] * id);  // half away from zero
    }
}

void quantize_row_q4_0_imatrix(const float* x, void* vy, int64_t n, const float* imatrix) {
    block_q4_0* y = (block_q4_0*)vy;
    const float sigma2 = row_sigma2(x, n);
    for (int64_t i = 0; i < n / QK4_0; i++) {
        uint8_t q[32];
        y[i].d = fp32_to_fp16(fit_symmetric(x + QK4_0 * i, imatrix + QK4_0 * i, sigma2, 8, q));
        pack_nibbles(q, y[i].qs);
    }
}

void quantize_row_q5_0_imatrix(const float* x, void* vy, int64_t n, const float* imatrix) {
    block_q5_0* y = (block_q5_0*)vy;
    const float sigma2 = row_sigma2(x, n);
    for (int64_t i = 0; i < n / QK5_0; i++) {
        uint8_t q[32];
        y[i].d = fp32_to_fp16(fit_symmetric(x + QK5_0 * i, imatrix + QK5_0 * i, sigma2, 16, q));
        pack_fifth_bits(q, y[i].qh);
        pack_nibbles(q, y[i].qs);
    }
}

void quantize_row_q4_1_imatrix(const float* x, void* vy, int64_t n, const float* imatrix) {
    block_q4_1* y = (block_q4_1*)vy;
    const float sigma2 = row_sigma2(x, n);
    for (int64_t i = 0; i < n / QK4_1; i++) {
        uint8_t q[32];
        float neg_min;
        y[i].d = fp32_to_fp16(fit_affine(x + QK4_1 * i, imatrix + QK4_1 * i, sigma2, 15, q, &neg_min));
        y[i].m = fp32_to_fp16(-neg_min);
        pack_nibbles(q, y[i].qs);
    }
}

void quantize_row_q5_1_imatrix(const float* x, void* vy, int64_t n, const float* imatrix) {
    block_q5_1* y = (block_q5_1*)vy;
    const float sigma2 = row_sigma2(x, n);
    for (int64_t i = 0; i < n / QK5_1; i++) {
        uint8_t q[32];
        float neg_min;
        y[i].d = fp32_to_fp16(fit_affine(x + QK5_1 * i, imatrix + QK5_1 * i, sigma2, 31, q, &neg_min));
        y[i].m = fp32_to_fp16(-neg_min);
        pack_fifth_bits(q, y[i].qh);
        pack_nibbles(q, y[i].qs);
    }
}

}  // namespace qref
}  // namespace ei
