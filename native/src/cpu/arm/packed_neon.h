// NEON kernels of the packed GEMV/GEMM over 16-row groups (cpu/repack.h: the layout and the
// float order), for the NEON unit (neon.cpp): Q4_0 always, and in FloatOrder::fast Q4_1, Q8_0 and
// IQ4_NL. Each output keeps one FMA chain, a block at a time, of the block's exact integer sum
// times d_w * d_a (Q4_1's minimums in a second chain added at the end), which is the scalar
// reference's order (gemm_packed_ref in cpu/repack.cpp) written lane-wise: the results are its
// bits. native/tests/kernel_test.cpp checks that under qemu.
//
// A group's piece t (64 bytes: 4 bytes of each of 16 rows) is four 16-byte registers of four
// rows each, so an int32 lane is a row: SDOT (or its widening fallback, dot_s8_lanes) sums a row's 4
// bytes against the 4 activation bytes broadcast to every lane. One convert and one FMA a block
// then serve 4 rows, as the x86 kernels serve 8 or 16.
#pragma once
#include <arm_neon.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "cpu/arm/quants_neon.h"
#include "cpu/repack.h"
#include "quant/blocks.h"

namespace ei {
namespace {

constexpr int kNeonPanel = 4;  // activation columns a pass over a group serves

// acc + per int32 lane l the sum of the products a[4l + b] * b[4l + b], b = 0..3: SDOT's lanes,
// which the packed layout needs (a lane is a row). quants_neon.h's dot_s8 falls back to lanes of
// other bytes where that does not matter (only their total is used); this one pairs its
// fallback's sums so that each lane keeps its own four bytes.
inline int32x4_t dot_s8_lanes(int32x4_t acc, int8x16_t a, int8x16_t b) {
#if defined(__ARM_FEATURE_DOTPROD)
    return vdotq_s32(acc, a, b);
#else
    const int32x4_t lo = vpaddlq_s16(vmull_s8(vget_low_s8(a), vget_low_s8(b)));  // bytes 0+1, 2+3, 4+5, 6+7
    const int32x4_t hi = vpaddlq_s16(vmull_high_s8(a, b));                       // bytes 8+9, ..., 14+15
    return vaddq_s32(acc, vpaddq_s32(lo, hi));
#endif
}

// The 4 activation bytes aq[0..3] in every lane.
inline int8x16_t broadcast4(const int8_t* aq) {
    int32_t v;
    std::memcpy(&v, aq, 4);
    return vreinterpretq_s8_s32(vdupq_n_s32(v));
}

// Four rows' fp16 values at h[0..3] as floats.
inline float32x4_t half4(const uint16_t* h) { return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(h))); }

// Block i's exact integer sums of the 16 rows (four lanes of four rows) against one activation
// block: the stored values as the type keeps them, Q4_0's offset of 8 taken off through `corr`
// (-8 * the activations' sum; 0 for the others).
template <uint32_t Type>
inline void block_sums(const uint8_t* qs, int64_t i, const int8_t* aq, int32_t corr, int32x4_t* s) {
    for (int q = 0; q < 4; ++q) s[q] = vdupq_n_s32(corr);
    if constexpr (Type == TYPE_Q8_0) {
        for (int t = 0; t < 8; ++t) {
            const int8x16_t a = broadcast4(aq + 4 * t);
            const uint8_t* piece = qs + (i * 8 + t) * 64;
            for (int q = 0; q < 4; ++q) s[q] = dot_s8_lanes(s[q], vld1q_s8(reinterpret_cast<const int8_t*>(piece + 16 * q)), a);
        }
    } else {
        const int8x16_t table = vld1q_s8(kIq4nlValues);
        for (int t = 0; t < 4; ++t) {
            const int8x16_t a_lo = broadcast4(aq + 4 * t), a_hi = broadcast4(aq + 16 + 4 * t);
            const uint8_t* piece = qs + (i * 4 + t) * 64;
            for (int q = 0; q < 4; ++q) {
                const uint8x16_t b = vld1q_u8(piece + 16 * q);
                uint8x16_t lo = vandq_u8(b, vdupq_n_u8(0x0F)), hi = vshrq_n_u8(b, 4);
                if constexpr (Type == TYPE_IQ4_NL) {  // a nibble indexes the type's 16 values
                    lo = vreinterpretq_u8_s8(vqtbl1q_s8(table, lo));
                    hi = vreinterpretq_u8_s8(vqtbl1q_s8(table, hi));
                }
                s[q] = dot_s8_lanes(dot_s8_lanes(s[q], vreinterpretq_s8_u8(lo), a_lo), vreinterpretq_s8_u8(hi), a_hi);
            }
        }
    }
}

// Q4_0's offset of 8 as a correction of the integer sum: -8 * sum(q_a).
inline int32_t q4_0_correction(const int8_t* aq) {
    const int16x8_t p = vpaddlq_s8(vld1q_s8(aq)), q = vpaddlq_s8(vld1q_s8(aq + 16));
    return -8 * vaddlvq_s16(vaddq_s16(p, q));
}

