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
// Each input is one forward over all its tokens (the engine's Context::embed), so the scratch
// grows to the longest input rather than being cut into n_batch chunks.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "common/error.h"
#include "common/fp16.h"
#include "cpu/gelu_table.h"
#include "arch/arch.h"
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

// ggml_norm then mul and add: mean and variance summed in double (ggml_float), the scale in float.
void layer_norm(const float* x, const float* w, const float* b, float* out, int64_t n, int64_t d, float eps) {
    for (int64_t t = 0; t < n; ++t) {
        const float* r = x + t * d;
        float* o = out + t * d;
        double sum = 0.0;
        for (int64_t j = 0; j < d; ++j) sum += r[j];
        const float mean = (float)(sum / d);
        double sum2 = 0.0;
        for (int64_t j = 0; j < d; ++j) {
            const float v = r[j] - mean;
            o[j] = v;
            sum2 += (double)(v * v);
        }
        const float scale = 1.0f / std::sqrt((float)(sum2 / d) + eps);
        for (int64_t j = 0; j < d; ++j) o[j] = o[j] * scale * w[j] + (b ? b[j] : 0.0f);
    }
}

void add_bias(float* y, const float* b, int64_t n, int64_t d) {
    if (!b) return;
    for (int64_t t = 0; t < n; ++t)
        for (int64_t j = 0; j < d; ++j) y[t * d + j] += b[j];
}

// ggml_vec_gelu_f32 with GGML_GELU_FP16: the input rounded to F16 and looked up (cpu/gelu_table.h).
void gelu_inplace(float* x, int64_t count) {
    const uint16_t* table = gelu_f16_table<false>();
    for (int64_t i = 0; i < count; ++i) {
        const float v = x[i];
        x[i] = v <= -10.0f ? 0.0f : v >= 10.0f ? v : fp16_to_fp32(table[fp32_to_fp16(v)]);
    }
}

