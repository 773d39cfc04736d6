// The KV cache: per layer, one K row and one V row per position. K and V each have their own
// type: F16 (default, what llama.cpp stores), Q8_0 or Q4_0 (rows quantized as they are written,
// the way ggml's set_rows writes a quantized cache; attention reads the blocks directly).
//
// Besides append (store) the cache supports what prompt caching and context overflow need:
// copying the rows of positions [0, n) of every layer out and back in (snapshots and state
// files) and shifting (drop positions, move the rest down, re-rotate their keys).
//
// K may be stored rotated (kv/hadamard.h): each head vector of a K row is multiplied by a fixed
// orthogonal matrix R before it is quantized, which keeps 4-bit keys usable. attention_cached
// rotates Q by the same R, so scores are unchanged; shift undoes R around the RoPE re-rotation.
// Whether K is rotated is part of the cache's format (state files record it).
//
// A quantized K may also be stored centered (kv/centered_k.h): the first n_sink() positions kept
// in F16 (K and V, in sink buffers beside the quantized rows, whose slots for those positions
// stay unused), every later K row stored as R((k - mu) / s) with mu and s taken from the sink
// keys. attention_cached scores the sink rows in float and gives the kernels R(q * s) for the
// others, adding q . mu back. Also part of the format.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/zero_pages.h"
#include "cpu/kernels.h"

namespace ei {

// The K/V types the cache supports, by name ("f16", "q8_0", "q4_0"); throws Error otherwise.
uint32_t kv_type_from_name(const std::string& name);
const char* kv_type_name(uint32_t type);

// Whether K of this type is rotated unless the caller says otherwise: where perplexity says the
// rotation pays (docs/PERFORMANCE.md, "KV cache"): Q4_0 K. An F16 K is never rotated by default
// (its attention stays bit-identical to llama.cpp's).
bool kv_rotate_k_by_default(uint32_t type_k);
// Whether K of this type is stored centered unless the caller says otherwise: Q4_0 K
// (docs/PERFORMANCE.md, "KV cache").
bool kv_center_k_by_default(uint32_t type_k);

class KvCache {
public:
    // n_layer layers, n_ctx positions, rows of `width` values (n_head_kv heads of head_dim).
    // Quantized types need width (and head_dim, checked by the caller) to be a multiple of 32;
    // rotate_k needs head_dim to be a power of two, center_k a quantized K (throws Error otherwise).
    KvCache(const KernelTable& kt, int64_t n_layer, int64_t n_ctx, int64_t width, int64_t head_dim,
            uint32_t type_k = TYPE_F16, uint32_t type_v = TYPE_F16, bool rotate_k = false, bool center_k = false);

    int64_t n_layer() const { return n_layer_; }
    int64_t n_ctx() const { return n_ctx_; }
    int64_t width() const { return width_; }
    int64_t head_dim() const { return head_dim_; }
    bool k_rotated() const { return rotate_k_; }  // K head vectors stored as R k (kv/hadamard.h)
    bool k_centered() const { return n_sink_ > 0; }  // kv/centered_k.h
    int64_t n_sink() const { return n_sink_; }       // positions kept in F16 (0 unless centered)
    uint32_t type_k() const { return type_k_; }
    uint32_t type_v() const { return type_v_; }
    size_t k_row_bytes() const { return k_row_; }   // bytes of one position's K row in one layer
    size_t v_row_bytes() const { return v_row_; }
    size_t bytes_per_token() const { return (size_t)n_layer_ * (k_row_ + v_row_); }
    // The quantized rows, the sink rows and mu, s.
    size_t bytes() const {
        return (size_t)n_ctx_ * bytes_per_token() + sink_k_.size() * 4 + centering_.size() * sizeof(float) +
               recurrent_.size() * sizeof(float);
    }

    // [n_ctx][k_row_bytes] for one layer, in type_k (likewise V).
    uint8_t* k_data(int64_t layer) { return k_.data() + layer * n_ctx_ * k_row_; }
    uint8_t* v_data(int64_t layer) { return v_.data() + layer * n_ctx_ * v_row_; }
    const uint8_t* k_data(int64_t layer) const { return k_.data() + layer * n_ctx_ * k_row_; }
    const uint8_t* v_data(int64_t layer) const { return v_.data() + layer * n_ctx_ * v_row_; }
    // [n_ctx][width] F16 views; only for an F16 K (V) cache (throws Error otherwise).
    uint16_t* k(int64_t layer);
    uint16_t* v(int64_t layer);
    // A centered cache's sink rows, [n_sink][width] F16 (positions 0 .. n_sink - 1), and its
    // K mean / K scale / V mean, [width] floats each (set once position n_sink - 1 is stored).
    const uint16_t* sink_k(int64_t layer) const { return sink_k_.data() + layer * n_sink_ * width_; }
    const uint16_t* sink_v(int64_t layer) const { return sink_v_.data() + layer * n_sink_ * width_; }
    const float* k_mean(int64_t layer) const { return centering_.data() + layer * 3 * width_; }
    const float* k_scale(int64_t layer) const { return k_mean(layer) + width_; }
    const float* v_mean(int64_t layer) const { return k_mean(layer) + 2 * width_; }
    // The same, writable, for a copy of the rows kept elsewhere (gpu/device_kv.h): sink rows
    // [n_sink][width] F16 and [3][width] floats mu, s, nu.
    uint16_t* sink_k(int64_t layer) { return sink_k_.data() + layer * n_sink_ * width_; }
    uint16_t* sink_v(int64_t layer) { return sink_v_.data() + layer * n_sink_ * width_; }
    float* centering(int64_t layer) { return centering_.data() + layer * 3 * width_; }

