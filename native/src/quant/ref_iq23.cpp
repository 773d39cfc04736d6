// Scalar reference kernels of the 2- and 3-bit lattice i-quants (IQ2_XXS, IQ2_XS, IQ2_S,
// IQ3_XXS, IQ3_S; layouts in quant/blocks.h, grids in quant/iq_grids.h), against Q8_K
// activations: ggml-cpu's vec_dot_type for all five.
//
// Each reads one 32-element sub-block at a time into signed integers (grid magnitude times sign,
// |q| <= 62) and the 4-bit scales of its two halves. Dequantization is bit-identical with
// gguf.quants.dequantize (and ggml's dequantize_row_*): x = dl * q, where dl is the half's scale
//   IQ2_*:   d * (0.5 + ls) * 0.25        IQ3_XXS: d * (0.5 + ls) * 0.5        IQ3_S: d * (1 + 2 ls)
// (ggml writes dl * grid * sign; a sign flip commutes with rounding, so the bits are the same).
// The dot product is ggml's generic order: per super-block the exact integer
//   bsum = sum over halves of (2 ls + 1) * sum(q * q8),
// then sumf += (d_x * d_y) * bsum, and at the end s = c * sumf with c = 1/8 (IQ2_*), 1/4
// (IQ3_XXS), 1 (IQ3_S): (2 ls + 1) * c is the scale above without d. The ISA kernels have the
// same integers and ggml's x86 / ARM float orders (cpu/x86/iq23_256.h, cpu/arm/iq23_neon.h).
// The *_tiled functions are the order of ggml-cpu's tiled GEMM (tiled.cpp), which llama.cpp runs
// on these weights on x86 for batches of 8 rows and more: the same bsum per super-block, then
//   r = (float)bsum * (d_x * c),  acc = fma(r, d_y, acc)
// (c folded into the weight's scale; the epilogue's add contracted, as for the k-quants there).
#include <cmath>
#include <cstring>

#include "common/fp16.h"
#include "quant/blocks.h"
#include "quant/iq_grids.h"
#include "quant/ref.h"

