// One decoder layer (layers/decoder_layer.h) run on both backends from the same weights, for
// tests: on the CPU through CpuLayerOps with the chosen ISA's table, and offloaded through
// gpu/offload.h (Offload::upload, then Offload::run), each over its own one-layer KV cache. It
// checks a layer's parts that no test model carries alone: gpt-oss's attention sinks and output
// bias come only with its expert FFN, which the device does not run. Batches run one after
// another at consecutive positions (a prompt, then decode steps), each going on past its K/V
// from its row r0, as the model's last layer does when only later rows' logits are wanted.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/thread_pool.h"
#include "cpu/matmul.h"
#include "gpu/offload.h"
#include "kv/kv_cache.h"
#include "layers/cpu_layer_ops.h"
#include "layers/decoder_layer.h"
#include "quant/types.h"
#include "shared/table_arg.h"

namespace py = pybind11;

namespace {

using Floats = py::array_t<float, py::array::c_style | py::array::forcecast>;
using Bytes = py::array_t<uint8_t, py::array::c_style | py::array::forcecast>;

// The layer's weights from `weights` (keys as LayerWeights' fields): matrices as rows of `type`
// blocks (uint8 [rows][row_bytes]), vectors as floats. `keep` holds the arrays they point into.
ei::CpuLayerWeights layer_weights(const py::dict& weights, uint32_t type, int64_t cols_in,
                                  std::vector<py::object>& keep) {
    auto has = [&](const char* name) { return weights.contains(name); };
    auto vec = [&](const char* name) -> const float* {
        if (!has(name)) return nullptr;
        Floats a = weights[name].cast<Floats>();
        keep.push_back(a);
        return a.data();
    };
    auto mat = [&](const char* name, int64_t cols) {
        if (!has(name)) throw ei::Error(std::string("layer_on_both_backends: no '") + name + "' matrix");
        Bytes a = weights[name].cast<Bytes>();
        if (a.ndim() != 2 || (size_t)a.shape(1) != ei::row_bytes(type, cols))
            throw ei::Error(std::string("layer_on_both_backends: '") + name + "' is not rows of " +
                            std::to_string(cols) + " values of the weight type");
        keep.push_back(a);
        ei::Tensor t;
        t.data = a.data();
        t.type = type;
        t.ne[0] = cols;
        t.ne[1] = a.shape(0);
        t.row_bytes = (size_t)a.shape(1);
        return t;
    };
    ei::CpuLayerWeights L;
    L.attn_norm = vec("attn_norm");
    L.wq = mat("wq", cols_in);
    L.wk = mat("wk", cols_in);
    L.wv = mat("wv", cols_in);
    L.wo = mat("wo", L.wq.rows());
    L.bo = vec("bo");
    L.attn_sinks = vec("attn_sinks");
    L.ffn_norm = vec("ffn_norm");
    L.w_gate = mat("w_gate", cols_in);
    L.w_up = mat("w_up", cols_in);
    L.w_down = mat("w_down", L.w_gate.rows());
    if (!L.attn_norm || !L.ffn_norm) throw ei::Error("layer_on_both_backends: attn_norm and ffn_norm are required");
    return L;
}

py::list layer_on_both_backends(const py::dict& weights, uint32_t weight_type, int64_t n_head, int64_t n_head_kv,
                                int64_t head_dim, int64_t window, const std::string& kv_type, const py::list& batches,
                                int device, const std::string& library, const py::object& isa) {
    const ei::KernelTable& kt = table_for(isa);
    std::vector<std::pair<Floats, int64_t>> steps;  // (x [n][n_embd], r0)
    int64_t n_ctx = 0, n_batch = 1;
    for (const py::handle& b : batches) {
        auto step = b.cast<std::pair<Floats, int64_t>>();
        if (step.first.ndim() != 2 || step.second < 0 || step.second > step.first.shape(0))
            throw ei::Error("layer_on_both_backends: each batch is (x [n, n_embd], r0 <= n)");
        n_ctx += step.first.shape(0);
        n_batch = std::max<int64_t>(n_batch, step.first.shape(0));
        steps.push_back(std::move(step));
    }
    if (steps.empty()) throw ei::Error("layer_on_both_backends: no batch");
    const int64_t d = steps[0].first.shape(1);
    std::vector<py::object> keep;
    const ei::CpuLayerWeights L = layer_weights(weights, weight_type, d, keep);
    const ei::LayerShapes shapes{d, n_head, n_head_kv, head_dim, L.w_gate.rows(), 1e-5f};
    ei::LayerConfig config;
    config.rope = ei::RopeParams{head_dim, 10000.0f, 1.0f, nullptr};
    config.rope_neox = true;
    config.window = window;
    const uint32_t kv = ei::kv_type_from_name(kv_type);

    py::list out;
    py::gil_scoped_release nogil;
    ei::ThreadPool pool(1);
    ei::KvCache cpu_kv(kt, 1, n_ctx, shapes.kv_width(), head_dim, kv, kv);
    ei::MatmulScratch scratch;
    ei::CpuLayerOps cpu(pool, kt, cpu_kv, scratch, shapes.norm_eps, nullptr, ei::BatchOrder::llama_cpp);
    ei::KvCache host_kv(kt, 1, n_ctx, shapes.kv_width(), head_dim, kv, kv);
    ei::cl::Offload offload(ei::cl::OffloadRequest{{0}, device, library, ""}, 1, n_ctx, n_batch, shapes, 0, host_kv, {});
    offload.upload(0, L, config);
    // The CPU's activations, [n_batch][width] each (layers/decoder_layer.h, LayerActs).
    const int64_t widths[9] = {d, d, shapes.q_width(), shapes.kv_width(), shapes.kv_width(), shapes.q_width(),
                               shapes.n_ff, shapes.n_ff, d};
    std::vector<std::vector<float>> buffers;
    for (int64_t w : widths) buffers.emplace_back((size_t)(n_batch * w));
    const ei::LayerActs<float*> acts{buffers[0].data(), buffers[1].data(), buffers[2].data(),
                                     buffers[3].data(), buffers[4].data(), buffers[5].data(),
                                     buffers[6].data(), buffers[7].data(), buffers[8].data()};
    int64_t pos0 = 0;
    std::vector<std::pair<std::vector<float>, std::vector<float>>> results;
    for (const auto& [x, r0] : steps) {
        const int64_t n = x.shape(0);
        std::copy(x.data(), x.data() + n * d, acts.x);
        ei::decoder_layer(cpu, L, config, shapes, acts, 0, n, pos0, r0);
        std::vector<float> on_device(x.data(), x.data() + n * d);
        offload.run(0, 0, on_device.data(), n, pos0, r0);
        results.emplace_back(std::vector<float>(acts.x + r0 * d, acts.x + n * d),
                             std::vector<float>(on_device.begin() + r0 * d, on_device.end()));
        pos0 += n;
    }
    py::gil_scoped_acquire gil;
    for (const auto& [c, g] : results) {
        const py::ssize_t rows = (py::ssize_t)c.size() / d;
        py::array_t<float> a({rows, (py::ssize_t)d}), b({rows, (py::ssize_t)d});
        std::copy(c.begin(), c.end(), a.mutable_data());
        std::copy(g.begin(), g.end(), b.mutable_data());
        out.append(py::make_tuple(a, b));
    }
    return out;
}

}  // namespace

void register_offload_layer(py::module_& m) {
    m.def("layer_on_both_backends", &layer_on_both_backends, py::arg("weights"), py::arg("weight_type"),
          py::arg("n_head"), py::arg("n_head_kv"), py::arg("head_dim"), py::arg("window") = 0,
          py::arg("kv_type") = "f16", py::arg("batches"), py::arg("device") = 0, py::arg("library") = "",
          py::arg("isa") = py::none(),
          "One decoder layer (neox rope, base 10000, eps 1e-5) on the CPU and offloaded to OpenCL device `device`,\n"
          "from the same weights (wq, wk, wv, wo, w_gate, w_up, w_down: uint8 rows of weight_type; attn_norm,\n"
          "ffn_norm and the optional bo, attn_sinks: floats), over batches [(x [n, n_embd], r0), ...] at\n"
          "consecutive positions: [(cpu rows r0.., device rows r0..) for each batch].");
}
