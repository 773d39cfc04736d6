#include "kv/centered_attention.h"

#include <algorithm>
#include <cmath>

#include "common/fp16.h"

namespace ei {

namespace {

// One query head q [head_dim] over sink positions first..last (K and V rows of `stride` floats,
// this KV head's values at k and v): the partial result (m, l, acc) of scores scale * (q . k).
void attend_sink_rows(const float* q, const float* k, const float* v, int64_t stride, int64_t first, int64_t last,
                      int64_t head_dim, float scale, float* acc, float* m, float* l) {
    constexpr int64_t kMaxRows = 64;  // scores kept at a time (a sink has kSinkRows = 32)
    float s[kMaxRows];
    for (int64_t d = 0; d < head_dim; ++d) acc[d] = 0.0f;
    *m = -INFINITY;
    *l = 0.0f;
    for (int64_t i0 = first; i0 <= last; i0 += kMaxRows) {
        const int64_t n = std::min(kMaxRows, last - i0 + 1);
        float mx = *m;
        for (int64_t i = 0; i < n; ++i) {
            const float* kr = k + (i0 + i) * stride;
            float dot = 0.0f;
            for (int64_t d = 0; d < head_dim; ++d) dot += q[d] * kr[d];
            s[i] = dot * scale;
            mx = std::fmax(mx, s[i]);
        }
        // What was accumulated so far, rescaled to the new maximum; then this block's rows.
        const float w = *l > 0.0f ? std::exp(*m - mx) : 0.0f;
        *l *= w;
        for (int64_t d = 0; d < head_dim; ++d) acc[d] *= w;
        *m = mx;
        for (int64_t i = 0; i < n; ++i) {
            const float p = std::exp(s[i] - mx);
            const float* vr = v + (i0 + i) * stride;
            *l += p;
            for (int64_t d = 0; d < head_dim; ++d) acc[d] += p * vr[d];
        }
    }
}

}  // namespace

CenteredAttention::CenteredAttention(const KvCache& kv, int64_t layer, const float* q, int64_t n, int64_t n_head,
                                     int64_t head_dim, float scale)
    : n_sink_(kv.n_sink()), n_head_(n_head), group_(n_head / (kv.width() / head_dim)), head_dim_(head_dim),
      width_(kv.width()), scale_(scale), q_(q) {
    if (n_sink_ == 0) return;
    v_mean_ = kv.v_mean(layer);
    k_.resize((size_t)(n_sink_ * width_));
    v_.resize(k_.size());
    for (size_t i = 0; i < k_.size(); ++i) {
        k_[i] = fp16_to_fp32(kv.sink_k(layer)[i]);
        v_[i] = fp16_to_fp32(kv.sink_v(layer)[i]);
    }
    const float* mu = kv.k_mean(layer);
    const float* s = kv.k_scale(layer);
    bias_.resize((size_t)(n * n_head));
    q_scaled_.resize((size_t)(n * n_head * head_dim));
    for (int64_t r = 0; r < n * n_head; ++r) {
        const int64_t c0 = (r % n_head) / group_ * head_dim;  // this head's KV head's channels
        const float* qr = q + r * head_dim;
        float dot = 0.0f;
        for (int64_t d = 0; d < head_dim; ++d) {
            dot += qr[d] * mu[c0 + d];
            q_scaled_[r * head_dim + d] = qr[d] * s[c0 + d];
        }
        bias_[r] = dot * scale;
    }
}

void CenteredAttention::correct_partial(int64_t t, int64_t h, float* m, float l, float* acc) const {
    *m += bias_[t * n_head_ + h];
    const float* nu = v_mean_ + h / group_ * head_dim_;
    for (int64_t d = 0; d < head_dim_; ++d) acc[d] += l * nu[d];
}

void CenteredAttention::merge_sink_rows(int64_t t, int64_t h, int64_t first, int64_t last, float* m, float* l,
                                        float* acc, float* tmp) const {
    const int64_t e = std::min(last, n_sink_ - 1);
    if (first > e) return;
    const int64_t c0 = h / group_ * head_dim_;
    float m2, l2;
    attend_sink_rows(q_ + (t * n_head_ + h) * head_dim_, k_.data() + c0, v_.data() + c0, width_, first, e, head_dim_,
                     scale_, tmp, &m2, &l2);
    merge_partial(m, l, acc, m2, l2, tmp, head_dim_);
}

void merge_partial(float* m, float* l, float* acc, float m2, float l2, const float* acc2, int64_t head_dim) {
    if (l2 == 0.0f) return;
    if (*l == 0.0f) {
        *m = m2;
        *l = l2;
        for (int64_t d = 0; d < head_dim; ++d) acc[d] = acc2[d];
        return;
    }
    const float mx = std::fmax(*m, m2), w1 = std::exp(*m - mx), w2 = std::exp(m2 - mx);
    *m = mx;
    *l = *l * w1 + l2 * w2;
    for (int64_t d = 0; d < head_dim; ++d) acc[d] = acc[d] * w1 + acc2[d] * w2;
}

}  // namespace ei
