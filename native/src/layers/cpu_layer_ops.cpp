#include "layers/cpu_layer_ops.h"

#include <algorithm>
#include <cstring>

#include "layers/cpu_blocks.h"

namespace ei {

template <class Fn>
void CpuLayerOps::by_rows(int64_t rows, Fn&& fn) {
    if (rows < kParallelMinRows || pool_.size() < 2) return fn(int64_t(0), rows);
    pool_.run([&](int ith, int nth) {
        int64_t r0, r1;
        ThreadPool::split(rows, ith, nth, &r0, &r1);
        if (r1 > r0) fn(r0, r1);
    });
}

template <class Fn>
void CpuLayerOps::by_elements(int64_t count, Fn&& fn) {
    by_rows((count + kElementUnit - 1) / kElementUnit, [&](int64_t u0, int64_t u1) {
        fn(u0 * kElementUnit, std::min(count, u1 * kElementUnit));
    });
}

void CpuLayerOps::rms_norm(const float* x, const float* w, float* out, int64_t rows, int64_t width) {
    by_rows(rows, [&](int64_t r0, int64_t r1) { ei::rms_norm(x + r0 * width, w, out + r0 * width, r1 - r0, width, eps_); });
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
    by_rows(n, [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) {
            const float* row = fused_ + t * 2 * ff;
            glu_inline(gelu, row, row + ff, gate + t * ff, ff);
        }
    });
}

void CpuLayerOps::add_rows(float* y, const float* bias, int64_t rows, int64_t width) {
    by_rows(rows, [&](int64_t r0, int64_t r1) {
        for (int64_t t = r0; t < r1; ++t) add_inplace(y + t * width, bias, width);
    });
}

void CpuLayerOps::rope(float* x, int64_t n, int64_t heads, int64_t head_dim, int64_t pos0, const LayerConfig& c) {
    pos_.resize((size_t)n);
    if (runs_) {
        for (size_t i = 0; i < n_runs_; ++i)
            for (int64_t t = 0; t < runs_[i].n; ++t) pos_[runs_[i].row0 + t] = (int32_t)(runs_[i].pos0 + t);
    } else {
        for (int64_t t = 0; t < n; ++t) pos_[t] = (int32_t)(pos0 + t);
    }
    by_rows(n, [&](int64_t r0, int64_t r1) {
        float* xr = x + r0 * heads * head_dim;
        if (c.rope_neox) rope_neox(kt_, xr, r1 - r0, heads, head_dim, pos_.data() + r0, c.rope);
        else rope_norm(kt_, xr, r1 - r0, heads, head_dim, pos_.data() + r0, c.rope);
    });
}

void CpuLayerOps::scale(float* x, float s, int64_t count) {
    by_elements(count, [&](int64_t i0, int64_t i1) { scale_inplace(x + i0, s, i1 - i0); });
}

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

void CpuLayerOps::glu_inline(bool gelu, const float* gate, const float* up, float* out, int64_t count) const {
    if (gelu) geglu(kt_, gate, up, out, count);
    else swiglu(kt_, gate, up, out, count);
}

void CpuLayerOps::glu(bool gelu, const float* gate, const float* up, float* out, int64_t count) {
    by_elements(count, [&](int64_t i0, int64_t i1) { glu_inline(gelu, gate + i0, up + i0, out + i0, i1 - i0); });
}

void CpuLayerOps::add(float* y, const float* x, int64_t count) {
    by_elements(count, [&](int64_t i0, int64_t i1) { add_inplace(y + i0, x + i0, i1 - i0); });
}

}  // namespace ei
