// E8M0 (the OCP microscaling formats' shared block scale: a bare exponent byte, bias 127) to
// float, bit-exact with ggml's ggml_e8m0_to_fp32_half. `static inline`, as common/fp16.h and
// for the same reason: units built with different ISA flags include it.
#pragma once
#include <cstdint>

#include "common/fp16.h"

namespace ei {

// 2^(e - 128): half the scale e encodes, because MXFP4's table holds its E2M1 values doubled
// (quant/blocks.h kMxfp4Values). ggml computes the dot products with this "half" form too, so
// the products it feeds into float sums are the same. e = 0 and 1 give the subnormals 2^-128
// and 2^-127; e = 255 (NaN in the OCP format) gives 2^127, as in ggml, which does not special-case it.
static inline float e8m0_to_fp32_half(uint8_t e) {
    return fp32_from_bits(e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23);
}

}  // namespace ei
