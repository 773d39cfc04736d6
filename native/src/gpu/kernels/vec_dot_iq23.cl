// The 2- and 3-bit lattice i-quants (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S) against Q8_K: a
// weight row times one row of quantized activations as the CPU's 256-bit kernels compute it
// (cpu/x86/iq23_256.h, which the AVX2 and AVX-512 units both run), so the device's products are
// the CPU's bit for bit. Needs vec_dot.cl first (half_at, hsum8, TILED_MIN_BATCH) and the grids
// (kIq2xxsGrid, ...) from iq_grids.cl, generated from quant/iq_grids.h.
//
// The integers are exact on both sides: element e of sub-block ib (32 elements) weighs
// grid magnitude * sign, and lane k (0..7) of a super-block is
//   sum over ib of (2 ls + 1) * (sum of weight * y over elements 4k .. 4k + 3 of sub-block ib),
// ls the 4-bit scale of the half (elements 0..15 or 16..31) the lane is in. Only the float steps
// have an order to keep, the same for the five types (c = 1/8 for IQ2_*, 1/4 IQ3_XXS, 1 IQ3_S):
//   vec_dot: per super-block acc[k] = fma(d_x * d_y, lane k, acc[k]); c * hsum8(acc).
//   tiled (from TILED_MIN_BATCH rows, as the CPU's matmul): per super-block the lanes' whole sum,
//     r = sum * (d_x * c), acc = fma(r, d_y, acc).
// Q8_K never holds -128 (its quantizer rounds to -127 .. 127), so the CPU's sign flip of the
// activations (PSIGNB) is an exact negation, as here.
#pragma OPENCL FP_CONTRACT OFF  // every fma is spelled out, every other product rounded, as on the CPU

// The sign rule of IQ2_XXS, IQ2_XS and IQ3_XXS (quant/iq_grids.h kIqSigns): 7 stored bits, the
// 8th making the count of minus signs even. Bit j set: element j of the group of 8 is negative.
inline uint iq23_even_signs(uint code7) { return code7 | (popcount(code7) & 1) << 7; }

// Byte j of a grid point: element j's magnitude.
inline int iq23_mag64(ulong point, int j) { return (int)((point >> (8 * j)) & 255); }
inline int iq23_mag32(uint point, int j) { return (int)((point >> (8 * j)) & 255); }

inline int iq23_signed(int mag, uint negative) { return negative ? -mag : mag; }

// The little-endian uint32 at p (4 bytes, or 2 uint16 words).
inline uint iq23_u32_bytes(__global const uchar* p) {
    return p[0] | p[1] << 8 | p[2] << 16 | (uint)p[3] << 24;
}
inline uint iq23_u32_words(__global const ushort* p) { return p[0] | (uint)p[1] << 16; }

// ---- per type: w_<type>(b, ib, e), the signed weight of element e of sub-block ib (grid
// magnitude times sign); scale_<type>(b, ib, hi), 2 ls + 1 of half hi (elements 0..15, 16..31). --

inline int w_iq2_xxs(__global const block_iq2_xxs* b, int ib, int e) {
    const uint idx = iq23_u32_words(b->qs + 4 * ib), meta = iq23_u32_words(b->qs + 4 * ib + 2);
    const int g = e / 8, j = e % 8;
    return iq23_signed(iq23_mag64(kIq2xxsGrid[(idx >> (8 * g)) & 255], j),
                       (iq23_even_signs((meta >> (7 * g)) & 127) >> j) & 1);
}
inline int scale_iq2_xxs(__global const block_iq2_xxs* b, int ib, int hi) {
    return 2 * (int)(iq23_u32_words(b->qs + 4 * ib + 2) >> 28) + 1;
}

inline int w_iq2_xs(__global const block_iq2_xs* b, int ib, int e) {
    const uint q = b->qs[4 * ib + e / 8];
    const int j = e % 8;
    return iq23_signed(iq23_mag64(kIq2xsGrid[q & 511], j), (iq23_even_signs(q >> 9) >> j) & 1);
}
inline int scale_iq2_xs(__global const block_iq2_xs* b, int ib, int hi) {
    return 2 * ((b->scales[ib] >> (4 * hi)) & 15) + 1;
}

