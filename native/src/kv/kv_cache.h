// The KV cache: per layer, one K row and one V row per position, stored as F16.
// (Quantized K/V types, shifting and save/load come with the prompt-caching work.)
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace ei {

class KvCache {
public:
    // n_layer layers, n_ctx positions, rows of `width` values (n_head_kv * head_dim).
    KvCache(int64_t n_layer, int64_t n_ctx, int64_t width);

    int64_t n_ctx() const { return n_ctx_; }
    int64_t width() const { return width_; }
    size_t bytes() const { return (k_.size() + v_.size()) * sizeof(uint16_t); }

    // [n_ctx][width] F16 for one layer.
    uint16_t* k(int64_t layer) { return k_.data() + layer * n_ctx_ * width_; }
    uint16_t* v(int64_t layer) { return v_.data() + layer * n_ctx_ * width_; }

    // Stores n rows of floats at positions pos0 .. pos0 + n - 1 (rounded to F16).
    void store(int64_t layer, int64_t pos0, int64_t n, const float* k_rows, const float* v_rows);

private:
    int64_t n_layer_, n_ctx_, width_;
    std::vector<uint16_t> k_;  // [n_layer][n_ctx][width], f16
    std::vector<uint16_t> v_;  // [n_layer][n_ctx][width], f16
};

}  // namespace ei
