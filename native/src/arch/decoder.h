// The decoder every architecture is: token embeddings, the layers of layers/decoder_layer.h
// with their weights and settings, and the output head,
//
//   x = token_embd[tokens] (* embed_scale)
//   for each layer: x = decoder_layer(x)                (on the CPU, or a range on a device)
//   logits = Woutput (rms_norm(x) * output_norm)        (Woutput = token_embd when tied;
//                                                        / logit_scale: Granite;
//                                                        a final tanh softcap where the file has one)
//
// and the loader pieces the architecture files build it with.
#pragma once
#include <cstdint>
#include <vector>

#include "cpu/kernels.h"
#include "gguf/gguf.h"
#include "layers/cpu_layer_ops.h"
#include "layers/decoder_layer.h"
#include "arch/hparams.h"
#include "arch/tensor_names.h"
#include "cpu/tensor.h"

namespace ei {

struct DecoderModel {
    LayerShapes shapes;
    Tensor tok_embd;                     // [n_vocab][n_embd]
    float embed_scale = 0.0f;            // > 0: the embeddings are scaled by it (Gemma: sqrt(n_embd),
                                         // Granite: its embedding multiplier)
    const float* output_norm = nullptr;  // [n_embd]
    Tensor output;                       // [n_vocab][n_embd] (token_embd when tied)
    float logit_scale = 0.0f;            // > 0: logits divided by it (Granite's logits scaling)
    float final_softcap = 0.0f;          // > 0: logits = c * tanh(logits / c)
    std::vector<CpuLayerWeights> layers;
    std::vector<LayerConfig> configs;    // per layer

    // Floats per token of the fused-projection scratch (0: no layer has a fused weight).
    int64_t fused_width() const;
    // Whether any layer is a short convolution (LFM2), whose state each sequence keeps.
    bool has_conv_layers() const { return shapes.conv_l_cache > 0; }
};

// Which optional weights a family's layers carry (every layer of a model alike).
struct LayerParts {
    bool qkv_bias = false;       // attn_{q,k,v}.bias (Qwen 2)
    bool qk_norm = false;        // attn_{q,k}_norm per-head norms (Qwen 3, Gemma 3)
    bool fused_qkv = false;      // one attn_qkv (Phi-3)
    bool fused_gate_up = false;  // one ffn_up of 2 n_ff rows, gate first (Phi-3)
    bool post_norms = false;     // post_attention_norm and post_ffw_norm (Gemma 3)
    bool experts = false;        // a mixture-of-experts feed-forward: ffn_gate_inp and the
                                 // ffn_{gate,up,down}_exps stacks instead of ffn_{gate,up,down}
    bool output_bias = false;    // attn_output.bias (gpt-oss)
    bool attn_sinks = false;     // attn_sinks, one logit a head (gpt-oss)
    bool expert_biases = false;  // ffn_gate_inp.bias and ffn_{gate,up,down}_exps.bias (gpt-oss)
    bool selection_bias = false; // exp_probs_b.bias, the experts' selection bias (LFM2-MoE)
    // The feed-forward's input norm: ffn_norm, except gpt-oss's, which its GGUF names
    // post_attention_norm (llama.cpp's attn_post_norm, used there as the FFN norm).
    TensorKind ffn_norm = TensorKind::ffn_norm;
};

LayerShapes layer_shapes(const HParams& hp);
// The rope of the file's hyper-parameters (base, linear or YaRN scaling, attention factor), over
// n_rot dims.
RopeParams file_rope(const HParams& hp, const float* freq_factors = nullptr);
// token_embd, output_norm and output (falling back to token_embd when tied); sets hp.n_vocab.
// norm_kind: the final norm's name (LFM2's is token_embd_norm).
void load_decoder_io(const GgufFile& f, const KernelTable& kt, HParams& hp, DecoderModel& m,
                     TensorKind norm_kind = TensorKind::output_norm);
// Layer il's weights: the parts every layer has, and the optional ones `parts` names.
CpuLayerWeights load_layer(const GgufFile& f, const KernelTable& kt, const HParams& hp, int il, const LayerParts& parts);
// Layer il's feed-forward half into L (its norm, then dense or expert weights as `parts` says):
// load_layer's, and LFM2's convolution layers'.
void load_feed_forward(const GgufFile& f, const KernelTable& kt, const HParams& hp, int il, const LayerParts& parts,
                       CpuLayerWeights& L);
// The decoder with every layer loaded alike (`parts`) and configured alike (`config`).
DecoderModel load_uniform_decoder(const GgufFile& f, const KernelTable& kt, HParams& hp, const LayerParts& parts,
                                  const LayerConfig& config);

}  // namespace ei
