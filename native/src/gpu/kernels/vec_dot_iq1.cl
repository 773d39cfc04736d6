// The 1-bit i-quants (IQ1_S, IQ1_M) against Q8_K: a weight row times one row of quantized
// activations as the CPU's 256-bit kernels compute it (cpu/x86/iq1_tq_256.h, which the AVX2 and
// AVX-512 units both run), so the device's products are the CPU's bit for bit. Needs vec_dot.cl
// first (half_at, hsum8, TILED_MIN_BATCH) and iq1_grids.cl (kIq1sGrid, kIq1Delta), generated from
// quant/iq1_grids.h.
//
// The integers are exact on both sides; what matters is which of 8 int32 lanes a product sits in
// (lane k: the elements at positions 4k .. 4k + 3 of each 32-element sub-block) and the float order:
//   IQ1_S: lane k = sum over sub-blocks of (2 s + 1) * (g . y); per super-block acc[k] =
//     fma(d, lane, acc[k]), d = d_y * d_x, and acc_delta = fma(d, delta, acc_delta), delta the
//     sub-blocks' (2 s + 1) * sign * (their y sum); hsum8(acc) + (kIq1Delta * acc_delta, rounded).
//   IQ1_M: two sets of lanes, of (2 s + 1) * (g . y) and of (2 s + 1) * sign * y (s the scale of
//     the lane's half sub-block), both fma'd by d per super-block; fma(hsum8(delta), kIq1Delta,
//     hsum8(acc)).
//   From TILED_MIN_BATCH rows (ggml's tiled GEMM, as the CPU's matmul), for both: per super-block
//     isum = 8 * (the lanes' sum) + (the deltas' sum), acc = fma(isum * (d_x * 1/8), d_y, acc).
#pragma OPENCL FP_CONTRACT OFF  // every fma is spelled out, every other product rounded, as on the CPU

// Value j (-1, 0, 1) of grid group idx: byte j of the point, an int8.
inline int iq1_value(uint idx, int j) { return (int)(char)((kIq1sGrid[idx] >> (8 * j)) & 255); }

// IQ1_S sub-block ib: group g's grid index; the scale 2 s + 1 (one for both halves h); the
// delta's sign is bit 15 of qh[ib] (delta_sum_iq1_s).
inline uint iq1_s_index(__global const block_iq1_s* b, int ib, int g) {
    return b->qs[4 * ib + g] | ((b->qh[ib] >> (3 * g)) & 7) << 8;
}
inline int iq1_s_scale(__global const block_iq1_s* b, int ib, int h) {
    return 2 * ((b->qh[ib] >> 12) & 7) + 1;
}

// IQ1_M: group g (0..3) of sub-block ib, its index and delta sign from byte qh[2 ib + g / 2]
// (bits 0..2 and 3 for the even group, 4..6 and 7 for the odd one); the scale of half h (0, 1).
inline uint iq1_m_index(__global const block_iq1_m* b, int ib, int g) {
    return b->qs[4 * ib + g] | ((b->qh[2 * ib + g / 2] >> (4 * (g % 2))) & 7) << 8;
}
inline int iq1_m_sign(__global const block_iq1_m* b, int ib, int g) {
    return (b->qh[2 * ib + g / 2] >> (4 * (g % 2) + 3)) & 1 ? -1 : 1;
}
inline uint iq1_m_word(__global const block_iq1_m* b, int w) {  // little-endian uint16 w of scales
    return b->scales[2 * w] | (uint)b->scales[2 * w + 1] << 8;
}
inline int iq1_m_scale(__global const block_iq1_m* b, int ib, int h) {
    return 2 * ((iq1_m_word(b, ib / 2) >> (6 * (ib % 2) + 3 * h)) & 7) + 1;
}
inline float d_iq1_s(__global const block_iq1_s* b) { return half_at(&b->d); }
// The super-block scale d. IQ1_M's fp16 d: the top nibbles of the four scale words, word 0's lowest.
inline float d_iq1_m(__global const block_iq1_m* b) {
    const ushort bits = (ushort)((iq1_m_word(b, 0) >> 12) | ((iq1_m_word(b, 1) >> 8) & 0x00f0) |
                                 ((iq1_m_word(b, 2) >> 4) & 0x0f00) | (iq1_m_word(b, 3) & 0xf000));
    return vload_half(0, (const half*)&bits);
}

