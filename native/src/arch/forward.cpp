// The forward pass every architecture shares (arch/decoder.h): embeddings, each layer on the
// backend the placement chose, the output head. llama.cpp's graph order throughout, so that the
// logits are its bits.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "common/error.h"
#include "layers/cpu_blocks.h"
#include "layers/shortconv_layer.h"
#include "arch/arch.h"

namespace ei {

LayerActs<float*> layer_activations(ForwardEnv& env, const LayerShapes& s, int64_t n) {
    const int64_t d = s.n_embd, qw = s.q_width(), kvw = s.kv_width(), ff = s.n_ff;
    return LayerActs<float*>{
        env.buffer(0, n * d),     // x    [n][d] residual stream
        env.buffer(1, n * d),     // h    [n][d] normed input of a sub-block
        env.buffer(2, n * qw),    // q    [n][n_head][head_dim]
        env.buffer(3, n * kvw),   // k    [n][n_head_kv][head_dim]
        env.buffer(4, n * kvw),   // v    [n][n_head_kv][head_dim]
        env.buffer(5, n * qw),    // att  [n][n_head][head_dim]
        env.buffer(6, n * ff),    // gate [n][n_ff]
        env.buffer(7, n * ff),    // up   [n][n_ff]
        env.buffer(8, n * d),     // out  [n][d] sub-block output
    };
}

void ArchModel::forward(ForwardEnv& env, const ForwardBatch& b) const {
    if (is_encoder()) throw Error("an encoder model (" + hp_.arch + ") has no decoder forward: use its embeddings");
    const DecoderModel& M = decoder_;
    const LayerShapes& s = M.shapes;
    const int64_t n = b.n, d = s.n_embd;
    const LayerActs<float*> a = layer_activations(env, s, n);
    const int64_t fused_width = M.fused_width();
    float* fused = fused_width > 0 ? env.buffer(9, n * fused_width) : nullptr;  // [n][fused_width]
    float* bcx = M.has_conv_layers() ? env.buffer(10, n * 3 * d) : nullptr;  // [n][3 n_embd] B, C, x
    CpuLayerOps ops(env.pool, env.kt, *env.kv, env.matmul_scratch, s.norm_eps, fused, b.order);
    ops.set_sequence_runs(b.runs, b.n_runs);
    ops.set_activation_stats(env.activation_stats);
    if (b.runs && env.device) throw Error("a batch of several sequences cannot run offloaded layers");
    if (env.activation_stats && env.device) throw Error("activation statistics are collected with every layer on the CPU");

    embed_tokens(env.kt, M.tok_embd, b.tokens, n, a.x);
    if (M.embed_scale > 0.0f) scale_inplace(a.x, M.embed_scale, n * d);  // ggml_scale(inpL, ...)

    // Rows still needed: all of them, except in the last layer after K/V are cached, where only
    // the rows whose logits are wanted go on (llama.cpp's inp_out_ids), on either backend.
    const int last_layer = hp_.n_layer - 1;
    const int64_t n_ctx = env.kv->n_ctx();
    int64_t r0 = 0;
    for (int il = 0; il <= last_layer; ++il) {
        if (env.device && env.device->on_device(il)) {
            const int last = env.device->range_end(il);
            if (last == last_layer) r0 = b.first_logit;
            env.device->run(il, last, a.x, n, b.pos0, r0);  // x crosses over and back once
            il = last;
            continue;
        }
        if (il == last_layer && !b.runs) r0 = b.first_logit;
        run_layer(ops, M.layers[il], layer_config(il, n_ctx), s, a, bcx, il, n, b.pos0, r0);
    }
    const float* last = a.x + r0 * d;
    int64_t m = n - r0;
    if (b.runs) {  // the rows whose logits are wanted, gathered
        m = b.n_logit_rows;
        for (int64_t i = 0; i < m; ++i) std::memcpy(a.out + i * d, a.x + b.logit_rows[i] * d, sizeof(float) * d);
        last = a.out;
    }
    if (m == 0) return;  // no logits wanted: the cache is all this batch was for
    rms_norm(last, M.output_norm, a.h, m, d, s.norm_eps);
    if (b.hidden) {  // embeddings: llama.cpp's t_embd, the normed rows before the output head
        std::memcpy(b.hidden, a.h, sizeof(float) * (size_t)(m * d));
        return;
    }
    if (env.activation_stats && env.activation_stats->include_output()) env.activation_stats->record(M.output, a.h, m);
    matmul(env.pool, env.kt, M.output, a.h, m, b.logits, env.matmul_scratch, b.order);
    // ggml_scale(logits, 1/s): a multiply by the float reciprocal, not a division, for its bits.
    if (M.logit_scale > 0.0f) scale_inplace(b.logits, 1.0f / M.logit_scale, m * hp_.n_vocab);
    if (M.final_softcap > 0.0f) {
        // ggml_scale(1/c), ggml_tanh, ggml_scale(c)
        const float c = M.final_softcap;
        const int64_t count = m * hp_.n_vocab;
        for (int64_t i = 0; i < count; ++i) b.logits[i] = std::tanh(b.logits[i] * (1.0f / c)) * c;
    }
}

void ArchModel::encode(ForwardEnv&, const int32_t*, int64_t, float*) const {
    throw Error("the " + hp_.arch + " architecture is a decoder, not an encoder");
}

void ArchModel::encode_packed(ForwardEnv& env, const int32_t* tokens, const int64_t* starts, int64_t n_seq,
                              float* hidden) const {
    for (int64_t s = 0; s < n_seq; ++s)
        encode(env, tokens + starts[s], starts[s + 1] - starts[s], hidden + starts[s] * hp_.n_embd);
}

void ArchModel::rotate_cached_keys(const KernelTable& kt, int64_t layer, float* rows, int64_t m, int32_t delta,
                                   int64_t n_ctx) const {
    const LayerConfig c = layer_config((int)layer, n_ctx);
    // Unroped keys hold no position to move. (llama.cpp's shift skips layers !has_rope, but its
    // smollm3 leaves every layer marked roped and so rotates NoPE keys; moving them is wrong.)
    if (c.nope) return;
    // Every angle is linear in the position (YaRN's mix and LongRoPE's factors included), so
    // rotating a key by delta's angles moves it to pos + delta; its magnitude (attn_factor,
    // YaRN's correction) it holds already, so the rotation is by the angle only. (llama.cpp's
    // shift scales the cached keys again.)
    RopeParams rope = c.rope;
    rope.scale_magnitude = false;
    const std::vector<int32_t> pos((size_t)m, delta);
    if (c.rope_neox) rope_neox(kt, rows, m, hp_.n_head_kv, hp_.head_dim, pos.data(), rope);
    else rope_norm(kt, rows, m, hp_.n_head_kv, hp_.head_dim, pos.data(), rope);
}

}  // namespace ei
