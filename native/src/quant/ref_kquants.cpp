// Scalar reference kernels of the k-quants: Q2_K, Q3_K, Q4_K, Q5_K, Q6_K (weights) and Q8_K
// (their activation type). Blocks are 256-element super-blocks (quant/blocks.h).
//
// Dequantization is bit-identical with gguf.quants.dequantize and ggml's dequantize_row_*:
// the sub-block factor is formed first in float (dl = d * scale, ml = dmin * min), then
// x = dl * q - ml, one multiply and one subtract, never fused (this unit is compiled for the
// baseline target, which has no FMA to contract into).
//
// Q8_K quantization is ggml's quantize_row_q8_K_ref, which is also what ggml-cpu's x86
// quantize_row_q8_K runs (it has no SIMD version there): per block, max = the first element of
// largest magnitude (with its sign), iscale = -127 / max, q = nearest_int(iscale * x) capped at
// 127, d = 1 / iscale, bsums[g] = sum of q over element group g of 16.
//
// Dot products form exact integer sums per super-block (block_ints) and combine them in float
// as ggml does:
//   q2_K, q4_K, q5_K:  s += (d_y * d_x) * sum_sub(sc * dot(q, q8)) - (d_y * dmin_x) * sum_sub(m * bsum)
//   q3_K, q6_K:        s += (d_y * d_x) * sum_sub(sc * dot(q, q8))       (q centred: q - 4 / q - 32)
// Only the float summation order differs from the SIMD versions (cpu/x86/kquants_256.h).
#include <cmath>
#include <cstring>

#include "common/fp16.h"
#include "quant/blocks.h"
#include "quant/ref.h"

