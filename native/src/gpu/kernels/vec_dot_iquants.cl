// The types with a non-linear 4-bit table (IQ4_NL and MXFP4 against Q8_0, IQ4_XS against Q8_K):
// a weight row times one row of quantized activations as the CPU's 256-bit kernels compute it
// (cpu/x86/iquants_256.h, mxfp4_256.h, which the AVX2 and AVX-512 units both run), so the device's
// products are the CPU's bit for bit. Needs vec_dot.cl first (half_at, hsum8); the tables
// kIq4nlValues and kMxfp4Values come from the prelude, generated from quant/blocks.h.
//
// The integers are exact on both sides: the CPU looks the nibbles up with PSHUFB and sums the
// products of 4 adjacent elements per int32 lane (elements 4l .. 4l + 3 of a 32-element block in
// lane l, as for the legacy types); only the float steps have an order to keep:
//   IQ4_NL, MXFP4 (ggml's IQ4_NL loop with its own table and scale 2^(e - 128)):
//           blocks in pairs, the even block's lanes fma'd by d_y * d_x into one set of 8
//           accumulators, the odd block's into another; the two added lane by lane, then hsum8;
//           a last block of an odd count after that, its whole sum times d_y * d_x rounded
//           on its own and added (no fma: the CPU keeps ggml's separate rounding).
//   IQ4_XS: per super-block, each lane's integers over the 8 sub-blocks, each sub-block's times
//           its scale ls - 32 (exact in int32); acc[l] = fma(d_x * d_y, lane, acc[l]); hsum8.
// IQ4_NL and MXFP4 have no tiled order on the CPU (cpu/matmul.cpp): a batch multiplies in vec_dot's
// order.
// IQ4_XS takes ggml's tiled order from TILED_MIN_BATCH rows, as the CPU does (its k-quants' form
// in vec_dot.cl): per super-block the whole integer sum, r = sum * d_x, acc = fma(r, d_y, acc).
#pragma OPENCL FP_CONTRACT OFF  // every fma is spelled out, every other product rounded, as on the CPU

// Lane l (0..7) of a 32-element block whose nibbles are qs[0..15] (element e: the low nibble of
// qs[e] for e < 16, the high one of qs[e - 16] above): sum of table[q[e]] * y[e] over e = 4l .. 4l + 3.
inline int lane_table4(__constant const char* table, __global const uchar* qs, __global const char* y, int l) {
    int sum = 0;
    for (int e = 4 * l; e < 4 * l + 4; ++e) sum += table[e < 16 ? (qs[e] & 15) : (qs[e - 16] >> 4)] * y[e];
    return sum;
}
inline int lane_iq4(__global const uchar* qs, __global const char* y, int l) {
    return lane_table4(kIq4nlValues, qs, y, l);
}

// A block's scale: IQ4_NL's fp16 d; MXFP4's E8M0 byte as 2^(e - 128), the half its doubled table
// wants (common/e8m0.h e8m0_to_fp32_half, whose bits these are: e = 0, 1 the subnormals 2^-128,
// 2^-127).
inline float scale_iq4_nl(__global const block_iq4_nl* b) { return half_at(&b->d); }
inline float scale_mxfp4(__global const block_mxfp4* b) {
    return as_float(b->e < 2 ? 0x00200000u << b->e : (uint)(b->e - 1) << 23);
}

// The row in the header's order for a 32-element block type of table TABLE.
#define TABLE4_ROW(TYPE, TABLE)                                                                     \
    inline float vec_dot_row_##TYPE(__global const uchar* row, __global const block_q8_0* y, int nb, \
                                    int t, int n, int rows) {                                      \
        __global const block_##TYPE* x = (__global const block_##TYPE*)row;                          \
        float even[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};                           \
        float odd[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};                            \
        int i = 0;                                                                                  \
        for (; i + 1 < nb; i += 2) {                                                                \
            const float d0 = half_at(&y[i].d) * scale_##TYPE(x + i);                                \
            const float d1 = half_at(&y[i + 1].d) * scale_##TYPE(x + i + 1);                        \
            for (int l = 0; l < 8; ++l) {                                                           \
                even[l] = fma(d0, (float)lane_table4(TABLE, x[i].qs, y[i].qs, l), even[l]);         \
                odd[l] = fma(d1, (float)lane_table4(TABLE, x[i + 1].qs, y[i + 1].qs, l), odd[l]);   \
            }                                                                                       \
        }                                                                                           \
        float acc[8];                                                                               \
        for (int l = 0; l < 8; ++l) acc[l] = even[l] + odd[l];                                      \
        float sum = hsum8(acc);                                                                     \
        for (; i < nb; ++i) {                                                                       \
            int isum = 0;                                                                           \
            for (int l = 0; l < 8; ++l) isum += lane_table4(TABLE, x[i].qs, y[i].qs, l);            \
            const float term = half_at(&y[i].d) * scale_##TYPE(x + i) * (float)isum;                \
            sum += term;                                                                            \
        }                                                                                           \
        return sum;                                                                                 \
    }
TABLE4_ROW(iq4_nl, kIq4nlValues)
TABLE4_ROW(mxfp4, kMxfp4Values)

// The 6-bit scale of sub-block ib (0..7) less 32: low 4 bits in nibble ib % 2 of scales_l[ib / 2],
// high 2 bits at bits 2ib .. 2ib + 1 of scales_h (block_iq4_xs in quant/blocks.h).
inline int scale_iq4_xs(__global const block_iq4_xs* b, int ib) {
    return (((b->scales_l[ib / 2] >> (4 * (ib % 2))) & 15) | (((b->scales_h >> (2 * ib)) & 3) << 4)) - 32;
}

inline float vec_dot_row_iq4_xs(__global const uchar* row, __global const block_q8_K* y, int nb, int t, int n,
                                int rows) {
    __global const block_iq4_xs* x = (__global const block_iq4_xs*)row;
    if (n >= TILED_MIN_BATCH) {
        float acc = 0.0f;
        for (int i = 0; i < nb; ++i) {
            int sumi = 0;
            for (int ib = 0; ib < 8; ++ib) {
                int sub = 0;
                for (int l = 0; l < 8; ++l) sub += lane_iq4(x[i].qs + 16 * ib, y[i].qs + 32 * ib, l);
                sumi += scale_iq4_xs(x + i, ib) * sub;
            }
            acc = fma((float)sumi * half_at(&x[i].d), y[i].d, acc);
        }
        return acc;
    }
    float acc[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    for (int i = 0; i < nb; ++i) {
        int ls[8];
        for (int ib = 0; ib < 8; ++ib) ls[ib] = scale_iq4_xs(x + i, ib);
        const float d = half_at(&x[i].d) * y[i].d;
        for (int l = 0; l < 8; ++l) {
            int lane = 0;
            for (int ib = 0; ib < 8; ++ib) lane += ls[ib] * lane_iq4(x[i].qs + 16 * ib, y[i].qs + 32 * ib, l);
            acc[l] = fma(d, (float)lane, acc[l]);
        }
    }
    return hsum8(acc);
}
