// Attention over the KV cache whatever its K/V types (cpu_blocks.h, attention_cached).
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "common/error.h"
#include "cpu/attn_sink.h"
#include "kv/centered_attention.h"
#include "kv/hadamard.h"
#include "layers/cpu_blocks.h"

namespace ei {

namespace {

// Attention through the span kernel (kernels.h, AttnKvqSpanFn). Jobs are (query row, KV head,
// span): a decode step has one query row and few KV heads, so the positions are split into
// spans until there are about four jobs a thread (each span at least 128 positions), and the
// spans' partial results are merged afterwards (max, rescaled sums). A centered K's sink rows
// are not in the spans: they are merged into the first span of each row (kv/centered_attention.h).
void attention_spans(ThreadPool& pool, const KernelTable& kt, const float* q, int64_t n, int64_t pos0,
                     const KvCache& kv, int64_t layer, const AttentionShape& s, const CenteredAttention& centered,
                     float* out) {
    const int64_t group = s.n_head / s.n_head_kv, hd = s.head_dim;
    const int64_t rows = n * s.n_head_kv;
    const int64_t max_len = s.window > 0 ? std::min(s.window, pos0 + n) : pos0 + n;
    const int64_t want = 4 * (int64_t)pool.size();
    const int64_t max_chunks = std::max<int64_t>(1, (max_len + 127) / 128);
    int64_t chunks = rows >= want ? 1 : std::min((want + rows - 1) / rows, max_chunks);
    // Equal jobs split over the threads evenly only if their count is a multiple of the threads'
    // (SmolLM2's 3 KV heads in 3 spans each were 4 jobs on one thread and 5 on the other).
    while (chunks > 1 && chunks < max_chunks && rows * chunks % pool.size() != 0) ++chunks;
    const int64_t span_max = (max_len + chunks - 1) / chunks;
    const int64_t jobs = rows * chunks;
    const size_t k_head = row_bytes(kv.type_k(), hd), v_head = row_bytes(kv.type_v(), hd);
    // Partial results of every job when spans are merged: [jobs][group] m, l and [jobs][group][hd] acc.
    std::vector<float> part_m, part_l, part_acc;
    if (chunks > 1) {
        part_m.resize((size_t)(jobs * group));
        part_l.resize((size_t)(jobs * group));
        part_acc.resize((size_t)(jobs * group * hd));
    }
    const AttnKvqSpanFn attend = kt.ops.attn_kvq_span;
    pool.run([&](int ith, int nth) {
        std::vector<float> scratch(attn_kvq_span_scratch_floats(group, hd, span_max));
        std::vector<float> acc((size_t)(group * hd)), m((size_t)group), l((size_t)group), tmp((size_t)hd);
        int64_t j0, j1;
        ThreadPool::split(jobs, ith, nth, &j0, &j1);
        for (int64_t j = j0; j < j1; ++j) {
            const int64_t c = j % chunks, r = j / chunks, t = r / s.n_head_kv, hk = r % s.n_head_kv;
            const int64_t last = pos0 + t;
            const int64_t first = s.window > 0 && last - s.window + 1 > 0 ? last - s.window + 1 : 0;
            const int64_t qfirst = std::max(first, centered.n_sink());  // the quantized rows
            const int64_t per = std::max<int64_t>(0, (last - qfirst + chunks) / chunks);
            const int64_t f = qfirst + c * per, e = std::min(last, f + per - 1);
            float* jm = chunks > 1 ? part_m.data() + j * group : m.data();
            float* jl = chunks > 1 ? part_l.data() + j * group : l.data();
            float* jacc = chunks > 1 ? part_acc.data() + j * group * hd : acc.data();
            const int64_t q_off = (t * s.n_head + hk * group) * hd;  // heads hk*group .. hk*group + group - 1
            if (f > e) {  // an empty span (a short row split as finely as the longest)
                std::fill(jm, jm + group, -INFINITY);
                std::fill(jl, jl + group, 0.0f);
                std::fill(jacc, jacc + group * hd, 0.0f);
            } else {
                const AttnKvqSpan a{q + q_off, group, kv.k_data(layer) + hk * k_head, kv.v_data(layer) + hk * v_head,
                                    kv.k_row_bytes(), kv.v_row_bytes(), f, e, hd, s.scale, kv.type_k(), kv.type_v(),
                                    scratch.data()};
                attend(a, jacc, jm, jl);
            }
            if (centered.active())
                for (int64_t g = 0; g < group; ++g) {
                    const int64_t h = hk * group + g;
                    centered.correct_partial(t, h, jm + g, jl[g], jacc + g * hd);
                    if (c == 0) centered.merge_sink_rows(t, h, first, last, jm + g, jl + g, jacc + g * hd, tmp.data());
                }
            else if (f > e)
                continue;
            if (chunks == 1)
                for (int64_t g = 0; g < group; ++g) {
                    const float ms = s.sinks ? attention_sink_step(s.sinks[hk * group + g], jm[g], jl[g]) : 1.0f;
                    for (int64_t d = 0; d < hd; ++d) out[q_off + g * hd + d] = jacc[g * hd + d] * ms / jl[g];
                }
        }
    });
    if (chunks == 1) return;
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t g = 0; g < group; ++g) {
            float M = -INFINITY;
            for (int64_t c = 0; c < chunks; ++c) M = std::max(M, part_m[(r * chunks + c) * group + g]);
            float L = 0.0f;
            float* o = out + ((r / s.n_head_kv) * s.n_head + (r % s.n_head_kv) * group + g) * hd;
            std::fill(o, o + hd, 0.0f);
            for (int64_t c = 0; c < chunks; ++c) {
                const int64_t jg = (r * chunks + c) * group + g;
                if (part_l[jg] == 0.0f) continue;
                const float w = std::exp(part_m[jg] - M);
                L += w * part_l[jg];
                const float* pa = part_acc.data() + jg * hd;
                for (int64_t d = 0; d < hd; ++d) o[d] += w * pa[d];
            }
            if (s.sinks) {
                const float ms = attention_sink_step(s.sinks[(r % s.n_head_kv) * group + g], M, L);
                for (int64_t d = 0; d < hd; ++d) o[d] *= ms;
            }
            for (int64_t d = 0; d < hd; ++d) o[d] /= L;
        }
}

}  // namespace

