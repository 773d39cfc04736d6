#include "layers/cpu_blocks.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "common/error.h"
#include "common/mmap.h"
#include "cpu/attn_sink.h"

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
        if (table.release_after_lookup) release_mapped_folio(table.row(tokens[t]), table.data, table.row(table.rows()));
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

namespace {

// The fast order's attention over an F16 cache (FloatOrder::fast, tables with the span kernel),
// for decode steps and batches: the positions are cut into spans of kAttnTileKeys at fixed
// positions (0, 64, 128, ...); each span of each KV head is one job through the span kernel
// (kernels.h, attn_f16_span: scores, a vectorized exp and the V sums in F32), which leaves per
// row the span's maximum, sum and unnormalized output; the spans are then merged in position
// order. A row's floats depend only on its query and the positions it sees, so a token decoded
// in a batch gets exactly what it gets alone, and a decode step has as many jobs as spans x KV
// heads to share among the threads.
void attention_f16_spans(ThreadPool& pool, const KernelTable& kt, const float* q, int64_t n, int64_t pos0,
                         const uint16_t* k, const uint16_t* v, const AttentionShape& s, float* out) {
    const int64_t group = s.n_head / s.n_head_kv, hd = s.head_dim, rows = n * group;
    const int64_t row_stride = s.n_head_kv * hd;  // elements per cached position
    const int64_t last_max = pos0 + n - 1;
    const int64_t first_min = s.window > 0 ? std::max<int64_t>(0, pos0 - s.window + 1) : 0;
    const int64_t span0 = first_min / kAttnTileKeys, spans = last_max / kAttnTileKeys - span0 + 1;
    const int64_t part_row = hd + 2, jobs = s.n_head_kv * spans;
    // [n_head_kv][spans][rows][hd + 2], every entry written by its job. Kept between calls (a
    // decode step calls this once a layer, and a new zeroed buffer each time showed in profiles),
    // up to a size; a larger one (many rows over a long context) is freed after the call.
    constexpr size_t kKeptPartFloats = size_t(4) << 20;
    const size_t part_floats = (size_t)(jobs * rows * part_row);
    thread_local std::vector<float> part_kept;  // the calling thread's: the tasks get its address
    std::vector<float> part_once;
    std::vector<float>& part_buffer = part_floats <= kKeptPartFloats ? part_kept : part_once;
    if (part_buffer.size() < part_floats) part_buffer.resize(part_floats);
    float* const part = part_buffer.data();
    pool.run([&](int task, int nt) {
        // A task takes a run of spans, each span's KV heads one after another: the heads' rows
        // interleave in the cache (position p holds every head's K), so a span's lines then come
        // from memory once for all its heads instead of once per head.
        for (int64_t i = jobs * task / nt; i < jobs * (task + 1) / nt; ++i) {
            const int64_t c = i / s.n_head_kv, hk = i % s.n_head_kv, j = hk * spans + c;
            AttnF16Tile a{q + hk * group * hd, nullptr, n, group, s.n_head * hd, k + hk * hd, v + hk * hd, row_stride,
                          pos0, s.window, hd, s.scale, nullptr};
            a.part = part + j * rows * part_row;
            a.k_first = (span0 + c) * kAttnTileKeys;
            kt.ops.attn_f16_span(a);
        }
    }, (int)std::min<int64_t>(jobs, 4 * pool.size()));
    // A decode step's merge (a few heads over a few spans) is less work than waking the pool's
    // threads and waiting for them: it runs on the caller alone. (Each (row, head) is merged the
    // same way whichever thread does it.)
    constexpr int64_t kMergeAloneSpans = 64;
    const int merge_tasks = n * s.n_head * spans <= kMergeAloneSpans ? 1 : pool.size();
    pool.run([&](int ith, int nth) {  // merge each (row, head) over its spans, in position order
        int64_t r0, r1;
        ThreadPool::split(n * s.n_head, ith, nth, &r0, &r1);
        for (int64_t rh = r0; rh < r1; ++rh) {
            const int64_t t = rh / s.n_head, h = rh % s.n_head, hk = h / group, r = t * group + h % group;
            const float* first_part = part + (hk * spans * rows + r) * part_row;
            const int64_t span_step = rows * part_row;
            float M = -INFINITY;
            for (int64_t c = 0; c < spans; ++c) M = std::max(M, first_part[c * span_step + hd]);
            float L = 0.0f;
            float* o = out + (t * s.n_head + h) * hd;
            std::fill(o, o + hd, 0.0f);
            for (int64_t c = 0; c < spans; ++c) {
                const float* pc = first_part + c * span_step;
                if (pc[hd + 1] == 0.0f) continue;
                const float w = std::exp(pc[hd] - M);
                L += w * pc[hd + 1];
                for (int64_t d = 0; d < hd; ++d) o[d] += w * pc[d];
            }
            if (s.sinks) {
                const float ms = attention_sink_step(s.sinks[h], M, L);
                for (int64_t d = 0; d < hd; ++d) o[d] *= ms;
            }
            const float inv = L == 0.0f ? 0.0f : 1.0f / L;
            for (int64_t d = 0; d < hd; ++d) o[d] *= inv;
        }
    }, merge_tasks);
}

}  // namespace