// Lane k (elements 4k .. 4k + 3 of each sub-block, in group k / 2 and half k / 4) of the grid dot
// products.
#define IQ1_LANE(TYPE)                                                                              \
    inline int lane_##TYPE(__global const block_##TYPE* x, __global const block_q8_K* y, int k) {   \
        int lane = 0;                                                                               \
        for (int ib = 0; ib < QK_K / 32; ++ib) {                                                    \
            const uint idx = TYPE##_index(x, ib, k / 2);                                            \
            int dot = 0;                                                                            \
            for (int e = 4 * k; e < 4 * k + 4; ++e) dot += iq1_value(idx, e % 8) * y->qs[32 * ib + e]; \
            lane += TYPE##_scale(x, ib, k >= 4) * dot;                                              \
        }                                                                                           \
        return lane;                                                                                \
    }
IQ1_LANE(iq1_s)
IQ1_LANE(iq1_m)
// IQ1_M's delta lane k: (2 s + 1) * sign * (the 4 activations), over the sub-blocks.
inline int delta_lane_iq1_m(__global const block_iq1_m* x, __global const block_q8_K* y, int k) {
    int lane = 0;
    for (int ib = 0; ib < QK_K / 32; ++ib) {
        int sum = 0;
        for (int e = 4 * k; e < 4 * k + 4; ++e) sum += y->qs[32 * ib + e];
        lane += iq1_m_scale(x, ib, k >= 4) * iq1_m_sign(x, ib, k / 2) * sum;
    }
    return lane;
}
// The deltas' integer of a super-block: IQ1_S's one, the sum of IQ1_M's lanes.
inline int delta_sum_iq1_s(__global const block_iq1_s* x, __global const block_q8_K* y) {
    int delta = 0;
    for (int ib = 0; ib < QK_K / 32; ++ib) {
        const int ls = iq1_s_scale(x, ib, 0);
        delta += (y->bsums[2 * ib] + y->bsums[2 * ib + 1]) * (x->qh[ib] & 0x8000 ? -ls : ls);
    }
    return delta;
}
inline int delta_sum_iq1_m(__global const block_iq1_m* x, __global const block_q8_K* y) {
    int sum = 0;
    for (int k = 0; k < 8; ++k) sum += delta_lane_iq1_m(x, y, k);
    return sum;
}

// The tiled order (the header), the same for both.
#define IQ1_TILED(TYPE)                                                                             \
    inline float tiled_##TYPE(__global const block_##TYPE* x, __global const block_q8_K* y, int nb) { \
        float acc = 0.0f;                                                                           \
        for (int i = 0; i < nb; ++i) {                                                              \
            int sum = 0;                                                                            \
            for (int k = 0; k < 8; ++k) sum += lane_##TYPE(x + i, y + i, k);                        \
            const int isum = 8 * sum + delta_sum_##TYPE(x + i, y + i);                              \
            acc = fma((float)isum * (d_##TYPE(x + i) * 0.125f), y[i].d, acc);                      \
        }                                                                                           \
        return acc;                                                                                 \
    }
IQ1_TILED(iq1_s)
IQ1_TILED(iq1_m)

inline float vec_dot_row_iq1_s(__global const uchar* row, __global const block_q8_K* y, int nb, int t, int n,
                               int rows) {
    __global const block_iq1_s* x = (__global const block_iq1_s*)row;
    if (n >= TILED_MIN_BATCH) return tiled_iq1_s(x, y, nb);
    float acc[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    float acc_delta = 0.0f;
    for (int i = 0; i < nb; ++i) {
        const float d = y[i].d * d_iq1_s(x + i);
        for (int k = 0; k < 8; ++k) acc[k] = fma(d, (float)lane_iq1_s(x + i, y + i, k), acc[k]);
        acc_delta = fma(d, (float)delta_sum_iq1_s(x + i, y + i), acc_delta);
    }
    const float delta = kIq1Delta * acc_delta;
    return hsum8(acc) + delta;
}

inline float vec_dot_row_iq1_m(__global const uchar* row, __global const block_q8_K* y, int nb, int t, int n,
                               int rows) {
    __global const block_iq1_m* x = (__global const block_iq1_m*)row;
    if (n >= TILED_MIN_BATCH) return tiled_iq1_m(x, y, nb);
    float acc[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    float acc_delta[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    for (int i = 0; i < nb; ++i) {
        const float d = y[i].d * d_iq1_m(x + i);
        for (int k = 0; k < 8; ++k) {
            acc[k] = fma(d, (float)lane_iq1_m(x + i, y + i, k), acc[k]);
            acc_delta[k] = fma(d, (float)delta_lane_iq1_m(x + i, y + i, k), acc_delta[k]);
        }
    }
    return fma(hsum8(acc_delta), kIq1Delta, hsum8(acc));
}
