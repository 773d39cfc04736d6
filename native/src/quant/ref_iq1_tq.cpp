// Scalar reference kernels of the 1-bit i-quants (IQ1_S, IQ1_M: groups of 8 values from a lattice of
// ternary octets, plus a +-1/8 shift per group) and the ternary types (TQ1_0: base-3 digits five to
// a byte; TQ2_0: 2-bit digits), all 256-element super-blocks against Q8_K activations (ggml-cpu's
// vec_dot_type for each of them).
//
// Dequantization is bit-identical with gguf.quants.dequantize (and ggml's dequantize_row_*):
//   iq1_s, iq1_m:  x = (d * (2s + 1)) * (g + delta), the scale product rounded first, g + delta exact
//   tq1_0, tq2_0:  x = (t - 1) * d
// The dot products form exact integer sums per super-block and combine them in float in ggml's
// generic order (ggml-cpu/quants.c, the *_generic functions):
//   iq1_s:  s += (d_x * d_y) * (sum_i s_i * (g . q) + 1/8 * sum_i s_i * sign_i * (sum of q over i))
//   iq1_m:  the same, with a scale per half sub-block and a delta sign per group of 8
//   tq1_0:  s += (float)sum((t - 1) * q) * (d_x * d_y)
//   tq2_0:  s += (float)sum((t - 1) * q) * (d_y * d_x)
// The ISA kernels (cpu/x86/iq1_tq_256.h, cpu/arm/iq1_tq_neon.h) take ggml's x86 / ARM orders, so
// they differ from these by float order only.
// The *_tiled functions (IQ1_S, IQ1_M only: ggml's tiled GEMM has no ternary types) are the order
// of ggml-cpu's tiled GEMM (tiled.cpp), which llama.cpp runs on x86 for batches of 8 rows and
// more. It unpacks each value as 8 g + delta sign (an integer) and folds the 1/8 into d_x, so per
// super-block the exact integer is 8 sumi + sumi_delta (sums as above), and
//   r = (float)(8 sumi + sumi_delta) * (d_x * 1/8),  acc = fma(r, d_y, acc)
// (the epilogue's add contracted, as for the k-quants: cpu/x86/kquants_256.h). Integer ranges: an IQ1 super-block's sums stay below
// 8 * 15 * 32 * 128 < 2^24, so their conversions to float are exact, as in ggml.
#include <cmath>
#include <cstring>

#include "common/fp16.h"
#include "quant/blocks.h"
#include "quant/iq1_grids.h"
#include "quant/ref.h"

