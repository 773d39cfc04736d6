#include "kv/hadamard.h"

#include <cmath>

namespace ei {

namespace {

// The fixed sign diagonal D: bit 0 of splitmix64(i). Part of the cache format; never change it.
inline bool sign_flipped(int64_t i) {
    uint64_t z = (uint64_t)i + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return z & 1;
}

void flip_signs(float* x, int64_t d) {
    for (int64_t i = 0; i < d; ++i)
        if (sign_flipped(i)) x[i] = -x[i];
}

// x <- H x / sqrt(d): log2(d) rounds of butterflies (a, b) -> (a + b, a - b), then one scale.
// For d = 4^k the scale is a power of two (64 -> 1/8, 256 -> 1/16), so it rounds nothing.
void fwht_normalized(float* x, int64_t d) {
    for (int64_t len = 1; len < d; len <<= 1)
        for (int64_t i = 0; i < d; i += 2 * len)
            for (int64_t j = i; j < i + len; ++j) {
                const float a = x[j], b = x[j + len];
                x[j] = a + b;
                x[j + len] = a - b;
            }
    const float s = 1.0f / std::sqrt((float)d);
    for (int64_t i = 0; i < d; ++i) x[i] *= s;
}

}  // namespace

bool hadamard_supported(int64_t head_dim) { return head_dim >= 2 && (head_dim & (head_dim - 1)) == 0; }

void hadamard_rotate(float* x, int64_t n_vec, int64_t head_dim) {
    for (int64_t v = 0; v < n_vec; ++v) {
        float* h = x + v * head_dim;
        flip_signs(h, head_dim);
        fwht_normalized(h, head_dim);
    }
}

void hadamard_unrotate(float* x, int64_t n_vec, int64_t head_dim) {
    for (int64_t v = 0; v < n_vec; ++v) {
        float* h = x + v * head_dim;
        fwht_normalized(h, head_dim);  // H is symmetric: H^T = H
        flip_signs(h, head_dim);
    }
}

}  // namespace ei