    // Stores n rows of floats at positions pos0 .. pos0 + n - 1 (K centered if k_centered() and
    // rotated if k_rotated(), then rounded to F16 / quantized; sink positions in F16). Storing
    // position n_sink - 1 of a centered cache sets the layer's mean and scale. Not thread-safe.
    void store(int64_t layer, int64_t pos0, int64_t n, const float* k_rows, const float* v_rows);

    // The K (V) row of a position as floats, as attention sees it: un-rotated and un-centered
    // (equal to what was stored up to rounding and quantization). [width]
    void k_row_floats(int64_t layer, int64_t pos, float* k) const;
    void v_row_floats(int64_t layer, int64_t pos, float* v) const;

    // Rows of positions [0, n) of every layer as one blob: per layer, its K rows then its V rows,
    // then for a centered cache its first min(n, n_sink) sink K rows, sink V rows (F16) and, if
    // n >= n_sink, its K mean, K scale and V mean (floats).
    size_t rows_bytes(int64_t n) const;
    void copy_rows_out(int64_t n, uint8_t* dst) const;
    // Writes positions [0, n_use) from a blob that copy_rows_out(n_stored) made (n_use <= n_stored).
    void copy_rows_in(int64_t n_stored, int64_t n_use, const uint8_t* src);

    // Drops positions [n_keep, n_keep + n_discard) of the first n_past and moves the later ones
    // down by n_discard. K rows were stored rotated for their old position: each moved K row is
    // converted to floats (un-rotated and un-centered as stored), passed to rerotate(layer, rows
    // [m][width], m) and stored again for its new position (a centered cache keeps its mean and
    // scale; rows that land among the sink positions go to F16).
    void shift(int64_t n_past, int64_t n_keep, int64_t n_discard,
               const std::function<void(int64_t layer, float* rows, int64_t m)>& rerotate);

    // A recurrent state beside the rows (LFM2's short convolutions, layers/shortconv_layer.h):
    // per layer `floats_per_layer` values a layer carries from one position to the next. It
    // describes the sequence's last position only, so it cannot be cut back to an earlier one:
    // the Context refuses truncating, shifting or snapshotting such a sequence short of its end.
    // It ends the blob of copy_rows_out (after the rows), and copy_rows_in restores it. Zero
    // floats (the default): no state.
    void add_recurrent_state(int64_t floats_per_layer);
    bool has_recurrent_state() const { return !recurrent_.empty(); }
    float* recurrent_state(int64_t layer) { return recurrent_.data() + layer * recurrent_floats_; }

private:
    // K row of `pos` (>= n_sink) from floats: centered, rotated, quantized (uses k_tmp_).
    void encode_k_row(int64_t layer, int64_t pos, const float* k);
    size_t sink_layer_bytes(int64_t n) const;  // one layer's sink rows and mean / scale in a blob

    int64_t n_layer_, n_ctx_, width_, head_dim_;
    uint32_t type_k_, type_v_;
    bool rotate_k_;
    int64_t n_sink_;  // kSinkRows if centered, else 0
    size_t k_row_, v_row_;
    FromFloatFn quantize_k_, quantize_v_;  // float row -> type_k / type_v row
    ToFloatFn dequantize_k_, dequantize_v_;  // type row -> floats (for shift)
    ZeroPages k_;  // [n_layer][n_ctx][k_row_bytes], type_k (pages resident once written)
    ZeroPages v_;  // [n_layer][n_ctx][v_row_bytes], type_v
    std::vector<uint16_t> sink_k_, sink_v_;  // [n_layer][n_sink][width] F16, positions 0 .. n_sink - 1
    std::vector<float> centering_;  // [n_layer][3][width] K mean mu, K scale s, V mean nu (kv/centered_k.h)
    std::vector<float> k_tmp_;  // [width] one K (or V) row being centered / rotated
    int64_t recurrent_floats_ = 0;
    std::vector<float> recurrent_;  // [n_layer][recurrent_floats_] the state after the last position
};

}  // namespace ei
