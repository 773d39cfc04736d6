// What a centered K cache (kv/centered_k.h) adds to attention over one layer.
//
// The quantized rows (positions >= n_sink) are scored by the attention kernels (kernels.h:
// AttnKvqSpanFn, AttnKvqRowFn) with the query q * s (then rotated like K), which gives
// q . (k - mu); the sink rows are scored here, in plain float, with q itself. Each side gives
// a partial softmax result over its positions,
//   m = max_i s_i,  l = sum_i exp(s_i - m),  acc = sum_i exp(s_i - m) v_i     (acc: [head_dim])
// and the quantized side's is corrected before the two are merged: m += scale * (q . mu) (every
// score of those rows was short by that much) and acc += l * nu (their V rows hold v - nu).
// Plain C++ compiled once for every ISA table, so it cannot make two tables' results differ.
#pragma once
#include <cstdint>
#include <vector>

#include "kv/kv_cache.h"

namespace ei {

class CenteredAttention {
public:
    // q: [n][n_head][head_dim] roped queries of n rows; scale: the score scale. Inactive (n_sink()
    // == 0, query() == q) unless the cache is centered.
    CenteredAttention(const KvCache& kv, int64_t layer, const float* q, int64_t n, int64_t n_head, int64_t head_dim,
                      float scale);

    int64_t n_sink() const { return n_sink_; }
    // The queries the quantized rows are scored with, [n][n_head][head_dim]: q * s (a copy the
    // caller may rotate in place), or q if inactive.
    float* query() { return q_scaled_.data(); }
    bool active() const { return n_sink_ > 0; }

    // A kernel's partial result over quantized rows, for query row t, head h: corrected as above.
    void correct_partial(int64_t t, int64_t h, float* m, float l, float* acc) const;
    // Merges the sink rows first .. min(last, n_sink - 1) of query row t, head h into (m, l, acc);
    // tmp: [head_dim] scratch. Nothing if first >= n_sink.
    void merge_sink_rows(int64_t t, int64_t h, int64_t first, int64_t last, float* m, float* l, float* acc,
                         float* tmp) const;

private:
    int64_t n_sink_ = 0, n_head_ = 0, group_ = 1, head_dim_ = 0, width_ = 0;
    float scale_ = 1.0f;
    const float* q_ = nullptr;      // [n][n_head][head_dim] the queries as given
    const float* v_mean_ = nullptr; // [width] nu
    std::vector<float> q_scaled_;   // [n][n_head][head_dim] q * s
    std::vector<float> bias_;       // [n][n_head] scale * (q . mu)
    std::vector<float> kt_;         // [width][n_sink] the layer's sink keys in float, transposed
    std::vector<float> v_;          // [n_sink][width] its sink values in float
};

// (m, l, acc) <- the merge of (m, l, acc) and (m2, l2, acc2). Either may be empty (l == 0).
void merge_partial(float* m, float* l, float* acc, float m2, float l2, const float* acc2, int64_t head_dim);

}  // namespace ei
