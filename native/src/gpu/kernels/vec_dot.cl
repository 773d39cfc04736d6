// A weight row times one row of quantized activations (quantize_act.cl), computed as the CPU's
// 256-bit kernels compute it (cpu/x86/quants_256.h, kquants_256.h; the AVX2 and AVX-512 units
// both run those), down to the order of every float operation, so the device's products are
// the CPU's bit for bit:
//   - per block, exact integer sums in 8 lanes, lane l holding the products of the elements
//     whose index mod 32 is 4l .. 4l + 3 (what maddubs + madd leave in an 8 x int32 register);
//   - per lane, acc[l] = fma(d_x * d_y, float(lane), acc[l]), block after block;
//   - then hsum8: (acc[0] + acc[4] + acc[2] + acc[6]) + (acc[1] + acc[5] + acc[3] + acc[7])
//     as ((a0+a4) + (a2+a6)) + ((a1+a5) + (a3+a7)).
// The k-quants have several orders, chosen as the CPU's matmul (cpu/matmul.cpp) chooses them:
// Q4_K weights whose row count is a multiple of 8 take llama.cpp's repacked GEMV / GEMM order
// (the GEMM for the activation rows in whole groups of 4), other k-quant weights the tiled order
// from 8 activation rows up, and vec_dot's lanes below that.
//
// vec_dot_row_<type>(row, y, nb, t, n, rows): row = the weight row's first byte, y = the
// activation row's nb blocks, t = its index in a batch of n rows, rows = the weight's row count.
// The i-quants' rows are in vec_dot_iquants.cl, which builds on this file's helpers.
#pragma OPENCL FP_CONTRACT OFF  // every fma is spelled out, every other product rounded, as on the CPU

inline float half_at(__global const ushort* p) { return vload_half(0, (__global const half*)p); }

// The horizontal sum of 8 lanes in hsum_float_8's order.
inline float hsum8(const float* a) {
    return ((a[4] + a[0]) + (a[6] + a[2])) + ((a[5] + a[1]) + (a[7] + a[3]));
}

#define TILED_MIN_BATCH 8   // kTiledMinBatch (cpu/matmul.cpp)

// ---- 32-element blocks ------------------------------------------------------------------------

// The quant of element e of a block, as a signed value (q - 8 for q4_0, q - 16 for q5_0).
inline int q_at_q4_0(__global const block_q4_0* b, int e) {
    return (int)(e < 16 ? (b->qs[e] & 15) : (b->qs[e - 16] >> 4)) - 8;
}
inline int q_at_q4_1(__global const block_q4_1* b, int e) {
    return (int)(e < 16 ? (b->qs[e] & 15) : (b->qs[e - 16] >> 4));
}
inline int q_at_q5_0(__global const block_q5_0* b, int e) {
    const uint qh = (uint)b->qh[0] | (uint)b->qh[1] << 8 | (uint)b->qh[2] << 16 | (uint)b->qh[3] << 24;
    const int low = e < 16 ? (b->qs[e] & 15) : (b->qs[e - 16] >> 4);
    return (low | (int)((qh >> e) & 1) << 4) - 16;
}
inline int q_at_q8_0(__global const block_q8_0* b, int e) { return b->qs[e]; }

// The minimum term of a block, accumulated apart from the lanes: Q4_1's summs = fma(m_x, s_y,
// summs); nothing for the types without a minimum.
#define NO_MIN_TERM(x, y, summs) (summs)
#define MIN_TERM_Q4_1(x, y, summs) fma(half_at(&(x)->m), half_at(&(y)->s), summs)

