// The ternary types (TQ1_0, TQ2_0) against Q8_K: a weight row times one row of quantized
// activations as the CPU's 256-bit kernels compute it (cpu/x86/iq1_tq_256.h, which the AVX2 and
// AVX-512 units both run), so the device's products are the CPU's bit for bit. Needs vec_dot.cl
// first (half_at, hsum8).
//
// The integers are exact on both sides; what matters is which of 8 int32 lanes a product sits in
// and the float order. Lane k = sum of t * y over the elements at positions 4k .. 4k + 3 of each
// 32-element slice (t the stored digit 0..2), minus bsums[2k] + bsums[2k + 1] (so sum (t - 1) * y
// in total); per super-block acc[k] = fma(lane, d_y * d_x, acc[k]); then hsum8. The CPU has no
// tiled order for these: every batch multiplies in this one.
#pragma OPENCL FP_CONTRACT OFF  // every fma is spelled out, every other product rounded, as on the CPU

// Digit k of a TQ1_0 byte b: ((uint8_t)(b * 3^k) * 3) >> 8 (quant/blocks.h block_tq1_0).
inline int tq1_digit(uint b, int k) {
    const uint pow3[5] = {1, 3, 9, 27, 81};
    return (int)((((b * pow3[k]) & 255) * 3) >> 8);
}

// t_<type>(b, e): the digit t (0..2) of element e (0..255), in quant/blocks.h's element order.
inline int t_tq1_0(__global const block_tq1_0* b, int e) {
    if (e < 160) return tq1_digit(b->qs[e % 32], e / 32);
    if (e < 240) return tq1_digit(b->qs[32 + (e - 160) % 16], (e - 160) / 16);
    return tq1_digit(b->qh[(e - 240) % 4], (e - 240) / 4);
}

inline int t_tq2_0(__global const block_tq2_0* b, int e) {
    return (b->qs[32 * (e / 128) + e % 32] >> (2 * ((e / 32) % 4))) & 3;
}

#define TERNARY_ROW(TYPE)                                                                           \
    inline float vec_dot_row_##TYPE(__global const uchar* row, __global const block_q8_K* y, int nb, \
                                    int t, int n, int rows) {                                      \
        __global const block_##TYPE* x = (__global const block_##TYPE*)row;                          \
        float acc[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};                            \
        for (int i = 0; i < nb; ++i) {                                                              \
            const float d = y[i].d * half_at(&x[i].d);                                               \
            for (int k = 0; k < 8; ++k) {                                                           \
                int lane = -(y[i].bsums[2 * k] + y[i].bsums[2 * k + 1]);                            \
                for (int c = 0; c < QK_K / 32; ++c)                                                 \
                    for (int e = 32 * c + 4 * k; e < 32 * c + 4 * k + 4; ++e)                         \
                        lane += t_##TYPE(x + i, e) * y[i].qs[e];                                    \
                acc[k] = fma((float)lane, d, acc[k]);                                               \
            }                                                                                       \
        }                                                                                           \
        return hsum8(acc);                                                                          \
    }
TERNARY_ROW(tq1_0)
TERNARY_ROW(tq2_0)