void attention_cached(ThreadPool& pool, const KernelTable& kt, const float* q, int64_t n, int64_t pos0,
                      const KvCache& kv, int64_t layer, const AttentionShape& s, float* out, BatchOrder order) {
    const bool f16_rows = kv.type_k() == TYPE_F16 && kv.type_v() == TYPE_F16 && n < kAttnTileMinRows;
    if (order == BatchOrder::per_row && n > 1 && !f16_rows) {
        // Row by row: how positions are split into spans over threads (and whether the tiled
        // kernel runs) depends on the batch, and so would the floats. (An F16 cache's short
        // batches already run the one-row kernel row by row.) A decode batch has few rows.
        const int64_t stride = s.n_head * s.head_dim;
        for (int64_t t = 0; t < n; ++t) attention_cached(pool, kt, q + t * stride, 1, pos0 + t, kv, layer, s, out + t * stride);
        return;
    }
    // A centered K holds (k - mu) / s past its sink rows: the scores need q * s (plus q . mu,
    // which `centered` adds to the partial results). kv/centered_attention.h
    CenteredAttention centered(kv, layer, q, n, s.n_head, s.head_dim, s.scale);
    // A rotated K holds R k: the scores need R q (kv/hadamard.h). [n][n_head][head_dim]
    std::vector<float> q_rotated;
    if (kv.k_rotated()) {
        float* qr = centered.query();
        if (!centered.active()) {
            q_rotated.assign(q, q + n * s.n_head * s.head_dim);
            qr = q_rotated.data();
        }
        hadamard_rotate(qr, n * s.n_head, s.head_dim);
        q = qr;
    } else if (centered.active()) {
        q = centered.query();
    }
    if (kv.type_k() == TYPE_F16 && kv.type_v() == TYPE_F16) {
        attention_f16(pool, kt, q, n, pos0, reinterpret_cast<const uint16_t*>(kv.k_data(layer)),
                      reinterpret_cast<const uint16_t*>(kv.v_data(layer)), s, out);
        return;
    }
    if (kt.ops.attn_kvq_span && attn_kvq_span_supports(kv.type_k(), kv.type_v()) && s.head_dim % 32 == 0) {
        attention_spans(pool, kt, q, n, pos0, kv, layer, s, centered, out);
        return;
    }
    // ggml's one-row kernel with a quantized K and/or V. (With an F16 V ggml accumulates in F16;
    // here every non-F16-pair goes through the F32 accumulator: F16 V rows are converted.)
    const TypeKernels& tk = kt.types[kv.type_k()];
    const AttnKvTypes types{kt.types[tk.vec_dot_type].from_float, tk.vec_dot, kt.types[kv.type_v()].to_float,
                            kv.type_v()};
    if (!types.q_to_k || !types.kq_dot || !types.v_to_float || !kt.ops.attn_kvq_row)
        throw Error(std::string("no attention kernels for KV types ") + kv_type_name(kv.type_k()) + "/" +
                    kv_type_name(kv.type_v()));
    if (s.head_dim % type_info(kv.type_k()).block_size || s.head_dim % type_info(kv.type_v()).block_size)
        throw Error("a quantized KV cache needs head_dim to be a multiple of its block size");
    const size_t k_head = row_bytes(kv.type_k(), s.head_dim), v_head = row_bytes(kv.type_v(), s.head_dim);
    const uint8_t* k = kv.k_data(layer);
    const uint8_t* v = kv.v_data(layer);
    const int64_t group = s.n_head / s.n_head_kv;
    const int64_t jobs = n * s.n_head;
    const AttnKvqRowFn attend = kt.ops.attn_kvq_row;
    pool.run([&](int ith, int nth) {
        std::vector<float> scratch(3 * s.head_dim), tmp((size_t)s.head_dim);
        int64_t j0, j1;
        ThreadPool::split(jobs, ith, nth, &j0, &j1);
        for (int64_t j = j0; j < j1; ++j) {
            const int64_t t = j / s.n_head, h = j % s.n_head, hk = h / group;
            const int64_t last = pos0 + t;
            const int64_t first = s.window > 0 && last - s.window + 1 > 0 ? last - s.window + 1 : 0;
            const int64_t off = (t * s.n_head + h) * s.head_dim;
            if (!centered.active() && !s.sinks) {
                attend(q + off, k + hk * k_head, v + hk * v_head, kv.k_row_bytes(), kv.v_row_bytes(), first, last,
                       s.head_dim, s.scale, types, scratch.data(), out + off, nullptr);
                continue;
            }
            // The quantized rows' partial result, corrected and merged with the sink rows' (of a
            // centered K), then the head's attention sink added (gpt-oss), then normalized.
            float* o = out + off;
            float ms[2] = {-INFINITY, 0.0f};  // m, l
            const int64_t qfirst = centered.active() ? std::max(first, centered.n_sink()) : first;
            if (qfirst <= last) {
                attend(q + off, k + hk * k_head, v + hk * v_head, kv.k_row_bytes(), kv.v_row_bytes(), qfirst, last,
                       s.head_dim, s.scale, types, scratch.data(), o, ms);
                if (centered.active()) centered.correct_partial(t, h, &ms[0], ms[1], o);
            } else {
                std::fill(o, o + s.head_dim, 0.0f);
            }
            if (centered.active()) centered.merge_sink_rows(t, h, first, last, &ms[0], &ms[1], o, tmp.data());
            if (s.sinks) {
                const float scale_acc = attention_sink_step(s.sinks[h], ms[0], ms[1]);
                const float inv = ms[1] == 0.0f ? 0.0f : 1.0f / ms[1];  // ggml: VKQ * (1 / S)
                for (int64_t d = 0; d < s.head_dim; ++d) o[d] = o[d] * scale_acc * inv;
                continue;
            }
            for (int64_t d = 0; d < s.head_dim; ++d) o[d] /= ms[1];
        }
    });
}

}  // namespace ei