namespace ei {
namespace ref {

namespace {

// One sub-block of 32 decoded: element j is q[j]; ls[0] scales elements 0..15, ls[1] 16..31.
struct SubBlock {
    int8_t q[32];
    int ls[2];
};

uint32_t load_u32(const void* p) {
    uint32_t v;
    std::memcpy(&v, p, 4);
    return v;
}

// n magnitudes of a grid point (byte j is element j), signed by bits 0..n-1 of `signs`.
void put_group(int8_t* q, uint64_t point, unsigned signs, int n) {
    for (int j = 0; j < n; ++j) {
        const int m = (int)(point >> 8 * j & 0xff);
        q[j] = (int8_t)(signs >> j & 1 ? -m : m);
    }
}

void decode(const block_iq2_xxs& b, int ib, SubBlock& s) {
    const uint32_t idx = load_u32(b.qs + 4 * ib), meta = load_u32(b.qs + 4 * ib + 2);
    for (int l = 0; l < 4; ++l)
        put_group(s.q + 8 * l, kIq2xxsGrid[idx >> 8 * l & 0xff], kIqSigns.bits[meta >> 7 * l & 127], 8);
    s.ls[0] = s.ls[1] = (int)(meta >> 28);
}

void decode(const block_iq2_xs& b, int ib, SubBlock& s) {
    for (int l = 0; l < 4; ++l) {
        const unsigned v = b.qs[4 * ib + l];
        put_group(s.q + 8 * l, kIq2xsGrid[v & 511], kIqSigns.bits[v >> 9], 8);
    }
    s.ls[0] = b.scales[ib] & 15;
    s.ls[1] = b.scales[ib] >> 4;
}

void decode(const block_iq2_s& b, int ib, SubBlock& s) {
    for (int l = 0; l < 4; ++l) {
        const int g = 4 * ib + l;
        put_group(s.q + 8 * l, kIq2sGrid[b.qs[g] | (b.qh[ib] >> 2 * l & 3) << 8], b.qs[QK_K / 8 + g], 8);
    }
    s.ls[0] = b.scales[ib] & 15;
    s.ls[1] = b.scales[ib] >> 4;
}

void decode(const block_iq3_xxs& b, int ib, SubBlock& s) {
    const uint32_t meta = load_u32(b.qs + QK_K / 4 + 4 * ib);
    for (int l = 0; l < 4; ++l) {
        const unsigned signs = kIqSigns.bits[meta >> 7 * l & 127];
        put_group(s.q + 8 * l, kIq3xxsGrid[b.qs[8 * ib + 2 * l]], signs, 4);
        put_group(s.q + 8 * l + 4, kIq3xxsGrid[b.qs[8 * ib + 2 * l + 1]], signs >> 4, 4);
    }
    s.ls[0] = s.ls[1] = (int)(meta >> 28);
}

void decode(const block_iq3_s& b, int ib, SubBlock& s) {
    for (int k = 0; k < 8; ++k)
        put_group(s.q + 4 * k, kIq3sGrid[b.qs[8 * ib + k] | (b.qh[ib] >> k & 1) << 8], b.signs[4 * ib + k / 2] >> 4 * (k % 2),
                  4);
    s.ls[0] = s.ls[1] = b.scales[ib / 2] >> 4 * (ib % 2) & 15;
}

// The float scale of a half whose 4-bit scale is ls, per type (the header's formulas).
float iq2_scale(float d, int ls) { return d * (0.5f + (float)ls) * 0.25f; }
float iq3_xxs_scale(float d, int ls) { return d * (0.5f + (float)ls) * 0.5f; }
float iq3_s_scale(float d, int ls) { return d * (float)(1 + 2 * ls); }

template <class Block, float (*half_scale)(float, int)>
void to_float_iq23(const void* src, float* dst, int64_t n) {
    const Block* x = (const Block*)src;
    SubBlock s;
    for (int64_t i = 0; i < n / QK_K; ++i) {
        const float d = fp16_to_fp32(x[i].d);
        for (int ib = 0; ib < QK_K / 32; ++ib, dst += 32) {
            decode(x[i], ib, s);
            for (int j = 0; j < 32; ++j) dst[j] = half_scale(d, s.ls[j / 16]) * (float)s.q[j];
        }
    }
}

// A super-block's exact integer: sum over its halves of (2 ls + 1) * sum(q * q8).
template <class Block>
int32_t block_sum(const Block& x, const block_q8_K& y) {
    SubBlock sb;
    int32_t bsum = 0;
    for (int ib = 0; ib < QK_K / 32; ++ib) {
        decode(x, ib, sb);
        for (int h = 0; h < 2; ++h) {
            int32_t sumi = 0;
            for (int j = 16 * h; j < 16 * h + 16; ++j) sumi += sb.q[j] * y.qs[32 * ib + j];
            bsum += (2 * sb.ls[h] + 1) * sumi;
        }
    }
    return bsum;
}

// c: the constant the integer scales 2 ls + 1 are short of (see the header).
template <class Block>
void vec_dot_iq23(int64_t n, float* s, const void* vx, const void* vy, float c) {
    const Block* x = (const Block*)vx;
    const block_q8_K* y = (const block_q8_K*)vy;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QK_K; ++i) sumf += fp16_to_fp32(x[i].d) * y[i].d * (float)block_sum(x[i], y[i]);
    *s = c * sumf;
}

// ggml's tiled GEMM order (the header).
template <class Block>
void vec_dot_iq23_tiled(int64_t n, float* s, const void* vx, const void* vy, float c) {
    const Block* x = (const Block*)vx;
    const block_q8_K* y = (const block_q8_K*)vy;
    float acc = 0.0f;
    for (int64_t i = 0; i < n / QK_K; ++i)
        acc = std::fma((float)block_sum(x[i], y[i]) * (fp16_to_fp32(x[i].d) * c), y[i].d, acc);
    *s = acc;
}

}  // namespace

void to_float_iq2_xxs(const void* src, float* dst, int64_t n) { to_float_iq23<block_iq2_xxs, iq2_scale>(src, dst, n); }
void to_float_iq2_xs(const void* src, float* dst, int64_t n) { to_float_iq23<block_iq2_xs, iq2_scale>(src, dst, n); }
void to_float_iq2_s(const void* src, float* dst, int64_t n) { to_float_iq23<block_iq2_s, iq2_scale>(src, dst, n); }
void to_float_iq3_xxs(const void* src, float* dst, int64_t n) {
    to_float_iq23<block_iq3_xxs, iq3_xxs_scale>(src, dst, n);
}
void to_float_iq3_s(const void* src, float* dst, int64_t n) { to_float_iq23<block_iq3_s, iq3_s_scale>(src, dst, n); }

void vec_dot_iq2_xxs_q8_K(int64_t n, float* s, const void* x, const void* y) {
    vec_dot_iq23<block_iq2_xxs>(n, s, x, y, 0.125f);
}
void vec_dot_iq2_xs_q8_K(int64_t n, float* s, const void* x, const void* y) {
    vec_dot_iq23<block_iq2_xs>(n, s, x, y, 0.125f);
}
void vec_dot_iq2_s_q8_K(int64_t n, float* s, const void* x, const void* y) { vec_dot_iq23<block_iq2_s>(n, s, x, y, 0.125f); }
void vec_dot_iq3_xxs_q8_K(int64_t n, float* s, const void* x, const void* y) {
    vec_dot_iq23<block_iq3_xxs>(n, s, x, y, 0.25f);
}
void vec_dot_iq3_s_q8_K(int64_t n, float* s, const void* x, const void* y) { vec_dot_iq23<block_iq3_s>(n, s, x, y, 1.0f); }

void vec_dot_iq2_xxs_q8_K_tiled(int64_t n, float* s, const void* x, const void* y) {
    vec_dot_iq23_tiled<block_iq2_xxs>(n, s, x, y, 0.125f);
}
void vec_dot_iq2_xs_q8_K_tiled(int64_t n, float* s, const void* x, const void* y) {
    vec_dot_iq23_tiled<block_iq2_xs>(n, s, x, y, 0.125f);
}
void vec_dot_iq2_s_q8_K_tiled(int64_t n, float* s, const void* x, const void* y) {
    vec_dot_iq23_tiled<block_iq2_s>(n, s, x, y, 0.125f);
}
void vec_dot_iq3_xxs_q8_K_tiled(int64_t n, float* s, const void* x, const void* y) {
    vec_dot_iq23_tiled<block_iq3_xxs>(n, s, x, y, 0.25f);
}
void vec_dot_iq3_s_q8_K_tiled(int64_t n, float* s, const void* x, const void* y) {
    vec_dot_iq23_tiled<block_iq3_s>(n, s, x, y, 1.0f);
}

}  // namespace ref
}  // namespace ei
