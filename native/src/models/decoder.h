// The forward pass of the pre-norm, grouped-query-attention, SwiGLU decoders that differ only in
// small ways (Qwen 2 / Qwen 3 / Phi-3), as llama.cpp builds them:
//
//   x = token_embd[tokens]
//   for each layer:
//     h = rms_norm(x) * attn_norm
//     q, k, v = Wq h (+ bq), Wk h (+ bk), Wv h (+ bv)   or one fused Wqkv h, split in that order
//     q = rms_norm_per_head(q) * q_norm;  k likewise      (Qwen 3)
//     rope(q), rope(k)                                    (neox mode: dims i and i + n_rot/2)
//     x += Wo attention(q, K cache, V cache)              (causal, grouped-query)
//     h = rms_norm(x) * ffn_norm
//     x += Wdown (silu(Wgate h) * Wup h)                  or one fused Wgate_up h, gate half first
//   logits = Woutput (rms_norm(x) * output_norm)          (Woutput = token_embd when tied)
//
// Each architecture file loads its tensors into DecoderWeights (absent parts stay empty) and
// calls decoder_forward.
#pragma once
#include <cstdint>
#include <vector>

#include "models/arch.h"

namespace ei {

struct DecoderLayer {
    const float* attn_norm = nullptr;  // [n_embd]
    Tensor wqkv;                       // fused [n_embd] -> [q_width + 2 kv_width], or absent
    Tensor wq;                         // [n_embd] -> [n_head * head_dim]     (when wqkv is absent)
    Tensor wk, wv;                     // [n_embd] -> [n_head_kv * head_dim]  (when wqkv is absent)
    const float* bq = nullptr;         // [q_width] or nullptr
    const float* bk = nullptr;         // [kv_width] or nullptr
    const float* bv = nullptr;         // [kv_width] or nullptr
    const float* q_norm = nullptr;     // [head_dim] per-head RMS norm weight, or nullptr
    const float* k_norm = nullptr;     // [head_dim] or nullptr
    Tensor wo;                         // [n_head * head_dim] -> [n_embd]
    const float* ffn_norm = nullptr;   // [n_embd]
    Tensor w_gate_up;                  // fused [n_embd] -> [2 n_ff] (gate rows first), or absent
    Tensor w_gate, w_up;               // [n_embd] -> [n_ff]  (when w_gate_up is absent)
    Tensor w_down;                     // [n_ff] -> [n_embd]
};

struct DecoderWeights {
    Tensor tok_embd;                   // [n_vocab][n_embd]
    const float* output_norm = nullptr;  // [n_embd]
    Tensor output;                     // [n_vocab][n_embd] (token_embd when tied)
    std::vector<DecoderLayer> layers;
};

struct DecoderOptions {
    bool scale_q_first = false;          // Q *= 1/sqrt(head_dim) before attention (llama.cpp's Phi-3 graph)
    const float* rope_factors = nullptr; // [n_rot / 2] divisors of the RoPE angles, or nullptr
    float rope_attn_factor = 1.0f;       // RoPE cos/sin scale
};

// Loads token_embd, output_norm and output (falling back to token_embd when tied); sets hp.n_vocab.
void load_decoder_io(const GgufFile& f, const KernelTable& kt, HParams& hp, DecoderWeights& w);

void decoder_forward(ForwardEnv& env, const ForwardBatch& b, const HParams& hp, const DecoderWeights& w,
                     const DecoderOptions& o);

// Context shift for a neox-mode decoder: keys rotated further by `delta` positions.
void decoder_rotate_keys(const KernelTable& kt, const HParams& hp, float* rows, int64_t m, int32_t delta);

}  // namespace ei
