// The one table of GGUF tensor names (llama.cpp's LLM_TENSOR_NAMES). Model code asks for a kind
// and a layer; it never spells a name.
#pragma once
#include <string>

namespace ei {

enum class TensorKind {
    token_embd, output_norm, output, rope_freqs, rope_factors_long, rope_factors_short,
    attn_norm, attn_q, attn_k, attn_v, attn_output, attn_q_norm, attn_k_norm, attn_post_norm,
    ffn_norm, ffn_gate, ffn_up, ffn_down, ffn_post_norm,
    attn_qkv,                              // fused Q, K, V projection (Phi-3, nomic-bert)
    attn_qkv_bias,                         // its bias (nomic-bert refuses one: arch/nomic_bert.cpp)
    attn_q_bias, attn_k_bias, attn_v_bias, // projection biases (Qwen 2)
    ffn_gate_inp, ffn_gate_exps, ffn_up_exps, ffn_down_exps,  // mixture of experts: the router and
                                                             // the stacked experts (Qwen 3 MoE)
    shortconv_conv, shortconv_in_proj, shortconv_out_proj,   // LFM2's short-convolution blocks
    output_norm_lfm2,                      // LFM2's final norm, which llama.cpp names token_embd_norm
    attn_output_bias, attn_sinks,          // gpt-oss: the output projection's bias, per-head sink logits
    ffn_gate_inp_bias, ffn_gate_exps_bias, ffn_up_exps_bias, ffn_down_exps_bias,  // gpt-oss: router and
                                                                                 // per-expert biases
    ffn_exp_probs_b,                       // LFM2-MoE: the experts' selection bias
    // encoders (BERT: arch/bert.cpp, nomic-bert: arch/nomic_bert.cpp) and classification heads
    // (arch/pooling.h)
    token_types, position_embd, token_embd_norm, token_embd_norm_bias,
    attn_output_norm, attn_output_norm_bias, ffn_up_bias, ffn_down_bias,
    layer_output_norm, layer_output_norm_bias,
    cls, cls_bias, cls_out, cls_out_bias,
    // sentence-transformers' Dense projections after pooling (EmbeddingGemma: arch/pooling.h)
    dense_2, dense_3,
};

// "blk.<layer>.attn_q.weight", "blk.<layer>.attn_q.bias", "token_embd.weight", ... (layer ignored
// for non-layer tensors).
std::string tensor_name(TensorKind kind, int layer = -1);

}  // namespace ei
