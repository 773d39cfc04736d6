// The gemma3 architecture (Gemma 3 text models), as llama.cpp runs it from GGUF
// (llm_build_gemma3 with interleaved sliding-window attention):
//
//   x = token_embd[tokens] * sqrt(n_embd)
//   for each layer:
//     h = rms_norm(x) * attn_norm
//     q, k, v = Wq h, Wk h, Wv h                      (one KV head for the 270M model)
//     q = rms_norm_per_head(q) * attn_q_norm;  k likewise with attn_k_norm
//     rope(q), rope(k)   neox mode; rope.freq_base_swa on local layers, rope.freq_base on global ones
//     q *= attention_scale                            (1/sqrt(head_dim); kq_scale is then 1)
//     a = attention(q, K, V)   local layers see the last sliding_window positions only
//     x += rms_norm(Wo a) * post_attention_norm
//     h = rms_norm(x) * ffn_norm
//     x += rms_norm(Wdown (gelu_tanh(Wgate h) * Wup h)) * post_ffw_norm
//   logits = token_embd (rms_norm(x) * output_norm)   (tied output; softcap only if the file has one)
//
// The norm weights are used as stored: the GGUF converter already folded Gemma's (1 + w) in.
#include <cmath>
#include <vector>

#include "common/error.h"
#include "gpu/offload.h"
#include "models/arch.h"
#include "models/blocks.h"

namespace ei {

namespace {

// llama.cpp's set_swa_pattern(6) for gemma3: in every group of 6 layers the first 5 are
// local (sliding window) and the 6th is global.
constexpr int kSwaPattern = 6;

struct Gemma3Layer {
    const float* attn_norm;       // [n_embd]
    Tensor wq;                    // [n_embd] -> [n_head * head_dim]
    Tensor wk, wv;                // [n_embd] -> [n_head_kv * head_dim]
    const float* q_norm;          // [head_dim]
    const float* k_norm;          // [head_dim]
    Tensor wo;                    // [n_head * head_dim] -> [n_embd]
    const float* post_attn_norm;  // [n_embd]
    const float* ffn_norm;        // [n_embd]
    Tensor w_gate, w_up;          // [n_embd] -> [n_ff]
    Tensor w_down;                // [n_ff] -> [n_embd]
    const float* post_ffn_norm;   // [n_embd]
    bool local;                   // sliding-window layer
};

class Gemma3 final : public ArchModel {
public:
    Gemma3(const GgufFile& f, const KernelTable& kt) : hp_(read_hparams(f)) {
        const int64_t d = hp_.n_embd, hd = hp_.head_dim;
        const std::string a = hp_.arch + ".";
        n_swa_ = f.get_int(a + "attention.sliding_window", 0);
        if (n_swa_ < 0) f.fail(a + "attention.sliding_window", "must not be negative");
        final_softcap_ = (float)f.get_float(a + "final_logit_softcapping", 0.0);
        // gemma_pytorch's query_pre_attn_scalar: head_dim, except the 27B model (62 layers),
        // which scales by n_embd / n_head (llama.cpp derives it the same way).
        attn_scale_ = hp_.n_layer == 62 ? 1.0f / std::sqrt((float)(hp_.n_embd / hp_.n_head))
                                        : 1.0f / std::sqrt((float)hd);

        tok_embd_ = load_tensor(f, kt, TensorKind::token_embd, -1, {d, -1}, false);
        hp_.n_vocab = tok_embd_.rows();
        output_norm_ = load_f32_vector(f, TensorKind::output_norm, -1, d);
        output_ = load_tensor(f, kt, TensorKind::output, -1, {d, hp_.n_vocab}, true, /*required=*/false);
        if (!output_.present()) output_ = load_tensor(f, kt, TensorKind::token_embd, -1, {d, hp_.n_vocab}, true);
        layers_.resize(hp_.n_layer);
        for (int il = 0; il < hp_.n_layer; ++il) {
            Gemma3Layer& L = layers_[il];
            L.attn_norm = load_f32_vector(f, TensorKind::attn_norm, il, d);
            L.wq = load_tensor(f, kt, TensorKind::attn_q, il, {d, hp_.q_width()}, true);
            L.wk = load_tensor(f, kt, TensorKind::attn_k, il, {d, hp_.kv_width()}, true);
            L.wv = load_tensor(f, kt, TensorKind::attn_v, il, {d, hp_.kv_width()}, true);
            L.q_norm = load_f32_vector(f, TensorKind::attn_q_norm, il, hd);
            L.k_norm = load_f32_vector(f, TensorKind::attn_k_norm, il, hd);
            L.wo = load_tensor(f, kt, TensorKind::attn_output, il, {hp_.q_width(), d}, true);
            L.post_attn_norm = load_f32_vector(f, TensorKind::attn_post_norm, il, d);
            L.ffn_norm = load_f32_vector(f, TensorKind::ffn_norm, il, d);
            L.w_gate = load_tensor(f, kt, TensorKind::ffn_gate, il, {d, hp_.n_ff}, true);
            L.w_up = load_tensor(f, kt, TensorKind::ffn_up, il, {d, hp_.n_ff}, true);
            L.w_down = load_tensor(f, kt, TensorKind::ffn_down, il, {hp_.n_ff, d}, true);
            L.post_ffn_norm = load_f32_vector(f, TensorKind::ffn_post_norm, il, d);
            L.local = n_swa_ > 0 && il % kSwaPattern < kSwaPattern - 1;
        }
    }