namespace ei {
namespace ref {

// 128-element halves; within one, element 32k + l takes the low or high nibble of
// ql[64h + 32 (k & 1) + l] and bits 2k of qh[32h + l].
int q6_K_value(const block_q6_K& b, int j) {
    const int h = j / 128, k = (j % 128) / 32, l = j % 32;
    const int low = (b.ql[64 * h + 32 * (k & 1) + l] >> (4 * (k >> 1))) & 0x0F;
    const int high = (b.qh[32 * h + l] >> (2 * k)) & 3;
    return low | (high << 4);
}

// The 16 6-bit scales of q3_K, minus 32. Low nibbles: bytes 0..7 (scales 0..7 in the low
// nibbles, 8..15 in the high ones); top 2 bits: bytes 8..11, two bits per scale.
void unpack_scales_q3(const uint8_t s[12], int sc[16]) {
    for (int j = 0; j < 16; j++) {
        const int low = (s[j % 8] >> (4 * (j / 8))) & 0x0F;
        const int high = (s[8 + j % 4] >> (2 * (j / 4))) & 0x03;
        sc[j] = (low | (high << 4)) - 32;
    }
}

// The 8 6-bit scales and 8 6-bit mins of q4_K / q5_K (ggml's get_scale_min_k4, for all j).
void unpack_scales_k4(const uint8_t s[K_SCALE_SIZE], uint8_t sc[8], uint8_t mn[8]) {
    for (int j = 0; j < 4; j++) {
        sc[j] = s[j] & 63;
        mn[j] = s[j + 4] & 63;
        sc[j + 4] = (s[j + 8] & 0x0F) | ((s[j] >> 6) << 4);
        mn[j + 4] = (s[j + 8] >> 4) | ((s[j + 4] >> 6) << 4);
    }
}

namespace {

// ggml's nearest_int: round half to even via the 1.5 * 2^23 magic number (valid for
// |v| <= 2^22). `v` arrives as an already-rounded product: the caller's multiply cannot be
// contracted into the add here because this unit is built without FMA.
inline int nearest_int(float v) {
    const float t = v + 12582912.0f;
    int32_t i;
    std::memcpy(&i, &t, 4);
    return (i & 0x007fffff) - 0x00400000;
}

// Element j of a q2_K block: 2 bits of qs; elements 128n + 32k + l (l < 32) sit at bits 2k
// of qs[32n + l]. Shared by q3_K's low bits.
inline int q2_at(const uint8_t* qs, int j) { return (qs[32 * (j / 128) + j % 32] >> (2 * ((j % 128) / 32))) & 3; }

// Element j of q3_K, in [-4, 3]: low 2 bits as q2, minus 4 unless bit j / 32 of hmask[j % 32].
inline int q3_at(const block_q3_K& b, int j) {
    return q2_at(b.qs, j) - ((b.hmask[j % 32] >> (j / 32)) & 1 ? 0 : 4);
}

// Element j of q4_K (and the low 4 bits of q5_K): 64-element groups, low nibbles first.
inline int q4_at(const uint8_t* qs, int j) { return (qs[32 * (j / 64) + j % 32] >> (4 * ((j % 64) / 32))) & 0x0F; }

inline int q5_at(const block_q5_K& b, int j) { return q4_at(b.qs, j) | (((b.qh[j % 32] >> (j / 32)) & 1) << 4); }

// Element j of q6_K, in [-32, 31].
inline int q6_at(const block_q6_K& b, int j) { return q6_K_value(b, j) - 32; }

// sum over [j0, j0 + len) of q(j) * y.qs[j]
template <typename Q>
inline int dot_range(Q q, const int8_t* q8, int j0, int len) {
    int s = 0;
    for (int j = j0; j < j0 + len; j++) s += q(j) * q8[j];
    return s;
}

}  // namespace

// ---- to_float ----------------------------------------------------------------------------

void to_float_q2_K(const void* src, float* dst, int64_t n) {
    const block_q2_K* x = (const block_q2_K*)src;
    for (int64_t i = 0; i < n / QK_K; i++, dst += QK_K) {
        const float d = fp16_to_fp32(x[i].d);
        const float dmin = fp16_to_fp32(x[i].dmin);
        for (int s = 0; s < 16; s++) {  // 16 sub-blocks of 16
            const float dl = d * (float)(x[i].scales[s] & 0x0F);
            const float ml = dmin * (float)(x[i].scales[s] >> 4);
            for (int j = 16 * s; j < 16 * s + 16; j++) dst[j] = dl * (float)q2_at(x[i].qs, j) - ml;
        }
    }
}

void to_float_q3_K(const void* src, float* dst, int64_t n) {
    const block_q3_K* x = (const block_q3_K*)src;
    int sc[16];
    for (int64_t i = 0; i < n / QK_K; i++, dst += QK_K) {
        const float d = fp16_to_fp32(x[i].d);
        unpack_scales_q3(x[i].scales, sc);
        for (int s = 0; s < 16; s++) {
            const float dl = d * (float)sc[s];
            for (int j = 16 * s; j < 16 * s + 16; j++) dst[j] = dl * (float)q3_at(x[i], j);
        }
    }
}

void to_float_q4_K(const void* src, float* dst, int64_t n) {
    const block_q4_K* x = (const block_q4_K*)src;
    uint8_t sc[8], mn[8];
    for (int64_t i = 0; i < n / QK_K; i++, dst += QK_K) {
        const float d = fp16_to_fp32(x[i].d);
        const float dmin = fp16_to_fp32(x[i].dmin);
        unpack_scales_k4(x[i].scales, sc, mn);
        for (int s = 0; s < 8; s++) {  // 8 sub-blocks of 32
            const float dl = d * (float)sc[s];
            const float ml = dmin * (float)mn[s];
            for (int j = 32 * s; j < 32 * s + 32; j++) dst[j] = dl * (float)q4_at(x[i].qs, j) - ml;
        }
    }
}

void to_float_q5_K(const void* src, float* dst, int64_t n) {
    const block_q5_K* x = (const block_q5_K*)src;
    uint8_t sc[8], mn[8];
    for (int64_t i = 0; i < n / QK_K; i++, dst += QK_K) {
        const float d = fp16_to_fp32(x[i].d);
        const float dmin = fp16_to_fp32(x[i].dmin);
        unpack_scales_k4(x[i].scales, sc, mn);
        for (int s = 0; s < 8; s++) {
            const float dl = d * (float)sc[s];
            const float ml = dmin * (float)mn[s];
            for (int j = 32 * s; j < 32 * s + 32; j++) dst[j] = dl * (float)q5_at(x[i], j) - ml;
        }
    }
}

void to_float_q6_K(const void* src, float* dst, int64_t n) {
    const block_q6_K* x = (const block_q6_K*)src;
    for (int64_t i = 0; i < n / QK_K; i++, dst += QK_K) {
        const float d = fp16_to_fp32(x[i].d);
        for (int s = 0; s < 16; s++) {
            const float dl = d * (float)x[i].scales[s];
            for (int j = 16 * s; j < 16 * s + 16; j++) dst[j] = dl * (float)q6_at(x[i], j);
        }
    }
}

void to_float_q8_K(const void* src, float* dst, int64_t n) {
    const block_q8_K* x = (const block_q8_K*)src;
    for (int64_t i = 0; i < n / QK_K; i++, dst += QK_K)
        for (int j = 0; j < QK_K; j++) dst[j] = x[i].d * (float)x[i].qs[j];
}

// ---- activation quantizer ----------------------------------------------------------------

void from_float_q8_K(const float* src, void* dst, int64_t n) {
    block_q8_K* y = (block_q8_K*)dst;
    for (int64_t i = 0; i < n / QK_K; i++, src += QK_K) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < QK_K; j++) {
            const float ax = std::fabs(src[j]);
            if (ax > amax) {  // strict: the first element of largest magnitude wins
                amax = ax;
                max = src[j];
            }
        }
        if (amax == 0.0f) {
            // ggml leaves bsums unwritten here; zeros are what they would hold.
            std::memset(&y[i], 0, sizeof(block_q8_K));
            continue;
        }
        const float iscale = -127.0f / max;
        for (int j = 0; j < QK_K; j++) {
            const int v = nearest_int(iscale * src[j]);
            y[i].qs[j] = (int8_t)(v < 127 ? v : 127);
        }
        for (int g = 0; g < QK_K / 16; g++) {
            int sum = 0;
            for (int j = 16 * g; j < 16 * g + 16; j++) sum += y[i].qs[j];
            y[i].bsums[g] = (int16_t)sum;
        }
        y[i].d = 1.0f / iscale;
    }
}

