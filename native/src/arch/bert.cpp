// The bert architecture (BERT encoders: bge, all-MiniLM, e5), as llama.cpp runs it from GGUF
// (src/models/bert.cpp). An encoder, not a decoder: no RoPE, no cache, every token attends to every
// other, and LayerNorms with biases after each sub-block (post-LN):
//
//   x = token_embd[tokens] + token_types[0] + position_embd[0..n)      (token type: "sentence A")
//   x = layer_norm(x, token_embd_norm)
//   for each layer:
//     q, k, v = Wq x + bq, Wk x + bk, Wv x + bv                        [n][n_head][head_dim]
//     a = softmax(q k^T / sqrt(head_dim)) v                            (per head, over all n tokens)
//     x = layer_norm(x + Wo a + bo, attn_output_norm)
//     x = layer_norm(x + Wdown gelu(Wup x + bup) + bdown, layer_output_norm)
//   hidden = x                                                         (pooled by arch/pooling.h)
//
// The LayerNorm, the token-type row and the attention within each input are nomic-bert's too
// (arch/encoder_blocks.h).
//
// Several inputs go through one forward (the engine's Context::embed packs them): every matmul
// takes all their rows at once, so the weights are read once for the pack rather than once per
// input, while attention stays within each input. The matmuls run in the per-row order
// (cpu/batch_order.h) and everything else is row by row, so an input gets the same floats
// whatever it is packed with. An input is never cut into chunks: the scratch grows to the pack.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "common/error.h"
#include "common/fp16.h"
#include "arch/arch.h"
#include "arch/encoder_blocks.h"
#include "layers/cpu_blocks.h"

namespace ei {

namespace {

struct BertLayer {
    Tensor wq, wk, wv, wo;                                 // [n_embd][n_embd]
    const float *bq, *bk, *bv, *bo;                        // [n_embd]
    const float *attn_norm, *attn_norm_b;                  // [n_embd] attn_output_norm
    Tensor up, down;                                       // [n_ff][n_embd], [n_embd][n_ff]
    const float *up_b, *down_b;                            // [n_ff], [n_embd]
    const float *out_norm, *out_norm_b;                    // [n_embd] layer_output_norm
};

// ggml_vec_gelu_f32 with GGML_GELU_FP16: the input rounded to F16 and looked up in the ISA unit's
// table (cpu/gelu_table.h), through its GEGLU with an up of ones (x 1.0 is exact). Row by row,
// rows split across the pool.
void gelu_inplace(ThreadPool& pool, const KernelTable& kt, float* x, int64_t n, int64_t width, float* ones) {
    std::fill(ones, ones + width, 1.0f);
    pool.run([&](int ith, int nth) {
        int64_t t0, t1;
        ThreadPool::split(n, ith, nth, &t0, &t1);
        for (int64_t t = t0; t < t1; ++t) kt.ops.geglu(width, x + t * width, ones, x + t * width);
    });
}

class BertModel : public ArchModel {
public:
    BertModel(HParams hp, DecoderModel io, float ln_eps) : ArchModel(std::move(hp), std::move(io)), eps_(ln_eps) {}

    Tensor type_embd;                           // [n_token_types][n_embd], optional
    Tensor pos_embd;                            // [n_ctx_train][n_embd]
    const float *tok_norm = nullptr, *tok_norm_b = nullptr;  // [n_embd]
    std::vector<BertLayer> layers;

    bool is_encoder() const override { return true; }

    void encode(ForwardEnv& env, const int32_t* tokens, int64_t n, float* hidden) const override {
        const int64_t starts[2] = {0, n};
        encode_packed(env, tokens, starts, 1, hidden);
    }

