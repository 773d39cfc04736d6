// The device ops an offloaded layer is made of, over device buffers (float32 unless noted).
// Each enqueues kernels on the device's in-order queue and returns without waiting; a read of a
// result (Device::read) waits for everything before it. Kernels are compiled at first use, per
// program, through the ProgramCache (matmul: one program per weight type, so only the types a
// model has are compiled).
#pragma once
#include <cstdint>
#include <map>
#include <string>

#include "gpu/program_cache.h"
#include "gpu/runtime.h"

namespace ei::cl {

// The weight types matmul takes (listed in ops.cpp only; Python asks _core.opencl_matmul_types()).
// Quantized ones multiply quantized activations in the CPU's order (kernels/vec_dot*.cl).
bool matmul_supports(uint32_t type);
// The activation types the device quantizes to (Q8_0, Q8_1, Q8_K): the vec_dot types of the
// quantized weight types above.
bool quantize_supports(uint32_t type);
// The KV cache types the device stores and attends over (F16, Q8_0, Q4_0).
bool kv_supports(uint32_t type);

// Floats of a device buffer from float `first` on: how a layer addresses rows r0.. of its
// activations without copying them (decoder_layer's rows: the last layer of a batch whose first
// logits are not wanted goes on with the wanted rows only). A Buffer converts to its start.
struct FloatsAt {
    const Buffer* buf;
    int64_t first = 0;
    FloatsAt(const Buffer& b, int64_t first_float = 0) : buf(&b), first(first_float) {}
};

struct RopeShape {
    int64_t n_heads, head_dim, n_rot;
    bool neox;  // pairs (i, i + n_rot/2) rather than (2i, 2i + 1)
};

struct AttentionDims {
    int64_t n_head, n_head_kv, head_dim;
    float scale;
    int64_t window;  // > 0: each query sees only its last `window` positions
    const Buffer* sinks = nullptr;  // [n_head] attention-sink logits (gpt-oss, cpu/attn_sink.h), or none
};

// How a token picks its experts (layers/decoder_layer.h, ExpertShape).
struct RouteShape {
    int64_t n_expert, n_used;
    bool softmax_weight, norm_weights;
};

// A centered K cache's extra inputs to attention (kv/centered_k.h, kernels/attention.cl): the
// queries as roped, q_sink [n][n_head][head_dim] (the attention's q is then R(q * s)), bias
// [n][n_head] (attention_query makes both), the F16 sink rows [n_sink][n_head_kv * head_dim]
// of K and V, and centering: [3][n_head_kv * head_dim] floats, mu, s, nu.
struct SinkRows {
    FloatsAt q_sink;
    const Buffer& bias;
    const Buffer& sink_k;
    const Buffer& sink_v;
    const Buffer& centering;
    int64_t n_sink;
};

class DeviceOps {
public:
    DeviceOps(Device& dev, ProgramCache& programs) : dev_(dev), programs_(programs) {}