// ---- dot products ------------------------------------------------------------------------

namespace {

// The exact integers of one super-block: sumi = sum_sub(sc * dot(q, q8)), summ = sum_sub(m * bsum)
// (0 for the types without a minimum).
struct BlockInts {
    int sumi = 0;
    int summ = 0;
};

BlockInts block_ints(const block_q2_K& b, const block_q8_K& y) {
    BlockInts r;
    for (int sub = 0; sub < 16; sub++) {
        r.sumi += (b.scales[sub] & 0x0F) * dot_range([&b](int j) { return q2_at(b.qs, j); }, y.qs, 16 * sub, 16);
        r.summ += (b.scales[sub] >> 4) * y.bsums[sub];
    }
    return r;
}

BlockInts block_ints(const block_q3_K& b, const block_q8_K& y) {
    int sc[16];
    unpack_scales_q3(b.scales, sc);
    BlockInts r;
    for (int sub = 0; sub < 16; sub++)
        r.sumi += sc[sub] * dot_range([&b](int j) { return q3_at(b, j); }, y.qs, 16 * sub, 16);
    return r;
}

BlockInts block_ints(const block_q4_K& b, const block_q8_K& y) {
    uint8_t sc[8], mn[8];
    unpack_scales_k4(b.scales, sc, mn);
    BlockInts r;
    for (int sub = 0; sub < 8; sub++) {
        r.sumi += sc[sub] * dot_range([&b](int j) { return q4_at(b.qs, j); }, y.qs, 32 * sub, 32);
        r.summ += mn[sub] * (y.bsums[2 * sub] + y.bsums[2 * sub + 1]);
    }
    return r;
}

BlockInts block_ints(const block_q5_K& b, const block_q8_K& y) {
    uint8_t sc[8], mn[8];
    unpack_scales_k4(b.scales, sc, mn);
    BlockInts r;
    for (int sub = 0; sub < 8; sub++) {
        r.sumi += sc[sub] * dot_range([&b](int j) { return q5_at(b, j); }, y.qs, 32 * sub, 32);
        r.summ += mn[sub] * (y.bsums[2 * sub] + y.bsums[2 * sub + 1]);
    }
    return r;
}

BlockInts block_ints(const block_q6_K& b, const block_q8_K& y) {
    BlockInts r;
    for (int sub = 0; sub < 16; sub++)
        r.sumi += b.scales[sub] * dot_range([&b](int j) { return q6_at(b, j); }, y.qs, 16 * sub, 16);
    return r;
}

// The super-block scales; 0 for the minimum of the types that have none.
template <typename B>
float d_of(const B& b) { return fp16_to_fp32(b.d); }
float dmin_of(const block_q2_K& b) { return fp16_to_fp32(b.dmin); }
float dmin_of(const block_q3_K&) { return 0.0f; }
float dmin_of(const block_q4_K& b) { return fp16_to_fp32(b.dmin); }
float dmin_of(const block_q5_K& b) { return fp16_to_fp32(b.dmin); }
float dmin_of(const block_q6_K&) { return 0.0f; }

}  // namespace