// acc[l] = fma(d_x * d_y, lane l, acc[l]) over the row's blocks, then hsum8(acc) + summs.
#define LEGACY_ROW(TYPE, ACT, MIN_TERM)                                                             \
    inline float vec_dot_row_##TYPE(__global const uchar* row, __global const ACT* y, int nb, int t, \
                                    int n, int rows) {                                             \
        __global const block_##TYPE* x = (__global const block_##TYPE*)row;                          \
        float acc[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};                            \
        float summs = 0.0f;                                                                         \
        for (int i = 0; i < nb; ++i) {                                                              \
            summs = MIN_TERM(x + i, y + i, summs);                                                  \
            const float d = half_at(&x[i].d) * half_at(&y[i].d);                                     \
            for (int l = 0; l < 8; ++l) {                                                           \
                int lane = 0;                                                                       \
                for (int e = 4 * l; e < 4 * l + 4; ++e) lane += q_at_##TYPE(x + i, e) * y[i].qs[e];    \
                acc[l] = fma(d, (float)lane, acc[l]);                                               \
            }                                                                                       \
        }                                                                                           \
        return hsum8(acc) + summs; /* + 0 without a minimum: exact */                               \
    }
LEGACY_ROW(q4_0, block_q8_0, NO_MIN_TERM)
LEGACY_ROW(q4_1, block_q8_1, MIN_TERM_Q4_1)
LEGACY_ROW(q5_0, block_q8_0, NO_MIN_TERM)
LEGACY_ROW(q8_0, block_q8_0, NO_MIN_TERM)

// ---- Q4_K ---------------------------------------------------------------------------------

// The 8 scales and 8 mins (6 bits each) of a q4_K super-block (ggml's get_scale_min_k4).
inline void scales_mins_q4_K(__global const block_q4_K* b, int* sc, int* mn) {
    __global const uchar* s = b->scales;
    for (int j = 0; j < 4; ++j) {
        sc[j] = s[j] & 63;
        mn[j] = s[j + 4] & 63;
        sc[j + 4] = (s[j + 8] & 15) | ((s[j] >> 6) << 4);
        mn[j + 4] = (s[j + 8] >> 4) | ((s[j + 4] >> 6) << 4);
    }
}

// dot(q, y) over the 32 elements of sub-block s, or over its elements 4l .. 4l + 3 (mod 32).
inline int dot_q4_K(__global const block_q4_K* b, __global const block_q8_K* y, int s, int e0, int len) {
    __global const uchar* q = b->qs + 32 * (s / 2);
    const int shift = 4 * (s % 2);
    int sum = 0;
    for (int e = e0; e < e0 + len; ++e) sum += ((q[e] >> shift) & 15) * y->qs[32 * s + e];
    return sum;
}

// m[2j] * (bsums[4j] + bsums[4j+1]) + m[2j+1] * (bsums[4j+2] + bsums[4j+3]): lane j of the
// minimum term.
inline int min_lane_q4_K(const int* mn, __global const block_q8_K* y, int j) {
    return mn[2 * j] * (y->bsums[4 * j] + y->bsums[4 * j + 1]) + mn[2 * j + 1] * (y->bsums[4 * j + 2] + y->bsums[4 * j + 3]);
}

