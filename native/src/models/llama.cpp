// The llama architecture (Llama 2/3, Mistral, SmolLM, TinyLlama), as llama.cpp runs it from GGUF:
//
//   x = token_embd[tokens]
//   for each layer:
//     h = rms_norm(x) * attn_norm
//     q, k, v = Wq h, Wk h, Wv h;  rope(q), rope(k)  (normal mode, adjacent pairs)
//     x += Wo attention(q, K cache, V cache)          (causal, grouped-query)
//     h = rms_norm(x) * ffn_norm
//     x += Wdown (silu(Wgate h) * Wup h)
//   logits = Woutput (rms_norm(x) * output_norm)      (Woutput = token_embd when tied)
#include <cmath>

#include "common/error.h"
#include "gpu/offload.h"
#include "models/arch.h"
#include "models/blocks.h"

namespace ei {

namespace {

struct LlamaLayer {
    const float* attn_norm;  // [n_embd]
    Tensor wq;               // [n_embd] -> [n_head * head_dim]
    Tensor wk, wv;           // [n_embd] -> [n_head_kv * head_dim]
    Tensor wo;               // [n_head * head_dim] -> [n_embd]
    const float* ffn_norm;   // [n_embd]
    Tensor w_gate, w_up;     // [n_embd] -> [n_ff]
    Tensor w_down;           // [n_ff] -> [n_embd]
};

class Llama final : public ArchModel {
public:
    Llama(const GgufFile& f, const KernelTable& kt) : hp_(read_hparams(f)) {
        const int64_t d = hp_.n_embd;
        tok_embd_ = load_tensor(f, kt, TensorKind::token_embd, -1, {d, -1}, false);
        hp_.n_vocab = tok_embd_.rows();
        output_norm_ = load_f32_vector(f, TensorKind::output_norm, -1, d);
        output_ = load_tensor(f, kt, TensorKind::output, -1, {d, hp_.n_vocab}, true, /*required=*/false);
        if (!output_.present()) output_ = load_tensor(f, kt, TensorKind::token_embd, -1, {d, hp_.n_vocab}, true);
        rope_factors_ = load_f32_vector(f, TensorKind::rope_freqs, -1, hp_.n_rot / 2, /*required=*/false);
        layers_.resize(hp_.n_layer);
        for (int il = 0; il < hp_.n_layer; ++il) {
            LlamaLayer& L = layers_[il];
            L.attn_norm = load_f32_vector(f, TensorKind::attn_norm, il, d);
            L.wq = load_tensor(f, kt, TensorKind::attn_q, il, {d, hp_.q_width()}, true);
            L.wk = load_tensor(f, kt, TensorKind::attn_k, il, {d, hp_.kv_width()}, true);
            L.wv = load_tensor(f, kt, TensorKind::attn_v, il, {d, hp_.kv_width()}, true);
            L.wo = load_tensor(f, kt, TensorKind::attn_output, il, {hp_.q_width(), d}, true);
            L.ffn_norm = load_f32_vector(f, TensorKind::ffn_norm, il, d);
            L.w_gate = load_tensor(f, kt, TensorKind::ffn_gate, il, {d, hp_.n_ff}, true);
            L.w_up = load_tensor(f, kt, TensorKind::ffn_up, il, {d, hp_.n_ff}, true);
            L.w_down = load_tensor(f, kt, TensorKind::ffn_down, il, {hp_.n_ff, d}, true);
        }
    }

    const HParams& hparams() const override { return hp_; }

