// Small pieces of ggml's reference quantizers that several of them share: its rounding, its
// all-zero threshold and its nearest-table-entry search. Baseline-target quantizer units only
// (quant/quantize_*.cpp), whose float results must be ggml's to the bit.
#pragma once
#include <cstdint>
#include <cstring>

namespace ei {
namespace qref {

constexpr float kGroupMaxEps = 1e-15f;  // below this absmax a (sub-)block counts as all zero

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

}  // namespace qref
}  // namespace ei