    void encode_packed(ForwardEnv& env, const int32_t* tokens, const int64_t* starts, int64_t n_seq,
                       float* hidden) const override {
        const HParams& hp = hparams();
        const int64_t d = hp.n_embd, ff = hp.n_ff, n = starts[n_seq];
        for (int64_t s = 0; s < n_seq; ++s)
            if (starts[s + 1] - starts[s] > pos_embd.rows())
                throw ContextOverflowError("an input of " + std::to_string(starts[s + 1] - starts[s]) +
                                           " tokens exceeds the " + std::to_string(pos_embd.rows()) +
                                           " positions this encoder has");
        float* x = hidden;                        // [n][d] residual stream, ends as the hidden states
        float* q = env.buffer(0, n * d);          // [n][n_head][head_dim]
        float* k = env.buffer(1, n * d);
        float* v = env.buffer(2, n * d);
        float* att = env.buffer(3, n * d);        // [n][n_head][head_dim]
        float* y = env.buffer(4, n * d);          // [n][d] sub-block output
        float* u = env.buffer(5, n * ff);         // [n][n_ff]
        float* row = env.buffer(6, d);            // one embedding row

        embed_tokens(env.kt, decoder().tok_embd, tokens, n, x);
        add_token_type0(env.kt, type_embd, x, n, d, row);
        for (int64_t s = 0; s < n_seq; ++s)
            for (int64_t t = starts[s]; t < starts[s + 1]; ++t) {  // ggml_add(pos, inpL): position first
                const int32_t pos = (int32_t)(t - starts[s]);
                embed_tokens(env.kt, pos_embd, &pos, 1, row);
                for (int64_t j = 0; j < d; ++j) x[t * d + j] = row[j] + x[t * d + j];
            }
        layer_norm(env.pool, x, tok_norm, tok_norm_b, x, n, d, eps_);

        MatmulScratch& ms = env.matmul_scratch;
        constexpr BatchOrder kOrder = BatchOrder::per_row;  // each row as if its input were alone
        for (const BertLayer& L : layers) {
            const Tensor* qkv[3] = {&L.wq, &L.wk, &L.wv};
            float* const qkv_out[3] = {q, k, v};
            matmul_same_input(env.pool, env.kt, qkv, qkv_out, 3, x, n, ms, kOrder);
            add_bias(q, L.bq, n, d);
            add_bias(k, L.bk, n, d);
            add_bias(v, L.bv, n, d);
            attention_full(env.pool, q, k, v, starts, n_seq, hp.n_head, hp.head_dim, att);
            matmul(env.pool, env.kt, L.wo, att, n, y, ms, kOrder);
            add_bias(y, L.bo, n, d);
            add_inplace(y, x, n * d);
            layer_norm(env.pool, y, L.attn_norm, L.attn_norm_b, x, n, d, eps_);

            matmul(env.pool, env.kt, L.up, x, n, u, ms, kOrder);
            add_bias(u, L.up_b, n, ff);
            gelu_inplace(env.pool, env.kt, u, n, ff, env.buffer(7, ff));
            matmul(env.pool, env.kt, L.down, u, n, y, ms, kOrder);
            add_bias(y, L.down_b, n, d);
            add_inplace(y, x, n * d);
            layer_norm(env.pool, y, L.out_norm, L.out_norm_b, x, n, d, eps_);
        }
    }

private:
    float eps_;
};

}  // namespace

std::unique_ptr<ArchModel> load_bert(const GgufFile& f, const KernelTable& kt) {
    EncoderFile e = load_encoder_file(f, kt);
    const HParams& hp = e.hp;
    const int64_t d = hp.n_embd, ff = hp.n_ff;
    auto m = std::make_unique<BertModel>(hp, std::move(e.io), e.eps);
    m->type_embd = e.type_embd;
    m->pos_embd = load_tensor(f, kt, TensorKind::position_embd, -1, {d, -1}, false);
    m->tok_norm = e.tok_norm;
    m->tok_norm_b = e.tok_norm_b;
    for (int il = 0; il < (int)hp.n_layer; ++il) {
        BertLayer L;
        L.wq = load_tensor(f, kt, TensorKind::attn_q, il, {d, d}, true);
        L.wk = load_tensor(f, kt, TensorKind::attn_k, il, {d, d}, true);
        L.wv = load_tensor(f, kt, TensorKind::attn_v, il, {d, d}, true);
        L.wo = load_tensor(f, kt, TensorKind::attn_output, il, {d, d}, true);
        L.bq = load_f32_vector(f, TensorKind::attn_q_bias, il, d, false);
        L.bk = load_f32_vector(f, TensorKind::attn_k_bias, il, d, false);
        L.bv = load_f32_vector(f, TensorKind::attn_v_bias, il, d, false);
        L.bo = load_f32_vector(f, TensorKind::attn_output_bias, il, d, false);
        L.attn_norm = load_f32_vector(f, TensorKind::attn_output_norm, il, d);
        L.attn_norm_b = load_f32_vector(f, TensorKind::attn_output_norm_bias, il, d);
        L.up = load_tensor(f, kt, TensorKind::ffn_up, il, {d, ff}, true);
        L.down = load_tensor(f, kt, TensorKind::ffn_down, il, {ff, d}, true);
        L.up_b = load_f32_vector(f, TensorKind::ffn_up_bias, il, ff, false);
        L.down_b = load_f32_vector(f, TensorKind::ffn_down_bias, il, d, false);
        L.out_norm = load_f32_vector(f, TensorKind::layer_output_norm, il, d);
        L.out_norm_b = load_f32_vector(f, TensorKind::layer_output_norm_bias, il, d);
        m->layers.push_back(L);
    }
    return m;
}

}  // namespace ei
