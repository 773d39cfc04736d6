// What `edgeinfer imatrix` collects: for every weight matrix the forward pass multiplies, the sum
// over all input rows of each input column's square (and of the column itself), and the number of
// rows. llama-imatrix collects the same from its MUL_MAT inputs; a quantizer later weighs each
// column's rounding error by the mean square (quant/quantize.h, the importance weights).
#pragma once
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "cpu/tensor.h"

namespace ei {

class ActivationStats {
public:
    struct Entry {
        std::vector<float> sum2;     // [n_mat][cols] sum of x[j]^2 over the rows seen
        std::vector<float> sum;      // [n_mat][cols] sum of x[j]
        int64_t rows = 0;            // rows seen, all matrices together
        std::vector<int64_t> counts; // [n_mat] rows each matrix saw
    };

    // include_output: also the output head's input (llama-imatrix --process-output).
    explicit ActivationStats(bool include_output = false) : include_output_(include_output) {}
    bool include_output() const { return include_output_; }

    // Adds x [rows][W.cols()], the input of a matmul with W. Rows are added in order, each into
    // float sums one column at a time, as llama-imatrix adds them: the same inputs give its bits.
    void record(const Tensor& W, const float* x, int64_t rows);
    // The same for matrix `matrix` of a stack of W.ne[2] matrices (a MoE layer's experts): one
    // entry for the stack, n_mat = W.ne[2] matrices of sums and counts, as llama-imatrix keeps a
    // MUL_MAT_ID weight's.
    void record_matrix(const Tensor& W, int64_t matrix, const float* x, int64_t rows);

    // Keyed by the weight's data in the mapping (Tensor::data), which names it in the file.
    const std::unordered_map<const uint8_t*, Entry>& entries() const { return entries_; }

private:
    bool include_output_;
    std::unordered_map<const uint8_t*, Entry> entries_;
};

}  // namespace ei
