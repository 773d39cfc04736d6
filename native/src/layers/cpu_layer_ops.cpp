#include "layers/cpu_layer_ops.h"

#include <cstring>

#include "layers/cpu_blocks.h"

namespace ei {

void CpuLayerOps::rms_norm(const float* x, const float* w, float* out, int64_t rows, int64_t width) {
    ei::rms_norm(x, w, out, rows, width, eps_);
}

void CpuLayerOps::matmul(const Tensor& W, const float* x, int64_t n, float* y) {
    if (stats_) stats_->record(W, x, n);
    ei::matmul(pool_, kt_, W, x, n, y, scratch_, order_);
}

void CpuLayerOps::matmul_same_input(const Tensor* const* W, float* const* y, int count, const float* x, int64_t n) {
    if (stats_)
        for (int i = 0; i < count; ++i) stats_->record(*W[i], x, n);
    ei::matmul_same_input(pool_, kt_, W, y, count, x, n, scratch_, order_);
}

void CpuLayerOps::matmul_split(const Tensor& W, const float* x, int64_t n, float* a, int64_t wa, float* b,
                               int64_t wb, float* c, int64_t wc) {
    const int64_t stride = wa + wb + wc;
    if (stats_) stats_->record(W, x, n);
    ei::matmul(pool_, kt_, W, x, n, fused_, scratch_, order_);
    for (int64_t t = 0; t < n; ++t) {
        const float* row = fused_ + t * stride;
        std::memcpy(a + t * wa, row, sizeof(float) * wa);
        std::memcpy(b + t * wb, row + wa, sizeof(float) * wb);
        std::memcpy(c + t * wc, row + wa + wb, sizeof(float) * wc);
    }
}

void CpuLayerOps::matmul_glu_fused(const Tensor& W, const float* x, int64_t n, int64_t ff, bool gelu, float* gate,
                                   float* /*up*/) {
    if (stats_) stats_->record(W, x, n);
    ei::matmul(pool_, kt_, W, x, n, fused_, scratch_, order_);
    for (int64_t t = 0; t < n; ++t) glu(gelu, fused_ + t * 2 * ff, fused_ + t * 2 * ff + ff, gate + t * ff, ff);
}

void CpuLayerOps::add_rows(float* y, const float* bias, int64_t rows, int64_t width) {
    for (int64_t t = 0; t < rows; ++t) add_inplace(y + t * width, bias, width);
}

void CpuLayerOps::rope(float* x, int64_t n, int64_t heads, int64_t head_dim, int64_t pos0, const LayerConfig& c) {
    pos_.resize((size_t)n);
    if (runs_) {
        for (size_t i = 0; i < n_runs_; ++i)
            for (int64_t t = 0; t < runs_[i].n; ++t) pos_[runs_[i].row0 + t] = (int32_t)(runs_[i].pos0 + t);
    } else {
        for (int64_t t = 0; t < n; ++t) pos_[t] = (int32_t)(pos0 + t);
    }
    if (c.rope_neox) rope_neox(kt_, x, n, heads, head_dim, pos_.data(), c.rope);
    else rope_norm(kt_, x, n, heads, head_dim, pos_.data(), c.rope);
}

void CpuLayerOps::scale(float* x, float s, int64_t count) { scale_inplace(x, s, count); }

void CpuLayerOps::kv_store(int il, int64_t pos0, int64_t n, const float* k, const float* v) {
    if (!runs_) return kv_.store(il, pos0, n, k, v);
    for (size_t i = 0; i < n_runs_; ++i) {
        const SequenceRun& r = runs_[i];
        const int64_t w = r.kv->width();
        r.kv->store(il, r.pos0, r.n, k + r.row0 * w, v + r.row0 * w);
    }
}

void CpuLayerOps::attention(int il, const float* q, int64_t m, int64_t pos0, const AttentionShape& shape,
                            const float* sinks, float* out) {
    AttentionShape s = shape;
    s.sinks = sinks;
    if (!runs_) return attention_cached(pool_, kt_, q, m, pos0, kv_, il, s, out, order_);
    // Every row goes on in a batch of sequences (m is the whole batch: the forward asks for no
    // row skipping), each run attending over its own sequence's cache.
    const int64_t w = s.n_head * s.head_dim;
    for (size_t i = 0; i < n_runs_; ++i) {
        const SequenceRun& r = runs_[i];
        attention_cached(pool_, kt_, q + r.row0 * w, r.n, r.pos0, *r.kv, il, s, out + r.row0 * w, order_);
    }
}

void CpuLayerOps::glu(bool gelu, const float* gate, const float* up, float* out, int64_t count) {
    if (gelu) geglu(kt_, gate, up, out, count);
    else swiglu(kt_, gate, up, out, count);
}

void CpuLayerOps::add(float* y, const float* x, int64_t count) { add_inplace(y, x, count); }

}  // namespace ei
