// What a rotated and / or centered K cache (kv/hadamard.h, kv/centered_k.h) adds around the
// device's stores and attention, operation for operation as the CPU does it, so that the device
// stores the CPU cache's bytes:
//   kv_encode_k:      K rows -> R((k - mu) / s)        (the rows kv_store then quantizes)
//   kv_center_v:      V rows -> v - nu
//   attention_query:  queries -> R(q * s) and the score bias scale * (q . mu)
// Each takes the rows src[row0 ..] of a batch, so that the batch's first rows (its positions
// below n_sink, kept in F16 beside the quantized rows) can be left out. centering: [3][width]
// floats, the layer's mu, s and nu (centering_from_sink, computed on the host).
#pragma OPENCL FP_CONTRACT OFF  // the CPU rounds every product and sum on its own

#define HADAMARD_MAX_DIM 256  // the largest head the attention kernels take (ATT_WG * 4)

// The fixed sign diagonal D of R = H D / sqrt(d): bit 0 of splitmix64(i) (kv/hadamard.cpp).
inline bool sign_flipped(ulong i) {
    ulong z = i + 0x9E3779B97F4A7C15UL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9UL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBUL;
    z ^= z >> 31;
    return (z & 1UL) != 0;
}

// x <- R x for one head vector of d values (a power of two): signs, log2(d) rounds of
// butterflies in the CPU's order, then the scale inv_sqrt_d = 1 / sqrt(d) (from the host).
inline void hadamard_rotate(__private float* x, int d, float inv_sqrt_d) {
    for (int i = 0; i < d; ++i)
        if (sign_flipped((ulong)i)) x[i] = -x[i];
    for (int len = 1; len < d; len <<= 1)
        for (int i = 0; i < d; i += 2 * len)
            for (int j = i; j < i + len; ++j) {
                const float a = x[j], b = x[j + len];
                x[j] = a + b;
                x[j + len] = a - b;
            }
    for (int i = 0; i < d; ++i) x[i] *= inv_sqrt_d;
}

// dst[t][width] = src[row0 + t] with each head vector centered (if centered) and rotated (if
// rotated). Global size (width / head_dim, n): one item per head vector.
__kernel void kv_encode_k(__global const float* src, __global float* dst, __global const float* centering,
                          int row0, int width, int head_dim, int centered, int rotated, float inv_sqrt_d) {
    const int h = get_global_id(0), t = get_global_id(1);
    const int c0 = h * head_dim;
    __global const float* k = src + (ulong)(row0 + t) * width + c0;
    float x[HADAMARD_MAX_DIM];
    for (int i = 0; i < head_dim; ++i)
        x[i] = centered ? (k[i] - centering[c0 + i]) / centering[width + c0 + i] : k[i];
    if (rotated) hadamard_rotate(x, head_dim, inv_sqrt_d);
    __global float* out = dst + (ulong)t * width + c0;
    for (int i = 0; i < head_dim; ++i) out[i] = x[i];
}

// dst[t][width] = src[row0 + t] - nu. Global size (width, n).
__kernel void kv_center_v(__global const float* src, __global float* dst, __global const float* centering,
                          int row0, int width) {
    const int i = get_global_id(0), t = get_global_id(1);
    dst[(ulong)t * width + i] = src[(ulong)(row0 + t) * width + i] - centering[2 * width + i];
}

// For query head h of row t (q: [n][n_head][head_dim]): qr = R(q * s) (* s if centered, R if
// rotated) and bias[t][h] = scale * (q . mu) (0 unless centered), with the CPU's summation order
// (kv/centered_attention.cpp). Query head h reads KV head h / group. Global size (n_head, n).
__kernel void attention_query(__global const float* q, ulong q0, __global float* qr, __global float* bias,
                              __global const float* centering, int n_head, int group, int head_dim, int width,
                              int centered, int rotated, float inv_sqrt_d, float scale) {
    const int h = get_global_id(0), t = get_global_id(1);
    const int c0 = (h / group) * head_dim;  // this head's KV head's channels
    const ulong off = ((ulong)t * n_head + h) * head_dim;
    q += q0;
    float x[HADAMARD_MAX_DIM];
    float dot = 0.0f;
    for (int i = 0; i < head_dim; ++i) {
        const float v = q[off + i];
        if (centered) {
            dot += v * centering[c0 + i];
            x[i] = v * centering[width + c0 + i];
        } else {
            x[i] = v;
        }
    }
    if (rotated) hadamard_rotate(x, head_dim, inv_sqrt_d);
    for (int i = 0; i < head_dim; ++i) qr[off + i] = x[i];
    bias[(ulong)t * n_head + h] = centered ? dot * scale : 0.0f;
}
