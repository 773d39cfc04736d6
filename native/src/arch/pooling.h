// Pooled hidden states (llama.cpp's --embeddings, llm_graph_context::build_pooling): how the final
// hidden rows of one input become its embedding, and the classification head of a reranker.
//
//   none: every row, [n][n_embd]          mean: their average, [n_embd]
//   cls:  the first row, [n_embd]         last: the last row, [n_embd]
//   rank: the first row through the head: tanh(cls · x + cls_b), then cls_out · h + cls_out_b,
//         [n_cls_out] scores
#pragma once
#include <cstdint>
#include <string>

#include "common/thread_pool.h"
#include "cpu/kernels.h"
#include "cpu/matmul.h"
#include "cpu/tensor.h"
#include "gguf/gguf.h"

namespace ei {

// llama.cpp's enum llama_pooling_type, as `<arch>.pooling_type` stores it (part of the format).
enum class Pooling : int32_t { none = 0, mean = 1, cls = 2, last = 3, rank = 4 };

const char* pooling_name(Pooling p);
// "none", "mean", "cls", "last", "rank"; throws Error naming the choices for anything else.
Pooling pooling_from_name(const std::string& name);
// `<arch>.pooling_type`, or `fallback` when the file has none; FormatError for an unknown value.
Pooling file_pooling(const GgufFile& file, Pooling fallback);

// A sequence-classification head (GGUF cls.weight / cls.bias, cls.output.weight / cls.output.bias;
// BERT and XLM-RoBERTa cross-encoders). `dense` may be absent (a direct projection).
struct ClassifierHead {
    Tensor dense;                       // [n_embd][n_embd] (cls.weight), optional
    const float* dense_b = nullptr;     // [n_embd]
    Tensor out;                         // [n_cls_out][n_embd] (cls.output.weight)
    const float* out_b = nullptr;       // [n_cls_out]
    bool present() const { return out.present(); }
    int64_t n_out() const { return out.rows(); }
};
// The head of `file` (absent when it has no cls.output.weight).
ClassifierHead load_classifier_head(const GgufFile& file, const KernelTable& kt, int64_t n_embd);

// The embedding of one input from its hidden rows h [n][d]: writes [n][d] (none), [d] (mean, cls,
// last) or [head.n_out()] (rank; Error without a head) floats to out.
void pool_hidden(ThreadPool& pool, const KernelTable& kt, MatmulScratch& scratch, Pooling p, const ClassifierHead& head,
                 const float* h, int64_t n, int64_t d, float* out);
// Floats pool_hidden writes for n rows.
int64_t pooled_size(Pooling p, const ClassifierHead& head, int64_t n, int64_t d);

}  // namespace ei
