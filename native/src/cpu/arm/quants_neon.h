// NEON kernels of the 32-element block types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 weights; Q8_0 and
// Q8_1 activations; dequantization of the KV cache types Q8_0 and Q4_0) and of the float
// types, for the NEON unit (neon.cpp, built with -march=armv8.2-a+dotprod+fp16).
//
// What is computed, and the numerical policy. The quantized dot products form, per block, the
// same exact integer sum(qx * qy) as the scalar reference (quant/ref_legacy.cpp): 32 int8
// products summed 4 at a time into int32 lanes by SDOT (vdotq_s32), or, in a build without the
// dot-product extension, by widening multiplies and pairwise adds - the lanes differ, their
// total does not. The block's float step is then the reference's own expression, block after
// block in the same order, with the contractions GCC applies to it when it builds the
// reference for AArch64 (whose baseline has FMA; GCC contracts a * b + c in C++ whatever the
// -std) written out as std::fma:
//   sumf = fma(d_x * d_y, (float)sumi, sumf)                   (q4_0, q5_0, q8_0)
//   sumf = sumf + fma(m_x, s_y, (d_x * d_y) * (float)sumi)     (q4_1, q5_1)
// so the result is the reference's, bit for bit, as GCC 12 builds both (another compiler, or
// another way of writing the reference, may round differently; the tests' bound still holds).
// Why not lane-wise float accumulators like the x86 kernels: those mirror ggml's x86 float
// sequence so that results match llama.cpp there; the ARM equivalent cannot be checked on this
// project's machines, while agreement with the reference can, and one float step per 32
// elements costs little next to the integer work (not measured on ARM hardware: none here).
// native/tests/kernel_test.cpp requires the tests' 1e-5 bound and reports the bit-identity.
//
// The Q8_0/Q8_1 activation quantizers produce the reference's bytes: amax over the block,
// d = amax / 127, x * (127 / amax) rounded to nearest-even by FCVTNS (std::nearbyint in the
// reference), saturated to int8 (only reached when 127 / amax overflows). Inputs are finite
// (a NaN input is where the two may differ).
//
// The float dot products (F32, F16, BF16) have ggml_vec_dot_f32's NEON shape: four 4-lane FMA
// accumulators over steps of 16, reduced (a0 + a2) + (a1 + a3), the tail summed in double; F16
// and BF16 are widened to float first (exact; ggml's F16 path on fp16-capable CPUs accumulates
// in half precision instead, which is not copied here). They differ from the reference
// (products summed in double) by float rounding only; the tests bound that at 1e-5 of
// sum |x_i * y_i|.
//
// Everything is in an anonymous namespace, like the x86 headers: this code is compiled with ISA
// flags, and the linker must never pick it for a baseline caller.
#pragma once
#include <arm_neon.h>

#include <cmath>
#include <cstring>

#include "common/fp16.h"
#include "cpu/kernels.h"
#include "quant/blocks.h"

namespace ei {
namespace {

// ---- primitives ----------------------------------------------------------------------------

// acc + the 16 products a[i] * b[i], 4 adjacent ones per int32 lane.
inline int32x4_t dot_s8(int32x4_t acc, int8x16_t a, int8x16_t b) {
#if defined(__ARM_FEATURE_DOTPROD)
    return vdotq_s32(acc, a, b);
#else
    // |a * b| <= 128 * 128 fits int16; pairs are widened into the int32 lanes.
    acc = vpadalq_s16(acc, vmull_s8(vget_low_s8(a), vget_low_s8(b)));
    return vpadalq_s16(acc, vmull_high_s8(a, b));
#endif
}

// sum(x[j] * y[j]) over a 32-element block given as two 16-byte halves each.
inline int dot_block_32(int8x16_t x0, int8x16_t x1, const int8_t* y) {
    const int32x4_t p = dot_s8(dot_s8(vdupq_n_s32(0), x0, vld1q_s8(y)), x1, vld1q_s8(y + 16));
    return vaddvq_s32(p);
}

// Half -> float by the FPU (exact, like fp16_to_fp32).
inline float h2f(uint16_t h) {
    __fp16 v;
    std::memcpy(&v, &h, 2);
    return (float)v;
}

// 16 bytes of nibbles -> elements 0..15 (low nibbles) and 16..31 (high nibbles), in [0, 15].
inline void nibbles_32(const uint8_t* qs, int8x16_t& lo, int8x16_t& hi) {
    const uint8x16_t b = vld1q_u8(qs);
    lo = vreinterpretq_s8_u8(vandq_u8(b, vdupq_n_u8(0x0F)));
    hi = vreinterpretq_s8_u8(vshrq_n_u8(b, 4));
}

// The 32 bits of a q5 block's qh (bit j: element j) as bytes, 0xFF where set: elements 0..15
// in `lo`, 16..31 in `hi`.
inline void bits_32(const uint8_t* qh, uint8x16_t& lo, uint8x16_t& hi) {
    static const uint8_t kBit[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
    const uint8x16_t bit = vld1q_u8(kBit);
    lo = vtstq_u8(vcombine_u8(vdup_n_u8(qh[0]), vdup_n_u8(qh[1])), bit);
    hi = vtstq_u8(vcombine_u8(vdup_n_u8(qh[2]), vdup_n_u8(qh[3])), bit);
}

// ---- dequantization (the quantized KV cache's V rows: q8_0, q4_0) ----------------------------
// One multiply per element, as the reference: the same floats.

// 16 int8 values times d, stored as 16 floats.
inline void store_scaled_16(float* dst, int8x16_t q, float d) {
    const int16x8_t lo = vmovl_s8(vget_low_s8(q)), hi = vmovl_high_s8(q);
    vst1q_f32(dst, vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo))), d));
    vst1q_f32(dst + 4, vmulq_n_f32(vcvtq_f32_s32(vmovl_high_s16(lo)), d));
    vst1q_f32(dst + 8, vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi))), d));
    vst1q_f32(dst + 12, vmulq_n_f32(vcvtq_f32_s32(vmovl_high_s16(hi)), d));
}

