// An opened OpenCL device whose ops run one call each on numpy arrays, for tests that compare every
// device op with the CPU reference (llama.cpp's test-backend-ops is the model), and the block
// layouts the host and the device compiler see. The forward pass calls the ops on device buffers
// directly, never through here.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "cpu/kernels.h"
#include "gpu/block_layouts.h"
#include "gpu/device_kv.h"
#include "gpu/kernel_sources.h"
#include "gpu/opencl_loader.h"
#include "gpu/ops.h"
#include "gpu/program_cache.h"
#include "gpu/runtime.h"
#include "kv/kv_cache.h"
#include "layers/cpu_blocks.h"
#include "quant/types.h"
#include "shared/opencl_info.h"
#include "testing/test_device.h"

namespace py = pybind11;

namespace {

using testing::Floats;
using testing::TestDevice;
using Ints = py::array_t<int32_t, py::array::c_style | py::array::forcecast>;
using Bytes = py::array_t<uint8_t, py::array::c_style | py::array::forcecast>;

void require(bool ok, const std::string& what) {
    if (!ok) throw ei::Error(what);
}

// The attention-sink logits [n_head] on the device, or an empty buffer for None.
ei::cl::Buffer upload_sinks(TestDevice& t, const std::optional<Floats>& sinks, int64_t n_head) {
    if (!sinks) return {};
    require(sinks->ndim() == 1 && sinks->shape(0) == n_head, "attention: sinks is [n_head]");
    return t.upload(*sinks, "sinks");
}

py::list layouts_list(const std::vector<ei::cl::LayoutEntry>& entries) {
    py::list out;
    for (const auto& e : entries) out.append(py::make_tuple(e.block, e.field, e.value));
    return out;
}

py::dict tables_dict(const std::vector<ei::cl::TableEntry>& entries) {
    py::dict out;
    for (const auto& e : entries) out[py::str(e.name)] = e.values;
    return out;
}

void register_opencl_device_class(py::module_& m) {
    py::class_<TestDevice>(m, "OpenCLDevice",
                           "An opened OpenCL device whose ops run one call each on numpy arrays (for tests;\n"
                           "the forward pass uses device buffers). index: as in `edgeinfer devices`.\n"
                           "cache_dir: folder for compiled program binaries ('' = memory only).")
        .def(py::init<int, const std::string&, const std::string&>(), py::arg("index") = 0,
             py::arg("library") = "", py::arg("cache_dir") = "")
        .def_property_readonly("info", [](TestDevice& t) { return bindings::info_dict(t.dev().info()); })
        .def_property_readonly("driver_version", [](TestDevice& t) { return t.dev().driver_version(); })
        .def_property_readonly("programs_compiled", [](TestDevice& t) { return t.programs().compiled(); },
                               "Programs this device object compiled from source.")
        .def_property_readonly("programs_loaded", [](TestDevice& t) { return t.programs().loaded(); },
                               "Programs this device object built from cached binaries.")
        .def("build_program", [](TestDevice& t, const std::string& name, const std::string& source,
                                 const std::string& options) {
            py::gil_scoped_release nogil;
            t.programs().get(name, source, options);
        }, py::arg("name"), py::arg("source"), py::arg("options") = "",
           "Compile (or load from the cache) a program; a build error raises EdgeInferError with the log.")
        .def("binary_path", [](TestDevice& t, const std::string& name, const std::string& source,
                               const std::string& options) { return t.programs().binary_path(name, source, options); },
             py::arg("name"), py::arg("source"), py::arg("options") = "")
        .def("block_layouts", [](TestDevice& t) {
            std::vector<ei::cl::LayoutEntry> e;
            {
                py::gil_scoped_release nogil;
                e = ei::cl::device_block_layouts(t.dev(), t.programs());
            }
            return layouts_list(e);
        }, "[(block, field, bytes)]: sizeof ('' field) and field offsets as the device lays out the prelude.")
        .def("block_tables", [](TestDevice& t) {
            std::vector<ei::cl::TableEntry> e;
            {
                py::gil_scoped_release nogil;
                e = ei::cl::device_block_tables(t.dev(), t.programs());
            }
            return tables_dict(e);
        }, "{name: [values]}: the prelude's value tables (kIq4nlValues, ...) as a kernel reads them.")
        .def("matmul", [](TestDevice& t, uint32_t type, const Bytes& w, const Floats& x) {
            require(w.ndim() == 2 && x.ndim() == 2, "matmul: w is [rows, row_bytes] uint8, x [n, cols] float32");
            require(ei::type_known(type), "matmul: unknown type id " + std::to_string(type));
            const int64_t rows = w.shape(0), n = x.shape(0), cols = x.shape(1);
            require(cols % ei::type_info(type).block_size == 0 &&
                        (size_t)w.shape(1) == ei::row_bytes(type, cols),
                    "matmul: each weight row must hold x's cols values of the type");
            ei::cl::Buffer wb = t.upload(w.data(), w.size(), "matmul weights");
            ei::cl::Buffer xb = t.upload(x, "matmul x");
            ei::cl::Buffer yb = t.dev().alloc((size_t)(n * rows) * sizeof(float), "matmul y");
            {
                py::gil_scoped_release nogil;
                t.ops().matmul(type, wb, rows, cols, xb, n, yb);
            }
            return t.download(yb, {n, rows});
        }, py::arg("type"), py::arg("w"), py::arg("x"), "y[n, rows] = x[n, cols] . W^T (mat-vec kernel for n = 1).")
        .def("quantize", [](TestDevice& t, uint32_t type, const Floats& x) {
            require(x.ndim() == 2, "quantize: x is [n, cols] float32");
            require(ei::type_known(type), "quantize: unknown type id " + std::to_string(type));
            const int64_t n = x.shape(0), cols = x.shape(1);
            require(cols % ei::type_info(type).block_size == 0, "quantize: cols must be whole blocks of the type");
            const size_t row = ei::row_bytes(type, cols);
            ei::cl::Buffer xb = t.upload(x, "quantize x");
            ei::cl::Buffer qb = t.dev().alloc(row * (size_t)n, "quantize out");
            {
                py::gil_scoped_release nogil;
                t.ops().quantize(type, xb, n, cols, qb);
            }
            py::array_t<uint8_t> out({(py::ssize_t)n, (py::ssize_t)row});
            t.dev().read(qb, out.mutable_data(), out.size());
            return out;
        }, py::arg("type"), py::arg("x"),
           "x[n, cols] quantized on the device to an activation type (q8_0, q8_1, q8_K) -> uint8 [n, row_bytes].")
        .def("rms_norm", [](TestDevice& t, const Floats& x, const Floats& w, float eps) {
            require(x.ndim() == 2 && w.ndim() == 1 && w.shape(0) == x.shape(1), "rms_norm: x is [n, d], w [d]");
            ei::cl::Buffer xb = t.upload(x, "x"), wb = t.upload(w, "w");
            t.ops().rms_norm(xb, wb, xb, x.shape(0), x.shape(1), eps);
            return t.download(xb, {x.shape(0), x.shape(1)});
        }, py::arg("x"), py::arg("w"), py::arg("eps"))
        .def("rope", [](TestDevice& t, const Floats& x, const Ints& pos, int64_t n_rot, float freq_base,
                        float freq_scale, bool neox, const std::optional<Floats>& freq_factors) {
            require(x.ndim() == 3 && pos.ndim() == 1 && pos.shape(0) == x.shape(0),
                    "rope: x is [n, n_heads, head_dim], pos [n] int32");
            require(n_rot > 0 && n_rot % 2 == 0 && n_rot <= x.shape(2), "rope: n_rot must be even and <= head_dim");
            if (freq_factors)
                require(freq_factors->ndim() == 1 && freq_factors->shape(0) == n_rot / 2, "rope: freq_factors is [n_rot/2]");
            // The rotation table as the offload builds it: the CPU's own angles.
            const ei::RopeParams p{n_rot, freq_base, freq_scale, freq_factors ? freq_factors->data() : nullptr};
            std::vector<float> cs((size_t)(x.shape(0) * n_rot));
            for (int64_t i = 0; i < x.shape(0); ++i) ei::rope_cos_sin(p, pos.data()[i], cs.data() + i * n_rot);
            ei::cl::Buffer xb = t.upload(x, "x");
            ei::cl::Buffer cb = t.upload(cs.data(), cs.size() * sizeof(float), "cs");
            const ei::cl::RopeShape s{x.shape(1), x.shape(2), n_rot, neox};
            t.ops().rope(xb, cb, x.shape(0), s);
            return t.download(xb, {x.shape(0), x.shape(1), x.shape(2)});
        }, py::arg("x"), py::arg("pos"), py::arg("n_rot"), py::arg("freq_base"), py::arg("freq_scale") = 1.0f,
           py::arg("neox") = false, py::arg("freq_factors") = py::none())
        .def("attention", [](TestDevice& t, const Floats& q, const Floats& k, const Floats& v, int64_t pos0,
                             int64_t window, float scale, uint32_t type_k, uint32_t type_v,
                             const std::optional<Floats>& sinks) {
            require(q.ndim() == 3 && k.ndim() == 3 && v.ndim() == 3,
                    "attention: q is [n, n_head, head_dim], k and v [n_kv, n_head_kv, head_dim]");
            const int64_t n = q.shape(0), n_head = q.shape(1), d = q.shape(2);
            const int64_t n_kv = k.shape(0), n_head_kv = k.shape(1);
            require(k.shape(2) == d && v.shape(0) == n_kv && v.shape(1) == n_head_kv && v.shape(2) == d,
                    "attention: k and v must have the same shape, with q's head_dim");
            require(n_kv == pos0 + n, "attention: n_kv must be pos0 + n (the cache up to the last query)");
            require(ei::cl::kv_supports(type_k) && ei::cl::kv_supports(type_v),
                    "attention: the cache types must be f16, q8_0 or q4_0");
            const int64_t width = n_head_kv * d;
            const size_t k_row = ei::row_bytes(type_k, width), v_row = ei::row_bytes(type_v, width);
            ei::cl::Buffer qb = t.upload(q, "q");
            ei::cl::Buffer kc = t.dev().alloc((size_t)n_kv * k_row, "K cache");
            ei::cl::Buffer vc = t.dev().alloc((size_t)n_kv * v_row, "V cache");
            ei::cl::Buffer ob = t.dev().alloc((size_t)(n * n_head * d) * sizeof(float), "out");
            // Stored in two pieces, as an earlier prompt (positions < pos0) and then the queries'
            // own tokens would be.
            const int64_t pieces[2][2] = {{0, pos0}, {pos0, n}};  // {first position, count}
            for (const auto& piece : pieces) {
                if (piece[1] == 0) continue;
                const size_t off = (size_t)(piece[0] * width), bytes = (size_t)(piece[1] * width) * sizeof(float);
                ei::cl::Buffer kf = t.upload(k.data() + off, bytes, "k rows");
                ei::cl::Buffer vf = t.upload(v.data() + off, bytes, "v rows");
                t.ops().kv_store(type_k, kf, kc, piece[0], piece[1], width);
                t.ops().kv_store(type_v, vf, vc, piece[0], piece[1], width);
            }
            const ei::cl::Buffer sb = upload_sinks(t, sinks, n_head);
            const ei::cl::AttentionDims a{n_head, n_head_kv, d, scale, window, sinks ? &sb : nullptr};
            t.ops().attention(type_k, type_v, qb, kc, vc, ob, n, pos0, a);
            py::array_t<uint8_t> k_raw({(py::ssize_t)n_kv, (py::ssize_t)k_row});
            py::array_t<uint8_t> v_raw({(py::ssize_t)n_kv, (py::ssize_t)v_row});
            t.dev().read(kc, k_raw.mutable_data(), k_raw.size());
            t.dev().read(vc, v_raw.mutable_data(), v_raw.size());
            return py::make_tuple(t.download(ob, {n, n_head, d}), k_raw, v_raw);
        }, py::arg("q"), py::arg("k"), py::arg("v"), py::arg("pos0"), py::arg("window") = 0, py::arg("scale"),
           py::arg("type_k") = (uint32_t)ei::TYPE_F16, py::arg("type_v") = (uint32_t)ei::TYPE_F16,
           py::arg("sinks") = py::none(),
           "(out [n, n_head, head_dim], K rows and V rows as the device stored them [n_kv, row_bytes] uint8):\n"
           "k/v rows stored into caches of type_k/type_v on the device, then causal attention of q\n"
           "(query t at pos0 + t; sinks: [n_head] attention-sink logits, or None).")
        .def("kv_cache_attention", [](TestDevice& t, const Floats& q, const Floats& k, const Floats& v, int64_t pos0,
                                      uint32_t type_k, uint32_t type_v, bool rotate_k, bool center_k, int64_t window,
                                      int64_t chunk, const std::optional<Floats>& sinks) {
            require(q.ndim() == 3 && k.ndim() == 3 && v.ndim() == 3,
                    "kv_cache_attention: q is [n, n_head, head_dim], k and v [n_kv, n_head_kv, head_dim]");
            const int64_t n = q.shape(0), n_head = q.shape(1), d = q.shape(2);
            const int64_t n_kv = k.shape(0), n_head_kv = k.shape(1);
            require(k.shape(2) == d && v.shape(0) == n_kv && v.shape(1) == n_head_kv && v.shape(2) == d &&
                        n_head_kv > 0 && n_head % n_head_kv == 0 && n > 0 && pos0 >= 0 && pos0 + n == n_kv,
                    "kv_cache_attention: inconsistent shapes (n_kv must be pos0 + n)");
            require(chunk > 0, "kv_cache_attention: chunk must be positive");
            const int64_t width = n_head_kv * d;
            // The host cache whose format the device copies, and into which its rows come back.
            ei::KvCache host(ei::kernels(), 1, n_kv, width, d, type_k, type_v, rotate_k, center_k);
            const int64_t n_batch = std::max(chunk, n);
            ei::cl::DeviceKvCache cache(t.dev(), t.ops(), host, {0}, n_batch, n_head);
            // The rows stored `chunk` at a time, as prompt chunks and decode steps are.
            for (int64_t p = 0; p < n_kv; p += chunk) {
                const int64_t m = std::min(chunk, n_kv - p);
                const size_t off = (size_t)(p * width), bytes = (size_t)(m * width) * sizeof(float);
                ei::cl::Buffer kf = t.upload(k.data() + off, bytes, "k rows");
                ei::cl::Buffer vf = t.upload(v.data() + off, bytes, "v rows");
                cache.store(0, kf, vf, p, m);
            }
            ei::cl::Buffer qb = t.upload(q, "q");
            ei::cl::Buffer ob = t.dev().alloc((size_t)(n * n_head * d) * sizeof(float), "out");
            const ei::cl::Buffer sb = upload_sinks(t, sinks, n_head);
            const ei::cl::AttentionDims a{n_head, n_head_kv, d, 1.0f / std::sqrt((float)d), window,
                                          sinks ? &sb : nullptr};
            cache.attend(0, qb, ob, n, pos0, a);
            cache.to_host(n_kv);
            py::array_t<uint8_t> blob((py::ssize_t)host.rows_bytes(n_kv));
            host.copy_rows_out(n_kv, blob.mutable_data());
            return py::make_tuple(t.download(ob, {n, n_head, d}), blob);
        }, py::arg("q"), py::arg("k"), py::arg("v"), py::arg("pos0"), py::arg("type_k") = (uint32_t)ei::TYPE_F16,
           py::arg("type_v") = (uint32_t)ei::TYPE_F16, py::arg("rotate_k") = false, py::arg("center_k") = false,
           py::arg("window") = 0, py::arg("chunk") = 64, py::arg("sinks") = py::none(),
           "(out [n, n_head, head_dim], the cache's rows blob as KvCache::copy_rows_out writes it): k/v rows\n"
           "stored `chunk` positions at a time into the device KV cache (gpu/device_kv.h) of a one-layer\n"
           "cache of these types (K rotated / centered as asked), then causal attention of q (query t at\n"
           "pos0 + t, scale 1 / sqrt(head_dim); sinks: [n_head] attention-sink logits, or None), and the\n"
           "rows synced back to the host.")
        .def("swiglu", [](TestDevice& t, const Floats& gate, const Floats& up) {
            require(gate.ndim() == 1 && up.ndim() == 1 && gate.size() == up.size(), "swiglu: gate and up are [n]");
            ei::cl::Buffer g = t.upload(gate, "gate"), u = t.upload(up, "up");
            t.ops().swiglu(g, u, g, gate.size());
            return t.download(g, {gate.size()});
        }, py::arg("gate"), py::arg("up"))
        .def("geglu", [](TestDevice& t, const Floats& gate, const Floats& up) {
            require(gate.ndim() == 1 && up.ndim() == 1 && gate.size() == up.size(), "geglu: gate and up are [n]");
            ei::cl::Buffer g = t.upload(gate, "gate"), u = t.upload(up, "up");
            t.ops().geglu(g, u, g, gate.size());
            return t.download(g, {gate.size()});
        }, py::arg("gate"), py::arg("up"))
        .def("add", [](TestDevice& t, const Floats& y, const Floats& x) {
            require(y.ndim() == 1 && x.ndim() == 1 && y.size() == x.size(), "add: y and x are [n]");
            ei::cl::Buffer yb = t.upload(y, "y"), xb = t.upload(x, "x");
            t.ops().add(yb, xb, y.size());
            return t.download(yb, {y.size()});
        }, py::arg("y"), py::arg("x"), "y + x through the residual-add kernel.")
        .def("short_conv", [](TestDevice& t, const Floats& bcx, const Floats& taps, const Floats& state, bool fresh) {
            require(bcx.ndim() == 2 && taps.ndim() == 2 && state.ndim() == 2 && bcx.shape(1) == 3 * taps.shape(0) &&
                        state.shape(0) == taps.shape(0) && state.shape(1) == taps.shape(1) - 1,
                    "short_conv: bcx is [n][3 d], taps [d][l], state [d][l - 1]");
            const int64_t n = bcx.shape(0), d = taps.shape(0), l = taps.shape(1);
            ei::cl::Buffer b = t.upload(bcx, "bcx"), k = t.upload(taps, "taps"), s = t.upload(state, "state");
            ei::cl::Buffer y = t.dev().alloc((size_t)(n * d) * sizeof(float), "y");
            t.ops().short_conv(b, k, s, y, n, d, l, fresh);
            return py::make_tuple(t.download(y, {n, d}), t.download(s, {d, l - 1}));
        }, py::arg("bcx"), py::arg("taps"), py::arg("state"), py::arg("fresh"),
           "(y [n, d], the new state [d, l - 1]): LFM2's short convolution of bcx [n, 3 d] (B, C, x) with\n"
           "taps [d, l] over state (zeros when fresh), kernels/shortconv.cl.");
}

}  // namespace

void register_opencl_device(py::module_& m) {
    register_opencl_device_class(m);
    m.def("opencl_host_block_layouts", [] { return layouts_list(ei::cl::host_block_layouts()); },
          "[(block, field, bytes)]: sizeof ('' field) and field offsets of quant/blocks.h's structs, in the\n"
          "order of OpenCLDevice.block_layouts().");
    m.def("opencl_host_block_tables", [] { return tables_dict(ei::cl::host_block_tables()); },
          "{name: [values]}: the value tables of quant/blocks.h (kIq4nlValues, ...), as\n"
          "OpenCLDevice.block_tables() lists them.");
    m.def("opencl_block_prelude", [] { return ei::cl::block_prelude(); },
          "The OpenCL C prelude generated from quant/blocks.h (block constants, structs and value tables).");
}
