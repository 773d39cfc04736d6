// Rows of the KV cache written on the device, in each cache type, with the CPU cache's quantizers
// (q8_0: ggml-cpu's x86 quantize_row_q8_0; q4_0: kv/kv_cache.cpp's own), so the
// host staging copy (snapshots, saved states) holds the bytes the CPU would have stored.
#pragma OPENCL FP_CONTRACT OFF  // the CPU's quantizers multiply and add without fma
//   src: [n][width] floats -> cache rows pos0 .. pos0 + n - 1 of width values

// Rows of n float values into the cache at positions pos0 .. pos0 + n - 1 (width values each),
// rounded to nearest even as the CPU's F16 cache stores them. Global size (width, n).
__kernel void kv_store_f16(__global const float* src, __global half* cache, int pos0, int width) {
    const int i = get_global_id(0), t = get_global_id(1);
    vstore_half_rte(src[(ulong)t * width + i], (ulong)(pos0 + t) * width + i, cache);
}

// Quantized: cache [n_ctx][width / 32] blocks; global size (width / 32, n), one item per block.

// q8_0: the CPU's from_float for Q8_0 (quantize_act.cl's quantize_block_q8, which this program
// includes: d = amax / 127, q = round-half-even(x * (127 / amax))).
__kernel void kv_store_q8_0(__global const float* src, __global block_q8_0* cache, int pos0, int width) {
    const int b = get_global_id(0), t = get_global_id(1);
    const int blocks = width / QK8_0;
    __global block_q8_0* y = cache + (ulong)(pos0 + t) * blocks + b;
    int sum;
    const float d = quantize_block_q8(src + (ulong)t * width + b * QK8_0, y->qs, &sum);
    vstore_half_rte(d, 0, (__global half*)&y->d);
}

// q4_0: the KV cache's own quantizer (kv/kv_cache.cpp, store_row_q4_0), operation for operation:
// each block's scale d is searched over m / -8 and m / 7 (m: the element of largest magnitude, the
// first on ties) shrunk by 0 .. 30 % in steps of 2.5 %, each candidate rounded to F16 as stored;
// the one with the least squared error (the first on ties) is kept. q = clamp(rint(x / d), -8, 7)
// + 8, x / d taken as x * (1 / d); element j in the low nibble of qs[j], j + 16 in the high one.
inline float to_half_and_back(float x) {
    ushort h;
    vstore_half_rte(x, 0, (__private half*)&h);
    return vload_half(0, (__private const half*)&h);
}

inline float q4_0_level(float x, float id) { return fmin(7.0f, fmax(-8.0f, rint(x * id))); }

__kernel void kv_store_q4_0(__global const float* src, __global block_q4_0* cache, int pos0, int width) {
    const int b = get_global_id(0), t = get_global_id(1);
    const int blocks = width / QK4_0;
    __global const float* xg = src + (ulong)t * width + b * QK4_0;
    __global block_q4_0* y = cache + (ulong)(pos0 + t) * blocks + b;
    float x[QK4_0];
    float amax = 0.0f, m = 0.0f;
    for (int j = 0; j < QK4_0; ++j) {
        x[j] = xg[j];
        if (amax < fabs(x[j])) {
            amax = fabs(x[j]);
            m = x[j];
        }
    }
    float best_d = 0.0f, best_err = INFINITY;
    for (int side = 0; side < 2 && amax > 0.0f; ++side)
        for (int step = 0; step <= 12; ++step) {
            const float shrink = 1.0f - 0.025f * (float)step;
            const float d = to_half_and_back((side == 0 ? m / -8.0f : m / 7.0f) * shrink);
            if (d == 0.0f) continue;
            const float id = 1.0f / d;
            float err = 0.0f;
            for (int j = 0; j < QK4_0; ++j) {
                const float e = x[j] - d * q4_0_level(x[j], id);
                err += e * e;
            }
            if (err < best_err) {
                best_err = err;
                best_d = d;
            }
        }
    const float id = best_d != 0.0f ? 1.0f / best_d : 0.0f;
    vstore_half_rte(best_d, 0, (__global half*)&y->d);
    for (int j = 0; j < QK4_0 / 2; ++j) {
        const int lo = (int)q4_0_level(x[j], id) + 8;
        const int hi = (int)q4_0_level(x[j + QK4_0 / 2], id) + 8;
        y->qs[j] = (uchar)(lo | (hi << 4));
    }
}
