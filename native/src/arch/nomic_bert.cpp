// The nomic-bert architecture (nomic-embed-text v1 / v1.5: NomicBertModel), as llama.cpp runs it
// from GGUF (src/models/bert.cpp, the graph it shares with bert). BERT's post-LN encoder with
// rotary positions instead of a position table, one fused QKV projection, a SwiGLU feed-forward
// and no biases but the LayerNorms':
//
//   x = layer_norm(token_embd[tokens] + token_types[0], token_embd_norm)   (type: "sentence A")
//   for each layer:
//     q | k | v = Wqkv x                                          [n][3][n_head][head_dim]
//     q, k = rope_neox(q, k, positions 0..len-1 of the token's own input, rope.freq_base)
//     a = softmax(q k^T / sqrt(head_dim)) v                       (per head, over the input's tokens)
//     x = layer_norm(x + Wo a, attn_output_norm)
//     x = layer_norm(x + Wdown (silu(Wgate x) * Wup x), layer_output_norm)
//   hidden = x                                                    (pooled by arch/pooling.h: mean)
//
// Several inputs go through one pass as in arch/bert.cpp: the matmuls over all their rows in the
// per-row order, RoPE, LayerNorm and SwiGLU row by row, attention within each input
// (arch/encoder_blocks.h), so an input gets the same floats whatever it is packed with.
#include <algorithm>
#include <string>
#include <vector>

#include "common/error.h"
#include "arch/arch.h"
#include "arch/encoder_blocks.h"
#include "layers/cpu_blocks.h"

namespace ei {

namespace {

struct NomicBertLayer {
    Tensor wqkv;                                // [3 n_embd][n_embd]: Q, K, V rows in that order
    Tensor wo;                                  // [n_embd][n_embd]
    const float *attn_norm, *attn_norm_b;       // [n_embd] attn_output_norm
    Tensor up, gate, down;                      // [n_ff][n_embd], [n_ff][n_embd], [n_embd][n_ff]
    const float *out_norm, *out_norm_b;         // [n_embd] layer_output_norm
};

class NomicBertModel : public ArchModel {
public:
    NomicBertModel(HParams hp, DecoderModel io, float ln_eps)
        : ArchModel(std::move(hp), std::move(io)), eps_(ln_eps), rope_(file_rope(hparams())) {}

    Tensor type_embd;                           // [n_token_types][n_embd], optional
    const float *tok_norm = nullptr, *tok_norm_b = nullptr;  // [n_embd]
    std::vector<NomicBertLayer> layers;

    bool is_encoder() const override { return true; }

    void encode(ForwardEnv& env, const int32_t* tokens, int64_t n, float* hidden) const override {
        const int64_t starts[2] = {0, n};
        encode_packed(env, tokens, starts, 1, hidden);
    }

