// IQ4_NL's table (quant/blocks.h) + 128, as unsigned bytes, for the AVX-512 kernels: VPDPBUSD
// multiplies u8 by s8, so the signed values go in biased and the kernels subtract 128 * sum(q_a).
#pragma once
#include <cstdint>

#include "quant/blocks.h"

namespace ei {

struct Iq4nlBiased {
    alignas(16) uint8_t v[16];
};
inline constexpr Iq4nlBiased kIq4nlBiased = [] {
    Iq4nlBiased t{};
    for (int i = 0; i < 16; ++i) t.v[i] = (uint8_t)(kIq4nlValues[i] + 128);
    return t;
}();

}  // namespace ei
