// The CPU's mixture-of-experts feed-forward (CpuLayerOps::moe_ffn), in the order llama.cpp's CPU
// backend runs build_moe_ffn with softmax gating:
//
//   logits = Wgate_inp h (+ b)                 one matmul over the batch (ggml_mul_mat), ggml_add
//   p = softmax(logits), row by row            ggml_soft_max: the max, exp(x - max) summed in
//                                              double (kt.ops.soft_max), times (float)(1 / sum)
//   sel = the n_used largest p, largest first  ggml_argsort_top_k (a descending sort, cut)
//   w = p[sel]; w /= max(sum(w), 2^-14)        ggml_sum_rows (summed in double), ggml_clamp,
//                                              ggml_div (norm_weights only)
//   for each expert e, the rows routed to it:  ggml_mul_mat_id, one selection of a row at a time
//     a = glu(Wgate[e] h (+ bg[e]), Wup[e] h (+ bu[e]))      ggml_add_id for each bias
//     y = Wdown[e] a (+ bd[e])
//   out = y_1 w_1 + y_2 w_2 + ...              ggml_mul, then ggml_add in selection order
//
// gpt-oss (ExpertShape::softmax_weight, llama.cpp's SOFTMAX_WEIGHT gating): sel = the n_used
// largest logits, w = ggml_soft_max of logits[sel] (no renormalization); and its glu is
// swiglu_oai (ggml_swiglu_oai, cpu_blocks.h).
// LFM2-MoE (ExpertShape::sigmoid, llama.cpp's SIGMOID gating): p = 1 / (1 + expf(-logit))
// (ggml_sigmoid); sel = the n_used largest p + b (b = ffn_exp_probs_b, ggml_add), w = p[sel].
//
// Rows are grouped by expert, so each expert's weights stream from memory once per batch rather
// than once per token (a decode batch of B tokens reads at most B * n_used experts, fewer where
// tokens share them). Every expert matmul runs in BatchOrder::per_row: each row's floats are a
// one-row matmul's, which is what ggml_mul_mat_id computes whatever the batch (one vec_dot per
// output, or for the types ggml repacks its GEMV row by row); so a token gets the same floats
// whichever other tokens share its experts, and a decode batch gives what single steps give.
//
// Activation statistics (`edgeinfer imatrix`) are summed per expert, the rows of each expert in
// llama-imatrix's order (by selection slot, then by token).
//
// Where this differs from llama.cpp: probabilities that tie exactly are ordered by expert index
// here, by std::sort's unspecified order there.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "common/error.h"
#include "cpu/repack.h"
#include "layers/cpu_blocks.h"
#include "layers/cpu_layer_ops.h"

