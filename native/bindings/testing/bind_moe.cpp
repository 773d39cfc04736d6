// The mixture-of-experts feed-forward (layers/decoder_layer.h, ExpertShape) as one call on numpy
// arrays, on the CPU (CpuLayerOps::moe_ffn, a chosen ISA's table) or on an OpenCL device
// (DeviceLayerOps::moe_ffn), so tests can compare the two op against op, as for the device's
// other ops (bind_opencl_device.cpp). The forward pass runs the same code on its own buffers.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/thread_pool.h"
#include "cpu/kernels.h"
#include "gpu/device_kv.h"
#include "gpu/device_layer_ops.h"
#include "kv/kv_cache.h"
#include "layers/cpu_layer_ops.h"
#include "quant/types.h"
#include "shared/table_arg.h"
#include "testing/test_device.h"

namespace py = pybind11;

namespace {

using testing::Floats;
using Bytes = py::array_t<uint8_t, py::array::c_style | py::array::forcecast>;

void require(bool ok, const std::string& what) {
    if (!ok) throw ei::Error(what);
}

// The layer's experts as numpy arrays (the `weights` dict of moe_ffn), checked against each other.
struct MoeWeights {
    uint32_t type;                  // the expert stacks' type
    Floats router;                  // [n_expert][n_embd] F32
    Bytes gate, up, down;           // [n_expert][n_ff | n_embd][row_bytes] of `type`
    std::optional<Floats> router_b, gate_b, up_b, down_b;  // [n_expert], [n_expert][n_ff], [n_expert][n_embd]
    int64_t n_expert, d, ff;

    static std::optional<Floats> optional_floats(const py::dict& w, const char* key) {
        if (!w.contains(key) || w[key].is_none()) return std::nullopt;
        return py::cast<Floats>(w[key]);
    }

    explicit MoeWeights(const py::dict& w)
        : type(py::cast<uint32_t>(w["type"])), router(py::cast<Floats>(w["router"])), gate(py::cast<Bytes>(w["gate"])),
          up(py::cast<Bytes>(w["up"])), down(py::cast<Bytes>(w["down"])), router_b(optional_floats(w, "router_bias")),
          gate_b(optional_floats(w, "gate_bias")), up_b(optional_floats(w, "up_bias")),
          down_b(optional_floats(w, "down_bias")) {
        require(ei::type_known(type), "moe_ffn: unknown expert type id " + std::to_string(type));
        require(router.ndim() == 2 && gate.ndim() == 3 && up.ndim() == 3 && down.ndim() == 3,
                "moe_ffn: router is [n_expert, n_embd] float32, gate/up/down [n_expert, rows, row_bytes] uint8");
        n_expert = router.shape(0), d = router.shape(1), ff = gate.shape(1);
        auto stack_ok = [&](const Bytes& b, int64_t rows, int64_t cols) {
            return b.shape(0) == n_expert && b.shape(1) == rows && cols % ei::type_info(type).block_size == 0 &&
                   (size_t)b.shape(2) == ei::row_bytes(type, cols);
        };
        require(stack_ok(gate, ff, d) && stack_ok(up, ff, d) && stack_ok(down, d, ff),
                "moe_ffn: the stacks must be [n_expert, n_ff, row_bytes(n_embd)] (gate, up) and "
                "[n_expert, n_embd, row_bytes(n_ff)] (down)");
        auto vec_ok = [](const std::optional<Floats>& v, int64_t size) { return !v || v->size() == size; };
        require(vec_ok(router_b, n_expert) && vec_ok(gate_b, n_expert * ff) && vec_ok(up_b, n_expert * ff) &&
                    vec_ok(down_b, n_expert * d),
                "moe_ffn: the biases are [n_expert] (router), [n_expert, n_ff] (gate, up), [n_expert, n_embd] (down)");
    }

