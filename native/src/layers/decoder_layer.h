// The pre-norm transformer decoder layer, written once for every architecture and every backend.
//
//   h = rms_norm(x) * attn_norm
//   q, k, v = Wq h (+ bq), Wk h (+ bk), Wv h (+ bv)    or one fused Wqkv h, split in that order
//   q = rms_norm_per_head(q) * q_norm;  k likewise      (Qwen 3, Gemma 3)
//   rope(q), rope(k)                                    (normal or neox mode, the layer's params;
//                                                        skipped on NoPE layers: SmolLM3)
//   q *= q_scale                                        (Gemma 3, Phi-3: attention then scales by 1)
//   cache k, v;  a = attention(q, K, V)                 (causal, grouped-query, optional window;
//                                                        scores * attn_scale or 1/sqrt(head_dim);
//                                                        per-head sink logits in the softmax's
//                                                        denominator: gpt-oss)
//   x += post_attn_norm(Wo a (+ bo)) * residual_scale   (the norm only where the layer has one,
//                                                        the scale only where set: Granite)
//   h = rms_norm(x) * ffn_norm
//   x += post_ffn_norm(Wdown glu(Wgate h, Wup h)) * residual_scale
//                                                       (SwiGLU or GEGLU; or one fused Wgate_up;
//                                                        or a mixture of experts: see moe_ffn)
//
// LFM2's convolution layers replace the attention half with a short convolution
// (layers/shortconv_layer.h) and share the feed-forward half (feed_forward_block).
//
// What an architecture adds is data: which weights a layer has (LayerWeights, absent ones
// empty) and how it ropes and attends (LayerConfig). A backend supplies `Ops`, the operations
// over its own buffers and weights (layers/cpu_layer_ops.h, gpu/device_layer_ops.h); this file
// never names one. The order of operations is llama.cpp's graph order: every backend computes
// the same floats in the same order, which is what keeps CPU and device bit for bit equal.
#pragma once
#include <cmath>
#include <cstdint>

#include "layers/params.h"

namespace ei {

// A mixture-of-experts feed-forward (llama.cpp's build_moe_ffn with softmax gating):
//
//   p = softmax(Wgate_inp h (+ b))                      (router: one probability an expert)
//   e_1..e_k = the k = n_used experts of highest p, highest first
//   w_j = p[e_j]  (/ sum_j p[e_j] when norm_weights)
//   out = sum_j w_j * (Wdown[e_j] glu(Wgate[e_j] h (+ bg), Wup[e_j] h (+ bu)) (+ bd))
//                                                       (summed in j order; biases: gpt-oss)
//
// gpt-oss gates by softmax_weight (llama.cpp's SOFTMAX_WEIGHT): the k highest router logits,
// then w = softmax over those k only; and its glu is swiglu_oai (layers/cpu_moe.cpp).
// LFM2-MoE gates by sigmoid (llama.cpp's SIGMOID): p = sigmoid(logit) each, the experts chosen
// by p + a per-expert selection bias (ffn_exp_probs_b, DeepSeek V3's), weighted by p.
// n_expert 0: the layer's feed-forward is dense.
struct ExpertShape {
    int64_t n_expert = 0, n_used = 0, n_ff = 0;
    bool norm_weights = true;     // renormalize the selected experts' weights to sum to 1
    bool softmax_weight = false;  // top-k of the logits, softmax over the k (gpt-oss)
    bool swiglu_oai = false;      // gpt-oss's clamped SwiGLU: min(g, 7) sigmoid(1.702 min(g, 7)) (clamp(u, +-7) + 1)
    bool sigmoid = false;         // p = 1 / (1 + exp(-logit)) instead of the softmax (LFM2-MoE)
};

// The shapes every layer of a model shares.
struct LayerShapes {
    int64_t n_embd = 0, n_head = 0, n_head_kv = 0, head_dim = 0, n_ff = 0;
    float norm_eps = 0.0f;
    ExpertShape experts{};
    int64_t conv_l_cache = 0;  // taps of a short-convolution layer (layers/shortconv_layer.h)

