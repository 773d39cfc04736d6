#include "arch/decoder.h"

#include <algorithm>
#include <string>

#include "arch/arch.h"

namespace ei {

int64_t DecoderModel::fused_width() const {
    int64_t w = 0;
    for (const CpuLayerWeights& L : layers) {
        if (L.wqkv.present()) w = std::max(w, shapes.q_width() + 2 * shapes.kv_width());
        if (L.w_gate_up.present()) w = std::max(w, 2 * shapes.n_ff);
    }
    return w;
}

LayerShapes layer_shapes(const HParams& hp) {
    LayerShapes s{hp.n_embd, hp.n_head, hp.n_head_kv, hp.head_dim, hp.n_ff, hp.norm_eps};
    s.experts = ExpertShape{hp.n_expert, hp.n_expert_used, hp.n_ff_exp};
    s.conv_l_cache = hp.conv_l_cache;
    return s;
}

RopeParams file_rope(const HParams& hp, const float* freq_factors) {
    RopeParams p{hp.n_rot, hp.rope_freq_base, hp.rope_freq_scale, freq_factors};
    p.attn_factor = hp.rope_attn_factor;
    p.n_ctx_orig = (int32_t)hp.rope_n_ctx_orig;
    if (hp.rope_scaling == RopeScaling::yarn) {
        p.ext_factor = hp.yarn_ext_factor;
        p.beta_fast = hp.yarn_beta_fast;
        p.beta_slow = hp.yarn_beta_slow;
    }
    return p;
}

void load_decoder_io(const GgufFile& f, const KernelTable& kt, HParams& hp, DecoderModel& m, TensorKind norm_kind) {
    const int64_t d = hp.n_embd;
    m.shapes = layer_shapes(hp);
    m.tok_embd = load_tensor(f, kt, TensorKind::token_embd, -1, {d, -1}, false);
    hp.n_vocab = m.tok_embd.rows();
    m.output_norm = load_f32_vector(f, norm_kind, -1, d);
    m.output = load_tensor(f, kt, TensorKind::output, -1, {d, hp.n_vocab}, true, /*required=*/false);
    if (!m.output.present()) {
        m.output = load_tensor(f, kt, TensorKind::token_embd, -1, {d, hp.n_vocab}, true);
        m.tok_embd.release_after_lookup = m.output.packed != nullptr;
    }
}

CpuLayerWeights load_layer(const GgufFile& f, const KernelTable& kt, const HParams& hp, int il, const LayerParts& parts) {
    const int64_t d = hp.n_embd, qw = hp.q_width(), kvw = hp.kv_width(), hd = hp.head_dim;
    CpuLayerWeights L;
    if (!hp.has_attention(il))
        f.fail(hp.arch + ".attention.head_count_kv", "is 0 for layer " + std::to_string(il) +
                                                         ", a layer without attention, which the " + hp.arch +
                                                         " architecture does not have");
    L.attn_norm = load_f32_vector(f, TensorKind::attn_norm, il, d);
    if (parts.fused_qkv) {
        L.wqkv = load_tensor(f, kt, TensorKind::attn_qkv, il, {d, qw + 2 * kvw}, true);
    } else {
        L.wq = load_tensor(f, kt, TensorKind::attn_q, il, {d, qw}, true);
        L.wk = load_tensor(f, kt, TensorKind::attn_k, il, {d, kvw}, true);
        L.wv = load_tensor(f, kt, TensorKind::attn_v, il, {d, kvw}, true);
    }
    if (parts.qkv_bias) {
        L.bq = load_f32_vector(f, TensorKind::attn_q_bias, il, qw);
        L.bk = load_f32_vector(f, TensorKind::attn_k_bias, il, kvw);
        L.bv = load_f32_vector(f, TensorKind::attn_v_bias, il, kvw);
    }
    if (parts.qk_norm) {
        L.q_norm = load_f32_vector(f, TensorKind::attn_q_norm, il, hd);
        L.k_norm = load_f32_vector(f, TensorKind::attn_k_norm, il, hd);
    }
    L.wo = load_tensor(f, kt, TensorKind::attn_output, il, {qw, d}, true);
    if (parts.output_bias) L.bo = load_f32_vector(f, TensorKind::attn_output_bias, il, d);
    if (parts.attn_sinks) L.attn_sinks = load_f32_vector(f, TensorKind::attn_sinks, il, hp.n_head);
    if (parts.post_norms) L.post_attn_norm = load_f32_vector(f, TensorKind::attn_post_norm, il, d);
    load_feed_forward(f, kt, hp, il, parts, L);
    return L;
}

void load_feed_forward(const GgufFile& f, const KernelTable& kt, const HParams& hp, int il, const LayerParts& parts,
                       CpuLayerWeights& L) {
    const int64_t d = hp.n_embd, ff = hp.n_ff;
    L.ffn_norm = load_f32_vector(f, parts.ffn_norm, il, d);
    if (parts.experts) {
        const int64_t ne = hp.n_expert, fe = hp.n_ff_exp;
        if (ne == 0) f.fail(hp.arch + ".expert_count", "is missing (a mixture-of-experts model needs it)");
        L.ffn_gate_inp = load_tensor(f, kt, TensorKind::ffn_gate_inp, il, {d, ne}, true);
        L.ffn_gate_exps = load_tensor(f, kt, TensorKind::ffn_gate_exps, il, {d, fe, ne}, true);
        L.ffn_up_exps = load_tensor(f, kt, TensorKind::ffn_up_exps, il, {d, fe, ne}, true);
        L.ffn_down_exps = load_tensor(f, kt, TensorKind::ffn_down_exps, il, {fe, d, ne}, true);
        if (parts.expert_biases) {
            L.ffn_gate_inp_b = load_f32_vector(f, TensorKind::ffn_gate_inp_bias, il, ne);
            L.ffn_gate_exps_b = load_f32_rows(f, TensorKind::ffn_gate_exps_bias, il, fe, ne);
            L.ffn_up_exps_b = load_f32_rows(f, TensorKind::ffn_up_exps_bias, il, fe, ne);
            L.ffn_down_exps_b = load_f32_rows(f, TensorKind::ffn_down_exps_bias, il, d, ne);
        }
        if (parts.selection_bias) L.ffn_exp_probs_b = load_f32_vector(f, TensorKind::ffn_exp_probs_b, il, ne);
    } else if (parts.fused_gate_up) {
        L.w_gate_up = load_tensor(f, kt, TensorKind::ffn_up, il, {d, 2 * ff}, true);
    } else {
        L.w_gate = load_tensor(f, kt, TensorKind::ffn_gate, il, {d, ff}, true);
        L.w_up = load_tensor(f, kt, TensorKind::ffn_up, il, {d, ff}, true);
    }
    if (!parts.experts) L.w_down = load_tensor(f, kt, TensorKind::ffn_down, il, {ff, d}, true);
    if (parts.post_norms) L.post_ffn_norm = load_f32_vector(f, TensorKind::ffn_post_norm, il, d);
}

DecoderModel load_uniform_decoder(const GgufFile& f, const KernelTable& kt, HParams& hp, const LayerParts& parts,
                                  const LayerConfig& config) {
    DecoderModel m;
    load_decoder_io(f, kt, hp, m);
    for (int il = 0; il < hp.n_layer; ++il) m.layers.push_back(load_layer(f, kt, hp, il, parts));
    m.configs.assign((size_t)hp.n_layer, config);
    return m;
}

std::unique_ptr<ArchModel> load_neox_decoder(const GgufFile& f, const KernelTable& kt, const LayerParts& parts) {
    HParams hp = read_hparams(f);
    LayerConfig config;
    config.rope = file_rope(hp);
    config.rope_neox = true;
    DecoderModel m = load_uniform_decoder(f, kt, hp, parts, config);
    return std::make_unique<ArchModel>(std::move(hp), std::move(m));
}

}  // namespace ei