    // y[n][rows] = x[n][cols] . W^T; w holds `rows` rows of `type` (row_bytes(type, cols) each).
    // Quantized types first quantize x to the type's vec_dot type (quantize) into scratch the ops
    // own, then multiply block by block as the CPU's vec_dot does; F32/F16 multiply floats.
    void matmul(uint32_t type, const Buffer& w, int64_t rows, int64_t cols, const Buffer& x, int64_t n,
                const Buffer& y);
    // A mixture of experts' matmul: y[s][rows] = W[ids[s]] x[s / (n_slots / x_rows)] for the
    // n_slots rows of ids (int32 [n_slots], each < n_expert), w a stack of n_expert matrices of
    // `rows` rows, x [x_rows][cols] (x_rows divides n_slots: a token's row feeds its n_used
    // slots). Quantized types form each output as a one-row matmul does, the CPU's per-row order.
    void matmul_id(uint32_t type, const Buffer& w, int64_t rows, int64_t cols, int64_t n_expert, const Buffer& x,
                   int64_t x_rows, const Buffer& ids, int64_t n_slots, const Buffer& y);
    // out: [n] rows of row_bytes(type, cols) = x[n][cols] quantized to the activation type
    // `type` (quantize_supports), the CPU's from_float bytes.
    void quantize(uint32_t type, const Buffer& x, int64_t n, int64_t cols, const Buffer& out);
    // out[n][d] = rms_norm(x[n][d]) * w[d]; out may be x.
    void rms_norm(FloatsAt x, const Buffer& w, const Buffer& out, int64_t n, int64_t d, float eps);
    // x[n][n_heads][head_dim] rotated in place by cs: [n][n_rot] floats, each token's cos and
    // sin per pair as layers/params.h rope_cos_sin makes them.
    void rope(const Buffer& x, const Buffer& cs, int64_t n, const RopeShape& s);
    // Rows src[n][width] into a cache of `type` ([n_ctx] rows of row_bytes(type, width)) at
    // positions pos0 .. pos0 + n - 1.
    void kv_store(uint32_t type, const Buffer& src, const Buffer& cache, int64_t pos0, int64_t n, int64_t width);
    // The rows a rotated / centered K cache quantizes (kernels/kv_centered.cl): dst[n][width] =
    // src rows row0 .. row0 + n - 1, each head vector of head_dim values centered ((k - mu) / s,
    // centering: [3][width] floats mu, s, nu) if `centered` and then rotated (kv/hadamard.h) if
    // `rotated`. centering is unused unless centered.
    void kv_encode_k(const Buffer& src, const Buffer& dst, const Buffer& centering, int64_t row0, int64_t n,
                     int64_t width, int64_t head_dim, bool centered, bool rotated);
    // dst[n][width] = src rows row0 .. row0 + n - 1 minus nu (a centered cache's V rows).
    void kv_center_v(const Buffer& src, const Buffer& dst, const Buffer& centering, int64_t row0, int64_t n,
                     int64_t width);
    // The queries of a rotated / centered K cache: qr[n][n_head][head_dim] = R(q * s) (* s if
    // centered, R if rotated) and bias[n][n_head] = a.scale * (q . mu) (0 unless centered).
    void attention_query(FloatsAt q, const Buffer& qr, const Buffer& bias, const Buffer& centering, int64_t n,
                         const AttentionDims& a, bool centered, bool rotated);
    // out[n][n_head][head_dim] = causal attention of q (query t at position pos0 + t) over the
    // caches k (of type_k), v (of type_v), rows of n_head_kv * head_dim values up to pos0 + n;
    // with sink (a centered cache, quantized types only), positions below sink->n_sink are read
    // from its F16 rows and the others corrected by mu and nu (see SinkRows). a.sinks, where
    // given, join each head's softmax denominator (attention sinks, not a centered K's sink rows).
    void attention(uint32_t type_k, uint32_t type_v, FloatsAt q, const Buffer& k, const Buffer& v,
                   const Buffer& out, int64_t n, int64_t pos0, const AttentionDims& a,
                   const SinkRows* sink = nullptr);
    // out[i] = silu(gate[i]) * up[i] / gelu_tanh(gate[i]) * up[i], i < n; out may be gate.
    void swiglu(const Buffer& gate, const Buffer& up, const Buffer& out, int64_t n);
    void geglu(const Buffer& gate, const Buffer& up, const Buffer& out, int64_t n);
    // gpt-oss's clamped SwiGLU (layers/cpu_blocks.h swiglu_oai); out may be gate.
    void swiglu_oai(const Buffer& gate, const Buffer& up, const Buffer& out, int64_t n);
    // x[i] *= s, i < n.
    void scale(const Buffer& x, float s, int64_t n);
    // y[i] += x[i], i < n.
    void add(FloatsAt y, FloatsAt x, int64_t n);
    // y[t][i] += b[i] for n rows of `width` values.
    void add_rows(const Buffer& y, const Buffer& b, int64_t n, int64_t width);
    // y[s][i] += b[ids[s]][i] for n_slots rows of `width` values, b [n_expert][width] (an expert's bias).
    void add_rows_id(const Buffer& y, const Buffer& b, const Buffer& ids, int64_t n_slots, int64_t width,
                     int64_t n_expert);
    // The mixture-of-experts routing (kernels/moe.cl), the CPU's floats: y[n][n_expert] = the
    // F32 router W [n_expert][cols] times x[n][cols] in the CPU's order (router_logits), then
    // per token its n_used experts and their weights (route) from those logits (+ bias, in place).
    void router_logits(const Buffer& w, const Buffer& x, int64_t n, int64_t cols, int64_t n_expert, const Buffer& y);
    void moe_route(const Buffer& logits, const Buffer& selected, const Buffer& weights, int64_t n, const RouteShape& r);
    // out[t] = sum_j y[t][j] w[t][j] in j order, y [n][n_used][d], w [n][n_used].
    void moe_weighted_sum(const Buffer& y, const Buffer& w, const Buffer& out, int64_t n, int64_t n_used, int64_t d);
    // dst[n][width] = columns c0 .. c0 + width - 1 of src[n][stride].
    void take_columns(const Buffer& src, const Buffer& dst, int64_t n, int64_t stride, int64_t c0, int64_t width);
    // y[n][d] = LFM2's gated short convolution of bcx [n][3 d] (B, C, x) with taps [d][l], over
    // and into state [d][l - 1] (zeros before these rows when `fresh`): kernels/shortconv.cl.
    void short_conv(const Buffer& bcx, const Buffer& taps, const Buffer& state, const Buffer& y, int64_t n, int64_t d,
                    int64_t l, bool fresh);

private:
    Kernel& kernel(const std::string& program, const char* name, const std::string& options = "");
    // The element-wise GLU kernel `name` (elementwise.cl) over n values.
    void glu(const char* name, const Buffer& gate, const Buffer& up, const Buffer& out, int64_t n);
    // options plus the request for correctly rounded division and sqrt, where the device has it.
    std::string with_exact_division(const std::string& options) const;
    // The weight type's program's kernel `name` (matmul.cl, built for the type).
    Kernel& matmul_kernel(uint32_t type, const char* name);
    // x quantized to the vec_dot type of weight type `type` in act_scratch_.
    const Buffer& quantized_activations(uint32_t type, const Buffer& x, int64_t n, int64_t cols);
    // act_scratch_, grown to at least `bytes`.
    const Buffer& act_scratch(size_t bytes);

    Device& dev_;
    ProgramCache& programs_;
    std::map<std::string, Kernel> kernels_;  // by "program/kernel"
    Buffer act_scratch_;  // matmul's quantized activations: [n] rows of the vec_dot type
};

}  // namespace ei::cl
