#include "arch/pooling.h"

#include <algorithm>
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

ClassifierHead load_classifier_head(const GgufFile& file, const KernelTable& kt, int64_t n_embd, bool causal) {
    ClassifierHead h;
    h.out = load_tensor(file, kt, TensorKind::cls_out, -1, {n_embd, -1}, true, false);
    if (!h.out.present()) return h;
    h.out_b = load_f32_vector(file, TensorKind::cls_out_bias, -1, h.out.rows(), false);
    h.dense = load_tensor(file, kt, TensorKind::cls, -1, {n_embd, n_embd}, true, false);
    if (h.dense.present()) h.dense_b = load_f32_vector(file, TensorKind::cls_bias, -1, n_embd, false);
    h.last_row = causal;
    // llama.cpp's build_pooling applies it for these architectures only: their converter makes
    // the head from the lm_head rows of "yes" and "no", whose softmax is the reranker's P(yes).
    const std::string arch = file.get_string("general.architecture");
    h.softmax = arch == "qwen3" || arch == "qwen3vl";
    return h;
}

DenseProjection load_dense_projection(const GgufFile& file, const KernelTable& kt, int64_t n_embd) {
    DenseProjection p;
    p.dense_2 = load_tensor(file, kt, TensorKind::dense_2, -1, {n_embd, -1}, true, false);
    const int64_t width = p.dense_2.present() ? p.dense_2.rows() : n_embd;
    p.dense_3 = load_tensor(file, kt, TensorKind::dense_3, -1, {width, -1}, true, false);
    return p;
}

int64_t pooled_size(Pooling p, const ClassifierHead& head, const DenseProjection& dense, int64_t n, int64_t d) {
    switch (p) {
        case Pooling::none: return n * dense.n_out(d);
        case Pooling::rank: return head.n_out();
        default: return dense.n_out(d);
    }
}

namespace {

// The rank head's scores of one hidden row x [d] into out [head.n_out()].
void classify(ThreadPool& pool, const KernelTable& kt, MatmulScratch& scratch, const ClassifierHead& head,
              const float* row, int64_t d, float* out) {
    std::vector<float> x(row, row + d);
    if (head.dense.present()) {
        std::vector<float> y((size_t)d);
        matmul(pool, kt, head.dense, x.data(), 1, y.data(), scratch);
        for (int64_t j = 0; j < d; ++j) x[j] = std::tanh(y[j] + (head.dense_b ? head.dense_b[j] : 0.0f));
    }
    matmul(pool, kt, head.out, x.data(), 1, out, scratch);
    const int64_t k = head.n_out();
    if (head.out_b)
        for (int64_t j = 0; j < k; ++j) out[j] += head.out_b[j];
    if (head.softmax) {  // ggml_soft_max: max subtracted, the sum in double
        float mx = -INFINITY;
        for (int64_t j = 0; j < k; ++j) mx = std::max(mx, out[j]);
        double sum = 0.0;
        for (int64_t j = 0; j < k; ++j) sum += (out[j] = std::exp(out[j] - mx));
        const float inv = (float)(1.0 / sum);
        for (int64_t j = 0; j < k; ++j) out[j] *= inv;
    }
}

// rows pooled vectors x [rows][d] projected into out [rows][dense.n_out(d)].
void project(ThreadPool& pool, const KernelTable& kt, MatmulScratch& scratch, const DenseProjection& dense,
             const float* x, int64_t rows, int64_t d, float* out) {
    std::vector<float> mid;  // [rows][n_dense] between the two projections
    if (dense.dense_2.present() && dense.dense_3.present()) {
        mid.resize((size_t)(rows * dense.dense_2.rows()));
        matmul(pool, kt, dense.dense_2, x, rows, mid.data(), scratch);
        matmul(pool, kt, dense.dense_3, mid.data(), rows, out, scratch);
    } else {
        matmul(pool, kt, dense.dense_2.present() ? dense.dense_2 : dense.dense_3, x, rows, out, scratch);
    }
}

}  // namespace

void pool_hidden(ThreadPool& pool, const KernelTable& kt, MatmulScratch& scratch, Pooling p, const ClassifierHead& head,
                 const DenseProjection& dense, const float* h, int64_t n, int64_t d, float* out) {
    if (n <= 0) throw Error("cannot pool an empty input");
    if (p == Pooling::rank) {
        if (!head.present()) throw Error("rank pooling needs a classification head (cls.output.weight), which this model has not");
        classify(pool, kt, scratch, head, h + (head.last_row ? (n - 1) * d : 0), d, out);
        return;
    }
    const int64_t rows = p == Pooling::none ? n : 1;
    std::vector<float> pooled;  // [rows][d] before the projections, where there are any
    float* dst = out;
    if (dense.present()) {
        pooled.resize((size_t)(rows * d));
        dst = pooled.data();
    }
    switch (p) {
        case Pooling::none: std::memcpy(dst, h, sizeof(float) * (size_t)(n * d)); break;
        case Pooling::cls: std::memcpy(dst, h, sizeof(float) * (size_t)d); break;
        case Pooling::last: std::memcpy(dst, h + (n - 1) * d, sizeof(float) * (size_t)d); break;
        case Pooling::mean: {
            // ggml's mean pooling is a matmul with a matrix of 1/n: each row scaled, then summed.
            const float inv = 1.0f / (float)n;
            for (int64_t j = 0; j < d; ++j) dst[j] = 0.0f;
            for (int64_t t = 0; t < n; ++t)
                for (int64_t j = 0; j < d; ++j) dst[j] += h[t * d + j] * inv;
            break;
        }
        case Pooling::rank: break;  // above
    }
    if (dense.present()) project(pool, kt, scratch, dense, dst, rows, d, out);
}

}  // namespace ei
