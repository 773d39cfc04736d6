// The float ops of the kernel table (KernelTable::ops), one call each, for tests: every ISA's
// version can be compared with the scalar reference and with a numpy formula. The forward pass
// calls the table directly, never through here.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>

#include <cmath>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/thread_pool.h"
#include "cpu/kernels.h"
#include "layers/cpu_blocks.h"
#include "layers/params.h"
#include "shared/table_arg.h"

namespace py = pybind11;

namespace {

using Floats = py::array_t<float, py::array::c_style | py::array::forcecast>;
using Halves = py::array_t<uint16_t, py::array::c_style | py::array::forcecast>;

void require(bool ok, const std::string& what) {
    if (!ok) throw ei::Error(what);
}

}  // namespace

void register_ops(py::module_& m) {
    m.def("attn_f16_row", [](const Floats& q, const Halves& k, const Halves& v, float scale, const py::object& isa) {
        const ei::KernelTable& t = table_for(isa);
        require(q.ndim() == 1 && k.ndim() == 2 && v.ndim() == 2,
                "attn_f16_row: q is [head_dim], k and v [n_kv, head_dim]");
        const int64_t d = q.shape(0), n_kv = k.shape(0);
        require(n_kv >= 1 && k.shape(1) == d && v.shape(0) == n_kv && v.shape(1) == d,
                "attn_f16_row: k and v must both be [n_kv >= 1, head_dim] with q's head_dim");
        py::array_t<float> out(d);
        std::vector<uint16_t> scratch(2 * d);
        {
            py::gil_scoped_release nogil;
            const ei::AttnF16Query query{q.data(), out.mutable_data(), 0, n_kv - 1};
            t.ops.attn_f16_rows(&query, 1, k.data(), v.data(), d, d, scale, scratch.data());
        }
        return out;
    }, py::arg("q"), py::arg("k"), py::arg("v"), py::arg("scale"), py::arg("isa") = py::none(),
       "One query row of flash attention over F16 K/V rows (uint16 bit patterns, [n_kv, head_dim]): "
       "softmax(scale * K q16) V with ggml's F16 rounding -> float32 [head_dim].");

    m.def("attn_f16_rows", [](const Floats& q, const std::vector<int64_t>& first, const std::vector<int64_t>& last,
                              const Halves& k, const Halves& v, float scale, const py::object& isa) {
        const ei::KernelTable& t = table_for(isa);
        require(q.ndim() == 2 && k.ndim() == 2 && v.ndim() == 2,
                "attn_f16_rows: q is [n_queries, head_dim], k and v [n_kv, head_dim]");
        const int64_t m = q.shape(0), d = q.shape(1), n_kv = k.shape(0);
        require(m >= 1 && m <= ei::kAttnMaxQueries && (int64_t)first.size() == m && (int64_t)last.size() == m,
                "attn_f16_rows: 1.." + std::to_string(ei::kAttnMaxQueries) + " queries, a first and last for each");
        require(k.shape(1) == d && v.shape(0) == n_kv && v.shape(1) == d, "attn_f16_rows: k and v must be [n_kv, head_dim]");
        for (int64_t j = 0; j < m; ++j)
            require(0 <= first[j] && first[j] <= last[j] && last[j] < n_kv, "attn_f16_rows: positions outside k");
        py::array_t<float> out({m, d});
        std::vector<ei::AttnF16Query> queries;
        for (int64_t j = 0; j < m; ++j) queries.push_back({q.data() + j * d, out.mutable_data() + j * d, first[j], last[j]});
        std::vector<uint16_t> scratch(2 * d * m);
        {
            py::gil_scoped_release nogil;
            t.ops.attn_f16_rows(queries.data(), m, k.data(), v.data(), d, d, scale, scratch.data());
        }
        return out;
    }, py::arg("q"), py::arg("first"), py::arg("last"), py::arg("k"), py::arg("v"), py::arg("scale"),
       py::arg("isa") = py::none(),
       "Several queries over the same F16 K/V rows in one call, query j over positions first[j]..last[j] "
       "-> float32 [n_queries, head_dim].");

    m.def("attention_f16", [](const Floats& q, const Halves& k, const Halves& v, int64_t window, bool tiled,
                              int n_threads, const py::object& isa, bool fast) {
        // A copy: `tiled` may take the tiled and span kernels out. fast: FloatOrder::fast's table.
        ei::KernelTable t = fast ? ei::kernels_for(table_for(isa).isa, ei::FloatOrder::fast) : table_for(isa);
        if (!tiled) t.ops.attn_f16_tile = t.ops.attn_f16_span = nullptr;
        require(q.ndim() == 3 && k.ndim() == 3 && v.ndim() == 3,
                "attention_f16: q is [n, n_head, head_dim], k and v [n_kv, n_head_kv, head_dim]");
        const int64_t n = q.shape(0), n_head = q.shape(1), d = q.shape(2), n_kv = k.shape(0), n_head_kv = k.shape(1);
        require(n >= 1 && n <= n_kv && n_head_kv >= 1 && n_head % n_head_kv == 0 && k.shape(2) == d &&
                    v.shape(0) == n_kv && v.shape(1) == n_head_kv && v.shape(2) == d && n_threads >= 1,
                "attention_f16: inconsistent shapes (the n queries are the last n of the n_kv positions)");
        py::array_t<float> out({n, n_head, d});
        {
            py::gil_scoped_release nogil;
            ei::ThreadPool pool(n_threads);
            const ei::AttentionShape shape{n_head, n_head_kv, d, 1.0f / std::sqrt((float)d), window};
            ei::attention_f16(pool, t, q.data(), n, n_kv - n, k.data(), v.data(), shape, out.mutable_data());
        }
        return out;
    }, py::arg("q"), py::arg("k"), py::arg("v"), py::arg("window") = 0, py::arg("tiled") = true,
       py::arg("n_threads") = 1, py::arg("isa") = py::none(), py::arg("fast") = false,
       "Causal attention of the last n of n_kv positions over F16 K/V (uint16 bit patterns) as the "
       "forward pass runs it for a batch (layers/cpu_blocks.h attention_f16); tiled=False keeps every row "
       "on the one-row kernel; fast=True in FloatOrder::fast (short batches over fixed spans).");

    m.def("swiglu", [](const Floats& gate, const Floats& up, const py::object& isa) {
        const ei::KernelTable& t = table_for(isa);
        require(gate.ndim() == 1 && up.ndim() == 1 && gate.size() == up.size(),
                "swiglu: gate and up must be 1-d and the same length");
        py::array_t<float> out(gate.size());
        {
            py::gil_scoped_release nogil;
            t.ops.swiglu(gate.size(), gate.data(), up.data(), out.mutable_data());
        }
        return out;
    }, py::arg("gate"), py::arg("up"), py::arg("isa") = py::none(), "silu(gate) * up, float32.");

    m.def("soft_max", [](const Floats& x, float max, const py::object& isa) {
        const ei::KernelTable& t = table_for(isa);
        require(x.ndim() == 1, "soft_max: x must be 1-d");
        py::array_t<float> y(x.size());
        double sum = 0.0;
        {
            py::gil_scoped_release nogil;
            sum = t.ops.soft_max(x.size(), x.data(), max, y.mutable_data());
        }
        return py::make_tuple(y, sum);
    }, py::arg("x"), py::arg("max"), py::arg("isa") = py::none(),
       "(exp(x - max) float32, their sum as a double): ggml_vec_soft_max_f32 as the table computes it.");

    m.def("rope_rotate", [](const Floats& x, const Floats& cs, const py::object& isa) {
        const ei::KernelTable& t = table_for(isa);
        require(x.ndim() == 2 && cs.ndim() == 1, "rope_rotate: x is [n_heads, head_dim], cs is [n_rot]");
        const int64_t n_heads = x.shape(0), head_dim = x.shape(1), n_rot = cs.shape(0);
        require(n_rot % 2 == 0 && n_rot <= head_dim, "rope_rotate: n_rot must be even and <= head_dim");
        py::array_t<float> out({n_heads, head_dim});
        {
            py::gil_scoped_release nogil;
            t.ops.rope_rotate(x.data(), out.mutable_data(), n_heads, head_dim, n_rot, cs.data());
        }
        return out;
    }, py::arg("x"), py::arg("cs"), py::arg("isa") = py::none(),
       "RoPE normal-mode rotation of adjacent pairs: cs = [cos0, sin0, cos1, sin1, ...] (n_rot values); "
       "dims past n_rot are copied.");

    m.def("rope_cos_sin", [](int64_t n_rot, const std::vector<int32_t>& positions, float freq_base, float freq_scale,
                             const std::optional<Floats>& freq_factors, float attn_factor, float ext_factor,
                             int32_t n_ctx_orig, float beta_fast, float beta_slow, bool scale_magnitude) {
        require(n_rot > 0 && n_rot % 2 == 0, "rope_cos_sin: n_rot must be even and positive");
        if (freq_factors)
            require(freq_factors->ndim() == 1 && freq_factors->shape(0) == n_rot / 2,
                    "rope_cos_sin: freq_factors is [n_rot/2]");
        ei::RopeParams p{n_rot, freq_base, freq_scale, freq_factors ? freq_factors->data() : nullptr};
        p.attn_factor = attn_factor;
        p.ext_factor = ext_factor;
        p.n_ctx_orig = n_ctx_orig;
        p.beta_fast = beta_fast;
        p.beta_slow = beta_slow;
        p.scale_magnitude = scale_magnitude;
        py::array_t<float> out({(int64_t)positions.size(), n_rot});
        for (size_t i = 0; i < positions.size(); ++i) ei::rope_cos_sin(p, positions[i], out.mutable_data() + i * n_rot);
        return out;
    }, py::arg("n_rot"), py::arg("positions"), py::arg("freq_base"), py::arg("freq_scale") = 1.0f,
       py::arg("freq_factors") = py::none(), py::arg("attn_factor") = 1.0f, py::arg("ext_factor") = 0.0f,
       py::arg("n_ctx_orig") = 0, py::arg("beta_fast") = 32.0f, py::arg("beta_slow") = 1.0f,
       py::arg("scale_magnitude") = true,
       "layers/params.h rope_cos_sin for each position -> float32 [n, n_rot] (cos, sin per pair): the "
       "rotation every backend applies, YaRN (ext_factor != 0) included.");

    m.def("geglu", [](const Floats& gate, const Floats& up, const py::object& isa) {
        const ei::KernelTable& t = table_for(isa);
        require(gate.ndim() == 1 && up.ndim() == 1 && gate.size() == up.size(),
                "geglu: gate and up must be 1-d and the same length");
        py::array_t<float> out(gate.size());
        {
            py::gil_scoped_release nogil;
            t.ops.geglu(gate.size(), gate.data(), up.data(), out.mutable_data());
        }
        return out;
    }, py::arg("gate"), py::arg("up"), py::arg("isa") = py::none(),
       "gelu_tanh(gate) * up through ggml's F16 GELU table, float32.");

    m.def("rope_rotate_neox", [](const Floats& x, const Floats& cs, const py::object& isa) {
        const ei::KernelTable& t = table_for(isa);
        require(x.ndim() == 2 && cs.ndim() == 1, "rope_rotate_neox: x is [n_heads, head_dim], cs is [n_rot]");
        const int64_t n_heads = x.shape(0), head_dim = x.shape(1), n_rot = cs.shape(0);
        require(n_rot % 2 == 0 && n_rot <= head_dim, "rope_rotate_neox: n_rot must be even and <= head_dim");
        py::array_t<float> out({n_heads, head_dim});
        {
            py::gil_scoped_release nogil;
            t.ops.rope_rotate_neox(x.data(), out.mutable_data(), n_heads, head_dim, n_rot, cs.data());
        }
        return out;
    }, py::arg("x"), py::arg("cs"), py::arg("isa") = py::none(),
       "RoPE neox-mode rotation: dim i pairs with dim i + n_rot/2, rotated by cs[2i] = cos, cs[2i+1] = sin; "
       "dims past n_rot are copied.");
}
