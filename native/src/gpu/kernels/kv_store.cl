// Rows of the KV cache written on the device, in each cache type. The quantized ones use ggml's
// reference quantizers (quant/quantize_legacy.cpp), so the host staging copy (snapshots, saved
// states) is an ordinary cache of that type.
//   src: [n][width] floats -> cache rows pos0 .. pos0 + n - 1 of width values

// Rows of n float values into the cache at positions pos0 .. pos0 + n - 1 (width values each),
// rounded to nearest even as the CPU's F16 cache stores them. Global size (width, n).
__kernel void kv_store_f16(__global const float* src, __global half* cache, int pos0, int width) {
    const int i = get_global_id(0), t = get_global_id(1);
    vstore_half_rte(src[(ulong)t * width + i], (ulong)(pos0 + t) * width + i, cache);
}

// Quantized: cache [n_ctx][width / 32] blocks; global size (width / 32, n), one item per block.

// q8_0: d = amax / 127, q = round(x / d) (half away from zero), x / d taken as x * (1 / d).
__kernel void kv_store_q8_0(__global const float* src, __global block_q8_0* cache, int pos0, int width) {
    const int b = get_global_id(0), t = get_global_id(1);
    const int blocks = width / QK8_0;
    __global const float* x = src + (ulong)t * width + b * QK8_0;
    __global block_q8_0* y = cache + (ulong)(pos0 + t) * blocks + b;
    float amax = 0.0f;
    for (int j = 0; j < QK8_0; ++j) amax = max(amax, fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    vstore_half_rte(d, 0, (__global half*)&y->d);
    for (int j = 0; j < QK8_0; ++j) y->qs[j] = (char)round(x[j] * id);
}

// q4_0: m = the element of largest magnitude (the first on ties), d = m / -8,
// q = min(15, trunc(x / d + 8.5)); element j in the low nibble of qs[j], j + 16 in the high one.
__kernel void kv_store_q4_0(__global const float* src, __global block_q4_0* cache, int pos0, int width) {
    const int b = get_global_id(0), t = get_global_id(1);
    const int blocks = width / QK4_0;
    __global const float* x = src + (ulong)t * width + b * QK4_0;
    __global block_q4_0* y = cache + (ulong)(pos0 + t) * blocks + b;
    float amax = 0.0f, m = 0.0f;
    for (int j = 0; j < QK4_0; ++j) {
        if (amax < fabs(x[j])) {
            amax = fabs(x[j]);
            m = x[j];
        }
    }
    const float d = m / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    vstore_half_rte(d, 0, (__global half*)&y->d);
    for (int j = 0; j < QK4_0 / 2; ++j) {
        const int lo = min(15, (int)(char)(x[j] * id + 8.5f));
        const int hi = min(15, (int)(char)(x[j + 16] * id + 8.5f));
        y->qs[j] = (uchar)(lo | (hi << 4));
    }
}