// Bidirectional attention of n tokens, head by head across the pool: out = softmax(q k^T s) v.
void attention_full(ThreadPool& pool, const float* q, const float* k, const float* v, int64_t n, int64_t n_head,
                    int64_t head_dim, float* out) {
    const int64_t w = n_head * head_dim;
    const float scale = 1.0f / std::sqrt((float)head_dim);
    pool.run([&](int ith, int nth) {
        std::vector<float> p((size_t)n);
        int64_t begin, end;
        ThreadPool::split(n * n_head, ith, nth, &begin, &end);
        for (int64_t task = begin; task < end; ++task) {
            const int64_t t = task / n_head, h = task % n_head;
            const float* qr = q + t * w + h * head_dim;
            float mx = -INFINITY;
            for (int64_t s = 0; s < n; ++s) {
                const float* kr = k + s * w + h * head_dim;
                float dot = 0.0f;
                for (int64_t j = 0; j < head_dim; ++j) dot += qr[j] * kr[j];
                p[s] = dot * scale;
                mx = std::max(mx, p[s]);
            }
            double sum = 0.0;
            for (int64_t s = 0; s < n; ++s) {
                p[s] = std::exp(p[s] - mx);
                sum += p[s];
            }
            const float inv = (float)(1.0 / sum);
            float* o = out + t * w + h * head_dim;
            for (int64_t j = 0; j < head_dim; ++j) o[j] = 0.0f;
            for (int64_t s = 0; s < n; ++s) {
                const float* vr = v + s * w + h * head_dim;
                const float ps = p[s] * inv;
                for (int64_t j = 0; j < head_dim; ++j) o[j] += ps * vr[j];
            }
        }
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
        const HParams& hp = hparams();
        const int64_t d = hp.n_embd, ff = hp.n_ff;
        if (n > pos_embd.rows())
            throw ContextOverflowError("an input of " + std::to_string(n) + " tokens exceeds the " +
                                       std::to_string(pos_embd.rows()) + " positions this encoder has");
        float* x = hidden;                        // [n][d] residual stream, ends as the hidden states
        float* q = env.buffer(0, n * d);          // [n][n_head][head_dim]
        float* k = env.buffer(1, n * d);
        float* v = env.buffer(2, n * d);
        float* att = env.buffer(3, n * d);        // [n][n_head][head_dim]
        float* y = env.buffer(4, n * d);          // [n][d] sub-block output
        float* u = env.buffer(5, n * ff);         // [n][n_ff]
        float* row = env.buffer(6, d);            // one embedding row

        embed_tokens(env.kt, decoder().tok_embd, tokens, n, x);
        if (type_embd.present()) {
            const int32_t zero = 0;
            embed_tokens(env.kt, type_embd, &zero, 1, row);
            for (int64_t t = 0; t < n; ++t) add_inplace(x + t * d, row, d);
        }
        for (int64_t t = 0; t < n; ++t) {  // ggml_add(pos, inpL): position first
            const int32_t pos = (int32_t)t;
            embed_tokens(env.kt, pos_embd, &pos, 1, row);
            for (int64_t j = 0; j < d; ++j) x[t * d + j] = row[j] + x[t * d + j];
        }
        layer_norm(x, tok_norm, tok_norm_b, x, n, d, eps_);

        MatmulScratch& ms = env.matmul_scratch;
        for (const BertLayer& L : layers) {
            matmul(env.pool, env.kt, L.wq, x, n, q, ms);
            matmul(env.pool, env.kt, L.wk, x, n, k, ms);
            matmul(env.pool, env.kt, L.wv, x, n, v, ms);
            add_bias(q, L.bq, n, d);
            add_bias(k, L.bk, n, d);
            add_bias(v, L.bv, n, d);
            attention_full(env.pool, q, k, v, n, hp.n_head, hp.head_dim, att);
            matmul(env.pool, env.kt, L.wo, att, n, y, ms);
            add_bias(y, L.bo, n, d);
            add_inplace(y, x, n * d);
            layer_norm(y, L.attn_norm, L.attn_norm_b, x, n, d, eps_);

            matmul(env.pool, env.kt, L.up, x, n, u, ms);
            add_bias(u, L.up_b, n, ff);
            gelu_inplace(u, n * ff);
            matmul(env.pool, env.kt, L.down, u, n, y, ms);
            add_bias(y, L.down_b, n, d);
            add_inplace(y, x, n * d);
            layer_norm(y, L.out_norm, L.out_norm_b, x, n, d, eps_);
        }
    }

private:
    float eps_;
};

}  // namespace

std::unique_ptr<ArchModel> load_bert(const GgufFile& f, const KernelTable& kt) {
    HParams hp = read_hparams(f);
    const std::string a = hp.arch + ".";
    const float eps = (float)f.get_float(a + "attention.layer_norm_epsilon", 1e-12);
    if (!(eps > 0.0f && eps < 1.0f)) f.fail(a + "attention.layer_norm_epsilon", "must be in (0, 1)");
    if (hp.n_head_kv != hp.n_head || hp.q_width() != hp.n_embd)
        f.fail(a + "attention.head_count", "a BERT encoder has n_head * head_dim = n_embd and no grouped heads");
    const int64_t d = hp.n_embd, ff = hp.n_ff;
    DecoderModel io;
    io.shapes = layer_shapes(hp);
    io.tok_embd = load_tensor(f, kt, TensorKind::token_embd, -1, {d, -1}, false);
    hp.n_vocab = io.tok_embd.rows();
    auto m = std::make_unique<BertModel>(hp, std::move(io), eps);
    m->type_embd = load_tensor(f, kt, TensorKind::token_types, -1, {d, -1}, false, /*required=*/false);
    m->pos_embd = load_tensor(f, kt, TensorKind::position_embd, -1, {d, -1}, false);
    m->tok_norm = load_f32_vector(f, TensorKind::token_embd_norm, -1, d);
    m->tok_norm_b = load_f32_vector(f, TensorKind::token_embd_norm_bias, -1, d);
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
