#include "kv/centered_attention.h"

#include <algorithm>
#include <cmath>

#include "common/fp16.h"
#include "kv/centered_k.h"

namespace ei {

namespace {

// One query head q [head_dim] over sink positions first..last: the partial result (m, l, acc) of
// scores scale * (q . k). kt: this KV head's sink keys transposed, [head_dim][n_sink], so that the
// scores of all rows are summed channel by channel in a loop the compiler vectorizes (a dot
// product per row would be a serial reduction); v: the V rows, `stride` floats apart.
void attend_sink_rows(const float* q, const float* kt, int64_t n_sink, const float* v, int64_t stride, int64_t first,
                      int64_t last, int64_t head_dim, float scale, float* acc, float* m, float* l) {
    static_assert(kSinkRows <= 64, "sink scores are kept on the stack");
    float s[64];
    const int64_t n = last - first + 1;
    for (int64_t i = 0; i < n; ++i) s[i] = 0.0f;
    for (int64_t d = 0; d < head_dim; ++d) {
        const float qd = q[d];
        const float* kd = kt + d * n_sink + first;
        for (int64_t i = 0; i < n; ++i) s[i] += qd * kd[i];
    }
    float mx = -INFINITY;
    for (int64_t i = 0; i < n; ++i) {
        s[i] *= scale;
        mx = std::fmax(mx, s[i]);
    }
    for (int64_t d = 0; d < head_dim; ++d) acc[d] = 0.0f;
    float sum = 0.0f;
    for (int64_t i = 0; i < n; ++i) {
        const float p = std::exp(s[i] - mx);
        const float* vr = v + (first + i) * stride;
        sum += p;
        for (int64_t d = 0; d < head_dim; ++d) acc[d] += p * vr[d];
    }
    *m = mx;
    *l = sum;
}

}  // namespace

CenteredAttention::CenteredAttention(const KvCache& kv, int64_t layer, const float* q, int64_t n, int64_t n_head,
                                     int64_t head_dim, float scale)
    : n_sink_(kv.n_sink()), n_head_(n_head), group_(n_head / (kv.width() / head_dim)), head_dim_(head_dim),
      width_(kv.width()), scale_(scale), q_(q) {
    if (n_sink_ == 0) return;
    v_mean_ = kv.v_mean(layer);
    kt_.resize((size_t)(n_sink_ * width_));
    v_.resize(kt_.size());
    const uint16_t* sk = kv.sink_k(layer);
    const uint16_t* sv = kv.sink_v(layer);
    for (int64_t i = 0; i < n_sink_; ++i)
        for (int64_t c = 0; c < width_; ++c) {
            kt_[c * n_sink_ + i] = fp16_to_fp32(sk[i * width_ + c]);
            v_[i * width_ + c] = fp16_to_fp32(sv[i * width_ + c]);
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
    attend_sink_rows(q_ + (t * n_head_ + h) * head_dim_, kt_.data() + c0 * n_sink_, n_sink_, v_.data() + c0, width_,
                     first, e, head_dim_, scale_, tmp, &m2, &l2);
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