    ei::Tensor stack(const Bytes& b, int64_t cols) const {
        ei::Tensor t;
        t.data = b.data();
        t.type = type;
        t.ne[0] = cols, t.ne[1] = b.shape(1), t.ne[2] = n_expert;
        t.row_bytes = ei::row_bytes(type, cols);
        return t;
    }
};

const float* data_or_null(const std::optional<Floats>& v) { return v ? v->data() : nullptr; }

py::array_t<float> cpu_moe_ffn(const MoeWeights& w, const Floats& h, const ei::ExpertShape& e, bool gelu,
                               const ei::KernelTable& kt) {
    const int64_t n = h.shape(0), d = w.d;
    ei::CpuLayerWeights L;
    L.ffn_gate_inp.data = reinterpret_cast<const uint8_t*>(w.router.data());
    L.ffn_gate_inp.type = ei::TYPE_F32;
    L.ffn_gate_inp.ne[0] = d, L.ffn_gate_inp.ne[1] = w.n_expert;
    L.ffn_gate_inp.row_bytes = ei::row_bytes(ei::TYPE_F32, d);
    L.ffn_gate_exps = w.stack(w.gate, d);
    L.ffn_up_exps = w.stack(w.up, d);
    L.ffn_down_exps = w.stack(w.down, w.ff);
    L.ffn_gate_inp_b = data_or_null(w.router_b);
    L.ffn_gate_exps_b = data_or_null(w.gate_b);
    L.ffn_up_exps_b = data_or_null(w.up_b);
    L.ffn_down_exps_b = data_or_null(w.down_b);
    py::array_t<float> out({n, d});
    {
        py::gil_scoped_release nogil;
        // Two threads: the decode-step path that shares the experts among the threads runs too.
        ei::ThreadPool pool(2);
        ei::KvCache kv(kt, 1, 1, 32, 32, ei::TYPE_F16, ei::TYPE_F16, false, false);  // unused by moe_ffn
        ei::MatmulScratch scratch;
        ei::CpuLayerOps ops(pool, kt, kv, scratch, 0.0f, nullptr, ei::BatchOrder::llama_cpp);
        ops.moe_ffn(L, e, gelu, h.data(), n, out.mutable_data());
    }
    return out;
}

py::array_t<float> device_moe_ffn(testing::TestDevice& t, const MoeWeights& w, const Floats& h,
                                  const ei::ExpertShape& e, bool gelu) {
    namespace cl = ei::cl;
    const int64_t n = h.shape(0), d = w.d;
    auto mat = [&](const void* data, size_t bytes, uint32_t type, int64_t rows, int64_t cols, int64_t matrices) {
        return cl::DeviceMat{t.upload(data, bytes, "an expert weight"), type, rows, cols, matrices};
    };
    auto vec = [&](const std::optional<Floats>& v) { return v ? t.upload(*v, "an expert bias") : cl::Buffer{}; };
    cl::DeviceLayerWeights L;
    L.ffn_gate_inp = mat(w.router.data(), w.router.nbytes(), ei::TYPE_F32, w.n_expert, d, 1);
    L.ffn_gate_exps = mat(w.gate.data(), w.gate.nbytes(), w.type, w.ff, d, w.n_expert);
    L.ffn_up_exps = mat(w.up.data(), w.up.nbytes(), w.type, w.ff, d, w.n_expert);
    L.ffn_down_exps = mat(w.down.data(), w.down.nbytes(), w.type, d, w.ff, w.n_expert);
    L.ffn_gate_inp_b = vec(w.router_b);
    L.ffn_gate_exps_b = vec(w.gate_b);
    L.ffn_up_exps_b = vec(w.up_b);
    L.ffn_down_exps_b = vec(w.down_b);
    cl::Buffer hb = t.upload(h, "h");
    cl::Buffer ob = t.dev().alloc((size_t)(n * d) * sizeof(float), "out");
    {
        py::gil_scoped_release nogil;
        ei::LayerShapes s;
        s.n_embd = d;
        s.experts = e;
        cl::MoeBuffers moe(t.dev(), s, n);
        // The layer ops want a KV cache and rope tables; moe_ffn touches neither.
        ei::KvCache host(ei::kernels(), 1, 1, 32, 32, ei::TYPE_F16, ei::TYPE_F16, false, false);
        cl::DeviceKvCache kv(t.dev(), t.ops(), host, {0}, 1, 1);
        const std::map<int, size_t> slot_of{{0, 0}};
        cl::RopeTables rope(t.dev(), 1);
        const cl::Buffer no_fused;
        cl::DeviceConvState no_conv(t.dev(), t.ops(), host, {}, d, 2);
        cl::DeviceLayerOps ops(t.ops(), kv, slot_of, no_conv, rope, 0.0f, no_fused, &moe);
        ops.moe_ffn(L, e, gelu, hb, n, ob);
    }
    return t.download(ob, {n, d});
}

}  // namespace

void register_moe(py::module_& m) {
    m.def("moe_ffn", [](const Floats& h, const py::dict& weights, int64_t n_used, bool norm_weights,
                        bool softmax_weight, bool swiglu_oai, bool gelu, const py::object& isa,
                        const py::object& device) {
        const MoeWeights w(weights);
        require(h.ndim() == 2 && h.shape(1) == w.d && h.shape(0) > 0, "moe_ffn: h is [n, n_embd] float32");
        require(n_used > 0 && n_used <= w.n_expert, "moe_ffn: n_used must be 1..n_expert");
        ei::ExpertShape e{w.n_expert, n_used, w.ff, norm_weights, softmax_weight, swiglu_oai};
        if (device.is_none()) return cpu_moe_ffn(w, h, e, gelu, table_for(isa));
        require(isa.is_none(), "moe_ffn: isa= is the CPU's; a device runs its own kernels");
        return device_moe_ffn(py::cast<testing::TestDevice&>(device), w, h, e, gelu);
    }, py::arg("h"), py::arg("weights"), py::arg("n_used"), py::arg("norm_weights") = true,
       py::arg("softmax_weight") = false, py::arg("swiglu_oai") = false, py::arg("gelu") = false,
       py::arg("isa") = py::none(), py::arg("device") = py::none(),
       "out [n, n_embd]: the mixture-of-experts feed-forward of h [n, n_embd] on the CPU (isa: None for\n"
       "the selected table, else an ISA name) or on `device` (an OpenCLDevice). weights: a dict with\n"
       "'type' (the experts' type id), 'router' [n_expert, n_embd] float32, 'gate' and 'up'\n"
       "[n_expert, n_ff, row_bytes] and 'down' [n_expert, n_embd, row_bytes] uint8 of that type, and\n"
       "optional 'router_bias' [n_expert], 'gate_bias', 'up_bias' [n_expert, n_ff], 'down_bias'\n"
       "[n_expert, n_embd] float32.");
}