void to_float_q8_0_neon(const void* src, float* dst, int64_t n) {
    const block_q8_0* x = (const block_q8_0*)src;
    for (int64_t i = 0; i < n / QK8_0; i++, dst += QK8_0) {
        const float d = h2f(x[i].d);
        store_scaled_16(dst, vld1q_s8(x[i].qs), d);
        store_scaled_16(dst + 16, vld1q_s8(x[i].qs + 16), d);
    }
}

void to_float_q4_0_neon(const void* src, float* dst, int64_t n) {
    const block_q4_0* x = (const block_q4_0*)src;
    const int8x16_t eight = vdupq_n_s8(8);
    for (int64_t i = 0; i < n / QK4_0; i++, dst += QK4_0) {
        int8x16_t lo, hi;
        nibbles_32(x[i].qs, lo, hi);
        const float d = h2f(x[i].d);
        store_scaled_16(dst, vsubq_s8(lo, eight), d);
        store_scaled_16(dst + 16, vsubq_s8(hi, eight), d);
    }
}

// ---- activation quantizers -----------------------------------------------------------------

// One block of 32 floats -> 32 int8 (round half to even of x * 127 / amax); returns
// d = amax / 127 and, through *isum, the sum of the int8 values.
inline float quantize_block_q8_neon(const float* x, int8_t* qs, int* isum) {
    float32x4_t v[8];
    for (int k = 0; k < 8; k++) v[k] = vld1q_f32(x + 4 * k);
    float32x4_t a = vabsq_f32(v[0]);
    for (int k = 1; k < 8; k++) a = vmaxq_f32(a, vabsq_f32(v[k]));
    const float amax = vmaxvq_f32(a);

    const float d = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    int32x4_t q[8];
    for (int k = 0; k < 8; k++) {
        const float32x4_t p = vmulq_n_f32(v[k], id);
        // A NaN product (0 * inf, when 127 / amax overflows for amax < 2^-121) becomes -128, as
        // the reference's clamp makes it; FCVTNS alone would give 0.
        q[k] = vbslq_s32(vceqq_f32(p, p), vcvtnq_s32_f32(p), vdupq_n_s32(-128));
    }
    int16x8_t h[4];
    for (int k = 0; k < 4; k++) h[k] = vcombine_s16(vqmovn_s32(q[2 * k]), vqmovn_s32(q[2 * k + 1]));
    const int8x16_t q0 = vcombine_s8(vqmovn_s16(h[0]), vqmovn_s16(h[1]));
    const int8x16_t q1 = vcombine_s8(vqmovn_s16(h[2]), vqmovn_s16(h[3]));
    vst1q_s8(qs, q0);
    vst1q_s8(qs + 16, q1);
    *isum = vaddlvq_s8(q0) + vaddlvq_s8(q1);
    return d;
}

void from_float_q8_0_neon(const float* src, void* dst, int64_t n) {
    block_q8_0* y = (block_q8_0*)dst;
    for (int64_t i = 0; i < n / QK8_0; i++) {
        int isum;
        y[i].d = fp32_to_fp16(quantize_block_q8_neon(src + i * QK8_0, y[i].qs, &isum));
    }
}

