// A weight tensor as the forward pass sees it: a view into the mapped file (never a copy).
#pragma once
#include <cstddef>
#include <cstdint>

namespace ei {

struct Tensor {
    const uint8_t* data = nullptr;  // row-major blocks, in the mapping
    uint32_t type = 0;              // GgmlType
    int64_t ne[4] = {1, 1, 1, 1};   // ne[0] = row length, ne[1] = rows
    size_t row_bytes = 0;           // bytes of one row of ne[0] elements

    bool present() const { return data != nullptr; }
    int64_t cols() const { return ne[0]; }
    int64_t rows() const { return ne[1]; }
    const uint8_t* row(int64_t r) const { return data + (size_t)r * row_bytes; }
};

}  // namespace ei