inline int w_iq2_s(__global const block_iq2_s* b, int ib, int e) {
    const int g = e / 8, j = e % 8;
    const uint idx = b->qs[4 * ib + g] | ((b->qh[ib] >> (2 * g)) & 3) << 8;
    return iq23_signed(iq23_mag64(kIq2sGrid[idx], j), (b->qs[QK_K / 8 + 4 * ib + g] >> j) & 1);
}
inline int scale_iq2_s(__global const block_iq2_s* b, int ib, int hi) {
    return 2 * ((b->scales[ib] >> (4 * hi)) & 15) + 1;
}

inline int w_iq3_xxs(__global const block_iq3_xxs* b, int ib, int e) {
    const uint meta = iq23_u32_bytes(b->qs + QK_K / 4 + 4 * ib);
    return iq23_signed(iq23_mag32(kIq3xxsGrid[b->qs[8 * ib + e / 4]], e % 4),
                       (iq23_even_signs((meta >> (7 * (e / 8))) & 127) >> (e % 8)) & 1);
}
inline int scale_iq3_xxs(__global const block_iq3_xxs* b, int ib, int hi) {
    return 2 * (int)(iq23_u32_bytes(b->qs + QK_K / 4 + 4 * ib) >> 28) + 1;
}

inline int w_iq3_s(__global const block_iq3_s* b, int ib, int e) {
    const int k = e / 4;
    const uint idx = b->qs[8 * ib + k] | ((b->qh[ib] >> k) & 1) << 8;
    return iq23_signed(iq23_mag32(kIq3sGrid[idx], e % 4), (b->signs[4 * ib + e / 8] >> (e % 8)) & 1);
}
inline int scale_iq3_s(__global const block_iq3_s* b, int ib, int hi) {
    return 2 * ((b->scales[ib / 2] >> (4 * (ib % 2))) & 15) + 1;
}

// Lane k of super-block x against y (the header's integer).
#define IQ23_LANE(TYPE)                                                                             \
    inline int lane_##TYPE(__global const block_##TYPE* x, __global const block_q8_K* y, int k) {   \
        int lane = 0;                                                                               \
        for (int ib = 0; ib < QK_K / 32; ++ib) {                                                    \
            int dot = 0;                                                                            \
            for (int e = 4 * k; e < 4 * k + 4; ++e) dot += w_##TYPE(x, ib, e) * y->qs[32 * ib + e];   \
            lane += scale_##TYPE(x, ib, k >= 4) * dot;                                              \
        }                                                                                           \
        return lane;                                                                                \
    }

// The row in the CPU's order for a batch of n rows (the header); C is the type's constant c.
#define IQ23_ROW(TYPE, C)                                                                           \
    IQ23_LANE(TYPE)                                                                                 \
    inline float vec_dot_row_##TYPE(__global const uchar* row, __global const block_q8_K* y, int nb, \
                                    int t, int n, int rows) {                                      \
        __global const block_##TYPE* x = (__global const block_##TYPE*)row;                          \
        if (n >= TILED_MIN_BATCH) {                                                                 \
            float acc = 0.0f;                                                                       \
            for (int i = 0; i < nb; ++i) {                                                          \
                int sumi = 0;                                                                       \
                for (int k = 0; k < 8; ++k) sumi += lane_##TYPE(x + i, y + i, k);                   \
                acc = fma((float)sumi * (half_at(&x[i].d) * (C)), y[i].d, acc);                     \
            }                                                                                       \
            return acc;                                                                             \
        }                                                                                           \
        float acc[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};                            \
        for (int i = 0; i < nb; ++i) {                                                              \
            const float d = half_at(&x[i].d) * y[i].d;                                               \
            for (int k = 0; k < 8; ++k) acc[k] = fma(d, (float)lane_##TYPE(x + i, y + i, k), acc[k]); \
        }                                                                                           \
        return (C) * hsum8(acc);                                                                    \
    }
IQ23_ROW(iq2_xxs, 0.125f)
IQ23_ROW(iq2_xs, 0.125f)
IQ23_ROW(iq2_s, 0.125f)
IQ23_ROW(iq3_xxs, 0.25f)
IQ23_ROW(iq3_s, 1.0f)
