// Attention over a KV cache of each type, one call, for tests: the rows are written through a
// one-layer KvCache (so they are quantized exactly as the forward pass quantizes them) and read by
// attention_cached with the chosen ISA's table; the dequantized rows come back for a numpy oracle.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <vector>

#include "common/error.h"
#include "common/thread_pool.h"
#include "kv/centered_k.h"
#include "kv/kv_cache.h"
#include "layers/cpu_blocks.h"
#include "shared/table_arg.h"

namespace py = pybind11;

namespace {

using Floats = py::array_t<float, py::array::c_style | py::array::forcecast>;

py::tuple attention_kv(const Floats& q, const Floats& k, const Floats& v, const std::string& type_k,
                       const std::string& type_v, int64_t window, bool rotate_k, bool center_k,
                       const py::object& isa) {
    const ei::KernelTable& t = table_for(isa);
    if (q.ndim() != 2 || k.ndim() != 3 || v.ndim() != 3)
        throw ei::Error("attention_kv: q is [n_head, head_dim], k and v [n_kv, n_head_kv, head_dim]");
    const int64_t n_head = q.shape(0), d = q.shape(1), n_kv = k.shape(0), n_head_kv = k.shape(1);
    if (k.shape(2) != d || v.shape(0) != n_kv || v.shape(1) != n_head_kv || v.shape(2) != d || n_kv < 1 ||
        n_head_kv < 1 || n_head % n_head_kv)
        throw ei::Error("attention_kv: inconsistent shapes");
    ei::KvCache kv(t, 1, n_kv, n_head_kv * d, d, ei::kv_type_from_name(type_k), ei::kv_type_from_name(type_v),
                   rotate_k, center_k);
    kv.store(0, 0, n_kv, k.data(), v.data());
    py::array_t<float> out({n_head, d});
    py::array_t<float> k_deq({n_kv, n_head_kv, d}), v_deq({n_kv, n_head_kv, d});
    {
        py::gil_scoped_release nogil;
        ei::ThreadPool pool(1);
        const ei::AttentionShape shape{n_head, n_head_kv, d, 1.0f / std::sqrt((float)d), window};
        ei::attention_cached(pool, t, q.data(), 1, n_kv - 1, kv, 0, shape, out.mutable_data());
        for (int64_t i = 0; i < n_kv; ++i) {
            kv.k_row_floats(0, i, k_deq.mutable_data() + i * kv.width());
            kv.v_row_floats(0, i, v_deq.mutable_data() + i * kv.width());
        }
    }
    return py::make_tuple(out, k_deq, v_deq);
}

// Best wall time of `repeats` runs of the attention alone (the rows are stored once, outside).
double attention_kv_seconds(const Floats& q, const Floats& k, const std::string& type_k, const std::string& type_v,
                            int repeats, bool rotate_k, bool center_k, const py::object& isa) {
    const ei::KernelTable& t = table_for(isa);
    if (q.ndim() != 2 || k.ndim() != 3 || k.shape(2) != q.shape(1) || q.shape(0) % k.shape(1))
        throw ei::Error("attention_kv_seconds: q is [n_head, head_dim], k [n_kv, n_head_kv, head_dim]");
    const int64_t n_head = q.shape(0), d = q.shape(1), n_kv = k.shape(0), n_head_kv = k.shape(1);
    ei::KvCache kv(t, 1, n_kv, n_head_kv * d, d, ei::kv_type_from_name(type_k), ei::kv_type_from_name(type_v),
                   rotate_k, center_k);
    kv.store(0, 0, n_kv, k.data(), k.data());
    std::vector<float> out((size_t)(n_head * d));
    py::gil_scoped_release nogil;
    ei::ThreadPool pool(1);
    const ei::AttentionShape shape{n_head, n_head_kv, d, 1.0f / std::sqrt((float)d), 0};
    double best = 1e30;
    for (int r = 0; r < repeats; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        ei::attention_cached(pool, t, q.data(), 1, n_kv - 1, kv, 0, shape, out.data());
        best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return best;
}

// n query rows at positions pos0 .. pos0 + n - 1 attending over the n_kv = pos0 + n rows k, v
// stored (in one call) in a one-layer KvCache: the CPU side of the device cache tests
// (tests/test_opencl_ops.py). Returns (out [n, n_head, head_dim], the cache's copy_rows_out(n_kv)
// blob, K and V as attention sees them [n_kv, n_head_kv, head_dim]).
py::tuple kv_cache_attention(const Floats& q, const Floats& k, const Floats& v, int64_t pos0, const std::string& type_k,
                             const std::string& type_v, bool rotate_k, bool center_k, int64_t window,
                             const py::object& isa, const std::optional<Floats>& sinks) {
    const ei::KernelTable& t = table_for(isa);
    if (q.ndim() != 3 || k.ndim() != 3 || v.ndim() != 3)
        throw ei::Error("kv_cache_attention: q is [n, n_head, head_dim], k and v [n_kv, n_head_kv, head_dim]");
    const int64_t n = q.shape(0), n_head = q.shape(1), d = q.shape(2), n_kv = k.shape(0), n_head_kv = k.shape(1);
    if (k.shape(2) != d || v.shape(0) != n_kv || v.shape(1) != n_head_kv || v.shape(2) != d || n < 1 ||
        n_head_kv < 1 || n_head % n_head_kv || pos0 < 0 || pos0 + n != n_kv)
        throw ei::Error("kv_cache_attention: inconsistent shapes (n_kv must be pos0 + n)");
    if (sinks && (sinks->ndim() != 1 || sinks->shape(0) != n_head))
        throw ei::Error("kv_cache_attention: sinks is [n_head]");
    ei::KvCache kv(t, 1, n_kv, n_head_kv * d, d, ei::kv_type_from_name(type_k), ei::kv_type_from_name(type_v),
                   rotate_k, center_k);
    kv.store(0, 0, n_kv, k.data(), v.data());
    py::array_t<float> out({n, n_head, d});
    py::array_t<uint8_t> blob((py::ssize_t)kv.rows_bytes(n_kv));
    py::array_t<float> k_deq({n_kv, n_head_kv, d}), v_deq({n_kv, n_head_kv, d});
    {
        py::gil_scoped_release nogil;
        ei::ThreadPool pool(1);
        ei::AttentionShape shape{n_head, n_head_kv, d, 1.0f / std::sqrt((float)d), window};
        if (sinks) shape.sinks = sinks->data();
        ei::attention_cached(pool, t, q.data(), n, pos0, kv, 0, shape, out.mutable_data());
        kv.copy_rows_out(n_kv, blob.mutable_data());
        for (int64_t i = 0; i < n_kv; ++i) {
            kv.k_row_floats(0, i, k_deq.mutable_data() + i * kv.width());
            kv.v_row_floats(0, i, v_deq.mutable_data() + i * kv.width());
        }
    }
    return py::make_tuple(out, blob, k_deq, v_deq);
}

}  // namespace

void register_kv_attention(py::module_& m) {
    m.def("kv_cache_attention", &kv_cache_attention, py::arg("q"), py::arg("k"), py::arg("v"), py::arg("pos0"),
          py::arg("type_k") = "f16", py::arg("type_v") = "f16", py::arg("rotate_k") = false,
          py::arg("center_k") = false, py::arg("window") = 0, py::arg("isa") = py::none(),
          py::arg("sinks") = py::none(),
          "Queries q [n, n_head, head_dim] at positions pos0.. attending over k, v [pos0 + n, n_head_kv, head_dim]\n"
          "stored in a one-layer KV cache (scale 1 / sqrt(head_dim); sinks: [n_head] attention-sink logits, or\n"
          "None): (out, the cache's rows blob as copy_rows_out writes it, K and V as attention sees them).");
    m.def("attention_kv", &attention_kv, py::arg("q"), py::arg("k"), py::arg("v"), py::arg("type_k") = "f16",
          py::arg("type_v") = "f16", py::arg("window") = 0, py::arg("rotate_k") = false, py::arg("center_k") = false,
          py::arg("isa") = py::none(),
          "One query (the last position) attending over n_kv cached rows stored as type_k/type_v (K rotated if "
          "rotate_k, centered if center_k): returns (out [n_head, head_dim], K and V as stored, as attention "
          "sees them: dequantized, un-rotated, un-centered).");
    m.def("attention_kv_seconds", &attention_kv_seconds, py::arg("q"), py::arg("k"), py::arg("type_k") = "f16",
          py::arg("type_v") = "f16", py::arg("repeats") = 20, py::arg("rotate_k") = false,
          py::arg("center_k") = false, py::arg("isa") = py::none(),
          "Best time of one decode-step attention (last position over all n_kv rows, one thread).");
}
