#include "arch/pooling.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "common/error.h"
#include "arch/arch.h"

namespace ei {

namespace {
constexpr const char* kNames[] = {"none", "mean", "cls", "last", "rank"};
}

const char* pooling_name(Pooling p) {
    const int i = (int)p;
    return i >= 0 && i < 5 ? kNames[i] : "?";
}

Pooling pooling_from_name(const std::string& name) {
    for (int i = 0; i < 5; ++i)
        if (name == kNames[i]) return (Pooling)i;
    throw Error("unknown pooling '" + name + "' (choose none, mean, cls, last or rank)");
}

Pooling file_pooling(const GgufFile& file, Pooling fallback) {
    const std::string key = file.get_string("general.architecture") + ".pooling_type";
    if (!file.find(key)) return fallback;
    const int64_t v = file.get_int(key);
    // llama.cpp's LLAMA_POOLING_TYPE_UNSPECIFIED (-1) leaves the choice to the caller.
    if (v == -1) return fallback;
    if (v < 0 || v > 4) file.fail(key, "value " + std::to_string(v) + " is not a pooling type (0..4)");
    return (Pooling)v;
}

ClassifierHead load_classifier_head(const GgufFile& file, const KernelTable& kt, int64_t n_embd) {
    ClassifierHead h;
    h.out = load_tensor(file, kt, TensorKind::cls_out, -1, {n_embd, -1}, true, false);
    if (!h.out.present()) return h;
    h.out_b = load_f32_vector(file, TensorKind::cls_out_bias, -1, h.out.rows(), false);
    h.dense = load_tensor(file, kt, TensorKind::cls, -1, {n_embd, n_embd}, true, false);
    if (h.dense.present()) h.dense_b = load_f32_vector(file, TensorKind::cls_bias, -1, n_embd, false);
    return h;
}

int64_t pooled_size(Pooling p, const ClassifierHead& head, int64_t n, int64_t d) {
    switch (p) {
        case Pooling::none: return n * d;
        case Pooling::rank: return head.n_out();
        default: return d;
    }
}

void pool_hidden(ThreadPool& pool, const KernelTable& kt, MatmulScratch& scratch, Pooling p, const ClassifierHead& head,
                 const float* h, int64_t n, int64_t d, float* out) {
    if (n <= 0) throw Error("cannot pool an empty input");
    switch (p) {
        case Pooling::none: std::memcpy(out, h, sizeof(float) * (size_t)(n * d)); return;
        case Pooling::cls: std::memcpy(out, h, sizeof(float) * (size_t)d); return;
        case Pooling::last: std::memcpy(out, h + (n - 1) * d, sizeof(float) * (size_t)d); return;
        case Pooling::mean: {
            // ggml's mean pooling is a matmul with a matrix of 1/n: each row scaled, then summed.
            const float inv = 1.0f / (float)n;
            for (int64_t j = 0; j < d; ++j) out[j] = 0.0f;
            for (int64_t t = 0; t < n; ++t)
                for (int64_t j = 0; j < d; ++j) out[j] += h[t * d + j] * inv;
            return;
        }
        case Pooling::rank: {
            if (!head.present()) throw Error("rank pooling needs a classification head (cls.output.weight), which this model has not");
            std::vector<float> x(h, h + d);  // the first ([CLS]) row
            if (head.dense.present()) {
                std::vector<float> y((size_t)d);
                matmul(pool, kt, head.dense, x.data(), 1, y.data(), scratch);
                for (int64_t j = 0; j < d; ++j) x[j] = std::tanh(y[j] + (head.dense_b ? head.dense_b[j] : 0.0f));
            }
            matmul(pool, kt, head.out, x.data(), 1, out, scratch);
            if (head.out_b)
                for (int64_t j = 0; j < head.n_out(); ++j) out[j] += head.out_b[j];
            return;
        }
    }
}

}  // namespace ei
