#include "arch/encoder_blocks.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "layers/cpu_blocks.h"

namespace ei {

EncoderFile load_encoder_file(const GgufFile& f, const KernelTable& kt) {
    EncoderFile e{read_hparams(f), {}, 0.0f, {}, nullptr, nullptr};
    HParams& hp = e.hp;
    const std::string a = hp.arch + ".";
    e.eps = (float)f.get_float(a + "attention.layer_norm_epsilon", 1e-12);
    if (!(e.eps > 0.0f && e.eps < 1.0f)) f.fail(a + "attention.layer_norm_epsilon", "must be in (0, 1)");
    if (hp.n_head_kv != hp.n_head || hp.q_width() != hp.n_embd)
        f.fail(a + "attention.head_count", "a BERT encoder has n_head * head_dim = n_embd and no grouped heads");
    const int64_t d = hp.n_embd;
    e.io.shapes = layer_shapes(hp);
    e.io.tok_embd = load_tensor(f, kt, TensorKind::token_embd, -1, {d, -1}, false);
    hp.n_vocab = e.io.tok_embd.rows();
    e.type_embd = load_tensor(f, kt, TensorKind::token_types, -1, {d, -1}, false, /*required=*/false);
    e.tok_norm = load_f32_vector(f, TensorKind::token_embd_norm, -1, d);
    e.tok_norm_b = load_f32_vector(f, TensorKind::token_embd_norm_bias, -1, d);
    return e;
}

void add_token_type0(const KernelTable& kt, const Tensor& type_embd, float* x, int64_t n, int64_t d, float* row) {
    if (!type_embd.present()) return;
    const int32_t zero = 0;
    embed_tokens(kt, type_embd, &zero, 1, row);
    for (int64_t t = 0; t < n; ++t) add_inplace(x + t * d, row, d);
}

void layer_norm(ThreadPool& pool, const float* x, const float* w, const float* b, float* out, int64_t n, int64_t d,
                float eps) {
    pool.run([&](int ith, int nth) {
        int64_t t0, t1;
        ThreadPool::split(n, ith, nth, &t0, &t1);
        for (int64_t t = t0; t < t1; ++t) {
            const float* r = x + t * d;
            float* o = out + t * d;
            double sum = 0.0;
            for (int64_t j = 0; j < d; ++j) sum += r[j];
            const float mean = (float)(sum / d);
            double sum2 = 0.0;
            for (int64_t j = 0; j < d; ++j) {
                const float v = r[j] - mean;
                o[j] = v;
                sum2 += (double)(v * v);
            }
            const float scale = 1.0f / std::sqrt((float)(sum2 / d) + eps);
            for (int64_t j = 0; j < d; ++j) o[j] = o[j] * scale * w[j] + (b ? b[j] : 0.0f);
        }
    });
}

void add_bias(float* y, const float* b, int64_t n, int64_t d) {
    if (!b) return;
    for (int64_t t = 0; t < n; ++t)
        for (int64_t j = 0; j < d; ++j) y[t * d + j] += b[j];
}

void attention_full(ThreadPool& pool, const float* q, const float* k, const float* v, const int64_t* starts,
                    int64_t n_seq, int64_t n_head, int64_t head_dim, float* out) {
    const int64_t w = n_head * head_dim, n = starts[n_seq];
    const float scale = 1.0f / std::sqrt((float)head_dim);
    int64_t longest = 0;
    for (int64_t s = 0; s < n_seq; ++s) longest = std::max(longest, starts[s + 1] - starts[s]);
    pool.run([&](int ith, int nth) {
        std::vector<float> p((size_t)longest);
        int64_t begin, end;
        ThreadPool::split(n * n_head, ith, nth, &begin, &end);
        int64_t seq = 0;
        for (int64_t task = begin; task < end; ++task) {
            const int64_t t = task / n_head, h = task % n_head;
            while (t >= starts[seq + 1]) ++seq;
            const int64_t first = starts[seq], len = starts[seq + 1] - first;
            const float* qr = q + t * w + h * head_dim;
            float mx = -INFINITY;
            for (int64_t s = 0; s < len; ++s) {
                const float* kr = k + (first + s) * w + h * head_dim;
                float dot = 0.0f;
                for (int64_t j = 0; j < head_dim; ++j) dot += qr[j] * kr[j];
                p[s] = dot * scale;
                mx = std::max(mx, p[s]);
            }
            double sum = 0.0;
            for (int64_t s = 0; s < len; ++s) {
                p[s] = std::exp(p[s] - mx);
                sum += p[s];
            }
            const float inv = (float)(1.0 / sum);
            float* o = out + t * w + h * head_dim;
            for (int64_t j = 0; j < head_dim; ++j) o[j] = 0.0f;
            for (int64_t s = 0; s < len; ++s) {
                const float* vr = v + (first + s) * w + h * head_dim;
                const float ps = p[s] * inv;
                for (int64_t j = 0; j < head_dim; ++j) o[j] += ps * vr[j];
            }
        }
    });
}

}  // namespace ei