namespace ei {

namespace {

// y[r] += bias for each of the rows, on the calling thread.
void add_bias_rows(float* y, const float* bias, int64_t rows, int64_t width) {
    for (int64_t r = 0; r < rows; ++r) add_inplace(y + r * width, bias, width);
}

// ggml_soft_max of one row of n values in place: the max, exp(x - max) summed in double, each
// times (float)(1 / sum).
void soft_max_row(const KernelTable& kt, float* p, int64_t n) {
    float max = -INFINITY;
    for (int64_t i = 0; i < n; ++i) max = std::max(max, p[i]);
    const double sum = kt.ops.soft_max(n, p, max, p);
    const float inv = (float)(1.0 / sum);
    for (int64_t i = 0; i < n; ++i) p[i] *= inv;
}

// One row's routing: the router logits `p` [n_expert] become probabilities in place (not with
// softmax_weight: they stay logits); sel and w get the n_used chosen experts and their weights
// (`bias`: the selection bias or null; `key`, `order`: scratch).
void route_row(const KernelTable& kt, float* p, int64_t n_expert, int64_t n_used, const ExpertShape& e,
               const float* bias, int32_t* sel, float* w, std::vector<float>& key, std::vector<int32_t>& order) {
    if (e.sigmoid) {
        for (int64_t i = 0; i < n_expert; ++i) p[i] = 1.0f / (1.0f + std::exp(-p[i]));
    } else if (!e.softmax_weight) {
        soft_max_row(kt, p, n_expert);
    }
    const float* by = p;
    if (bias) {
        key.resize((size_t)n_expert);
        for (int64_t i = 0; i < n_expert; ++i) key[i] = p[i] + bias[i];
        by = key.data();
    }
    // A partial sort by probability, ties by index: the first n_used of a descending order.
    order.resize((size_t)n_expert);
    for (int64_t i = 0; i < n_expert; ++i) order[i] = (int32_t)i;
    std::partial_sort(order.begin(), order.begin() + n_used, order.end(),
                      [by](int32_t a, int32_t b) { return by[a] > by[b] || (by[a] == by[b] && a < b); });
    for (int64_t j = 0; j < n_used; ++j) {
        sel[j] = order[j];
        w[j] = p[order[j]];
    }
    if (e.softmax_weight) soft_max_row(kt, w, n_used);
    if (!e.norm_weights) return;
    double total = 0.0;
    for (int64_t j = 0; j < n_used; ++j) total += (double)w[j];
    const float denom = std::max((float)total, 6.103515625e-5f);  // the smallest normal F16
    for (int64_t j = 0; j < n_used; ++j) w[j] = w[j] / denom;
}

}  // namespace

void CpuLayerOps::record_expert_inputs(int64_t expert, int64_t r0, int64_t rows, int64_t n_used,
                                       std::initializer_list<const Tensor*> stacks, const float* x, int64_t width) {
    // The expert's rows are in token order; llama-imatrix adds them by slot, then by token.
    std::vector<int64_t>& order = moe_.stats_order;
    order.resize((size_t)rows);
    for (int64_t r = 0; r < rows; ++r) order[r] = r;
    const int64_t* routed = moe_.routed.data() + r0;
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return routed[a] % n_used < routed[b] % n_used; });
    for (const Tensor* stack : stacks)
        for (int64_t r : order) stats_->record_matrix(*stack, expert, x + r * width, 1);
}

void CpuLayerOps::expert_ffn(const ExpertRows& a, int64_t x, ThreadPool& pool, MatmulScratch& scratch,
                             ExpertBuffers& b) {
    const MoeScratch& s = moe_;
    const int64_t d = a.d, ff = a.ff, k = a.k, r0 = s.first[x], rows = s.first[x + 1] - r0;
    b.x.resize((size_t)(rows * d));
    b.gate.resize((size_t)(rows * ff));
    b.up.resize((size_t)(rows * ff));
    b.y.resize((size_t)(rows * d));
    for (int64_t r = 0; r < rows; ++r)
        std::memcpy(b.x.data() + r * d, a.h + (s.routed[r0 + r] / k) * d, sizeof(float) * d);
    const Tensor gate = stacked_matrix(a.L.ffn_gate_exps, x), up = stacked_matrix(a.L.ffn_up_exps, x);
    const Tensor down = stacked_matrix(a.L.ffn_down_exps, x);
    const Tensor* gate_up[] = {&gate, &up};
    float* const gate_up_out[] = {b.gate.data(), b.up.data()};
    if (stats_) record_expert_inputs(x, r0, rows, k, {&a.L.ffn_gate_exps, &a.L.ffn_up_exps}, b.x.data(), d);
    ei::matmul_same_input(pool, kt_, gate_up, gate_up_out, 2, b.x.data(), rows, scratch, BatchOrder::per_row);
    // (Serial from here on: this may run inside a task of pool_, which the ops' own splits use.)
    if (a.L.ffn_up_exps_b) add_bias_rows(b.up.data(), a.L.ffn_up_exps_b + x * ff, rows, ff);
    if (a.L.ffn_gate_exps_b) add_bias_rows(b.gate.data(), a.L.ffn_gate_exps_b + x * ff, rows, ff);
    for (int64_t r = 0; r < rows; ++r) {  // ggml's GLU runs row by row (its SIMD tail is per row)
        float* g = b.gate.data() + r * ff;
        const float* u = b.up.data() + r * ff;
        if (a.swiglu_oai) ei::swiglu_oai(g, u, g, ff);
        else glu_inline(a.gelu, g, u, g, ff);
    }
    if (stats_) record_expert_inputs(x, r0, rows, k, {&a.L.ffn_down_exps}, b.gate.data(), ff);
    ei::matmul(pool, kt_, down, b.gate.data(), rows, b.y.data(), scratch, BatchOrder::per_row);
    if (a.L.ffn_down_exps_b) add_bias_rows(b.y.data(), a.L.ffn_down_exps_b + x * d, rows, d);
    for (int64_t r = 0; r < rows; ++r)
        std::memcpy(moe_.expert_out.data() + s.routed[r0 + r] * d, b.y.data() + r * d, sizeof(float) * d);
}