    int64_t q_width() const { return n_head * head_dim; }
    int64_t kv_width() const { return n_head_kv * head_dim; }
};

// How one layer ropes and attends.
struct LayerConfig {
    RopeParams rope{};
    bool rope_neox = false;  // pairs (i, i + n_rot/2), else adjacent pairs (2i, 2i + 1)
    bool nope = false;       // no positional embedding: Q and K are not roped (SmolLM3's every
                             // fourth layer), so the cached keys never move on a context shift
    int64_t window = 0;      // > 0: sliding-window attention over that many positions
    float q_scale = 0.0f;    // > 0: Q is scaled by it after rope and attention scales by 1;
                             // 0: attention scales by attn_scale
    float attn_scale = 0.0f; // > 0: the attention scores' scale (Granite's attention multiplier,
                             // llama.cpp's kq_scale); 0: 1 / sqrt(head_dim)
    float residual_scale = 0.0f;  // != 0: each sub-block's output is scaled by it before its
                                  // residual add (Granite's residual multiplier); 0: not scaled
    bool gelu = false;       // GEGLU feed-forward, else SwiGLU
};

// One layer's weights as a backend holds them: Mat a matrix, Vec a vector of floats. Absent
// parts are empty (Ops::present says which are there).
template <class Mat, class Vec>
struct LayerWeights {
    Vec attn_norm{};                   // [n_embd]
    Mat wqkv{};                        // fused [n_embd] -> [q_width + 2 kv_width], or absent
    Mat wq{}, wk{}, wv{};              // [n_embd] -> [q_width], [kv_width] (when wqkv is absent)
    Vec bq{}, bk{}, bv{};              // biases of Q, K, V (optional)
    Vec q_norm{}, k_norm{};            // [head_dim] per-head RMS norm weights (optional)
    Mat wo{};                          // [q_width] -> [n_embd]
    Vec bo{};                          // [n_embd] bias of Wo (optional: gpt-oss)
    Vec attn_sinks{};                  // [n_head] attention-sink logits (optional: gpt-oss)
    Vec post_attn_norm{};              // [n_embd] on the attention output (optional)
    Vec ffn_norm{};                    // [n_embd]
    Mat w_gate_up{};                   // fused [n_embd] -> [2 n_ff], gate rows first, or absent
    Mat w_gate{}, w_up{};              // [n_embd] -> [n_ff] (when w_gate_up is absent)
    Mat w_down{};                      // [n_ff] -> [n_embd]
    // A mixture of experts instead of w_gate, w_up, w_down (ExpertShape): the router and a stack
    // of n_expert matrices each (3-D, matrix e = expert e).
    Mat ffn_gate_inp{};                // [n_embd] -> [n_expert] router logits
    Mat ffn_gate_exps{}, ffn_up_exps{};// [n_expert] x ([n_embd] -> [n_ff_exp])
    Mat ffn_down_exps{};               // [n_expert] x ([n_ff_exp] -> [n_embd])
    Vec ffn_gate_inp_b{};              // [n_expert] router bias (optional: gpt-oss)
    Vec ffn_exp_probs_b{};             // [n_expert] added to p to choose experts, not to weight
                                       // them (optional: LFM2-MoE)
    Vec ffn_gate_exps_b{}, ffn_up_exps_b{};  // [n_expert][n_ff_exp] per-expert biases (optional)
    Vec ffn_down_exps_b{};             // [n_expert][n_embd] (optional)
    Vec post_ffn_norm{};               // [n_embd] on the feed-forward output (optional)
    // A short-convolution block instead of attention (LFM2; layers/shortconv_layer.h).
    Mat conv_in{};                     // [n_embd] -> [3 n_embd]: B, C, x
    Vec conv_kernel{};                 // [n_embd][conv_l_cache] F32, each channel's taps, oldest first
    Mat conv_out{};                    // [n_embd] -> [n_embd]
};

// The activations of one step, [rows][width] each: x the residual stream, h a normed input, q, k,
// v, att the attention's, gate and up the feed-forward's, out a sub-block's output.
template <class Buf>
struct LayerActs {
    Buf x, h, q, k, v, att, gate, up, out;
};

// The second half of every layer, on the m rows of xr (the residual stream, in place):
//   x += post_ffn_norm(Wdown glu(Wgate h, Wup h)) * residual_scale,  h = rms_norm(x) * ffn_norm
// (a fused Wgate_up or a mixture of experts where the layer has one). Shared by the attention
// layer below and the short-convolution layer (layers/shortconv_layer.h).
template <class Ops>
void feed_forward_block(Ops& ops, const typename Ops::Weights& L, const LayerConfig& c, const LayerShapes& s,
                        const LayerActs<typename Ops::Buf>& a, const typename Ops::Buf& xr, int64_t m) {
    const int64_t d = s.n_embd, ff = s.n_ff;
    ops.rms_norm(xr, L.ffn_norm, a.h, m, d);
    if (ops.present(L.ffn_gate_inp)) {
        ops.moe_ffn(L, s.experts, c.gelu, a.h, m, a.out);
    } else {
        if (ops.present(L.w_gate_up)) {
            ops.matmul_glu_fused(L.w_gate_up, a.h, m, ff, c.gelu, a.gate, a.up);
        } else {
            const typename Ops::Mat* gate_up[] = {&L.w_gate, &L.w_up};
            const typename Ops::Buf out[] = {a.gate, a.up};
            ops.matmul_same_input(gate_up, out, 2, a.h, m);
            ops.glu(c.gelu, a.gate, a.up, a.gate, m * ff);
        }
        ops.matmul(L.w_down, a.gate, m, a.out);
    }
    if (ops.present(L.post_ffn_norm)) ops.rms_norm(a.out, L.post_ffn_norm, a.out, m, d);
    if (c.residual_scale != 0.0f) ops.scale(a.out, c.residual_scale, m * d);
    ops.add(xr, a.out, m * d);
}

// Runs layer `il` over n tokens at positions pos0 .. pos0 + n - 1 on x in place. Rows before r0
// skip everything after the K/V are cached (the last layer of a batch whose first logits are not
// wanted: llama.cpp's inp_out_ids). Each backend's rows() addresses a buffer from a row on.
template <class Ops>
void decoder_layer(Ops& ops, const typename Ops::Weights& L, const LayerConfig& c, const LayerShapes& s,
                   const LayerActs<typename Ops::Buf>& a, int il, int64_t n, int64_t pos0, int64_t r0) {
    const int64_t d = s.n_embd, qw = s.q_width(), kvw = s.kv_width(), hd = s.head_dim;
    ops.rms_norm(a.x, L.attn_norm, a.h, n, d);
    if (ops.present(L.wqkv)) {
        ops.matmul_split(L.wqkv, a.h, n, a.q, qw, a.k, kvw, a.v, kvw);
    } else {
        const typename Ops::Mat* qkv[] = {&L.wq, &L.wk, &L.wv};
        const typename Ops::Buf out[] = {a.q, a.k, a.v};
        ops.matmul_same_input(qkv, out, 3, a.h, n);
    }
    if (ops.present(L.bq)) ops.add_rows(a.q, L.bq, n, qw);
    if (ops.present(L.bk)) ops.add_rows(a.k, L.bk, n, kvw);
    if (ops.present(L.bv)) ops.add_rows(a.v, L.bv, n, kvw);
    // Per-head norms: rms_norm over each head_dim row (ggml_rms_norm on the 3-D view).
    if (ops.present(L.q_norm)) ops.rms_norm(a.q, L.q_norm, a.q, n * s.n_head, hd);
    if (ops.present(L.k_norm)) ops.rms_norm(a.k, L.k_norm, a.k, n * s.n_head_kv, hd);
    if (!c.nope) {
        ops.rope(a.q, n, s.n_head, hd, pos0, c);
        ops.rope(a.k, n, s.n_head_kv, hd, pos0, c);
    }
    // Q is scaled before attention (ggml_scale), K is not: the F16 rounding of q inside
    // attention then sees llama.cpp's values.
    if (c.q_scale > 0.0f) ops.scale(a.q, c.q_scale, n * qw);
    ops.kv_store(il, pos0, n, a.k, a.v);

    const int64_t m = n - r0;
    if (m == 0) return;  // no row goes on: the cache is all this batch was for
    const float scale = c.q_scale > 0.0f      ? 1.0f
                        : c.attn_scale > 0.0f ? c.attn_scale
                                              : 1.0f / std::sqrt((float)hd);
    const AttentionShape shape{s.n_head, s.n_head_kv, hd, scale, c.window};
    ops.attention(il, ops.rows(a.q, r0, qw), m, pos0 + r0, shape, L.attn_sinks, a.att);
    ops.matmul(L.wo, a.att, m, a.out);
    if (ops.present(L.bo)) ops.add_rows(a.out, L.bo, m, d);
    if (ops.present(L.post_attn_norm)) ops.rms_norm(a.out, L.post_attn_norm, a.out, m, d);
    // ggml_scale of the sub-block's output before ggml_add, as llama.cpp's Granite graph does.
    if (c.residual_scale != 0.0f) ops.scale(a.out, c.residual_scale, m * d);
    const typename Ops::Buf xr = ops.rows(a.x, r0, d);
    ops.add(xr, a.out, m * d);

    feed_forward_block(ops, L, c, s, a, xr, m);
}

}  // namespace ei