    void forward(ForwardEnv& env, const ForwardBatch& b) const override {
        const int64_t n = b.n, d = hp_.n_embd, qw = hp_.q_width(), kvw = hp_.kv_width(), ff = hp_.n_ff;
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
        const RopeParams rope{hp_.n_rot, hp_.rope_freq_base, hp_.rope_freq_scale, rope_factors_};
        const AttentionShape shape{hp_.n_head, hp_.n_head_kv, hp_.head_dim, 1.0f / std::sqrt((float)hp_.head_dim), 0};

        // Rows still needed: all of them, except in the last layer after K/V are cached, where
        // only the rows whose logits are wanted go on (llama.cpp's inp_out_ids).
        int64_t r0 = 0;
        for (int il = 0; il < hp_.n_layer; ++il) {
            if (env.offload && env.offload->on_device(il)) {
                // A range of layers on the device: x crosses over and back once. All rows go
                // through, also the last layer's rows whose logits are not wanted.
                const int last = env.offload->range_end(il);
                env.offload->run(il, last, x, n, b.pos0);
                il = last;
                if (il == hp_.n_layer - 1) {
                    r0 = b.first_logit;
                    if (r0 == n) return;
                }
                continue;
            }
            const LlamaLayer& L = layers_[il];
            rms_norm(x, L.attn_norm, h, n, d, hp_.norm_eps);
            matmul(env.pool, env.kt, L.wq, h, n, q, env.matmul_scratch);
            matmul(env.pool, env.kt, L.wk, h, n, k, env.matmul_scratch);
            matmul(env.pool, env.kt, L.wv, h, n, v, env.matmul_scratch);
            rope_norm(env.kt, q, n, hp_.n_head, hp_.head_dim, pos.data(), rope);
            rope_norm(env.kt, k, n, hp_.n_head_kv, hp_.head_dim, pos.data(), rope);
            env.kv.store(il, b.pos0, n, k, v);

            if (il == hp_.n_layer - 1) {
                r0 = b.first_logit;
                if (r0 == n) return;  // no logits wanted: the cache is all this batch was for
            }
            const int64_t m = n - r0;
            attention_cached(env.pool, env.kt, q + r0 * qw, m, b.pos0 + r0, env.kv, il, shape, att);
            matmul(env.pool, env.kt, L.wo, att, m, out, env.matmul_scratch);
            float* xr = x + r0 * d;
            add_inplace(xr, out, m * d);

            rms_norm(xr, L.ffn_norm, h, m, d, hp_.norm_eps);
            matmul(env.pool, env.kt, L.w_gate, h, m, gate, env.matmul_scratch);
            matmul(env.pool, env.kt, L.w_up, h, m, up, env.matmul_scratch);
            swiglu(env.kt, gate, up, gate, m * ff);
            matmul(env.pool, env.kt, L.w_down, gate, m, out, env.matmul_scratch);
            add_inplace(xr, out, m * d);
        }
        const int64_t m = n - r0;
        rms_norm(x + r0 * d, output_norm_, h, m, d, hp_.norm_eps);
        matmul(env.pool, env.kt, output_, h, m, b.logits, env.matmul_scratch);
    }

    bool offloadable_layer(int il, cl::HostLayer* w, cl::LayerDims* dims) const override {
        const LlamaLayer& L = layers_.at(il);
        *w = cl::HostLayer{};
        w->attn_norm = L.attn_norm;
        w->wq = &L.wq, w->wk = &L.wk, w->wv = &L.wv, w->wo = &L.wo;
        w->ffn_norm = L.ffn_norm;
        w->w_gate = &L.w_gate, w->w_up = &L.w_up, w->w_down = &L.w_down;
        w->rope_freq_base = hp_.rope_freq_base;
        w->rope_freq_scale = hp_.rope_freq_scale;
        *dims = cl::LayerDims{};
        dims->n_embd = hp_.n_embd, dims->n_head = hp_.n_head, dims->n_head_kv = hp_.n_head_kv;
        dims->head_dim = hp_.head_dim, dims->n_ff = hp_.n_ff, dims->norm_eps = hp_.norm_eps;
        dims->n_rot = hp_.n_rot, dims->rope_factors = rope_factors_;
        return true;
    }

    void rotate_cached_keys(const KernelTable& kt, int64_t, float* rows, int64_t m, int32_t delta) const override {
        const RopeParams rope{hp_.n_rot, hp_.rope_freq_base, hp_.rope_freq_scale, rope_factors_};
        const std::vector<int32_t> pos(m, delta);
        rope_norm(kt, rows, m, hp_.n_head_kv, hp_.head_dim, pos.data(), rope);
    }

private:
    HParams hp_;
    Tensor tok_embd_;             // [n_vocab][n_embd]
    const float* output_norm_;    // [n_embd]
    Tensor output_;               // [n_vocab][n_embd] (token_embd when tied)
    const float* rope_factors_;   // [n_rot / 2] or nullptr
    std::vector<LlamaLayer> layers_;
};

}  // namespace

std::unique_ptr<ArchModel> load_llama(const GgufFile& file, const KernelTable& kt) {
    return std::make_unique<Llama>(file, kt);
}

}  // namespace ei