namespace ei {
namespace ref {

namespace {

// The 8 values of grid entry `index` (11 bits), element j in byte j.
inline const int8_t* iq1_group(int index) { return (const int8_t*)&kIq1sGrid[index]; }

// IQ1_S: the grid index of group l (0..3) of sub-block ib, its scale 2s + 1, its delta sign.
inline int iq1_s_index(const block_iq1_s& b, int ib, int l) { return b.qs[4 * ib + l] | ((b.qh[ib] >> 3 * l) & 7) << 8; }
inline int iq1_s_scale(const block_iq1_s& b, int ib) { return 2 * ((b.qh[ib] >> 12) & 7) + 1; }
inline int iq1_s_sign(const block_iq1_s& b, int ib) { return b.qh[ib] & 0x8000 ? -1 : 1; }

// IQ1_M: group k (0..31) has its high index bits and delta sign in nibble k % 2 of qh[k / 2]; half
// sub-block h (0..15) its 3-bit scale at bits 3 (h % 4) of scale word h / 4; d is the words' top
// nibbles.
inline void iq1_m_words(const block_iq1_m& b, uint16_t sc[4]) { std::memcpy(sc, b.scales, sizeof b.scales); }
inline int iq1_m_index(const block_iq1_m& b, int k) { return b.qs[k] | ((b.qh[k / 2] >> 4 * (k % 2)) & 7) << 8; }
inline int iq1_m_sign(const block_iq1_m& b, int k) { return (b.qh[k / 2] >> 4 * (k % 2)) & 8 ? -1 : 1; }
inline int iq1_m_scale(const uint16_t sc[4], int h) { return 2 * ((sc[h / 4] >> 3 * (h % 4)) & 7) + 1; }
inline float iq1_m_d(const uint16_t sc[4]) {
    return fp16_to_fp32((uint16_t)((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000)));
}

// The 256 ternary values (t - 1, in -1..1) of a TQ1_0 / TQ2_0 block in element order.
void tq1_0_values(const block_tq1_0& b, int8_t v[QK_K]) {
    static constexpr uint8_t kPow3[5] = {1, 3, 9, 27, 81};
    // Digit k of a byte: multiplying by 3^k shifts the fixed-point fraction left by k digits (mod
    // 256); the top digit is then (frac * 3) >> 8.
    auto digit = [](uint8_t byte, int k) { return (int)(((uint16_t)(uint8_t)(byte * kPow3[k]) * 3) >> 8) - 1; };
    for (int k = 0; k < 5; ++k)
        for (int m = 0; m < 32; ++m) v[32 * k + m] = (int8_t)digit(b.qs[m], k);
    for (int k = 0; k < 5; ++k)
        for (int m = 0; m < 16; ++m) v[160 + 16 * k + m] = (int8_t)digit(b.qs[32 + m], k);
    for (int k = 0; k < 4; ++k)
        for (int m = 0; m < 4; ++m) v[240 + 4 * k + m] = (int8_t)digit(b.qh[m], k);
}

void tq2_0_values(const block_tq2_0& b, int8_t v[QK_K]) {
    for (int c = 0; c < 2; ++c)
        for (int l = 0; l < 4; ++l)
            for (int m = 0; m < 32; ++m) v[128 * c + 32 * l + m] = (int8_t)(((b.qs[32 * c + m] >> 2 * l) & 3) - 1);
}

int dot_i8(const int8_t* a, const int8_t* b, int n) {
    int sum = 0;
    for (int j = 0; j < n; ++j) sum += a[j] * b[j];
    return sum;
}

}  // namespace

void to_float_iq1_s(const void* src, float* dst, int64_t n) {
    const block_iq1_s* x = (const block_iq1_s*)src;
    for (int64_t i = 0; i < n / QK_K; ++i) {
        const float d = fp16_to_fp32(x[i].d);
        for (int ib = 0; ib < QK_K / 32; ++ib) {
            const float dl = d * (float)iq1_s_scale(x[i], ib);
            const float delta = (float)iq1_s_sign(x[i], ib) * kIq1Delta;
            for (int l = 0; l < 4; ++l, dst += 8) {
                const int8_t* g = iq1_group(iq1_s_index(x[i], ib, l));
                for (int j = 0; j < 8; ++j) dst[j] = dl * ((float)g[j] + delta);
            }
        }
    }
}

void to_float_iq1_m(const void* src, float* dst, int64_t n) {
    const block_iq1_m* x = (const block_iq1_m*)src;
    for (int64_t i = 0; i < n / QK_K; ++i) {
        uint16_t sc[4];
        iq1_m_words(x[i], sc);
        const float d = iq1_m_d(sc);
        for (int k = 0; k < QK_K / 8; ++k, dst += 8) {
            const float dl = d * (float)iq1_m_scale(sc, k / 2);
            const float delta = (float)iq1_m_sign(x[i], k) * kIq1Delta;
            const int8_t* g = iq1_group(iq1_m_index(x[i], k));
            for (int j = 0; j < 8; ++j) dst[j] = dl * ((float)g[j] + delta);
        }
    }
}

void to_float_tq1_0(const void* src, float* dst, int64_t n) {
    const block_tq1_0* x = (const block_tq1_0*)src;
    int8_t v[QK_K];
    for (int64_t i = 0; i < n / QK_K; ++i, dst += QK_K) {
        const float d = fp16_to_fp32(x[i].d);
        tq1_0_values(x[i], v);
        for (int j = 0; j < QK_K; ++j) dst[j] = (float)v[j] * d;
    }
}

void to_float_tq2_0(const void* src, float* dst, int64_t n) {
    const block_tq2_0* x = (const block_tq2_0*)src;
    int8_t v[QK_K];
    for (int64_t i = 0; i < n / QK_K; ++i, dst += QK_K) {
        const float d = fp16_to_fp32(x[i].d);
        tq2_0_values(x[i], v);
        for (int j = 0; j < QK_K; ++j) dst[j] = (float)v[j] * d;
    }
}

namespace {

// A super-block's two exact integers: sumi = sum s * (g . q), delta = sum s * sign * (sum of q).
struct Iq1Sums {
    int sumi = 0, delta = 0;
};

Iq1Sums iq1_s_sums(const block_iq1_s& x, const block_q8_K& y) {
    Iq1Sums r;
    for (int ib = 0; ib < QK_K / 32; ++ib) {
        const int8_t* q = y.qs + 32 * ib;
        int lsum = 0;
        for (int l = 0; l < 4; ++l) lsum += dot_i8(iq1_group(iq1_s_index(x, ib, l)), q + 8 * l, 8);
        const int ls = iq1_s_scale(x, ib);
        r.sumi += ls * lsum;
        r.delta += ls * iq1_s_sign(x, ib) * (y.bsums[2 * ib] + y.bsums[2 * ib + 1]);
    }
    return r;
}

Iq1Sums iq1_m_sums(const block_iq1_m& x, const block_q8_K& y) {
    uint16_t sc[4];
    iq1_m_words(x, sc);
    Iq1Sums r;
    for (int k = 0; k < QK_K / 8; ++k) {
        const int8_t* q = y.qs + 8 * k;
        int qsum = 0;
        for (int j = 0; j < 8; ++j) qsum += q[j];
        const int ls = iq1_m_scale(sc, k / 2);
        r.sumi += ls * dot_i8(iq1_group(iq1_m_index(x, k)), q, 8);
        r.delta += ls * iq1_m_sign(x, k) * qsum;
    }
    return r;
}

inline float iq1_d(const block_iq1_s& x) { return fp16_to_fp32(x.d); }
inline float iq1_d(const block_iq1_m& x) {
    uint16_t sc[4];
    iq1_m_words(x, sc);
    return iq1_m_d(sc);
}
inline Iq1Sums iq1_sums(const block_iq1_s& x, const block_q8_K& y) { return iq1_s_sums(x, y); }
inline Iq1Sums iq1_sums(const block_iq1_m& x, const block_q8_K& y) { return iq1_m_sums(x, y); }

// ggml's generic order (the header).
template <class Block>
void vec_dot_iq1(int64_t n, float* s, const void* vx, const void* vy) {
    const Block* x = (const Block*)vx;
    const block_q8_K* y = (const block_q8_K*)vy;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QK_K; ++i) {
        const Iq1Sums b = iq1_sums(x[i], y[i]);
        sumf += iq1_d(x[i]) * y[i].d * ((float)b.sumi + kIq1Delta * (float)b.delta);
    }
    *s = sumf;
}

// The tiled GEMM's order (the header).
template <class Block>
void vec_dot_iq1_tiled(int64_t n, float* s, const void* vx, const void* vy) {
    const Block* x = (const Block*)vx;
    const block_q8_K* y = (const block_q8_K*)vy;
    float acc = 0.0f;
    for (int64_t i = 0; i < n / QK_K; ++i) {
        const Iq1Sums b = iq1_sums(x[i], y[i]);
        acc = std::fma((float)(8 * b.sumi + b.delta) * (iq1_d(x[i]) * 0.125f), y[i].d, acc);
    }
    *s = acc;
}

}  // namespace

void vec_dot_iq1_s_q8_K(int64_t n, float* s, const void* x, const void* y) { vec_dot_iq1<block_iq1_s>(n, s, x, y); }
void vec_dot_iq1_m_q8_K(int64_t n, float* s, const void* x, const void* y) { vec_dot_iq1<block_iq1_m>(n, s, x, y); }
void vec_dot_iq1_s_q8_K_tiled(int64_t n, float* s, const void* x, const void* y) {
    vec_dot_iq1_tiled<block_iq1_s>(n, s, x, y);
}
void vec_dot_iq1_m_q8_K_tiled(int64_t n, float* s, const void* x, const void* y) {
    vec_dot_iq1_tiled<block_iq1_m>(n, s, x, y);
}

void vec_dot_tq1_0_q8_K(int64_t n, float* s, const void* vx, const void* vy) {
    const block_tq1_0* x = (const block_tq1_0*)vx;
    const block_q8_K* y = (const block_q8_K*)vy;
    int8_t v[QK_K];
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QK_K; ++i) {
        tq1_0_values(x[i], v);
        sumf += (float)dot_i8(v, y[i].qs, QK_K) * (fp16_to_fp32(x[i].d) * y[i].d);
    }
    *s = sumf;
}

void vec_dot_tq2_0_q8_K(int64_t n, float* s, const void* vx, const void* vy) {
    const block_tq2_0* x = (const block_tq2_0*)vx;
    const block_q8_K* y = (const block_q8_K*)vy;
    int8_t v[QK_K];
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QK_K; ++i) {
        tq2_0_values(x[i], v);
        sumf += (float)dot_i8(v, y[i].qs, QK_K) * (y[i].d * fp16_to_fp32(x[i].d));
    }
    *s = sumf;
}

}  // namespace ref
}  // namespace ei
