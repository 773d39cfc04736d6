#include "gpu/device_layer_ops.h"

#include "common/error.h"
#include "layers/params.h"
#include "quant/types.h"

namespace ei::cl {

void RopeTables::add(const RopeParams& rope) {
    for (const Entry& e : entries_)
        if (same_rotation(e.rope, rope)) return;
    entries_.push_back(Entry{rope, dev_.alloc((size_t)(n_batch_ * rope.n_rot) * sizeof(float), "a rope table")});
}

void RopeTables::write(int64_t n, int64_t pos0) {
    std::vector<float> cs;
    for (const Entry& e : entries_) {
        cs.resize((size_t)(n * e.rope.n_rot));
        for (int64_t t = 0; t < n; ++t) rope_cos_sin(e.rope, (int32_t)(pos0 + t), cs.data() + t * e.rope.n_rot);
        dev_.write(e.cs, cs.data(), cs.size() * sizeof(float));
    }
}

const Buffer& RopeTables::at(const RopeParams& rope) const {
    for (const Entry& e : entries_)
        if (same_rotation(e.rope, rope)) return e.cs;
    throw Error("no rope table for a layer's rope (the offload did not see that layer)");
}

DeviceLayerOps::Buf DeviceLayerOps::rows(Buf b, int64_t r0, int64_t width) {
    return FloatsAt(*b.buf, b.first + r0 * width);
}

const Buffer& DeviceLayerOps::whole(Buf b) {
    if (b.first != 0) throw Error("a device op that takes whole buffers was given rows from an offset");
    return *b.buf;
}

void DeviceLayerOps::rms_norm(Buf x, const Buffer& w, Buf out, int64_t rows, int64_t width) {
    ops_.rms_norm(x, w, whole(out), rows, width, eps_);
}

void DeviceLayerOps::matmul(const DeviceMat& W, Buf x, int64_t n, Buf y) {
    ops_.matmul(W.type, W.w, W.rows, W.cols, whole(x), n, whole(y));
}

void DeviceLayerOps::matmul_same_input(const DeviceMat* const* W, const Buf* y, int count, Buf x, int64_t n) {
    for (int i = 0; i < count; ++i) matmul(*W[i], x, n, y[i]);
}

void DeviceLayerOps::matmul_split(const DeviceMat& W, Buf x, int64_t n, Buf a, int64_t wa, Buf b, int64_t wb, Buf c,
                                  int64_t wc) {
    const int64_t stride = wa + wb + wc;
    ops_.matmul(W.type, W.w, W.rows, W.cols, whole(x), n, fused_);
    ops_.take_columns(fused_, whole(a), n, stride, 0, wa);
    ops_.take_columns(fused_, whole(b), n, stride, wa, wb);
    ops_.take_columns(fused_, whole(c), n, stride, wa + wb, wc);
}

void DeviceLayerOps::matmul_glu_fused(const DeviceMat& W, Buf x, int64_t n, int64_t ff, bool gelu, Buf gate, Buf up) {
    ops_.matmul(W.type, W.w, W.rows, W.cols, whole(x), n, fused_);
    ops_.take_columns(fused_, whole(gate), n, 2 * ff, 0, ff);
    ops_.take_columns(fused_, whole(up), n, 2 * ff, ff, ff);
    glu(gelu, gate, up, gate, n * ff);
}

void DeviceLayerOps::add_rows(Buf y, const Buffer& bias, int64_t rows, int64_t width) {
    ops_.add_rows(whole(y), bias, rows, width);
}

void DeviceLayerOps::rope(Buf x, int64_t n, int64_t heads, int64_t head_dim, int64_t /*pos0*/, const LayerConfig& c) {
    // The tables were written for this batch's positions before its layers ran (RopeTables::write).
    ops_.rope(whole(x), rope_.at(c.rope), n, RopeShape{heads, head_dim, c.rope.n_rot, c.rope_neox});
}

void DeviceLayerOps::scale(Buf x, float s, int64_t count) { ops_.scale(whole(x), s, count); }

void DeviceLayerOps::kv_store(int il, int64_t pos0, int64_t n, Buf k, Buf v) {
    kv_.store(slot_of_.at(il), whole(k), whole(v), pos0, n);
}

void DeviceLayerOps::attention(int il, Buf q, int64_t m, int64_t pos0, const AttentionShape& s, const Buffer& sinks,
                               Buf out) {
    const AttentionDims dims{s.n_head, s.n_head_kv, s.head_dim, s.scale, s.window, present(sinks) ? &sinks : nullptr};
    kv_.attend(slot_of_.at(il), q, whole(out), m, pos0, dims);
}

void DeviceLayerOps::glu(bool gelu, Buf gate, Buf up, Buf out, int64_t count) {
    if (gelu) ops_.geglu(whole(gate), whole(up), whole(out), count);
    else ops_.swiglu(whole(gate), whole(up), whole(out), count);
}

void DeviceLayerOps::add(Buf y, Buf x, int64_t count) { ops_.add(y, x, count); }

MoeBuffers::MoeBuffers(Device& dev, const LayerShapes& s, int64_t n_batch) {
    const ExpertShape& e = s.experts;
    const int64_t slots = n_batch * e.n_used;
    auto floats = [&](int64_t count, const char* what) { return dev.alloc((size_t)count * sizeof(float), what); };
    logits = floats(n_batch * e.n_expert, "the router logits");
    selected = dev.alloc((size_t)slots * sizeof(int32_t), "the selected experts");
    weights = floats(slots, "the experts' weights");
    gate = floats(slots * e.n_ff, "the experts' gate projections");
    up = floats(slots * e.n_ff, "the experts' up projections");
    y = floats(slots * s.n_embd, "the experts' outputs");
}

void DeviceLayerOps::moe_ffn(const DeviceLayerWeights& L, const ExpertShape& e, bool gelu, Buf h, int64_t n, Buf out) {
    if (!moe_) throw Error("a mixture-of-experts layer on the device, but the offload has no scratch for it");
    const MoeBuffers& m = *moe_;
    const DeviceMat& router = L.ffn_gate_inp;
    const int64_t d = router.cols, E = e.n_expert, k = e.n_used, ff = e.n_ff, slots = n * k;
    // The router's last bits pick the experts: an F32 router (what files have: llama-quantize
    // and ours keep it) takes the CPU's vec_dot order, not the float matmul's (ops.h).
    if (router.type == TYPE_F32) ops_.router_logits(router.w, whole(h), n, d, E, m.logits);
    else matmul(router, h, n, m.logits);
    if (present(L.ffn_gate_inp_b)) ops_.add_rows(m.logits, L.ffn_gate_inp_b, n, E);
    ops_.moe_route(m.logits, m.selected, m.weights, n, RouteShape{E, k, e.softmax_weight, e.norm_weights});

    auto expert_matmul = [&](const DeviceMat& W, const Buffer& x, int64_t x_rows, const Buffer& y) {
        ops_.matmul_id(W.type, W.w, W.rows, W.cols, W.matrices, x, x_rows, m.selected, slots, y);
    };
    expert_matmul(L.ffn_gate_exps, whole(h), n, m.gate);
    expert_matmul(L.ffn_up_exps, whole(h), n, m.up);
    if (present(L.ffn_up_exps_b)) ops_.add_rows_id(m.up, L.ffn_up_exps_b, m.selected, slots, ff, E);
    if (present(L.ffn_gate_exps_b)) ops_.add_rows_id(m.gate, L.ffn_gate_exps_b, m.selected, slots, ff, E);
    // The CPU's GLU runs an expert's rows one by one, its AVX2 SwiGLU 8 values at a time and a
    // row's last n_ff % 8 through libm's exp; the device's SwiGLU is the 8-wide form for every
    // value, which is the CPU's when n_ff_exp is a multiple of 8 (every released model's).
    if (e.swiglu_oai) ops_.swiglu_oai(m.gate, m.up, m.gate, slots * ff);
    else glu(gelu, m.gate, m.up, m.gate, slots * ff);
    expert_matmul(L.ffn_down_exps, m.gate, slots, m.y);
    if (present(L.ffn_down_exps_b)) ops_.add_rows_id(m.y, L.ffn_down_exps_b, m.selected, slots, d, E);
    ops_.moe_weighted_sum(m.y, m.weights, whole(out), n, k, d);
}

void DeviceLayerOps::short_conv(int il, Buf bcx, int64_t n, int64_t d, int64_t pos0, const Buffer& kernel,
                                int64_t l_cache, Buf y) {
    // d and l_cache are the state's shape, fixed when it was allocated.
    if (d != conv_.n_embd() || l_cache != conv_.l_cache())
        throw Error("layer " + std::to_string(il) + ": a convolution of another shape than its device state");
    conv_.run(il, whole(bcx), kernel, whole(y), n, pos0);
}

}  // namespace ei::cl
