// What the BERT-family encoders (arch/bert.cpp, arch/nomic_bert.cpp) compute alike, as llama.cpp's
// one graph for them does (src/models/bert.cpp): the token-type row, the post-LN LayerNorm with a
// bias, bidirectional attention within each of several packed inputs, and what their files hold
// alike (EncoderFile).
//
// Every function here is row by row (or, for attention, row by row within an input), so that an
// input gets the same floats whatever it is packed with: the matmuls around them run in
// BatchOrder::per_row for the same reason.
#pragma once
#include <cstdint>

#include "arch/arch.h"

namespace ei {

// What a BERT-family file has before its layers: the hyper-parameters (n_head * head_dim = n_embd,
// no grouped heads: refused otherwise), the LayerNorm epsilon, and the embeddings with their norm.
struct EncoderFile {
    HParams hp;                                 // n_vocab from token_embd
    DecoderModel io;                            // tok_embd [n_vocab][n_embd] and the layer shapes
    float eps;                                  // <arch>.attention.layer_norm_epsilon
    Tensor type_embd;                           // [n_token_types][n_embd], optional
    const float *tok_norm, *tok_norm_b;         // [n_embd] token_embd_norm
};
EncoderFile load_encoder_file(const GgufFile& f, const KernelTable& kt);

// x[t] += type_embd[0] for n rows of width d: llama.cpp gives every token type 0 ("sentence A").
// An absent table adds nothing. row: [d] scratch.
void add_token_type0(const KernelTable& kt, const Tensor& type_embd, float* x, int64_t n, int64_t d, float* row);

// ggml_norm then mul and add: out[t] = (x[t] - mean) / sqrt(var + eps) * w + b over n rows of
// width d, rows split across the pool; mean and variance summed in double (ggml_float), the scale
// in float. b may be null; out may equal x.
void layer_norm(ThreadPool& pool, const float* x, const float* w, const float* b, float* out, int64_t n, int64_t d,
                float eps);

// y[t] += b for n rows of width d (nothing when b is null: a bias the file does not have).
void add_bias(float* y, const float* b, int64_t n, int64_t d);

// Bidirectional attention within each packed input, (token, head) tasks across the pool:
// out = softmax(q k^T / sqrt(head_dim)) v over the keys of the token's own input
// [starts[s], starts[s + 1]).
//   q, k, v, out: [starts[n_seq]][n_head][head_dim]; starts: [n_seq + 1], starts[0] = 0
void attention_full(ThreadPool& pool, const float* q, const float* k, const float* v, const int64_t* starts,
                    int64_t n_seq, int64_t n_head, int64_t head_dim, float* out);

}  // namespace ei
