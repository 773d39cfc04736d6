// Every weight type the device multiplies with, read as 32-element chunks: dequant32_<type>(row,
// c, out) writes elements 32c .. 32c + 31 of a row (row: its first byte) to out. The formulas are
// those of quant/blocks.h and the scalar reference (quant/ref_legacy.cpp, ref_kquants.cpp); the
// structs come from the generated prelude. A chunk is the unit of work of the matmul kernels:
// one whole legacy block, or one 32-element sub-block of a k-quant super-block.

inline float half_at(__global const ushort* p) { return vload_half(0, (__global const half*)p); }

inline void dequant32_f32(__global const uchar* row, int c, __private float* out) {
    __global const float* x = (__global const float*)row + 32 * c;
    for (int j = 0; j < 32; ++j) out[j] = x[j];
}

inline void dequant32_f16(__global const uchar* row, int c, __private float* out) {
    __global const half* x = (__global const half*)row + 32 * c;
    for (int j = 0; j < 32; ++j) out[j] = vload_half(j, x);
}

// x[j] = d * (q[j] - 8)
inline void dequant32_q4_0(__global const uchar* row, int c, __private float* out) {
    __global const block_q4_0* b = (__global const block_q4_0*)row + c;
    const float d = half_at(&b->d);
    for (int j = 0; j < QK4_0 / 2; ++j) {
        out[j] = d * (float)((int)(b->qs[j] & 15) - 8);
        out[j + 16] = d * (float)((int)(b->qs[j] >> 4) - 8);
    }
}

// x[j] = d * q[j] + m
inline void dequant32_q4_1(__global const uchar* row, int c, __private float* out) {
    __global const block_q4_1* b = (__global const block_q4_1*)row + c;
    const float d = half_at(&b->d), m = half_at(&b->m);
    for (int j = 0; j < QK4_1 / 2; ++j) {
        out[j] = d * (float)(b->qs[j] & 15) + m;
        out[j + 16] = d * (float)(b->qs[j] >> 4) + m;
    }
}

// x[j] = d * (q[j] - 16), the fifth bit of q[j] being bit j of qh (little-endian)
inline void dequant32_q5_0(__global const uchar* row, int c, __private float* out) {
    __global const block_q5_0* b = (__global const block_q5_0*)row + c;
    const float d = half_at(&b->d);
    const uint qh = (uint)b->qh[0] | (uint)b->qh[1] << 8 | (uint)b->qh[2] << 16 | (uint)b->qh[3] << 24;
    for (int j = 0; j < QK5_0 / 2; ++j) {
        const int lo = (b->qs[j] & 15) | ((qh >> j) & 1) << 4;
        const int hi = (b->qs[j] >> 4) | ((qh >> (j + 16)) & 1) << 4;
        out[j] = d * (float)(lo - 16);
        out[j + 16] = d * (float)(hi - 16);
    }
}

// x[j] = d * qs[j]
inline void dequant32_q8_0(__global const uchar* row, int c, __private float* out) {
    __global const block_q8_0* b = (__global const block_q8_0*)row + c;
    const float d = half_at(&b->d);
    for (int j = 0; j < QK8_0; ++j) out[j] = d * (float)b->qs[j];
}

// Sub-block s of q4_K: x = d * sc[s] * q - dmin * mn[s], sc/mn the 6-bit values packed in
// scales (ggml's get_scale_min_k4); sub-blocks 2p and 2p+1 share qs[32p .. 32p+31], low nibble
// then high nibble.
inline void dequant32_q4_K(__global const uchar* row, int c, __private float* out) {
    __global const block_q4_K* b = (__global const block_q4_K*)row + c / 8;
    const int s = c % 8;
    __global const uchar* sc = b->scales;
    int scale, min;
    if (s < 4) {
        scale = sc[s] & 63;
        min = sc[s + 4] & 63;
    } else {
        scale = (sc[s + 4] & 15) | ((sc[s - 4] >> 6) << 4);
        min = (sc[s + 4] >> 4) | ((sc[s] >> 6) << 4);
    }
    const float d = half_at(&b->d) * (float)scale, m = half_at(&b->dmin) * (float)min;
    __global const uchar* q = b->qs + 32 * (s / 2);
    const int shift = (s % 2) * 4;
    for (int j = 0; j < 32; ++j) out[j] = d * (float)((q[j] >> shift) & 15) - m;
}

// Sub-blocks of q6_K in ggml's order: half h = c/8's 128 values use ql[64h ..], qh[32h ..],
// scales[8h ..]; within a half, quarter k takes ql[l] or ql[l + 32] (low nibble for k < 2, high
// for k >= 2) and bits 2k..2k+1 of qh[l]; x = d * scales[l / 16 + 2k] * (q - 32).
inline void dequant32_q6_K(__global const uchar* row, int c, __private float* out) {
    __global const block_q6_K* b = (__global const block_q6_K*)row + c / 8;
    const int s = c % 8, h = s / 4, k = s % 4;
    __global const uchar* ql = b->ql + 64 * h + (k & 1) * 32;
    __global const uchar* qh = b->qh + 32 * h;
    __global const char* sc = b->scales + 8 * h + 2 * k;
    const float d = half_at(&b->d);
    const int nibble_shift = (k >> 1) * 4, high_shift = 2 * k;
    for (int l = 0; l < 32; ++l) {
        const int q = (((ql[l] >> nibble_shift) & 15) | (((qh[l] >> high_shift) & 3) << 4)) - 32;
        out[l] = d * (float)sc[l / 16] * (float)q;
    }
}