inline float vec_dot_row_q4_K(__global const uchar* row, __global const block_q8_K* y, int nb, int t, int n, int rows) {
    __global const block_q4_K* x = (__global const block_q4_K*)row;
    int sc[8], mn[8];
    if (rows % 8 == 0) {
        // Repacked: the GEMM (activation rows in whole groups of 4) folds every pair of
        // sub-blocks into the floats, the GEMV (the rest) every super-block.
        const bool gemm = t < n - n % 4;
        float acc = 0.0f, acc_m = 0.0f;
        for (int i = 0; i < nb; ++i) {
            scales_mins_q4_K(x + i, sc, mn);
            const float d = half_at(&x[i].d) * y[i].d, dmin = half_at(&x[i].dmin) * y[i].d;
            int sumi = 0, summ = 0;
            for (int j = 0; j < 4; ++j) {
                const int isum = sc[2 * j] * dot_q4_K(x + i, y + i, 2 * j, 0, 32) +
                                 sc[2 * j + 1] * dot_q4_K(x + i, y + i, 2 * j + 1, 0, 32);
                const int imin = min_lane_q4_K(mn, y + i, j);
                if (gemm) {
                    acc = fma((float)isum, d, acc);
                    acc_m = fma((float)imin, dmin, acc_m);
                }
                sumi += isum;
                summ += imin;
            }
            if (!gemm) {
                acc = fma((float)sumi, d, acc);
                acc_m = fma((float)summ, dmin, acc_m);
            }
        }
        return acc - acc_m;
    }
    if (n >= TILED_MIN_BATCH) {  // tiled: r = fma(-dmin_x, summ, sumi * d_x); acc = fma(r, d_y, acc)
        float acc = 0.0f;
        for (int i = 0; i < nb; ++i) {
            scales_mins_q4_K(x + i, sc, mn);
            int sumi = 0, summ = 0;
            for (int s = 0; s < 8; ++s) sumi += sc[s] * dot_q4_K(x + i, y + i, s, 0, 32);
            for (int j = 0; j < 4; ++j) summ += min_lane_q4_K(mn, y + i, j);
            const float r = fma(-half_at(&x[i].dmin), (float)summ, (float)sumi * half_at(&x[i].d));
            acc = fma(r, y[i].d, acc);
        }
        return acc;
    }
    // vec_dot: 8 lanes for the scaled products, 4 for the minimum term (its own accumulators,
    // summed as (m0 + m2) + (m1 + m3)).
    float acc[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f}, acc_m[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int i = 0; i < nb; ++i) {
        scales_mins_q4_K(x + i, sc, mn);
        const float d = y[i].d * half_at(&x[i].d), dmin = -y[i].d * half_at(&x[i].dmin);
        for (int j = 0; j < 4; ++j) acc_m[j] = fma(dmin, (float)min_lane_q4_K(mn, y + i, j), acc_m[j]);
        for (int l = 0; l < 8; ++l) {
            int lane = 0;
            for (int s = 0; s < 8; ++s) lane += sc[s] * dot_q4_K(x + i, y + i, s, 4 * l, 4);
            acc[l] = fma(d, (float)lane, acc[l]);
        }
    }
    return hsum8(acc) + ((acc_m[0] + acc_m[2]) + (acc_m[1] + acc_m[3]));
}

// ---- Q6_K ---------------------------------------------------------------------------------

// Lane l (0..7) of a q6_K super-block as the CPU forms it: the unsigned 6-bit quants (0..63)
// times y, each 16-element sub-block times its scale, elements 4l .. 4l + 3 of every 32-element
// chunk; minus 32 * (sc[2l] * bsums[2l] + sc[2l+1] * bsums[2l+1]), the -32 offset taken from
// the activation sums.
inline int lane_q6_K(__global const block_q6_K* b, __global const block_q8_K* y, int l) {
    int sum = 0;
    for (int h = 0; h < 2; ++h)
        for (int k = 0; k < 4; ++k) {
            __global const uchar* ql = b->ql + 64 * h + (k & 1) * 32;
            __global const uchar* qh = b->qh + 32 * h;
            __global const char* q8 = y->qs + 128 * h + 32 * k;
            int dot = 0;
            for (int e = 4 * l; e < 4 * l + 4; ++e)
                dot += (((ql[e] >> (4 * (k >> 1))) & 15) | (((qh[e] >> (2 * k)) & 3) << 4)) * q8[e];
            sum += b->scales[8 * h + 2 * k + (l >= 4)] * dot;
        }
    return sum - 32 * (b->scales[2 * l] * y->bsums[2 * l] + b->scales[2 * l + 1] * y->bsums[2 * l + 1]);
}

inline float vec_dot_row_q6_K(__global const uchar* row, __global const block_q8_K* y, int nb, int t, int n, int rows) {
    __global const block_q6_K* x = (__global const block_q6_K*)row;
    if (n >= TILED_MIN_BATCH) {  // tiled: r = sumi * d_x; acc = fma(r, d_y, acc)
        float acc = 0.0f;
        for (int i = 0; i < nb; ++i) {
            int sumi = 0;
            for (int l = 0; l < 8; ++l) sumi += lane_q6_K(x + i, y + i, l);
            acc = fma((float)sumi * half_at(&x[i].d), y[i].d, acc);
        }
        return acc;
    }
    float acc[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    for (int i = 0; i < nb; ++i) {
        const float d = y[i].d * half_at(&x[i].d);
        for (int l = 0; l < 8; ++l) acc[l] = fma(d, (float)lane_q6_K(x + i, y + i, l), acc[l]);
    }
    return hsum8(acc);
}