    const HParams& hparams() const override { return hp_; }

    // Context shift: cached keys were roped at their old positions; rotating them by `delta`
    // with the layer's own rope (local or global base, neox mode) moves them to the new ones.
    void rotate_cached_keys(const KernelTable& kt, int64_t layer, float* rows, int64_t m,
                            int32_t delta) const override {
        const std::vector<int32_t> pos(m, delta);
        rope_neox(kt, rows, m, hp_.n_head_kv, hp_.head_dim, pos.data(), layer_rope(layers_[layer]));
    }

    bool offloadable_layer(int il, cl::HostLayer* w, cl::LayerDims* dims) const override {
        const Gemma3Layer& L = layers_.at(il);
        *w = cl::HostLayer{};
        w->attn_norm = L.attn_norm;
        w->wq = &L.wq, w->wk = &L.wk, w->wv = &L.wv, w->wo = &L.wo;
        w->q_norm = L.q_norm, w->k_norm = L.k_norm, w->post_attn_norm = L.post_attn_norm;
        w->ffn_norm = L.ffn_norm;
        w->w_gate = &L.w_gate, w->w_up = &L.w_up, w->w_down = &L.w_down;
        w->post_ffn_norm = L.post_ffn_norm;
        const RopeParams rope = layer_rope(L);
        w->rope_freq_base = rope.freq_base;
        w->rope_freq_scale = rope.freq_scale;
        w->window = L.local ? n_swa_ : 0;
        *dims = cl::LayerDims{};
        dims->n_embd = hp_.n_embd, dims->n_head = hp_.n_head, dims->n_head_kv = hp_.n_head_kv;
        dims->head_dim = hp_.head_dim, dims->n_ff = hp_.n_ff, dims->norm_eps = hp_.norm_eps;
        dims->n_rot = hp_.n_rot;
        dims->rope_neox = true;
        dims->gelu = true;
        dims->attn_scale = attn_scale_;  // the CPU scales Q by it and attends with scale 1
        return true;
    }

