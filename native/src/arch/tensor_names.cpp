#include "arch/tensor_names.h"

namespace ei {

namespace {
struct Entry {
    TensorKind kind;
    const char* name;  // "%d" stands for the layer
    const char* suffix = "weight";
};
constexpr Entry kNames[] = {
    {TensorKind::token_embd, "token_embd"},
    {TensorKind::output_norm, "output_norm"},
    {TensorKind::output, "output"},
    {TensorKind::rope_freqs, "rope_freqs"},
    {TensorKind::rope_factors_long, "rope_factors_long"},
    {TensorKind::rope_factors_short, "rope_factors_short"},
    {TensorKind::attn_norm, "blk.%d.attn_norm"},
    {TensorKind::attn_q, "blk.%d.attn_q"},
    {TensorKind::attn_k, "blk.%d.attn_k"},
    {TensorKind::attn_v, "blk.%d.attn_v"},
    {TensorKind::attn_output, "blk.%d.attn_output"},
    {TensorKind::attn_q_norm, "blk.%d.attn_q_norm"},
    {TensorKind::attn_k_norm, "blk.%d.attn_k_norm"},
    {TensorKind::attn_post_norm, "blk.%d.post_attention_norm"},
    {TensorKind::ffn_norm, "blk.%d.ffn_norm"},
    {TensorKind::ffn_gate, "blk.%d.ffn_gate"},
    {TensorKind::ffn_up, "blk.%d.ffn_up"},
    {TensorKind::ffn_down, "blk.%d.ffn_down"},
    {TensorKind::ffn_post_norm, "blk.%d.post_ffw_norm"},
    {TensorKind::attn_qkv, "blk.%d.attn_qkv"},
    {TensorKind::attn_qkv_bias, "blk.%d.attn_qkv", "bias"},
    {TensorKind::attn_q_bias, "blk.%d.attn_q", "bias"},
    {TensorKind::attn_k_bias, "blk.%d.attn_k", "bias"},
    {TensorKind::attn_v_bias, "blk.%d.attn_v", "bias"},
    {TensorKind::ffn_gate_inp, "blk.%d.ffn_gate_inp"},
    {TensorKind::ffn_gate_exps, "blk.%d.ffn_gate_exps"},
    {TensorKind::ffn_up_exps, "blk.%d.ffn_up_exps"},
    {TensorKind::ffn_down_exps, "blk.%d.ffn_down_exps"},
    {TensorKind::shortconv_conv, "blk.%d.shortconv.conv"},
    {TensorKind::shortconv_in_proj, "blk.%d.shortconv.in_proj"},
    {TensorKind::shortconv_out_proj, "blk.%d.shortconv.out_proj"},
    {TensorKind::output_norm_lfm2, "token_embd_norm"},
    {TensorKind::attn_output_bias, "blk.%d.attn_output", "bias"},
    {TensorKind::attn_sinks, "blk.%d.attn_sinks"},
    {TensorKind::ffn_gate_inp_bias, "blk.%d.ffn_gate_inp", "bias"},
    {TensorKind::ffn_gate_exps_bias, "blk.%d.ffn_gate_exps", "bias"},
    {TensorKind::ffn_up_exps_bias, "blk.%d.ffn_up_exps", "bias"},
    {TensorKind::ffn_down_exps_bias, "blk.%d.ffn_down_exps", "bias"},
    {TensorKind::ffn_exp_probs_b, "blk.%d.exp_probs_b", "bias"},
    {TensorKind::token_types, "token_types"},
    {TensorKind::position_embd, "position_embd"},
    {TensorKind::token_embd_norm, "token_embd_norm"},
    {TensorKind::token_embd_norm_bias, "token_embd_norm", "bias"},
    {TensorKind::attn_output_norm, "blk.%d.attn_output_norm"},
    {TensorKind::attn_output_norm_bias, "blk.%d.attn_output_norm", "bias"},
    {TensorKind::ffn_up_bias, "blk.%d.ffn_up", "bias"},
    {TensorKind::ffn_down_bias, "blk.%d.ffn_down", "bias"},
    {TensorKind::layer_output_norm, "blk.%d.layer_output_norm"},
    {TensorKind::layer_output_norm_bias, "blk.%d.layer_output_norm", "bias"},
    {TensorKind::cls, "cls"},
    {TensorKind::cls_bias, "cls", "bias"},
    {TensorKind::cls_out, "cls.output"},
    {TensorKind::cls_out_bias, "cls.output", "bias"},
    {TensorKind::dense_2, "dense_2"},
    {TensorKind::dense_3, "dense_3"},
};
}  // namespace

std::string tensor_name(TensorKind kind, int layer) {
    for (const Entry& e : kNames) {
        if (e.kind != kind) continue;
        std::string name = e.name;
        const auto at = name.find("%d");
        if (at != std::string::npos) name.replace(at, 2, std::to_string(layer));
        return name + "." + e.suffix;
    }
    return "?";
}

}  // namespace ei
