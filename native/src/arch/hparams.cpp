#include "arch/hparams.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace ei {

namespace {
int64_t positive(const GgufFile& f, const std::string& key, int64_t v, int64_t limit) {
    if (v <= 0 || v > limit) f.fail(key, "value " + std::to_string(v) + " is out of range (1.." + std::to_string(limit) + ")");
    return v;
}

float positive_float(const GgufFile& f, const std::string& key, double fallback) {
    const float v = (float)f.get_float(key, fallback);
    if (!(v > 0.0f && std::isfinite(v))) f.fail(key, "must be positive");
    return v;
}

// YaRN's attention-magnitude factor as transformers' get_mscale: 1 + 0.1 m ln(scale) above 1.
float yarn_mscale(float scale, float m) {
    return scale <= 1.0f ? 1.0f : 0.1f * m * std::log(scale) + 1.0f;
}

// <arch>.rope.scaling.*, as llama_model::load_hparams and llama_context read them (their float
// operations: the cos/sin are ggml's bits). An absent type is linear, as in llama.cpp (a factor
// without a type scales linearly); a type the core does not implement is refused, whatever the
// factor, rather than run as plain RoPE.
void read_rope_scaling(const GgufFile& f, HParams& hp) {
    const std::string a = hp.arch + ".";
    const std::string type_key = a + "rope.scaling.type";
    const std::string type = f.get_string(type_key, "linear");
    if (type == "none") hp.rope_scaling = RopeScaling::none;
    else if (type == "linear") hp.rope_scaling = RopeScaling::linear;
    else if (type == "yarn") hp.rope_scaling = RopeScaling::yarn;
    else if (type == "longrope" && hp.arch == "phi3") hp.rope_scaling = RopeScaling::longrope;
    else
        f.fail(type_key, "rope scaling '" + gguf_printable(type) + "' is not supported for the " + gguf_printable(hp.arch) +
                             " architecture (this version implements none, linear, yarn, and longrope for phi3)");

    const std::string factor_key = f.find(a + "rope.scaling.factor") ? a + "rope.scaling.factor" : a + "rope.scale_linear";
    const float factor = (float)f.get_float(factor_key, 0.0);
    if (!(factor >= 0.0f && std::isfinite(factor))) f.fail(factor_key, "must be positive");
    if (hp.rope_scaling != RopeScaling::none && factor != 0.0f) hp.rope_freq_scale = 1.0f / factor;

    const float attn_factor = positive_float(f, a + "rope.scaling.attn_factor", 1.0);
    hp.rope_n_ctx_orig = positive(f, a + "rope.scaling.original_context_length",
                                  f.get_int(a + "rope.scaling.original_context_length", hp.n_ctx_train), 1 << 24);
    hp.rope_attn_factor = attn_factor;
    if (hp.rope_scaling != RopeScaling::yarn) {
        for (const char* k : {"yarn_ext_factor", "yarn_attn_factor", "yarn_beta_fast", "yarn_beta_slow", "yarn_log_multiplier"})
            if (f.find(a + "rope.scaling." + k)) f.fail(a + "rope.scaling." + k, "is set but the rope scaling is not yarn");
        return;
    }
    // llama.cpp reads the yarn_* keys for a few architectures only (grok, mistral3, deepseek2) and
    // runs the others at its defaults; they are what the checkpoint was trained with (transformers'
    // beta_fast, beta_slow, attention_factor), so they are read here for every architecture.
    const std::string ext_key = a + "rope.scaling.yarn_ext_factor";
    hp.yarn_ext_factor = (float)f.get_float(ext_key, 1.0);
    if (!(hp.yarn_ext_factor > 0.0f && hp.yarn_ext_factor <= 1.0f)) f.fail(ext_key, "must be in (0, 1]");
    hp.yarn_beta_fast = positive_float(f, a + "rope.scaling.yarn_beta_fast", 32.0);
    hp.yarn_beta_slow = positive_float(f, a + "rope.scaling.yarn_beta_slow", 1.0);
    // llama_context: the magnitude transformers scales cos and sin by, divided by the
    // 1 + 0.1 ln(factor) that ggml's rope_yarn multiplies in, times the file's attn_factor.
    const float scale = 1.0f / hp.rope_freq_scale;
    float mscale = yarn_mscale(scale, 1.0f);
    const std::string log_mul_key = a + "rope.scaling.yarn_log_multiplier";
    if (f.find(log_mul_key)) mscale = yarn_mscale(scale, 1.0f) / yarn_mscale(scale, positive_float(f, log_mul_key, 1.0));
    const std::string yarn_attn_key = a + "rope.scaling.yarn_attn_factor";
    if (f.find(yarn_attn_key)) mscale = positive_float(f, yarn_attn_key, 1.0);
    mscale *= 1.0f / (1.0f + 0.1f * std::log(scale));
    hp.rope_attn_factor = mscale * attn_factor;
    // The context YaRN was chosen for: Qwen 2.5 keeps context_length at the original 32768.
    const double scaled_ctx = (double)hp.rope_n_ctx_orig * (double)scale;
    if (scaled_ctx > (double)hp.n_ctx_train) hp.n_ctx_train = std::min<int64_t>((int64_t)scaled_ctx, 1 << 24);
}
}  // namespace