    void forward(ForwardEnv& env, const ForwardBatch& b) const override {
        const int64_t n = b.n, d = hp_.n_embd, qw = hp_.q_width(), kvw = hp_.kv_width(), ff = hp_.n_ff;
        const int64_t hd = hp_.head_dim;
        float* x = env.buffer(0, n * d);      // [n][d] residual stream
        float* h = env.buffer(1, n * d);      // [n][d] normed input of a sub-block
        float* q = env.buffer(2, n * qw);     // [n][n_head][head_dim]
        float* k = env.buffer(3, n * kvw);    // [n][n_head_kv][head_dim]
        float* v = env.buffer(4, n * kvw);    // [n][n_head_kv][head_dim]
        float* att = env.buffer(5, n * qw);   // [n][n_head][head_dim]
        float* gate = env.buffer(6, n * ff);  // [n][n_ff]
        float* up = env.buffer(7, n * ff);    // [n][n_ff]
        float* out = env.buffer(8, n * d);    // [n][d] sub-block output
        std::vector<int32_t> pos(n);
        for (int64_t t = 0; t < n; ++t) pos[t] = (int32_t)(b.pos0 + t);

        embed_tokens(env.kt, tok_embd_, b.tokens, n, x);
        scale_inplace(x, std::sqrt((float)d), n * d);  // ggml_scale(inpL, sqrtf(n_embd))

        // As in llama.cpp's graph, the last layer carries on with only the rows whose logits are
        // wanted once its K/V are cached.
        int64_t r0 = 0;
        for (int il = 0; il < hp_.n_layer; ++il) {
            if (env.offload && env.offload->on_device(il)) {
                // A range of layers on the device: x crosses over and back once (all rows).
                const int last = env.offload->range_end(il);
                env.offload->run(il, last, x, n, b.pos0);
                il = last;
                if (il == hp_.n_layer - 1) {
                    r0 = b.first_logit;
                    if (r0 == n) return;
                }
                continue;
            }
            const Gemma3Layer& L = layers_[il];
            rms_norm(x, L.attn_norm, h, n, d, hp_.norm_eps);
            matmul(env.pool, env.kt, L.wq, h, n, q, env.matmul_scratch);
            matmul(env.pool, env.kt, L.wk, h, n, k, env.matmul_scratch);
            matmul(env.pool, env.kt, L.wv, h, n, v, env.matmul_scratch);
            // Per-head norms: rms_norm over each head_dim row (ggml_rms_norm on the 3-D view).
            rms_norm(q, L.q_norm, q, n * hp_.n_head, hd, hp_.norm_eps);
            rms_norm(k, L.k_norm, k, n * hp_.n_head_kv, hd, hp_.norm_eps);
            const RopeParams rope = layer_rope(L);
            rope_neox(env.kt, q, n, hp_.n_head, hd, pos.data(), rope);
            rope_neox(env.kt, k, n, hp_.n_head_kv, hd, pos.data(), rope);
            // Q is scaled before attention (ggml_scale), K is not; the rounding of q * scale
            // to F16 inside attention is then llama.cpp's.
            scale_inplace(q, attn_scale_, n * qw);
            env.kv.store(il, b.pos0, n, k, v);

            if (il == hp_.n_layer - 1) {
                r0 = b.first_logit;
                if (r0 == n) return;  // no logits wanted: the cache is all this batch was for
            }
            const int64_t m = n - r0;
            const AttentionShape shape{hp_.n_head, hp_.n_head_kv, hd, 1.0f, L.local ? n_swa_ : 0};
            attention_cached(env.pool, env.kt, q + r0 * qw, m, b.pos0 + r0, env.kv, il, shape, att);
            matmul(env.pool, env.kt, L.wo, att, m, out, env.matmul_scratch);
            rms_norm(out, L.post_attn_norm, out, m, d, hp_.norm_eps);
            float* xr = x + r0 * d;
            add_inplace(xr, out, m * d);

            rms_norm(xr, L.ffn_norm, h, m, d, hp_.norm_eps);
            matmul(env.pool, env.kt, L.w_gate, h, m, gate, env.matmul_scratch);
            matmul(env.pool, env.kt, L.w_up, h, m, up, env.matmul_scratch);
            geglu(env.kt, gate, up, gate, m * ff);
            matmul(env.pool, env.kt, L.w_down, gate, m, out, env.matmul_scratch);
            rms_norm(out, L.post_ffn_norm, out, m, d, hp_.norm_eps);
            add_inplace(xr, out, m * d);
        }
        const int64_t m = n - r0;
        rms_norm(x + r0 * d, output_norm_, h, m, d, hp_.norm_eps);
        matmul(env.pool, env.kt, output_, h, m, b.logits, env.matmul_scratch);
        if (final_softcap_ > 0.0f) {
            // ggml_scale(1/c), ggml_tanh, ggml_scale(c)
            const int64_t count = m * hp_.n_vocab;
            for (int64_t i = 0; i < count; ++i)
                b.logits[i] = std::tanh(b.logits[i] * (1.0f / final_softcap_)) * final_softcap_;
        }
    }

private:
    // A layer's rope: local layers use the sliding-window base and are never scaled (llama.cpp's
    // rope_freq_base_train_swa / rope_freq_scale_train_swa), global ones the file's base and scale.
    RopeParams layer_rope(const Gemma3Layer& L) const {
        return L.local ? RopeParams{hp_.n_rot, hp_.rope_freq_base_swa, 1.0f, nullptr}
                       : RopeParams{hp_.n_rot, hp_.rope_freq_base, hp_.rope_freq_scale, nullptr};
    }

    HParams hp_;
    int64_t n_swa_ = 0;           // sliding window of local layers (0: every layer global)
    float attn_scale_ = 1.0f;     // applied to Q before attention
    float final_softcap_ = 0.0f;  // final_logit_softcapping, 0 if none
    Tensor tok_embd_;             // [n_vocab][n_embd]
    const float* output_norm_;    // [n_embd]
    Tensor output_;               // [n_vocab][n_embd] (token_embd when tied)
    std::vector<Gemma3Layer> layers_;
};

}  // namespace

std::unique_ptr<ArchModel> load_gemma3(const GgufFile& file, const KernelTable& kt) {
    return std::make_unique<Gemma3>(file, kt);
}

}  // namespace ei
