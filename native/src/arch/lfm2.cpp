// The lfm2 architecture (Liquid AI LFM2-350M / 700M / 1.2B) and lfm2moe (LFM2-8B-A1B), as
// llama.cpp runs them from GGUF (llama_model_lfm2, llama_model_lfm2moe): a hybrid of two kinds of
// layer, chosen per layer by attention.head_count_kv (an array; 0 marks a convolution layer):
//
//   attention layers: the shared decoder layer with per-head Q/K norms and neox-mode RoPE
//   convolution layers: a gated short convolution over the last shortconv.l_cache positions
//                       (layers/shortconv_layer.h), whose state each sequence keeps
//   both: SwiGLU feed-forward, RMS norms (attn_norm is LFM2's operator_norm)
//   lfm2moe: the feed-forward of every layer from leading_dense_block_count on is a mixture of
//            experts gated by sigmoid, chosen with a per-expert selection bias, the chosen
//            weights renormalized (layers/decoder_layer.h, ExpertShape::sigmoid)
//   the final norm is stored as token_embd_norm (llama.cpp's name for LFM2's embedding_norm,
//   which transformers applies after the last layer); the output tied to token_embd
//
// The convolution's state describes a sequence's last position only: engine/context.cpp refuses,
// naming it, what would rewind or move a sequence (truncating short of its end, a context shift,
// a snapshot of a prefix). Both kinds of layer offload; an offloaded convolution keeps its state
// on the device (gpu/device_conv_state.h).
#include <string>

#include "arch/arch.h"

namespace ei {

std::unique_ptr<ArchModel> load_lfm2(const GgufFile& f, const KernelTable& kt) {
    HParams hp = read_hparams(f);
    const std::string a = hp.arch + ".";
    hp.conv_l_cache = f.get_int(a + "shortconv.l_cache");
    if (hp.conv_l_cache < 2 || hp.conv_l_cache > 64) f.fail(a + "shortconv.l_cache", "must be in 2..64");
    // lfm2moe: dense feed-forwards up to this layer, experts from it on.
    const bool moe = hp.arch == "lfm2moe";
    const int64_t dense_lead = moe ? f.get_int(a + "leading_dense_block_count", 0) : hp.n_layer;
    if (moe) {
        if (hp.n_expert == 0) f.fail(a + "expert_count", "is missing (a mixture-of-experts model needs it)");
        // llama.cpp's gating functions: 1 softmax, 2 sigmoid, 3 softmax_weight; its converter
        // writes sigmoid for this architecture, and only that is computed here.
        if (f.get_int(a + "expert_gating_func", 2) != 2) f.fail(a + "expert_gating_func", "must be 2 (sigmoid)");
        if (dense_lead < 0 || dense_lead > hp.n_layer) f.fail(a + "leading_dense_block_count", "is out of range");
    }
    DecoderModel m;
    load_decoder_io(f, kt, hp, m, TensorKind::output_norm_lfm2);
    m.shapes.experts.sigmoid = moe;  // llama.cpp passes norm_w = true: the default

    LayerConfig config;
    config.rope = file_rope(hp);
    config.rope_neox = true;
    const int64_t d = hp.n_embd;
    for (int il = 0; il < hp.n_layer; ++il) {
        LayerParts parts;
        parts.qk_norm = true;
        parts.experts = parts.selection_bias = il >= dense_lead;
        if (hp.has_attention(il)) {
            m.layers.push_back(load_layer(f, kt, hp, il, parts));
        } else {
            CpuLayerWeights L;
            L.attn_norm = load_f32_vector(f, TensorKind::attn_norm, il, d);
            L.conv_in = load_tensor(f, kt, TensorKind::shortconv_in_proj, il, {d, 3 * d}, true);
            const Tensor kernel = load_tensor(f, kt, TensorKind::shortconv_conv, il, {hp.conv_l_cache, d}, false);
            if (kernel.type != TYPE_F32)
                f.fail("tensor '" + tensor_name(TensorKind::shortconv_conv, il) + "'", "must be F32");
            L.conv_kernel = reinterpret_cast<const float*>(kernel.data);
            L.conv_out = load_tensor(f, kt, TensorKind::shortconv_out_proj, il, {d, d}, true);
            load_feed_forward(f, kt, hp, il, parts, L);
            m.layers.push_back(L);
        }
        m.configs.push_back(config);
    }
    return std::make_unique<ArchModel>(std::move(hp), std::move(m));
}

}  // namespace ei
