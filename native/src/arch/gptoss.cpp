// The gpt-oss architecture (OpenAI gpt-oss-20b / gpt-oss-120b), as llama.cpp runs it from GGUF
// (llama_model_openai_moe, build_moe_ffn with SOFTMAX_WEIGHT gating and SWIGLU_OAI_MOE):
//
//   h = rms_norm(x) * attn_norm
//   q, k, v = Wq h + bq, Wk h + bk, Wv h + bv; neox RoPE (the file's, YaRN for the released models)
//   a = attention with per-head sinks (attn_sinks: a logit in each softmax's denominator only),
//       scores * 1/sqrt(head_dim); even layers attend over the last sliding_window positions,
//       odd layers over everything (llama.cpp's swa pattern 2)
//   x += Wo a + bo
//   h = rms_norm(x) * post_attention_norm                (the FFN's input norm, so named)
//   logits = Wgate_inp h + b; the n_used highest, weights = softmax over those n_used
//   x += sum_j w_j (Wdown[e_j] swiglu_oai(Wgate[e_j] h + bg, Wup[e_j] h + bu) + bd)
//   logits = Woutput (rms_norm(x) * output_norm)
#include <string>

#include "arch/arch.h"

namespace ei {

namespace {
// llama.cpp's load_swa_pattern(ml, 2) for this architecture: in each pair of layers the first is
// sliding-window, the second global.
constexpr int kSwaPattern = 2;
}  // namespace

std::unique_ptr<ArchModel> load_gptoss(const GgufFile& f, const KernelTable& kt) {
    HParams hp = read_hparams(f);
    const std::string a = hp.arch + ".";
    const int64_t n_swa = f.get_int(a + "attention.sliding_window", 0);
    if (n_swa < 0) f.fail(a + "attention.sliding_window", "must not be negative");
    DecoderModel m;
    load_decoder_io(f, kt, hp, m);
    m.shapes.experts.norm_weights = false;  // llama.cpp passes norm_w = false
    m.shapes.experts.softmax_weight = true;
    m.shapes.experts.swiglu_oai = true;

    LayerConfig global;
    global.rope = file_rope(hp);
    global.rope_neox = true;
    LayerConfig local = global;
    // llama.cpp: the sliding layers' base is rope.freq_base_swa where the file has one, else the
    // global base; their scaling is always the global one.
    local.rope.freq_base = (float)f.get_float(a + "rope.freq_base_swa", hp.rope_freq_base);
    local.window = n_swa;

    LayerParts parts;
    parts.qkv_bias = true;
    parts.output_bias = true;
    parts.attn_sinks = true;
    parts.experts = true;
    parts.expert_biases = true;
    parts.ffn_norm = TensorKind::attn_post_norm;
    for (int il = 0; il < hp.n_layer; ++il) {
        m.layers.push_back(load_layer(f, kt, hp, il, parts));
        m.configs.push_back(n_swa > 0 && il % kSwaPattern < kSwaPattern - 1 ? local : global);
    }
    return std::make_unique<ArchModel>(std::move(hp), std::move(m));
}

}  // namespace ei