void attention_f16(ThreadPool& pool, const KernelTable& kt, const float* q, int64_t n, int64_t pos0,
                   const uint16_t* k, const uint16_t* v, const AttentionShape& s, float* out) {
    if (kt.order == FloatOrder::fast && kt.ops.attn_f16_span && n < kAttnTileMinRows && s.head_dim % 8 == 0)
        return attention_f16_spans(pool, kt, q, n, pos0, k, v, s, out);
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
                AttnF16Tile a{q + off, out + off, std::min(kTileTokens, n - t0), group, s.n_head * s.head_dim,
                                    k + hk * s.head_dim, v + hk * s.head_dim, row_stride, pos0 + t0, s.window,
                                    s.head_dim, s.scale, scratch.data()};
                if (s.sinks) a.sinks = s.sinks + hk * group;
                kt.ops.attn_f16_tile(a);
            }
        }, n_tasks);
        return;
    }
    // Every (row, head) is one query of the one-row kernel. The queries of a KV head share its
    // rows, so they go to the kernel together (AttnF16RowsFn), ordered by KV head; tasks take
    // contiguous runs of them of about equal cost (a causal row costs its position count).
    struct Item {
        int64_t hk, cost;
        AttnF16Query query;
    };
    std::vector<Item> items;
    items.reserve((size_t)(n * s.n_head));
    for (int64_t hk = 0; hk < s.n_head_kv; ++hk)
        for (int64_t t = 0; t < n; ++t)
            for (int64_t h = hk * group; h < (hk + 1) * group; ++h) {
                const int64_t last = pos0 + t;
                const int64_t first = s.window > 0 && last - s.window + 1 > 0 ? last - s.window + 1 : 0;
                const int64_t off = (t * s.n_head + h) * s.head_dim;
                items.push_back({hk, last - first + 1, {q + off, out + off, first, last, s.sinks ? s.sinks[h] : -INFINITY}});
            }
    std::vector<int64_t> cost_before(items.size() + 1, 0);
    for (size_t i = 0; i < items.size(); ++i) cost_before[i + 1] = cost_before[i] + items[i].cost;
    const int n_tasks = (int)std::min<int64_t>((int64_t)items.size(), 2 * pool.size());
    const AttnF16RowsFn attend = kt.ops.attn_f16_rows;
    pool.run([&](int task, int nt) {
        // This task's items: those whose cost midpoint falls in its share of the total.
        const int64_t total = cost_before.back();
        auto boundary = [&](int64_t share) {
            const int64_t target = total * share / nt;
            return (size_t)(std::lower_bound(cost_before.begin(), cost_before.end(), target) - cost_before.begin());
        };
        const size_t i0 = task == 0 ? 0 : boundary(task), i1 = task == nt - 1 ? items.size() : boundary(task + 1);
        std::vector<AttnF16Query> batch;
        std::vector<uint16_t> scratch((size_t)(2 * s.head_dim * kAttnMaxQueries));
        for (size_t i = i0; i < i1;) {
            const int64_t hk = items[i].hk;
            batch.clear();
            for (; i < i1 && items[i].hk == hk && (int64_t)batch.size() < kAttnMaxQueries; ++i)
                batch.push_back(items[i].query);
            attend(batch.data(), (int64_t)batch.size(), k + hk * s.head_dim, v + hk * s.head_dim, row_stride,
                   s.head_dim, s.scale, scratch.data());
        }
    }, n_tasks);
}

void swiglu(const KernelTable& kt, const float* gate, const float* up, float* out, int64_t n) {
    kt.ops.swiglu(n, gate, up, out);
}

void geglu(const KernelTable& kt, const float* gate, const float* up, float* out, int64_t n) {
    kt.ops.geglu(n, gate, up, out);
}

void swiglu_oai(const float* gate, const float* up, float* out, int64_t n) {
    // llama.cpp's build_moe_ffn fixes both constants for LLM_FFN_SWIGLU_OAI_MOE.
    constexpr float alpha = 1.702f, limit = 7.0f;
    for (int64_t i = 0; i < n; ++i) {
        const float x = std::min(gate[i], limit);
        const float y = std::clamp(up[i], -limit, limit);
        const float out_glu = x / (1.0f + std::exp(alpha * (-x)));
        out[i] = out_glu * (y + 1.0f);
    }
}

void scale_inplace(float* x, float s, int64_t n) {
    for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

void add_inplace(float* y, const float* x, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

}  // namespace ei