void from_float_q8_1_neon(const float* src, void* dst, int64_t n) {
    block_q8_1* y = (block_q8_1*)dst;
    for (int64_t i = 0; i < n / QK8_1; i++) {
        int isum;
        const float d = quantize_block_q8_neon(src + i * QK8_1, y[i].qs, &isum);
        y[i].d = fp32_to_fp16(d);
        y[i].s = fp32_to_fp16(d * (float)isum);  // unrounded d, as the reference
    }
}

// ---- quantized dot products ----------------------------------------------------------------

void vec_dot_q4_0_q8_0_neon(int64_t n, float* s, const void* vx, const void* vy) {
    const block_q4_0* x = (const block_q4_0*)vx;
    const block_q8_0* y = (const block_q8_0*)vy;
    const int8x16_t eight = vdupq_n_s8(8);
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QK8_0; i++) {
        int8x16_t lo, hi;
        nibbles_32(x[i].qs, lo, hi);
        const int sumi = dot_block_32(vsubq_s8(lo, eight), vsubq_s8(hi, eight), y[i].qs);
        sumf = std::fma(h2f(x[i].d) * h2f(y[i].d), (float)sumi, sumf);
    }
    *s = sumf;
}

void vec_dot_q4_1_q8_1_neon(int64_t n, float* s, const void* vx, const void* vy) {
    const block_q4_1* x = (const block_q4_1*)vx;
    const block_q8_1* y = (const block_q8_1*)vy;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QK8_1; i++) {
        int8x16_t lo, hi;
        nibbles_32(x[i].qs, lo, hi);
        const int sumi = dot_block_32(lo, hi, y[i].qs);
        sumf += std::fma(h2f(x[i].m), h2f(y[i].s), (h2f(x[i].d) * h2f(y[i].d)) * (float)sumi);
    }
    *s = sumf;
}

void vec_dot_q5_0_q8_0_neon(int64_t n, float* s, const void* vx, const void* vy) {
    const block_q5_0* x = (const block_q5_0*)vx;
    const block_q8_0* y = (const block_q8_0*)vy;
    const uint8x16_t f0 = vdupq_n_u8(0xF0);
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QK8_0; i++) {
        int8x16_t lo, hi;
        uint8x16_t b_lo, b_hi;
        nibbles_32(x[i].qs, lo, hi);
        bits_32(x[i].qh, b_lo, b_hi);
        // q - 16 = nibble | (fifth bit clear ? 0xF0 : 0), read as int8
        lo = vorrq_s8(lo, vreinterpretq_s8_u8(vbicq_u8(f0, b_lo)));
        hi = vorrq_s8(hi, vreinterpretq_s8_u8(vbicq_u8(f0, b_hi)));
        const int sumi = dot_block_32(lo, hi, y[i].qs);
        sumf = std::fma(h2f(x[i].d) * h2f(y[i].d), (float)sumi, sumf);
    }
    *s = sumf;
}

void vec_dot_q5_1_q8_1_neon(int64_t n, float* s, const void* vx, const void* vy) {
    const block_q5_1* x = (const block_q5_1*)vx;
    const block_q8_1* y = (const block_q8_1*)vy;
    const uint8x16_t b4 = vdupq_n_u8(0x10);
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QK8_1; i++) {
        int8x16_t lo, hi;
        uint8x16_t b_lo, b_hi;
        nibbles_32(x[i].qs, lo, hi);
        bits_32(x[i].qh, b_lo, b_hi);
        lo = vorrq_s8(lo, vreinterpretq_s8_u8(vandq_u8(b4, b_lo)));
        hi = vorrq_s8(hi, vreinterpretq_s8_u8(vandq_u8(b4, b_hi)));
        const int sumi = dot_block_32(lo, hi, y[i].qs);
        sumf += std::fma(h2f(x[i].m), h2f(y[i].s), (h2f(x[i].d) * h2f(y[i].d)) * (float)sumi);
    }
    *s = sumf;
}

void vec_dot_q8_0_q8_0_neon(int64_t n, float* s, const void* vx, const void* vy) {
    const block_q8_0* x = (const block_q8_0*)vx;
    const block_q8_0* y = (const block_q8_0*)vy;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QK8_0; i++) {
        const int sumi = dot_block_32(vld1q_s8(x[i].qs), vld1q_s8(x[i].qs + 16), y[i].qs);
        sumf = std::fma(h2f(x[i].d) * h2f(y[i].d), (float)sumi, sumf);
    }
    *s = sumf;
}

// ---- float types ---------------------------------------------------------------------------