void CpuLayerOps::moe_ffn(const CpuLayerWeights& L, const ExpertShape& e, bool gelu, const float* h, int64_t n,
                          float* out) {
    const int64_t d = L.ffn_gate_inp.cols(), E = e.n_expert, k = e.n_used, ff = e.n_ff;
    MoeScratch& s = moe_;
    s.probs.resize((size_t)(n * E));
    s.selected.resize((size_t)(n * k));
    s.weights.resize((size_t)(n * k));
    matmul(L.ffn_gate_inp, h, n, s.probs.data());  // [n][n_expert]
    if (L.ffn_gate_inp_b) add_rows(s.probs.data(), L.ffn_gate_inp_b, n, E);
    for (int64_t t = 0; t < n; ++t)
        route_row(kt_, s.probs.data() + t * E, E, k, e, L.ffn_exp_probs_b, s.selected.data() + t * k,
                  s.weights.data() + t * k, s.keys, s.order);

    // The selections grouped by expert (a counting sort, rows in order within an expert).
    s.first.assign((size_t)(E + 1), 0);
    for (int64_t i = 0; i < n * k; ++i) {
        const int32_t x = s.selected[i];
        if (x < 0 || x >= E) throw Error("moe_ffn: expert index out of range");
        ++s.first[x + 1];
    }
    int64_t most = 0;
    for (int64_t x = 0; x < E; ++x) {
        most = std::max(most, s.first[x + 1]);
        s.first[x + 1] += s.first[x];
    }
    s.routed.resize((size_t)(n * k));
    {
        std::vector<int64_t> next(s.first.begin(), s.first.end() - 1);
        for (int64_t i = 0; i < n * k; ++i) s.routed[next[s.selected[i]]++] = i;
    }

    s.expert_out.resize((size_t)(n * k * d));
    const ExpertRows rows_of{L, gelu, e.swiglu_oai, h, d, ff, k};
    std::vector<int64_t>& active = s.active;
    active.clear();
    for (int64_t x = 0; x < E; ++x)
        if (s.first[x + 1] > s.first[x]) active.push_back(x);
    if (!stats_ && most <= kSmallBatchMax && (int64_t)active.size() >= 2 && pool_.size() > 1) {
        // A decode step (or a few tokens): each expert's matmuls are too small to share among
        // the threads at a wait on the pool apiece, so the threads share the experts instead,
        // each running its experts' matmuls alone (every row's floats are the same either way:
        // per_row gives each output its own dot). One wait for the layer instead of three an expert.
        pool_.run([&](int task, int n_tasks) {
            thread_local ThreadPool alone(1);
            thread_local MatmulScratch scratch;
            thread_local ExpertBuffers buffers;
            for (size_t i = task; i < active.size(); i += n_tasks) expert_ffn(rows_of, active[i], alone, scratch, buffers);
        }, (int)std::min<int64_t>((int64_t)active.size(), pool_.size()));
    } else {
        for (int64_t x : active) expert_ffn(rows_of, x, pool_, scratch_, s.buffers);
    }

    for (int64_t t = 0; t < n; ++t) {
        float* o = out + t * d;
        const float* y = s.expert_out.data() + t * k * d;
        const float* w = s.weights.data() + t * k;
        for (int64_t i = 0; i < d; ++i) o[i] = y[i] * w[0];
        for (int64_t j = 1; j < k; ++j) {
            const float* yj = y + j * d;
            for (int64_t i = 0; i < d; ++i) {
                const float weighted = yj[i] * w[j];  // rounded before the add, as ggml_mul then ggml_add
                o[i] += weighted;
            }
        }
    }
}

}  // namespace ei