const char* rope_scaling_name(RopeScaling s) {
    switch (s) {
        case RopeScaling::none: return "none";
        case RopeScaling::linear: return "linear";
        case RopeScaling::yarn: return "yarn";
        case RopeScaling::longrope: return "longrope";
    }
    return "?";
}

HParams read_hparams(const GgufFile& f) {
    HParams hp;
    hp.arch = f.get_string("general.architecture");
    const std::string a = hp.arch + ".";
    // Limits are generous sanity bounds: they only stop absurd values from sizing buffers.
    hp.n_ctx_train = positive(f, a + "context_length", f.get_int(a + "context_length", 4096), 1 << 24);
    hp.n_embd = positive(f, a + "embedding_length", f.get_int(a + "embedding_length"), 1 << 17);
    hp.n_layer = positive(f, a + "block_count", f.get_int(a + "block_count"), 4096);
    hp.n_head = positive(f, a + "attention.head_count", f.get_int(a + "attention.head_count"), 4096);
    const std::string kv_key = a + "attention.head_count_kv";
    const GgufValue* kv_value = f.find(kv_key);
    if (kv_value && kv_value->type == GgufType::ARRAY) {
        // One count per layer (llama.cpp's per-layer hparams): 0 for a layer without attention.
        // The cache and the layer shapes hold one width, so the attention layers must agree.
        hp.n_head_kv_layer = f.get_int_array(kv_key);
        if ((int64_t)hp.n_head_kv_layer.size() != hp.n_layer)
            f.fail(kv_key, "has " + std::to_string(hp.n_head_kv_layer.size()) + " values for " +
                               std::to_string(hp.n_layer) + " layers");
        for (int32_t v : hp.n_head_kv_layer) {
            if (v < 0 || v > hp.n_head) f.fail(kv_key, "value " + std::to_string(v) + " is out of range (0.." + std::to_string(hp.n_head) + ")");
            if (v > 0 && hp.n_head_kv > 0 && v != hp.n_head_kv)
                f.fail(kv_key, "differs between attention layers, which this version does not support");
            if (v > 0) hp.n_head_kv = v;
        }
        if (hp.n_head_kv == 0) f.fail(kv_key, "is 0 in every layer (no layer attends)");
    } else {
        hp.n_head_kv = positive(f, kv_key, f.get_int(kv_key, hp.n_head), hp.n_head);
    }
    if (hp.n_head % hp.n_head_kv != 0)
        f.fail(a + "attention.head_count_kv", "head_count " + std::to_string(hp.n_head) +
                                                  " is not a multiple of head_count_kv " + std::to_string(hp.n_head_kv));
    const int64_t default_head_dim = hp.n_embd % hp.n_head == 0 ? hp.n_embd / hp.n_head : 0;
    hp.head_dim = positive(f, a + "attention.key_length", f.get_int(a + "attention.key_length", default_head_dim), 1 << 12);
    if (f.get_int(a + "attention.value_length", hp.head_dim) != hp.head_dim)
        f.fail(a + "attention.value_length", "differs from key_length, which no supported architecture does");
    hp.n_ff = positive(f, a + "feed_forward_length", f.get_int(a + "feed_forward_length"), 1 << 20);
    hp.norm_eps = (float)f.get_float(a + "attention.layer_norm_rms_epsilon", 1e-5);
    if (!(hp.norm_eps >= 0.0f && hp.norm_eps < 1.0f)) f.fail(a + "attention.layer_norm_rms_epsilon", "must be in [0, 1)");
    hp.n_rot = f.get_int(a + "rope.dimension_count", hp.head_dim);
    if (hp.n_rot <= 0 || hp.n_rot > hp.head_dim || hp.n_rot % 2 != 0)
        f.fail(a + "rope.dimension_count", "must be even and in 1.." + std::to_string(hp.head_dim));
    hp.rope_freq_base = (float)f.get_float(a + "rope.freq_base", 10000.0);
    if (!(hp.rope_freq_base > 0.0f)) f.fail(a + "rope.freq_base", "must be positive");
    // Absent from older files (llama.cpp's and ours), whose local layers ran at the default.
    hp.rope_freq_base_swa = (float)f.get_float(a + "rope.freq_base_swa", hp.rope_freq_base_swa);
    if (!(hp.rope_freq_base_swa > 0.0f)) f.fail(a + "rope.freq_base_swa", "must be positive");
    read_rope_scaling(f, hp);
    hp.n_expert = f.get_int(a + "expert_count", 0);
    if (hp.n_expert != 0) {
        positive(f, a + "expert_count", hp.n_expert, 1 << 12);
        hp.n_expert_used = positive(f, a + "expert_used_count", f.get_int(a + "expert_used_count", 0), hp.n_expert);
        hp.n_ff_exp = positive(f, a + "expert_feed_forward_length",
                               f.get_int(a + "expert_feed_forward_length", hp.n_ff / hp.n_expert_used), 1 << 20);
    }
    return hp;
}

}  // namespace ei