inline float32x4_t load_f16x4(const uint16_t* p) { return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p))); }
inline float32x4_t load_bf16x4(const uint16_t* p) { return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(p), 16)); }

// Four FMA accumulators over steps of 16 elements, reduced (a0 + a2) + (a1 + a3) then across
// lanes; the tail in double. Load converts 4 elements of the row type to float.
template <typename T, float32x4_t (*Load)(const T*), float (*Scalar)(T)>
inline float dot_float_rows(int64_t n, const T* x, const T* y) {
    float32x4_t a0 = vdupq_n_f32(0.0f), a1 = a0, a2 = a0, a3 = a0;
    const int64_t np = n & ~(int64_t)15;
    for (int64_t i = 0; i < np; i += 16) {
        a0 = vfmaq_f32(a0, Load(x + i), Load(y + i));
        a1 = vfmaq_f32(a1, Load(x + i + 4), Load(y + i + 4));
        a2 = vfmaq_f32(a2, Load(x + i + 8), Load(y + i + 8));
        a3 = vfmaq_f32(a3, Load(x + i + 12), Load(y + i + 12));
    }
    double sum = vaddvq_f32(vaddq_f32(vaddq_f32(a0, a2), vaddq_f32(a1, a3)));
    for (int64_t i = np; i < n; i++) sum += (double)(Scalar(x[i]) * Scalar(y[i]));
    return (float)sum;
}

inline float32x4_t load_f32x4(const float* p) { return vld1q_f32(p); }
inline float f32_scalar(float v) { return v; }
inline float f16_scalar(uint16_t h) { return h2f(h); }
inline float bf16_scalar(uint16_t h) { return bf16_to_fp32(h); }

void vec_dot_f32_neon(int64_t n, float* s, const void* x, const void* y) {
    *s = dot_float_rows<float, load_f32x4, f32_scalar>(n, (const float*)x, (const float*)y);
}

void vec_dot_f16_neon(int64_t n, float* s, const void* x, const void* y) {
    *s = dot_float_rows<uint16_t, load_f16x4, f16_scalar>(n, (const uint16_t*)x, (const uint16_t*)y);
}

void vec_dot_bf16_neon(int64_t n, float* s, const void* x, const void* y) {
    *s = dot_float_rows<uint16_t, load_bf16x4, bf16_scalar>(n, (const uint16_t*)x, (const uint16_t*)y);
}

// F16 <-> F32 rows: exact one way, round-to-nearest-even the other (FPCR's default mode), as
// the scalar conversions for every finite value (a NaN keeps its payload here).
void to_float_f16_neon(const void* src, float* dst, int64_t n) {
    const uint16_t* x = (const uint16_t*)src;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(dst + i, load_f16x4(x + i));
    for (; i < n; i++) dst[i] = h2f(x[i]);
}

void from_float_f16_neon(const float* src, void* dst, int64_t n) {
    uint16_t* y = (uint16_t*)dst;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) vst1_u16(y + i, vreinterpret_u16_f16(vcvt_f16_f32(vld1q_f32(src + i))));
    for (; i < n; i++) y[i] = fp32_to_fp16(src[i]);
}

// The entries this file accelerates; the rest of the table stays as the caller filled it.
inline void fill_kernels_quants_neon(KernelTable& t) {
    t.types[TYPE_F32].vec_dot = vec_dot_f32_neon;
    t.types[TYPE_F16].to_float = to_float_f16_neon;
    t.types[TYPE_F16].from_float = from_float_f16_neon;
    t.types[TYPE_F16].vec_dot = vec_dot_f16_neon;
    t.types[TYPE_BF16].vec_dot = vec_dot_bf16_neon;
    t.types[TYPE_Q4_0].to_float = to_float_q4_0_neon;
    t.types[TYPE_Q4_0].vec_dot = vec_dot_q4_0_q8_0_neon;
    t.types[TYPE_Q4_1].vec_dot = vec_dot_q4_1_q8_1_neon;
    t.types[TYPE_Q5_0].vec_dot = vec_dot_q5_0_q8_0_neon;
    t.types[TYPE_Q5_1].vec_dot = vec_dot_q5_1_q8_1_neon;
    t.types[TYPE_Q8_0].to_float = to_float_q8_0_neon;
    t.types[TYPE_Q8_0].vec_dot = vec_dot_q8_0_q8_0_neon;
    t.types[TYPE_Q8_0].from_float = from_float_q8_0_neon;
    t.types[TYPE_Q8_1].from_float = from_float_q8_1_neon;
}

}  // namespace
}  // namespace ei
