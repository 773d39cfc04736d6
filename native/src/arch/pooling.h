// Pooled hidden states (llama.cpp's --embeddings, llm_graph_context::build_pooling): how the final
// hidden rows of one input become its embedding, and the classification head of a reranker.
//
//   none: every row, [n][n_embd]          mean: their average, [n_embd]
//   cls:  the first row, [n_embd]         last: the last row, [n_embd]
//   rank: the first row (the last of a causal decoder) through the head: tanh(cls · x + cls_b),
//         then cls_out · h + cls_out_b, [n_cls_out] scores; a Qwen 3 reranker's two outputs
//         (cls_out = the lm_head rows of "yes" and "no") then go through a softmax, so that its
//         score, output 0, is P(yes) over {yes, no}
//
// and then, where the file has them, sentence-transformers' Dense projections of every pooled
// vector (EmbeddingGemma; llama.cpp's build_dense_out): y = dense_3 · (dense_2 · x), no biases
// and no activation. A rank head's scores are never projected.
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
    bool last_row = false;              // pools the last row: a causal decoder's (llama.cpp's
                                        // rank with causal_attn), else the first ([CLS])
    bool softmax = false;               // a softmax over the outputs (llama.cpp does it for qwen3)
    bool present() const { return out.present(); }
    int64_t n_out() const { return out.rows(); }
};
// The head of `file` (absent when it has no cls.output.weight). causal: the model attends
// causally, so only its last row has seen the whole input.
ClassifierHead load_classifier_head(const GgufFile& file, const KernelTable& kt, int64_t n_embd, bool causal);

// sentence-transformers' Dense modules after the pooling (GGUF dense_2 then dense_3, as llama.cpp's
// converter writes them with --sentence-transformers-dense-modules). Both optional.
struct DenseProjection {
    Tensor dense_2;                     // [n_dense][n_embd], optional
    Tensor dense_3;                     // [n_embd_out][n_dense] (n_dense = n_embd without dense_2)
    bool present() const { return dense_2.present() || dense_3.present(); }
    // Floats of a projected n_embd vector.
    int64_t n_out(int64_t n_embd) const {
        return dense_3.present() ? dense_3.rows() : dense_2.present() ? dense_2.rows() : n_embd;
    }
};
DenseProjection load_dense_projection(const GgufFile& file, const KernelTable& kt, int64_t n_embd);

// The embedding of one input from its hidden rows h [n][d]: writes [n][d_out] (none), [d_out]
// (mean, cls, last) or [head.n_out()] (rank; Error without a head) floats to out, where d_out is
// dense.n_out(d).
void pool_hidden(ThreadPool& pool, const KernelTable& kt, MatmulScratch& scratch, Pooling p, const ClassifierHead& head,
                 const DenseProjection& dense, const float* h, int64_t n, int64_t d, float* out);
// Floats pool_hidden writes for n rows.
int64_t pooled_size(Pooling p, const ClassifierHead& head, const DenseProjection& dense, int64_t n, int64_t d);

}  // namespace ei