    void encode_packed(ForwardEnv& env, const int32_t* tokens, const int64_t* starts, int64_t n_seq,
                       float* hidden) const override {
        const HParams& hp = hparams();
        const int64_t d = hp.n_embd, ff = hp.n_ff, n = starts[n_seq];
        float* x = hidden;                        // [n][d] residual stream, ends as the hidden states
        float* qkv = env.buffer(0, n * 3 * d);    // [n][3][d] the fused projection's output
        float* q = env.buffer(1, n * d);          // [n][n_head][head_dim]
        float* k = env.buffer(2, n * d);
        float* v = env.buffer(3, n * d);
        float* att = env.buffer(4, n * d);        // [n][n_head][head_dim]
        float* y = env.buffer(5, n * d);          // [n][d] sub-block output
        float* up = env.buffer(6, n * ff);        // [n][n_ff]
        float* gate = env.buffer(7, n * ff);      // [n][n_ff], then silu(gate) * up
        float* row = env.buffer(8, d);            // one embedding row

        std::vector<int32_t> pos((size_t)n);     // each input's positions restart at 0
        for (int64_t s = 0; s < n_seq; ++s)
            for (int64_t t = starts[s]; t < starts[s + 1]; ++t) pos[t] = (int32_t)(t - starts[s]);

        embed_tokens(env.kt, decoder().tok_embd, tokens, n, x);
        add_token_type0(env.kt, type_embd, x, n, d, row);
        layer_norm(env.pool, x, tok_norm, tok_norm_b, x, n, d, eps_);

        MatmulScratch& ms = env.matmul_scratch;
        constexpr BatchOrder kOrder = BatchOrder::per_row;  // each row as if its input were alone
        for (const NomicBertLayer& L : layers) {
            matmul(env.pool, env.kt, L.wqkv, x, n, qkv, ms, kOrder);
            for (int64_t t = 0; t < n; ++t) {
                const float* r = qkv + t * 3 * d;
                std::copy(r, r + d, q + t * d);
                std::copy(r + d, r + 2 * d, k + t * d);
                std::copy(r + 2 * d, r + 3 * d, v + t * d);
            }
            rope_neox(env.kt, q, n, hp.n_head, hp.head_dim, pos.data(), rope_);
            rope_neox(env.kt, k, n, hp.n_head, hp.head_dim, pos.data(), rope_);
            attention_full(env.pool, q, k, v, starts, n_seq, hp.n_head, hp.head_dim, att);
            matmul(env.pool, env.kt, L.wo, att, n, y, ms, kOrder);
            add_inplace(y, x, n * d);
            layer_norm(env.pool, y, L.attn_norm, L.attn_norm_b, x, n, d, eps_);

            const Tensor* ffn[2] = {&L.up, &L.gate};
            float* const ffn_out[2] = {up, gate};
            matmul_same_input(env.pool, env.kt, ffn, ffn_out, 2, x, n, ms, kOrder);
            for (int64_t t = 0; t < n; ++t) swiglu(env.kt, gate + t * ff, up + t * ff, gate + t * ff, ff);
            matmul(env.pool, env.kt, L.down, gate, n, y, ms, kOrder);
            add_inplace(y, x, n * d);
            layer_norm(env.pool, y, L.out_norm, L.out_norm_b, x, n, d, eps_);
        }
    }

private:
    float eps_;
    RopeParams rope_;  // the file's RoPE on all of head_dim (neox pairs: i and i + n_rot / 2)
};

// nomic-bert files have no biases but the LayerNorms' (llama.cpp would load an attn_output or
// ffn bias and then leave the ffn ones out of its graph): one present is refused, not ignored.
void refuse_bias(const GgufFile& f, TensorKind kind, int il) {
    const std::string name = tensor_name(kind, il);
    if (f.find_tensor(name))
        f.fail(name, "nomic-bert has no projection biases (a nomic-bert-moe or modified checkpoint?); not supported");
}

}  // namespace

std::unique_ptr<ArchModel> load_nomic_bert(const GgufFile& f, const KernelTable& kt) {
    EncoderFile e = load_encoder_file(f, kt);
    const HParams& hp = e.hp;
    const int64_t d = hp.n_embd, ff = hp.n_ff;
    auto m = std::make_unique<NomicBertModel>(hp, std::move(e.io), e.eps);
    m->type_embd = e.type_embd;
    m->tok_norm = e.tok_norm;
    m->tok_norm_b = e.tok_norm_b;
    for (int il = 0; il < (int)hp.n_layer; ++il) {
        for (TensorKind bias : {TensorKind::attn_qkv_bias, TensorKind::attn_output_bias, TensorKind::ffn_up_bias,
                                TensorKind::ffn_down_bias})
            refuse_bias(f, bias, il);
        NomicBertLayer L;
        L.wqkv = load_tensor(f, kt, TensorKind::attn_qkv, il, {d, 3 * d}, true);
        L.wo = load_tensor(f, kt, TensorKind::attn_output, il, {d, d}, true);
        L.attn_norm = load_f32_vector(f, TensorKind::attn_output_norm, il, d);
        L.attn_norm_b = load_f32_vector(f, TensorKind::attn_output_norm_bias, il, d);
        L.up = load_tensor(f, kt, TensorKind::ffn_up, il, {d, ff}, true);
        L.gate = load_tensor(f, kt, TensorKind::ffn_gate, il, {d, ff}, true);
        L.down = load_tensor(f, kt, TensorKind::ffn_down, il, {ff, d}, true);
        L.out_norm = load_f32_vector(f, TensorKind::layer_output_norm, il, d);
        L.out_norm_b = load_f32_vector(f, TensorKind::layer_output_norm_bias, il, d);
        m->layers.push_back(L);
    }
    return m;
}

}  // namespace ei
