#include "engine/activation_stats.h"

#include <cmath>

#include "common/error.h"

namespace ei {

void ActivationStats::record(const Tensor& W, const float* x, int64_t rows) { record_matrix(W, 0, x, rows); }

void ActivationStats::record_matrix(const Tensor& W, int64_t matrix, const float* x, int64_t rows) {
    const int64_t cols = W.cols(), n_mat = W.ne[2];
    Entry& e = entries_[W.data];
    if (e.sum2.empty()) {
        e.sum2.assign((size_t)(n_mat * cols), 0.0f);
        e.sum.assign((size_t)(n_mat * cols), 0.0f);
        e.counts.assign((size_t)n_mat, 0);
    }
    float* sum2 = e.sum2.data() + matrix * cols;
    float* sum = e.sum.data() + matrix * cols;
    for (int64_t r = 0; r < rows; ++r) {
        const float* row = x + r * cols;
        // The same loop as llama-imatrix's, built with the core's baseline flags as its tools are.
        for (int64_t j = 0; j < cols; ++j) sum2[j] += row[j] * row[j];
        for (int64_t j = 0; j < cols; ++j) sum[j] += row[j];
    }
    // A non-finite activation would poison every quantization that uses these sums; stop here,
    // as llama-imatrix does, rather than write them.
    for (int64_t j = 0; j < cols; ++j)
        if (!std::isfinite(sum2[j])) throw Error("non-finite activations reached a matmul input");
    e.rows += rows;
    e.counts[matrix] += rows;
}

}  // namespace ei
