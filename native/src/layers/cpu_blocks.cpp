#include "layers/cpu_blocks.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "common/error.h"

namespace ei {

void rms_norm(const float* x, const float* w, float* out, int64_t n, int64_t d, float eps) {
    for (int64_t t = 0; t < n; ++t) {
        const float* xt = x + t * d;
        float* ot = out + t * d;
        double sum = 0.0;
        for (int64_t i = 0; i < d; ++i) sum += (double)(xt[i] * xt[i]);
        const float mean = (float)(sum / (double)d);
        const float scale = 1.0f / std::sqrt(mean + eps);
        for (int64_t i = 0; i < d; ++i) ot[i] = (xt[i] * scale) * w[i];
    }
}

void embed_tokens(const KernelTable& kt, const Tensor& table, const int32_t* tokens, int64_t n, float* out) {
    const ToFloatFn to_float = kt.types[table.type].to_float;
    if (!to_float) throw Error(std::string("no dequantization for embedding type ") + type_info(table.type).name);
    for (int64_t t = 0; t < n; ++t) {
        if (tokens[t] < 0 || tokens[t] >= table.rows())
            throw Error("token id " + std::to_string(tokens[t]) + " is outside the vocabulary (0.." +
                        std::to_string(table.rows() - 1) + ")");
        to_float(table.row(tokens[t]), out + t * table.cols(), table.cols());
    }
}

namespace {
// The rotation is the table's (its FMA contractions differ by ISA, as ggml's builds do).
void rope_apply(RopeRotateFn rotate, float* x, int64_t n, int64_t n_heads, int64_t head_dim, const int32_t* pos,
                const RopeParams& p) {
    std::vector<float> cs(p.n_rot);  // cos, sin interleaved
    for (int64_t t = 0; t < n; ++t) {
        rope_cos_sin(p, pos[t], cs.data());
        float* xt = x + t * n_heads * head_dim;
        rotate(xt, xt, n_heads, head_dim, p.n_rot, cs.data());
    }
}
}  // namespace

void rope_norm(const KernelTable& kt, float* x, int64_t n, int64_t n_heads, int64_t head_dim, const int32_t* pos,
               const RopeParams& p) {
    rope_apply(kt.ops.rope_rotate, x, n, n_heads, head_dim, pos, p);
}

void rope_neox(const KernelTable& kt, float* x, int64_t n, int64_t n_heads, int64_t head_dim, const int32_t* pos,
               const RopeParams& p) {
    rope_apply(kt.ops.rope_rotate_neox, x, n, n_heads, head_dim, pos, p);
}

void attention_f16(ThreadPool& pool, const KernelTable& kt, const float* q, int64_t n, int64_t pos0,
                   const uint16_t* k, const uint16_t* v, const AttentionShape& s, float* out) {
    // Every query row runs ggml's one-row kernel (flash_attn_ext_f16_one_chunk): what llama.cpp
    // runs for decode and for prompts shorter than its 64-row tile. Longer chunks take the
    // table's tiled kernel where it has one (kernels.h, AttnF16Tile).
    // TODO(exactness): prompts of >= 64 rows go through ggml's tiled f32 GEMM path
    // (flash_attn_ext_tiled), and single-row decode over >= 512 cached positions through its
    // split-KV path; both round differently from this one (results stay within tolerance).
    const int64_t group = s.n_head / s.n_head_kv;
    const int64_t row_stride = s.n_head_kv * s.head_dim;  // elements per cached position
    if (kt.ops.attn_f16_tile && n >= kAttnTileMinRows && s.head_dim % 8 == 0) {
        // Long prompt chunks: the tiled kernel over tiles of 16 tokens x the heads of one KV
        // head. Jobs go latest tokens first (they see the most keys), several tasks a thread.
        constexpr int64_t kTileTokens = 16;
        const int64_t tiles = (n + kTileTokens - 1) / kTileTokens, jobs = tiles * s.n_head_kv;
        const int n_tasks = (int)std::min<int64_t>(jobs, 4 * pool.size());
        pool.run([&](int task, int nt) {
            std::vector<float> scratch(attn_f16_tile_scratch_floats(kTileTokens * group, s.head_dim));
            for (int64_t j = task; j < jobs; j += nt) {
                const int64_t tile = tiles - 1 - j / s.n_head_kv, hk = j % s.n_head_kv, t0 = tile * kTileTokens;
                const int64_t off = (t0 * s.n_head + hk * group) * s.head_dim;
                const AttnF16Tile a{q + off, out + off, std::min(kTileTokens, n - t0), group, s.n_head * s.head_dim,
                                    k + hk * s.head_dim, v + hk * s.head_dim, row_stride, pos0 + t0, s.window,
                                    s.head_dim, s.scale, scratch.data()};
                kt.ops.attn_f16_tile(a);
            }
        }, n_tasks);
        return;
    }
    const AttnF16RowFn attend = kt.ops.attn_f16_row;
    auto attend_row_head = [&](int64_t t, int64_t h, uint16_t* scratch) {
        const int64_t hk = h / group;
        const int64_t last = pos0 + t;
        const int64_t first = s.window > 0 && last - s.window + 1 > 0 ? last - s.window + 1 : 0;
        const int64_t off = (t * s.n_head + h) * s.head_dim;
        attend(q + off, k + hk * s.head_dim, v + hk * s.head_dim, row_stride, first, last, s.head_dim, s.scale,
               scratch, out + off);
    };
    if (n >= 2 * pool.size()) {
        // A causal query row costs in proportion to its position, so contiguous ranges would
        // leave most of a prompt's work to the thread with the last rows: tasks take rows
        // round-robin (task i: rows i, i + n_tasks, ...), a few tasks per thread.
        const int n_tasks = (int)std::min<int64_t>(n, 4 * pool.size());
        pool.run([&](int task, int nt) {
            std::vector<uint16_t> scratch(2 * s.head_dim);
            for (int64_t t = task; t < n; t += nt)
                for (int64_t h = 0; h < s.n_head; ++h) attend_row_head(t, h, scratch.data());
        }, n_tasks);
        return;
    }
    // Decode (a row or a few): the heads are the work to share.
    const int64_t jobs = n * s.n_head;
    pool.run([&](int ith, int nth) {
        std::vector<uint16_t> scratch(2 * s.head_dim);
        int64_t j0, j1;
        ThreadPool::split(jobs, ith, nth, &j0, &j1);
        for (int64_t j = j0; j < j1; ++j) attend_row_head(j / s.n_head, j % s.n_head, scratch.data());
    });
}

void swiglu(const KernelTable& kt, const float* gate, const float* up, float* out, int64_t n) {
    kt.ops.swiglu(n, gate, up, out);
}

void geglu(const KernelTable& kt, const float* gate, const float* up, float* out, int64_t n) {
    kt.ops.geglu(n, gate, up, out);
}

void scale_inplace(float* x, float s, int64_t n) {
    for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

void add_inplace(float* y, const float* x, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

}  // namespace ei
