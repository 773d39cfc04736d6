// One table's packed GEMV streaming ~`mib` MiB of weights, apart from the rest of a decode step, for
// scripts/stream_packed_gemv.py: how close a kernel comes to the machine's plain read, and (cached)
// how fast it computes when its weights sit in L2. This is how the dropped requests of
// cpu/x86/request_ahead.h were found (docs/PERFORMANCE.md, Zen 4).
#include <pybind11/pybind11.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <iterator>
#include <string>
#include <memory>
#include <random>
#include <vector>

#include "common/error.h"
#include "common/thread_pool.h"
#include "common/weight_arena.h"
#include "cpu/kernels.h"
#include "cpu/repack.h"
#include "quant/quantize.h"
#include "quant/types.h"
#include "shared/table_arg.h"

namespace py = pybind11;

void register_stream_gemv(py::module_& m) {
    m.def("stream_packed_gemv", [](uint32_t type, int64_t k, int64_t rows, int cols, const py::object& isa, bool exact,
                                   bool one_token_slot, int threads, double mib, bool cached, int runs) {
        if (type >= ei::TYPE_COUNT || !ei::has_quantizer(type))
            throw ei::Error("stream_packed_gemv: type " + std::to_string(type) + " is not a weight type with a quantizer");
        if (k <= 0 || rows <= 0) throw ei::Error("stream_packed_gemv: k and rows must be positive");
        const ei::KernelTable& t =
            ei::kernels_for(table_for(isa).isa, exact ? ei::FloatOrder::llama_cpp : ei::FloatOrder::fast);
        const ei::TypeKernels& kt = t.types[type];
        ei::GemmFn gemv = one_token_slot && cols == 1 && kt.gemm_16row_groups_one_token ? kt.gemm_16row_groups_one_token
                                                                                        : kt.gemm_16row_groups;
        if (!gemv || !ei::packed_layout_supported(type, rows, k))
            throw ei::Error(std::string("no packed GEMV for ") + ei::type_info(type).name + " at " +
                            std::to_string(rows) + " x " + std::to_string(k) + " in this table");
        if (cols < 1 || cols > ei::kSmallBatchMax || threads < 1 || runs < 1 || mib <= 0)
            throw ei::Error("stream_packed_gemv: cols 1.." + std::to_string(ei::kSmallBatchMax) +
                            ", threads, runs and mib above 0");
        // One matrix of random weights, quantized and packed as loading does, copied end to end
        // into huge-page memory as the weight arena lays a model out (or, cached, passed over
        // again and again).
        std::mt19937 rng(1);
        std::normal_distribution<float> normal(0.0f, 1.0f);
        std::vector<float> x((size_t)(k * rows));
        for (float& v : x) v = normal(rng);
        const size_t row_bytes = ei::row_bytes(type, k);
        std::vector<uint8_t> raw(row_bytes * (size_t)rows);
        ei::quantize_row_fn(type)(x.data(), raw.data(), k * rows);
        const std::shared_ptr<const uint8_t> packed = ei::make_packed(type, raw.data(), row_bytes, rows, k);
        const size_t group_bytes = ei::packed_group_bytes(type, k), matrix_bytes = group_bytes * (size_t)(rows / 16);
        const int64_t passes_per_run = std::max<int64_t>(1, (int64_t)(mib * 1048576.0 / (double)matrix_bytes));
        const int64_t copies = cached ? 1 : passes_per_run;
        std::vector<std::shared_ptr<uint8_t>> matrices;
        for (int64_t c = 0; c < copies; ++c) {
            matrices.push_back(ei::alloc_weight_bytes(matrix_bytes));
            std::memcpy(matrices.back().get(), packed.get(), matrix_bytes);
        }
        const uint32_t act_type = kt.vec_dot_type;
        const size_t act_row = ei::row_bytes(act_type, k);
        std::vector<uint8_t> act(act_row * (size_t)cols);
        for (int c = 0; c < cols; ++c) {
            for (int64_t i = 0; i < k; ++i) x[(size_t)i] = normal(rng);
            t.types[act_type].from_float(x.data(), act.data() + (size_t)c * act_row, k);
        }
        double best = 1e30;
        {
            py::gil_scoped_release release;
            ei::ThreadPool pool(threads);
            std::vector<std::vector<float>> y((size_t)pool.size(), std::vector<float>((size_t)(rows * cols)));
            for (int r = 0; r < runs + 1; ++r) {  // the first pass warms up
                const auto t0 = std::chrono::steady_clock::now();
                for (int64_t p = 0; p < passes_per_run; ++p) {
                    const uint8_t* w = matrices[(size_t)(p % copies)].get();
                    pool.run([&](int i, int n) {  // each thread its own groups, as a decode step splits them
                        int64_t g0, g1;
                        ei::ThreadPool::split(rows / 16, i, n, &g0, &g1);
                        if (g1 > g0)
                            gemv(k, (g1 - g0) * 16, cols, w + (size_t)g0 * group_bytes, group_bytes, act.data(), act_row,
                                 y[(size_t)i].data(), (g1 - g0) * 16);
                    });
                }
                const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
                if (r > 0) best = std::min(best, s);
            }
        }
        return py::make_tuple((double)matrix_bytes * (double)passes_per_run, best);
    }, py::arg("type"), py::arg("k"), py::arg("rows"), py::arg("cols") = 1, py::arg("isa") = py::none(),
       py::arg("exact") = false, py::arg("one_token_slot") = true, py::arg("threads") = 1, py::arg("mib") = 144.0,
       py::arg("cached") = false, py::arg("runs") = 5,
       "(bytes a pass, best seconds of `runs` passes): the packed GEMV of `type` (k columns, rows a "
       "multiple of 16) in the fast order (exact: llama.cpp's) over copies of one packed matrix filling "
       "~mib MiB, `cols` activation columns, `threads` threads splitting each matrix's groups; "
       "one_token_slot: one column through gemm_16row_groups_one_token where the table has it; cached: "
       "one matrix passed over again and again (from L2 if it fits).");
}
