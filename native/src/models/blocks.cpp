#include "models/blocks.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "common/error.h"
#include "common/fp16.h"

namespace ei {

void rms_norm(const float* x, const float* w, float* out, int64_t n, int64_t d, float eps) {
    for (int64_t t = 0; t < n; ++t) {
        const float* xt = x + t * d;
        float* ot = out + t * d;
        double sum = 0.0;
        for (int64_t i = 0; i < d; ++i) sum += (double)(xt[i] * xt[i]);
        const float mean = (float)(sum / (double)d);
        const float scale = 1.0f / std::sqrt(mean + eps);
        for (int64_t i = 0; i < d; ++i) ot[i] = (xt[i] * scale) * w[i];
    }
}

void embed_tokens(const KernelTable& kt, const Tensor& table, const int32_t* tokens, int64_t n, float* out) {
    const ToFloatFn to_float = kt.types[table.type].to_float;
    if (!to_float) throw Error(std::string("no dequantization for embedding type ") + type_info(table.type).name);
    for (int64_t t = 0; t < n; ++t) {
        if (tokens[t] < 0 || tokens[t] >= table.rows())
            throw Error("token id " + std::to_string(tokens[t]) + " is outside the vocabulary (0.." +
                        std::to_string(table.rows() - 1) + ")");
        to_float(table.row(tokens[t]), out + t * table.cols(), table.cols());
    }
}

void rope_norm(float* x, int64_t n, int64_t n_heads, int64_t head_dim, const int32_t* pos, const RopeParams& p) {
    // Angles as ggml builds its rope cache: theta_i = pos * base^(-2i/n_rot), formed by repeated
    // multiplication in float (not pow per i), so the values match bit for bit.
    const float theta_scale = std::pow(p.freq_base, -2.0f / (float)p.n_rot);
    std::vector<float> cs(p.n_rot);  // cos, sin interleaved
    for (int64_t t = 0; t < n; ++t) {
        float theta = (float)pos[t];
        for (int64_t i0 = 0; i0 < p.n_rot; i0 += 2) {
            const float ff = p.freq_factors ? p.freq_factors[i0 / 2] : 1.0f;
            const float angle = p.freq_scale * (theta / ff);
            cs[i0] = std::cos(angle);
            cs[i0 + 1] = std::sin(angle);
            theta *= theta_scale;
        }
        for (int64_t h = 0; h < n_heads; ++h) {
            float* v = x + (t * n_heads + h) * head_dim;
            for (int64_t i0 = 0; i0 < p.n_rot; i0 += 2) {
                const float x0 = v[i0], x1 = v[i0 + 1];
                v[i0] = x0 * cs[i0] - x1 * cs[i0 + 1];
                v[i0 + 1] = x0 * cs[i0 + 1] + x1 * cs[i0];
            }
        }
    }
}

namespace {

// One query head against the cache (ggml_compute_forward_flash_attn_ext_f16_one_chunk with F16 K/V).
void attend_one(const float* q, int64_t first, int64_t last, const uint16_t* k, const uint16_t* v, int64_t row_stride,
                int64_t head_dim, float scale, uint16_t* q16, uint16_t* acc16, float* out) {
    for (int64_t d = 0; d < head_dim; ++d) q16[d] = fp32_to_fp16(q[d]);
    std::memset(acc16, 0, head_dim * sizeof(uint16_t));
    float M = -INFINITY, S = 0.0f;
    for (int64_t ic = first; ic <= last; ++ic) {
        const uint16_t* kr = k + ic * row_stride;
        float s = 0.0f;
        for (int64_t d = 0; d < head_dim; ++d) s += fp16_to_fp32(kr[d]) * fp16_to_fp32(q16[d]);
        s *= scale;
        float ms = 1.0f, vs = 1.0f;
        if (s > M) {
            const float m_old = M;
            M = s;
            ms = std::exp(m_old - M);
            for (int64_t d = 0; d < head_dim; ++d) acc16[d] = fp32_to_fp16(fp16_to_fp32(acc16[d]) * ms);
        } else {
            vs = std::exp(s - M);
        }
        const uint16_t* vr = v + ic * row_stride;
        for (int64_t d = 0; d < head_dim; ++d)
            acc16[d] = fp32_to_fp16(std::fma(fp16_to_fp32(vr[d]), vs, fp16_to_fp32(acc16[d])));
        S = S * ms + vs;
    }
    const float inv = S == 0.0f ? 0.0f : 1.0f / S;
    for (int64_t d = 0; d < head_dim; ++d) out[d] = fp16_to_fp32(acc16[d]) * inv;
}

}  // namespace

void attention_f16(ThreadPool& pool, const float* q, int64_t n, int64_t pos0, const uint16_t* k, const uint16_t* v,
                   const AttentionShape& s, float* out) {
    const int64_t group = s.n_head / s.n_head_kv;
    const int64_t row_stride = s.n_head_kv * s.head_dim;  // elements per cached position
    const int64_t jobs = n * s.n_head;
    pool.run([&](int ith, int nth) {
        std::vector<uint16_t> q16(s.head_dim), acc16(s.head_dim);
        int64_t j0, j1;
        ThreadPool::split(jobs, ith, nth, &j0, &j1);
        for (int64_t j = j0; j < j1; ++j) {
            const int64_t t = j / s.n_head, h = j % s.n_head, hk = h / group;
            const int64_t last = pos0 + t;
            const int64_t first = s.window > 0 && last - s.window + 1 > 0 ? last - s.window + 1 : 0;
            const int64_t off = (t * s.n_head + h) * s.head_dim;
            attend_one(q + off, first, last, k + hk * s.head_dim, v + hk * s.head_dim, row_stride, s.head_dim, s.scale,
                       q16.data(), acc16.data(), out + off);
        }
    });
}

void swiglu(const float* gate, const float* up, float* out, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
        const float g = gate[i];
        out[i] = (g / (1.0f + std::exp(-g))) * up[i];
    }
}

void add_inplace(float* y, const float* x, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

}  // namespace ei