// One group's 16 rows x NC columns into y[c * ldy + 0..15].
template <uint32_t Type, int NC>
void packed_tile(int64_t nb, const uint8_t* grp, const PackedLayout& lay, const uint8_t* const* act, float* y,
                 int64_t ldy, size_t prefetch) {
    constexpr bool kMin = Type == TYPE_Q4_1;
    using Act = std::conditional_t<kMin, block_q8_1, block_q8_0>;
    const uint16_t* d = reinterpret_cast<const uint16_t*>(grp);
    const uint16_t* mins = reinterpret_cast<const uint16_t*>(grp + lay.m);
    const uint8_t* qs = grp + lay.qs;
    constexpr int kPieces = Type == TYPE_Q8_0 ? 8 : 4;
    float32x4_t acc[NC][4], acc_m[kMin ? NC : 1][4];
    for (int c = 0; c < NC; ++c)
        for (int q = 0; q < 4; ++q) acc[c][q] = acc_m[kMin ? c : 0][q] = vdupq_n_f32(0.0f);
    for (int64_t i = 0; i < nb; ++i) {
        if (prefetch)
            for (int t = 0; t < kPieces; ++t) __builtin_prefetch(qs + (i * kPieces + t) * 64 + prefetch, 0, 1);
        float32x4_t dw[4];
        for (int q = 0; q < 4; ++q) dw[q] = half4(d + i * kPackRows + 4 * q);
        for (int c = 0; c < NC; ++c) {
            const Act& ab = reinterpret_cast<const Act*>(act[c])[i];
            int32x4_t s[4];
            block_sums<Type>(qs, i, ab.qs, Type == TYPE_Q4_0 ? q4_0_correction(ab.qs) : 0, s);
            const float32x4_t da = vdupq_n_f32(h2f(ab.d));
            for (int q = 0; q < 4; ++q) acc[c][q] = vfmaq_f32(acc[c][q], vcvtq_f32_s32(s[q]), vmulq_f32(dw[q], da));
            if constexpr (kMin) {
                const float32x4_t sa = vdupq_n_f32(h2f(ab.s));
                for (int q = 0; q < 4; ++q) acc_m[c][q] = vfmaq_f32(acc_m[c][q], half4(mins + i * kPackRows + 4 * q), sa);
            }
        }
    }
    for (int c = 0; c < NC; ++c)
        for (int q = 0; q < 4; ++q)
            vst1q_f32(y + c * ldy + 4 * q, kMin ? vaddq_f32(acc[c][q], acc_m[c][q]) : acc[c][q]);
}

template <uint32_t Type>
void gemm_packed_neon(int64_t k, int64_t m, int64_t n, const void* w, size_t w_stride, const void* a,
                      size_t a_stride, float* y, int64_t ldy) {
    const int64_t nb = k / QK8_0;
    const PackedLayout lay = packed_layout(Type, k);
    const uint8_t* a8 = static_cast<const uint8_t*>(a);
    const uint8_t* cols[kNeonPanel];
    for (int64_t g = 0; g < m / kPackRows; ++g) {
        const uint8_t* grp = static_cast<const uint8_t*>(w) + g * w_stride;
        for_each_panel(n, kNeonPanel, [&](int64_t p, int64_t c0, int nc) {
            for (int c = 0; c < nc; ++c) cols[c] = a8 + (c0 + c) * a_stride;
            float* yt = y + c0 * ldy + g * kPackRows;
            const size_t pf = p == 0 ? w_stride : 0;  // the next group (past the last too: cpu/repack.h)
            switch (nc) {
                case 4: return packed_tile<Type, 4>(nb, grp, lay, cols, yt, ldy, pf);
                case 3: return packed_tile<Type, 3>(nb, grp, lay, cols, yt, ldy, pf);
                case 2: return packed_tile<Type, 2>(nb, grp, lay, cols, yt, ldy, pf);
                default: return packed_tile<Type, 1>(nb, grp, lay, cols, yt, ldy, pf);
            }
        });
    }
}

// Q4_0's packed kernel (its own order in every table).
void fill_packed_neon(KernelTable& t) { t.types[TYPE_Q4_0].gemm_16row_groups = gemm_packed_neon<TYPE_Q4_0>; }

// FloatOrder::fast: the packed kernels of the types whose vec_dot order is otherwise kept.
void fill_packed_fast_neon(KernelTable& t) {
    t.types[TYPE_Q4_1].gemm_16row_groups = gemm_packed_neon<TYPE_Q4_1>;
    t.types[TYPE_Q8_0].gemm_16row_groups = gemm_packed_neon<TYPE_Q8_0>;
    t.types[TYPE_IQ4_NL].gemm_16row_groups = gemm_packed_neon<TYPE_IQ4_NL>;
}

}  // namespace
}  // namespace ei
