// Small pieces of ggml's quantizers that several of them share: its rounding, its all-zero
// threshold, its nearest-table-entry search, the importance weights an imatrix gives, and the
// scale searches used by more than one block family (quantize_math.cpp). Baseline-target
// quantizer units only (quant/quantize_*.cpp), whose float results must be ggml's to the bit.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

namespace ei {
namespace qref {

constexpr float kGroupMaxEps = 1e-15f;  // below this absmax a (sub-)block counts as all zero

inline int clamp(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }

// Round to nearest (half to even, by the float adder), valid for |f| <= 2^22.
inline int nearest_int(float f) {
    const float v = f + 12582912.f;  // 1.5 * 2^23: the integer lands in the low mantissa bits
    int i;
    std::memcpy(&i, &v, 4);
    return (i & 0x007fffff) - 0x00400000;
}

// The index of the entry of the ascending table values[0..n-1] nearest to x (a tie goes to
// the larger entry), by bisection as ggml's best_index_int8.
inline int best_index_int8(int n, const int8_t* values, float x) {
    if (x <= values[0]) return 0;
    if (x >= values[n - 1]) return n - 1;
    int lo = 0, hi = n - 1;
    while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        if (x < values[mid]) hi = mid;
        else lo = mid;
    }
    return x - values[hi - 1] < values[hi] - x ? hi - 1 : hi;
}

// sum x[i]^2 in index order.
inline float sum_of_squares(const float* x, int64_t n) {
    float s = 0;
    for (int64_t i = 0; i < n; ++i) s += x[i] * x[i];
    return s;
}

// The weights every imatrix quantizer fits with: w[i] = qw[i] * sqrt(sigma2 + x[i]^2), where qw
// is the importance matrix's slice for these n elements and sigma2 the (row's or super-block's)
// mean square, so that small elements of an important column still count.
inline void importance_weights(int n, const float* x, const float* qw, float sigma2, float* w) {
    for (int i = 0; i < n; ++i) w[i] = qw[i] * std::sqrt(sigma2 + x[i] * x[i]);
}

// Symmetric search (ggml's make_qx_quants, rmse_type 1): scale = -nmax / (signed absmax), then
// the 18 scales -(nmax + 0.1 is) / max, is = +-1..9, keeping the one maximising
// (sum w x l)^2 / (sum w l^2) with weights qw (x^2 when qw is null). L[i] in [0, 2 nmax - 1]
// (offset by nmax); returns the least-squares scale for them.
float make_qx_quants(int n, int nmax, const float* x, int8_t* L, const float* qw);

// Affine search with weights (ggml's make_qkx3_quants as its callers use it: rmin -0.9,
// rdelta 0.05, 37 steps, squared error): L[i] in [0, nmax], x ~ scale * L - *the_min.
float make_qkx3_quants(int n, int nmax, const float* x, const float* weights, uint8_t* L, float* the_min,
                       uint8_t* Laux);

// Quantizes non-negative values x (a super-block's sub-block scales or mins) to L[i] in
// [0, nmax] against one scale (ggml's make_qp_quants): 9 trial scales by weighted squared
// error, then coordinate descent on single quants; returns the least-squares scale.
float make_qp_quants(int n, int nmax, const float* x, uint8_t* L, const float* quant_weights);

}  // namespace qref
}  // namespace ei
