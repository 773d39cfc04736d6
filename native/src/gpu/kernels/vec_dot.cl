// One weight block times the matching block of quantized activations (quantize_act.cl), as the
// CPU's vec_dot computes it (quant/ref_legacy.cpp, ref_kquants.cpp): the exact integer sum of
// the block, then the same float combination. vec_dot_<type>(row, i, y) is block i of a weight
// row (row: its first byte) against y, the activation row's block i (k-quants: super-block i).
// Only the float summation order across blocks may differ from the CPU (the matmul kernels'
// reduction): ~1e-7 relative.
#pragma OPENCL FP_CONTRACT OFF  // the CPU rounds each product and sum; so must we

inline float half_at(__global const ushort* p) { return vload_half(0, (__global const half*)p); }

// sum(q[j] * y[j]) over a 32-element block of nibbles (element j low, j + 16 high), each
// nibble minus `offset`.
inline int dot_nibbles(__global const uchar* qs, __global const char* y, int offset) {
    int s = 0;
    for (int j = 0; j < 16; ++j) {
        s += ((int)(qs[j] & 15) - offset) * y[j];
        s += ((int)(qs[j] >> 4) - offset) * y[j + 16];
    }
    return s;
}

// s = (d_x * d_y) * sum((q - 8) * y)
inline float vec_dot_q4_0(__global const uchar* row, int i, __global const block_q8_0* y) {
    __global const block_q4_0* b = (__global const block_q4_0*)row + i;
    const int sumi = dot_nibbles(b->qs, y->qs, 8);
    return (half_at(&b->d) * half_at(&y->d)) * (float)sumi;
}

// s = (d_x * d_y) * sum(q * y) + m_x * s_y
inline float vec_dot_q4_1(__global const uchar* row, int i, __global const block_q8_1* y) {
    __global const block_q4_1* b = (__global const block_q4_1*)row + i;
    const int sumi = dot_nibbles(b->qs, y->qs, 0);
    return (half_at(&b->d) * half_at(&y->d)) * (float)sumi + half_at(&b->m) * half_at(&y->s);
}

// s = (d_x * d_y) * sum((q - 16) * y), the fifth bit of q[j] being bit j of qh
inline float vec_dot_q5_0(__global const uchar* row, int i, __global const block_q8_0* y) {
    __global const block_q5_0* b = (__global const block_q5_0*)row + i;
    const uint qh = (uint)b->qh[0] | (uint)b->qh[1] << 8 | (uint)b->qh[2] << 16 | (uint)b->qh[3] << 24;
    int sumi = 0;
    for (int j = 0; j < 16; ++j) {
        const int lo = (b->qs[j] & 15) | ((qh >> j) & 1) << 4;
        const int hi = (b->qs[j] >> 4) | ((qh >> (j + 16)) & 1) << 4;
        sumi += (lo - 16) * y->qs[j] + (hi - 16) * y->qs[j + 16];
    }
    return (half_at(&b->d) * half_at(&y->d)) * (float)sumi;
}

// s = (d_x * d_y) * sum(q * y)
inline float vec_dot_q8_0(__global const uchar* row, int i, __global const block_q8_0* y) {
    __global const block_q8_0* b = (__global const block_q8_0*)row + i;
    int sumi = 0;
    for (int j = 0; j < QK8_0; ++j) sumi += b->qs[j] * y->qs[j];
    return (half_at(&b->d) * half_at(&y->d)) * (float)sumi;
}

// Super-block: sumi = sum over the 8 sub-blocks of sc * dot(q, y), summ = sum of mn * (the
// sub-block's two bsums); s = (d_y * d_x) * sumi - (d_y * dmin_x) * summ. sc/mn are the 6-bit
// values packed in scales (ggml's get_scale_min_k4); sub-blocks 2p and 2p+1 share
// qs[32p .. 32p+31], low nibble then high nibble.
inline float vec_dot_q4_K(__global const uchar* row, int i, __global const block_q8_K* y) {
    __global const block_q4_K* b = (__global const block_q4_K*)row + i;
    __global const uchar* sc = b->scales;
    int sumi = 0, summ = 0;
    for (int s = 0; s < 8; ++s) {
        int scale, min;
        if (s < 4) {
            scale = sc[s] & 63;
            min = sc[s + 4] & 63;
        } else {
            scale = (sc[s + 4] & 15) | ((sc[s - 4] >> 6) << 4);
            min = (sc[s + 4] >> 4) | ((sc[s] >> 6) << 4);
        }
        __global const uchar* q = b->qs + 32 * (s / 2);
        __global const char* q8 = y->qs + 32 * s;
        const int shift = (s % 2) * 4;
        int dot = 0;
        for (int j = 0; j < 32; ++j) dot += ((q[j] >> shift) & 15) * q8[j];
        sumi += scale * dot;
        summ += min * (y->bsums[2 * s] + y->bsums[2 * s + 1]);
    }
    const float d = y->d * half_at(&b->d), dmin = y->d * half_at(&b->dmin);
    return d * (float)sumi - dmin * (float)summ;
}

// Super-block of 16 sub-blocks of 16: sumi = sum of scales[sub] * dot(q - 32, y);
// s = (d_y * d_x) * sumi. Element 128h + 32k + l takes the low (k < 2) or high nibble of
// ql[64h + 32 (k & 1) + l] and bits 2k..2k+1 of qh[32h + l]; its sub-block is (128h + 32k + l) / 16.
inline float vec_dot_q6_K(__global const uchar* row, int i, __global const block_q8_K* y) {
    __global const block_q6_K* b = (__global const block_q6_K*)row + i;
    int sumi = 0;
    for (int h = 0; h < 2; ++h)
        for (int k = 0; k < 4; ++k) {
            __global const uchar* ql = b->ql + 64 * h + (k & 1) * 32;
            __global const uchar* qh = b->qh + 32 * h;
            __global const char* q8 = y->qs + 128 * h + 32 * k;
            const int nibble_shift = (k >> 1) * 4, high_shift = 2 * k;
            for (int half16 = 0; half16 < 2; ++half16) {
                int dot = 0;
                for (int l = 16 * half16; l < 16 * half16 + 16; ++l) {
                    const int q = (((ql[l] >> nibble_shift) & 15) | (((qh[l] >> high_shift) & 3) << 4)) - 32;
                    dot += q * q8[l];
                }
                sumi += b->scales[8 * h + 2 * k + half16] * dot;
            }
        }
    return (y->d * half_at(&b->d)) * (float)sumi;
}
