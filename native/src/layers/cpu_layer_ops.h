// The CPU backend of the layer written once (layers/decoder_layer.h): the ops over float rows in
// host memory, weights as mapped (or repacked) tensors, the KV cache of the Context.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "common/thread_pool.h"
#include "cpu/kernels.h"
#include "engine/activation_stats.h"
#include "cpu/matmul.h"
#include "kv/kv_cache.h"
#include "layers/decoder_layer.h"
#include "cpu/tensor.h"

namespace ei {

using CpuLayerWeights = LayerWeights<Tensor, const float*>;

// Rows [row0, row0 + n) of a batch of several sequences: one sequence's tokens at positions
// pos0 .. pos0 + n - 1 of its own cache.
struct SequenceRun {
    KvCache* kv;
    int64_t row0, n, pos0;
};

class CpuLayerOps {
public:
    using Buf = float*;
    using Mat = Tensor;
    using Weights = CpuLayerWeights;

    // fused: scratch of at least [n][max(q_width + 2 kv_width, 2 n_ff)] floats for fused projections.
    // order: how the rows of this batch are computed (cpu/batch_order.h).
    CpuLayerOps(ThreadPool& pool, const KernelTable& kt, KvCache& kv, MatmulScratch& scratch, float norm_eps,
                float* fused, BatchOrder order)
        : pool_(pool), kt_(kt), kv_(kv), scratch_(scratch), eps_(norm_eps), fused_(fused), order_(order) {}

    // A batch of several sequences (runs cover every row, in order): positions, cached rows and
    // attention per run, each in its sequence's cache; the layer's pos0 and kv are then unused.
    void set_sequence_runs(const SequenceRun* runs, size_t n_runs) { runs_ = runs, n_runs_ = n_runs; }
    // Every matmul's input is added to `stats` (nullptr: none), keyed by its weight.
    void set_activation_stats(ActivationStats* stats) { stats_ = stats; }

    static bool present(const Tensor& t) { return t.present(); }
    static bool present(const float* v) { return v != nullptr; }
    static float* rows(float* b, int64_t r0, int64_t width) { return b + r0 * width; }

    void rms_norm(const float* x, const float* w, float* out, int64_t rows, int64_t width);
    void matmul(const Tensor& W, const float* x, int64_t n, float* y);
    // y[i] = W[i] x for the same x (cpu/matmul.h, matmul_same_input).
    void matmul_same_input(const Tensor* const* W, float* const* y, int count, const float* x, int64_t n);
    // One matmul with the fused [a | b | c] weight, its columns taken apart into a, b, c.
    void matmul_split(const Tensor& W, const float* x, int64_t n, float* a, int64_t wa, float* b, int64_t wb,
                      float* c, int64_t wc);
    // gate[n][ff] = glu of the fused [gate | up] projection, row by row (ggml's per-row op);
    // `up` is scratch another backend may need (unused here).
    void matmul_glu_fused(const Tensor& W, const float* x, int64_t n, int64_t ff, bool gelu, float* gate, float* up);
    void add_rows(float* y, const float* bias, int64_t rows, int64_t width);
    void rope(float* x, int64_t n, int64_t heads, int64_t head_dim, int64_t pos0, const LayerConfig& c);
    void scale(float* x, float s, int64_t count);
    void kv_store(int il, int64_t pos0, int64_t n, const float* k, const float* v);
    // sinks: [n_head] attention-sink logits, or nullptr (layers/params.h, AttentionShape).
    void attention(int il, const float* q, int64_t m, int64_t pos0, const AttentionShape& s, const float* sinks,
                   float* out);
    void glu(bool gelu, const float* gate, const float* up, float* out, int64_t count);
    void add(float* y, const float* x, int64_t count);
    // The mixture-of-experts feed-forward (layers/decoder_layer.h, ExpertShape) of n rows of h
    // into out [n][n_embd], in llama.cpp's order (layers/cpu_moe.cpp).
    void moe_ffn(const CpuLayerWeights& L, const ExpertShape& e, bool gelu, const float* h, int64_t n, float* out);
    // LFM2's gated short convolution (layers/shortconv_layer.h) of n rows of bcx [n][3 n_embd]
    // (B, C, x) into y [n][n_embd], over and into the layer's recurrent state in each sequence's
    // cache (layers/cpu_shortconv.cpp).
    void short_conv(int il, const float* bcx, int64_t n, int64_t d, int64_t pos0, const float* kernel, int64_t l_cache,
                    float* y);

private:
    // fn(r0, r1) over [0, rows) in contiguous parts on the pool's threads, or inline for fewer
    // than kParallelMinRows rows: a decode step's one row is cheaper than waking the pool. Every
    // op split this way computes each row (each element) alone, so the split changes no bits.
    static constexpr int64_t kParallelMinRows = 16;
    template <class Fn>
    void by_rows(int64_t rows, Fn&& fn);
    // by_rows over `count` elements in units of kElementUnit (a multiple of every kernel's vector
    // width, so each part's vector loop groups the elements as the whole array's would and a
    // ragged tail stays in the last part).
    static constexpr int64_t kElementUnit = 64;
    template <class Fn>
    void by_elements(int64_t count, Fn&& fn);
    // out = glu(gate, up) over count values on the calling thread (GELU or SiLU gate).
    void glu_inline(bool gelu, const float* gate, const float* up, float* out, int64_t count) const;

