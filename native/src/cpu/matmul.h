// y = W x for a batch of activation rows, the way llama.cpp's CPU backend computes it: the
// activations are converted once into the weight type's vec_dot_type (Q8_0 / Q8_1 / F16 / F32),
// then every output element is one vec_dot of a weight row with an activation row. Work is split
// over the thread pool by weight rows, so each thread streams its own slice of W once per batch.
// For a prompt chunk, types whose table has a gemm entry use it instead (and k-quants their
// gemm_ggml_repack / gemm_ggml_tiled entry for the columns that order covers): same results, bit for
// bit, with each weight block unpacked once for several tokens.
#pragma once
#include <cstdint>
#include <vector>

#include "common/thread_pool.h"
#include "cpu/batch_order.h"
#include "cpu/kernels.h"
#include "cpu/tensor.h"

namespace ei {

// Scratch for the converted activations; grows on demand, reused across calls.
struct MatmulScratch {
    std::vector<uint8_t> act;
};

// x: [n][W.cols()] floats; y: [n][W.rows()] floats. `order`: llama.cpp's for a batch of n rows,
// or each row's as a one-row matmul computes it (cpu/batch_order.h).
void matmul(ThreadPool& pool, const KernelTable& kt, const Tensor& W, const float* x, int64_t n, float* y,
            MatmulScratch& scratch, BatchOrder order = BatchOrder::llama_cpp);

// The same x through several weights (a layer's Q, K and V; gate and up): y[i] = W[i] x, the
// bits of `count` separate matmuls. Weights of one activation type and width share one
// conversion of x, and where all of them are repacked (cpu/repack.h) one pool job covers their
// groups: a decode step waits on the pool once for them, not once each.
constexpr int kMaxSameInput = 4;
void matmul_same_input(ThreadPool& pool, const KernelTable& kt, const Tensor* const* W, float* const* y, int count,
                       const float* x, int64_t n, MatmulScratch& scratch, BatchOrder order = BatchOrder::llama_cpp);

// Bytes of one activation row converted for W (what matmul stores per row in the scratch).
size_t matmul_act_row_bytes(const KernelTable& kt, const Tensor& W);

}  // namespace ei
