// The OpenCL backend of the layer written once (layers/decoder_layer.h): its ops over device
// buffers, weights copied to the device in the file's blocks, the device KV cache. Every op
// computes the CPU's floats in the CPU's order (gpu/kernels/*.cl), so a layer run here gives
// the CPU path's bits.
#pragma once
#include <cstdint>
#include <map>
#include <vector>

#include "gpu/device_conv_state.h"
#include "gpu/device_kv.h"
#include "gpu/ops.h"
#include "gpu/runtime.h"
#include "layers/decoder_layer.h"

namespace ei::cl {

// A weight matrix on the device: `rows` rows of `cols` values of `type`, the file's blocks; or a
// stack of `matrices` such matrices one after another (a mixture's experts, matrix e = expert e).
struct DeviceMat {
    Buffer w;
    uint32_t type = 0;
    int64_t rows = 0, cols = 0;
    int64_t matrices = 1;
};

using DeviceLayerWeights = LayerWeights<DeviceMat, Buffer>;

// Rotation tables, one per distinct RoPE among the layers ([n_batch][n_rot] floats: cos, sin
// per pair for positions pos0 .. pos0 + n - 1, made on the host by rope_cos_sin, the CPU's).
class RopeTables {
public:
    RopeTables(Device& dev, int64_t n_batch) : dev_(dev), n_batch_(n_batch) {}
    // Makes room for `rope`'s table.
    void add(const RopeParams& rope);
    // Fills every table for positions pos0 .. pos0 + n - 1.
    void write(int64_t n, int64_t pos0);
    const Buffer& at(const RopeParams& rope) const;

private:
    struct Entry {
        RopeParams rope;
        Buffer cs;
    };
    Device& dev_;
    int64_t n_batch_;
    std::vector<Entry> entries_;
};

// The scratch of a mixture-of-experts feed-forward for up to n_batch tokens, n_used slots each (a
// slot: one token's choice of expert, s = t * n_used + j).
struct MoeBuffers {
    Buffer logits;    // [n_batch][n_expert] router logits, then probabilities
    Buffer selected;  // [n_batch][n_used] int32 experts, highest weight first
    Buffer weights;   // [n_batch][n_used] their weights
    Buffer gate, up;  // [n_batch * n_used][n_ff_exp] each slot's expert's projections
    Buffer y;         // [n_batch * n_used][n_embd] each slot's expert output

    MoeBuffers(Device& dev, const LayerShapes& s, int64_t n_batch);
};

class DeviceLayerOps {
public:
    using Buf = FloatsAt;  // an activation buffer from a row on (rows)
    using Mat = DeviceMat;
    using Weights = DeviceLayerWeights;

    // slot_of: attention layer -> its slot in kv; conv: the convolution layers' state; fused:
    // scratch of at least [n][the widest fused projection] floats (or empty when no layer has
    // one); moe: the experts' scratch (null when no layer has experts).
    DeviceLayerOps(DeviceOps& ops, DeviceKvCache& kv, const std::map<int, size_t>& slot_of, DeviceConvState& conv,
                   const RopeTables& rope, float norm_eps, const Buffer& fused, const MoeBuffers* moe)
        : ops_(ops), kv_(kv), slot_of_(slot_of), conv_(conv), rope_(rope), eps_(norm_eps), fused_(fused), moe_(moe) {}

    static bool present(const DeviceMat& m) { return m.w.get() != nullptr; }
    static bool present(const Buffer& b) { return b.get() != nullptr; }
    // b from row r0 on (rows of `width` floats). Only the ops a layer's row offset reaches take
    // such a view (rms_norm's input, add's output and input, attention's queries: the layers' r0);
    // the others take whole buffers (whole).
    static Buf rows(Buf b, int64_t r0, int64_t width);

    void rms_norm(Buf x, const Buffer& w, Buf out, int64_t rows, int64_t width);
    void matmul(const DeviceMat& W, Buf x, int64_t n, Buf y);
    // y[i] = W[i] x: one matmul each (the device queue has no per-job wait to save).
    void matmul_same_input(const DeviceMat* const* W, const Buf* y, int count, Buf x, int64_t n);
    void matmul_split(const DeviceMat& W, Buf x, int64_t n, Buf a, int64_t wa, Buf b, int64_t wb, Buf c, int64_t wc);
    void matmul_glu_fused(const DeviceMat& W, Buf x, int64_t n, int64_t ff, bool gelu, Buf gate, Buf up);
    void add_rows(Buf y, const Buffer& bias, int64_t rows, int64_t width);
    void rope(Buf x, int64_t n, int64_t heads, int64_t head_dim, int64_t pos0, const LayerConfig& c);
    void scale(Buf x, float s, int64_t count);
    void kv_store(int il, int64_t pos0, int64_t n, Buf k, Buf v);
    // sinks: [n_head] attention-sink logits (gpt-oss), or an empty buffer: none.
    void attention(int il, Buf q, int64_t m, int64_t pos0, const AttentionShape& s, const Buffer& sinks, Buf out);
    void glu(bool gelu, Buf gate, Buf up, Buf out, int64_t count);
    void add(Buf y, Buf x, int64_t count);
    // The mixture-of-experts feed-forward, the CPU's floats (layers/cpu_moe.cpp): all on the
    // device, the routing included, so the hidden state stays there (no read per layer).
    void moe_ffn(const DeviceLayerWeights& L, const ExpertShape& e, bool gelu, Buf h, int64_t n, Buf out);
    // LFM2's gated short convolution of layer il (layers/shortconv_layer.h), its state on the device.
    void short_conv(int il, Buf bcx, int64_t n, int64_t d, int64_t pos0, const Buffer& kernel, int64_t l_cache, Buf y);

private:
    // b's buffer, which must start at its first float (an op that does not address rows).
    static const Buffer& whole(Buf b);

    DeviceOps& ops_;
    DeviceKvCache& kv_;
    const std::map<int, size_t>& slot_of_;
    DeviceConvState& conv_;
    const RopeTables& rope_;
    float eps_;
    const Buffer& fused_;
    const MoeBuffers* moe_;
};

}  // namespace ei::cl