template <typename B>
void vec_dot_k(int64_t n, float* s, const void* vx, const void* vy) {
    const B* x = (const B*)vx;
    const block_q8_K* y = (const block_q8_K*)vy;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const BlockInts k = block_ints(x[i], y[i]);
        const float d = y[i].d * d_of(x[i]);
        const float dmin = y[i].d * dmin_of(x[i]);
        sumf += d * (float)k.sumi - dmin * (float)k.summ;
    }
    *s = sumf;
}

// The order of ggml-cpu's tiled GEMM (TypeKernels::vec_dot_ggml_tiled): per super-block
// r = float(sumi) * d_x, minus dmin_x * float(summ) in one FMA (an exact no-op without a
// minimum), then acc = fma(r, d_y, acc).
template <typename B>
void vec_dot_k_tiled(int64_t n, float* s, const void* vx, const void* vy) {
    const B* x = (const B*)vx;
    const block_q8_K* y = (const block_q8_K*)vy;
    float acc = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const BlockInts k = block_ints(x[i], y[i]);
        const float r = std::fma(-dmin_of(x[i]), (float)k.summ, (float)k.sumi * d_of(x[i]));
        acc = std::fma(r, y[i].d, acc);
    }
    *s = acc;
}

void vec_dot_q2_K_q8_K(int64_t n, float* s, const void* x, const void* y) { vec_dot_k<block_q2_K>(n, s, x, y); }
void vec_dot_q3_K_q8_K(int64_t n, float* s, const void* x, const void* y) { vec_dot_k<block_q3_K>(n, s, x, y); }
void vec_dot_q4_K_q8_K(int64_t n, float* s, const void* x, const void* y) { vec_dot_k<block_q4_K>(n, s, x, y); }
void vec_dot_q5_K_q8_K(int64_t n, float* s, const void* x, const void* y) { vec_dot_k<block_q5_K>(n, s, x, y); }
void vec_dot_q6_K_q8_K(int64_t n, float* s, const void* x, const void* y) { vec_dot_k<block_q6_K>(n, s, x, y); }

void vec_dot_q2_K_q8_K_tiled(int64_t n, float* s, const void* x, const void* y) { vec_dot_k_tiled<block_q2_K>(n, s, x, y); }
void vec_dot_q3_K_q8_K_tiled(int64_t n, float* s, const void* x, const void* y) { vec_dot_k_tiled<block_q3_K>(n, s, x, y); }
void vec_dot_q4_K_q8_K_tiled(int64_t n, float* s, const void* x, const void* y) { vec_dot_k_tiled<block_q4_K>(n, s, x, y); }
void vec_dot_q5_K_q8_K_tiled(int64_t n, float* s, const void* x, const void* y) { vec_dot_k_tiled<block_q5_K>(n, s, x, y); }
void vec_dot_q6_K_q8_K_tiled(int64_t n, float* s, const void* x, const void* y) { vec_dot_k_tiled<block_q6_K>(n, s, x, y); }

}  // namespace ref

}  // namespace ei
