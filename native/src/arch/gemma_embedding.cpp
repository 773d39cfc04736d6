// The gemma-embedding architecture (EmbeddingGemma: sentence-transformers' Gemma3TextModel), as
// llama.cpp runs it from GGUF (src/models/gemma-embedding.cpp): Gemma 3's layers (arch/gemma3.cpp)
// with bidirectional attention, as an encoder (no cache: each input is one pass over all its tokens)
//
//   x = token_embd[tokens] * sqrt(n_embd)
//   for each layer: x = decoder_layer(x)      (layers/decoder_layer.h, Q scaled by 1/sqrt(head_dim))
//                                             with attention over every token of the input, on local
//                                             layers only those within sliding_window / 2 positions
//                                             either side (llama.cpp's LLAMA_SWA_TYPE_SYMMETRIC)
//   hidden = rms_norm(x) * output_norm
//
// then pooled (mean, from the file) and projected by the Dense modules (arch/pooling.h).
//
// The layer is the shared one: only where its K and V go and how it attends differ, so the ops are
// the CPU backend's with those two replaced (BidirectionalOps). The attention is a plain F32
// softmax over all rows, as arch/bert.cpp's, with grouped heads and the symmetric window.
#include <algorithm>
#include <cmath>
#include <vector>

#include "common/error.h"
#include "arch/arch.h"
#include "layers/cpu_blocks.h"

namespace ei {

namespace {

// The CPU layer ops with no cache: kv_store keeps the layer's K and V rows where they are, and
// attention lets every row see every other (within the window).
class BidirectionalOps : public CpuLayerOps {
public:
    // kv: never touched (kv_store is replaced); the base class only holds it.
    BidirectionalOps(ThreadPool& pool, const KernelTable& kt, KvCache& kv, MatmulScratch& scratch, float norm_eps)
        : CpuLayerOps(pool, kt, kv, scratch, norm_eps, nullptr, BatchOrder::llama_cpp), pool_(pool) {}

    void kv_store(int, int64_t, int64_t n, const float* k, const float* v) { k_ = k, v_ = v, n_ = n; }

    // q: [m][n_head][head_dim] of rows 0..m-1 (m = n: an encoder wants every row), already scaled.
    void attention(int, const float* q, int64_t m, int64_t, const AttentionShape& s, const float*, float* out) {
        const int64_t n = n_, hd = s.head_dim, qw = s.n_head * hd, kvw = s.n_head_kv * hd;
        const int64_t group = s.n_head / s.n_head_kv;
        const int64_t half = s.window > 0 ? s.window / 2 : n;  // symmetric window: |i - j| <= half
        const float* k = k_;
        const float* v = v_;
        pool_.run([&](int ith, int nth) {
            std::vector<float> p((size_t)n);
            int64_t begin, end;
            ThreadPool::split(m * s.n_head, ith, nth, &begin, &end);
            for (int64_t task = begin; task < end; ++task) {
                const int64_t t = task / s.n_head, h = task % s.n_head, hk = h / group;
                const float* qr = q + t * qw + h * hd;
                const int64_t lo = std::max<int64_t>(0, t - half), hi = std::min<int64_t>(n, t + half + 1);
                float mx = -INFINITY;
                for (int64_t j = lo; j < hi; ++j) {
                    const float* kr = k + j * kvw + hk * hd;
                    float dot = 0.0f;
                    for (int64_t c = 0; c < hd; ++c) dot += qr[c] * kr[c];
                    p[j] = dot * s.scale;
                    mx = std::max(mx, p[j]);
                }
                double sum = 0.0;
                for (int64_t j = lo; j < hi; ++j) sum += (p[j] = std::exp(p[j] - mx));
                const float inv = (float)(1.0 / sum);
                float* o = out + t * qw + h * hd;
                std::fill(o, o + hd, 0.0f);
                for (int64_t j = lo; j < hi; ++j) {
                    const float* vr = v + j * kvw + hk * hd;
                    const float w = p[j] * inv;
                    for (int64_t c = 0; c < hd; ++c) o[c] += w * vr[c];
                }
            }
        });
    }

private:
    ThreadPool& pool_;          // the attention's threads (the base class keeps its own private)
    const float* k_ = nullptr;  // [n][n_head_kv][head_dim] this layer's keys (the layer's k buffer)
    const float* v_ = nullptr;  // [n][n_head_kv][head_dim]
    int64_t n_ = 0;
};

class GemmaEmbeddingModel : public ArchModel {
public:
    using ArchModel::ArchModel;

    bool is_encoder() const override { return true; }

    void encode(ForwardEnv& env, const int32_t* tokens, int64_t n, float* hidden) const override {
        const DecoderModel& M = decoder();
        const LayerShapes& s = M.shapes;
        const int64_t d = s.n_embd;
        const LayerActs<float*> a = layer_activations(env, s, n);
        BidirectionalOps ops(env.pool, env.kt, *env.kv, env.matmul_scratch, s.norm_eps);
        embed_tokens(env.kt, M.tok_embd, tokens, n, a.x);
        scale_inplace(a.x, M.embed_scale, n * d);
        for (int il = 0; il < (int)M.layers.size(); ++il)
            decoder_layer(ops, M.layers[il], M.configs[il], s, a, il, n, 0, 0);
        rms_norm(a.x, M.output_norm, hidden, n, d, s.norm_eps);
    }
};

}  // namespace

std::unique_ptr<ArchModel> load_gemma_embedding(const GgufFile& f, const KernelTable& kt) {
    HParams hp = read_hparams(f);
    DecoderModel m = load_gemma3_decoder(f, kt, hp);
    // llama.cpp's f_attention_scale for this architecture, whatever the layer count.
    for (LayerConfig& c : m.configs) c.q_scale = 1.0f / std::sqrt((float)hp.head_dim);
    return std::make_unique<GemmaEmbeddingModel>(std::move(hp), std::move(m));
}

}  // namespace ei
