// The gemma3 architecture (Gemma 3 text models), as llama.cpp runs it from GGUF
// (llm_build_gemma3 with interleaved sliding-window attention): the shared decoder
// (arch/decoder.h) with
//
//   x = token_embd[tokens] * sqrt(n_embd)
//   per-head norms of Q and K before neox-mode RoPE (attn_q_norm, attn_k_norm)
//   rope.freq_base_swa on local layers, rope.freq_base on global ones
//   Q scaled by attention_scale before attention, which then scales by 1
//   local layers attend to the last sliding_window positions only
//   norms of both sub-block outputs before their residual adds (post_attention_norm, post_ffw_norm)
//   GEGLU (gelu_tanh) feed-forward
//   logits softcapped only if the file has final_logit_softcapping
//
// The norm weights are used as stored: the GGUF converter already folded Gemma's (1 + w) in.
#include <cmath>
#include <string>

#include "arch/arch.h"

namespace ei {

namespace {
// llama.cpp's set_swa_pattern(6) for gemma3: in every group of 6 layers the first 5 are
// local (sliding window) and the 6th is global.
constexpr int kSwaPattern = 6;
}  // namespace

DecoderModel load_gemma3_decoder(const GgufFile& f, const KernelTable& kt, HParams& hp) {
    const std::string a = hp.arch + ".";
    // llama.cpp would run the local layers with YaRN's mix at scale 1; no Gemma 3 uses YaRN.
    if (hp.rope_scaling == RopeScaling::yarn)
        f.fail(a + "rope.scaling.type", "rope scaling 'yarn' is not supported for the " + hp.arch + " architecture");
    const int64_t n_swa = f.get_int(a + "attention.sliding_window", 0);
    if (n_swa < 0) f.fail(a + "attention.sliding_window", "must not be negative");
    DecoderModel m;
    load_decoder_io(f, kt, hp, m);
    m.embed_scale = std::sqrt((float)hp.n_embd);
    m.final_softcap = (float)f.get_float(a + "final_logit_softcapping", 0.0);

    LayerConfig global;
    global.rope = file_rope(hp);
    global.rope_neox = true;
    global.gelu = true;
    // gemma_pytorch's query_pre_attn_scalar: head_dim, except the 27B model (62 layers), which
    // scales by n_embd / n_head (llama.cpp derives it the same way).
    global.q_scale = hp.n_layer == 62 ? 1.0f / std::sqrt((float)(hp.n_embd / hp.n_head))
                                      : 1.0f / std::sqrt((float)hp.head_dim);
    // Local layers use the sliding-window base and are never scaled (llama.cpp's
    // rope_freq_base_train_swa / rope_freq_scale_train_swa).
    LayerConfig local = global;
    local.rope = RopeParams{hp.n_rot, hp.rope_freq_base_swa, 1.0f, nullptr};
    local.rope.attn_factor = hp.rope_attn_factor;  // llama.cpp's one attn_factor for every layer
    local.window = n_swa;

    LayerParts parts;
    parts.qk_norm = true;
    parts.post_norms = true;
    for (int il = 0; il < hp.n_layer; ++il) {
        m.layers.push_back(load_layer(f, kt, hp, il, parts));
        m.configs.push_back(n_swa > 0 && il % kSwaPattern < kSwaPattern - 1 ? local : global);
    }
    return m;
}

std::unique_ptr<ArchModel> load_gemma3(const GgufFile& f, const KernelTable& kt) {
    HParams hp = read_hparams(f);
    DecoderModel m = load_gemma3_decoder(f, kt, hp);
    return std::make_unique<ArchModel>(std::move(hp), std::move(m));
}

}  // namespace ei