    // One expert's rows: [r][n_embd] inputs, [r][n_ff_exp] gate and up, [r][n_embd] outputs.
    struct ExpertBuffers {
        std::vector<float> x, gate, up, y;
    };
    // moe_ffn's buffers, grown on demand.
    struct MoeScratch {
        std::vector<float> probs;       // [n][n_expert] router logits, then probabilities
        std::vector<int32_t> selected;  // [n][n_used] experts of each row, highest weight first
        std::vector<int32_t> order;     // [n_expert] one row's experts being sorted
        std::vector<float> keys;        // [n_expert] one row's choice keys (p + the selection bias)
        std::vector<float> weights;     // [n][n_used] their weights
        std::vector<int64_t> first;     // [n_expert + 1] where each expert's routed rows start in `routed`
        std::vector<int64_t> routed;    // [n * n_used] (row t, slot j) as t * n_used + j, by expert
        std::vector<int64_t> active;    // the experts some row is routed to
        std::vector<float> expert_out;  // [n][n_used][n_embd] each selection's expert output
        std::vector<int64_t> stats_order;  // one expert's rows in llama-imatrix's order
        ExpertBuffers buffers;          // the serial path's
    };
    // What expert_ffn reads besides moe_: the layer, its input h [n][d], the widths.
    struct ExpertRows {
        const CpuLayerWeights& L;
        bool gelu, swiglu_oai;
        const float* h;
        int64_t d, ff, k;
    };
    // Expert x's feed-forward over the rows routed to it: gathered from h, its matmuls on `pool`,
    // the outputs scattered into moe_.expert_out.
    void expert_ffn(const ExpertRows& a, int64_t x, ThreadPool& pool, MatmulScratch& scratch, ExpertBuffers& b);
    // Adds `rows` rows of x [rows][width] (expert `expert`'s inputs, its routed entries r0..) to
    // the activation statistics of each stack in `stacks`.
    void record_expert_inputs(int64_t expert, int64_t r0, int64_t rows, int64_t n_used,
                              std::initializer_list<const Tensor*> stacks, const float* x, int64_t width);

    ThreadPool& pool_;
    const KernelTable& kt_;
    KvCache& kv_;
    MatmulScratch& scratch_;
    float eps_;
    float* fused_;
    BatchOrder order_;
    const SequenceRun* runs_ = nullptr;
    size_t n_runs_ = 0;
    ActivationStats* stats_ = nullptr;
    std::vector<int32_t> pos_;
    MoeScratch moe_;
    std::vector<float> conv_window_;  // [l_cache - 1 + n] one channel's state and new B*x values
};

}  // namespace ei
