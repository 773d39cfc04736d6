#include "models/decoder.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "models/blocks.h"

namespace ei {

void load_decoder_io(const GgufFile& f, const KernelTable& kt, HParams& hp, DecoderWeights& w) {
    const int64_t d = hp.n_embd;
    w.tok_embd = load_tensor(f, kt, TensorKind::token_embd, -1, {d, -1}, false);
    hp.n_vocab = w.tok_embd.rows();
    w.output_norm = load_f32_vector(f, TensorKind::output_norm, -1, d);
    w.output = load_tensor(f, kt, TensorKind::output, -1, {d, hp.n_vocab}, true, /*required=*/false);
    if (!w.output.present()) w.output = load_tensor(f, kt, TensorKind::token_embd, -1, {d, hp.n_vocab}, true);
}

namespace {

// rows[t] += bias for n rows of width w
void add_bias(float* rows, const float* bias, int64_t n, int64_t w) {
    for (int64_t t = 0; t < n; ++t) add_inplace(rows + t * w, bias, w);
}

// Columns [c0, c0 + w) of n rows of width `stride` into a packed [n][w] buffer.
void take_columns(const float* src, int64_t n, int64_t stride, int64_t c0, int64_t w, float* dst) {
    for (int64_t t = 0; t < n; ++t) std::memcpy(dst + t * w, src + t * stride + c0, sizeof(float) * w);
}

}  // namespace

void decoder_forward(ForwardEnv& env, const ForwardBatch& b, const HParams& hp, const DecoderWeights& w,
                     const DecoderOptions& o) {
    const int64_t n = b.n, d = hp.n_embd, qw = hp.q_width(), kvw = hp.kv_width(), ff = hp.n_ff;
    const int64_t hd = hp.head_dim;
    float* x = env.buffer(0, n * d);      // [n][d] residual stream
    float* h = env.buffer(1, n * d);      // [n][d] normed input of a sub-block
    float* q = env.buffer(2, n * qw);     // [n][n_head][head_dim]
    float* k = env.buffer(3, n * kvw);    // [n][n_head_kv][head_dim]
    float* v = env.buffer(4, n * kvw);    // [n][n_head_kv][head_dim]
    float* att = env.buffer(5, n * qw);   // [n][n_head][head_dim]
    float* gate = env.buffer(6, n * ff);  // [n][n_ff]
    float* up = env.buffer(7, n * ff);    // [n][n_ff]
    float* out = env.buffer(8, n * d);    // [n][d] sub-block output
    // [n][q_width + 2 kv_width] fused QKV output, or [n][2 n_ff] fused gate/up output
    float* fused = env.buffer(9, n * std::max(qw + 2 * kvw, 2 * ff));
    std::vector<int32_t> pos(n);
    for (int64_t t = 0; t < n; ++t) pos[t] = (int32_t)(b.pos0 + t);

    embed_tokens(env.kt, w.tok_embd, b.tokens, n, x);
    const RopeParams rope{hp.n_rot, hp.rope_freq_base, hp.rope_freq_scale, o.rope_factors, o.rope_attn_factor};
    const float scale = 1.0f / std::sqrt((float)hd);
    const AttentionShape shape{hp.n_head, hp.n_head_kv, hd, o.scale_q_first ? 1.0f : scale, 0};

    // As in llama.cpp's graph, the last layer carries on with only the rows whose logits are
    // wanted once its K/V are cached.
    int64_t r0 = 0;
    for (int il = 0; il < hp.n_layer; ++il) {
        const DecoderLayer& L = w.layers[il];
        rms_norm(x, L.attn_norm, h, n, d, hp.norm_eps);
        if (L.wqkv.present()) {
            const int64_t stride = qw + 2 * kvw;
            matmul(env.pool, env.kt, L.wqkv, h, n, fused, env.matmul_scratch);
            take_columns(fused, n, stride, 0, qw, q);
            take_columns(fused, n, stride, qw, kvw, k);
            take_columns(fused, n, stride, qw + kvw, kvw, v);
        } else {
            matmul(env.pool, env.kt, L.wq, h, n, q, env.matmul_scratch);
            matmul(env.pool, env.kt, L.wk, h, n, k, env.matmul_scratch);
            matmul(env.pool, env.kt, L.wv, h, n, v, env.matmul_scratch);
        }
        if (L.bq) add_bias(q, L.bq, n, qw);
        if (L.bk) add_bias(k, L.bk, n, kvw);
        if (L.bv) add_bias(v, L.bv, n, kvw);
        if (L.q_norm) rms_norm(q, L.q_norm, q, n * hp.n_head, hd, hp.norm_eps);
        if (L.k_norm) rms_norm(k, L.k_norm, k, n * hp.n_head_kv, hd, hp.norm_eps);
        rope_neox(env.kt, q, n, hp.n_head, hd, pos.data(), rope);
        rope_neox(env.kt, k, n, hp.n_head_kv, hd, pos.data(), rope);
        if (o.scale_q_first) scale_inplace(q, scale, n * qw);
        env.kv.store(il, b.pos0, n, k, v);

        if (il == hp.n_layer - 1) {
            r0 = b.first_logit;
            if (r0 == n) return;  // no logits wanted: the cache is all this batch was for
        }
        const int64_t m = n - r0;
        attention_cached(env.pool, env.kt, q + r0 * qw, m, b.pos0 + r0, env.kv, il, shape, att);
        matmul(env.pool, env.kt, L.wo, att, m, out, env.matmul_scratch);
        float* xr = x + r0 * d;
        add_inplace(xr, out, m * d);

        rms_norm(xr, L.ffn_norm, h, m, d, hp.norm_eps);
        if (L.w_gate_up.present()) {
            matmul(env.pool, env.kt, L.w_gate_up, h, m, fused, env.matmul_scratch);
            for (int64_t t = 0; t < m; ++t) swiglu(env.kt, fused + t * 2 * ff, fused + t * 2 * ff + ff, gate + t * ff, ff);
        } else {
            matmul(env.pool, env.kt, L.w_gate, h, m, gate, env.matmul_scratch);
            matmul(env.pool, env.kt, L.w_up, h, m, up, env.matmul_scratch);
            swiglu(env.kt, gate, up, gate, m * ff);
        }
        matmul(env.pool, env.kt, L.w_down, gate, m, out, env.matmul_scratch);
        add_inplace(xr, out, m * d);
    }
    const int64_t m = n - r0;
    rms_norm(x + r0 * d, w.output_norm, h, m, d, hp.norm_eps);
    matmul(env.pool, env.kt, w.output, h, m, b.logits, env.matmul_scratch);
}

void decoder_rotate_keys(const KernelTable& kt, const HParams& hp, float* rows, int64_t m, int32_t delta) {
    const RopeParams rope{hp.n_rot, hp.rope_freq_base, hp.rope_freq_scale, nullptr};
    const std::vector<int32_t> pos(m, delta);
    rope_neox(kt, rows, m, hp.n_head_kv, hp.head_dim, pos.data(), rope);
}

}  // namespace ei
