// _core.Model and _core.Context: loading, and the one-call-per-step decode with zero-copy logits.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "common/error.h"
#include "cpu/kernels.h"
#include "engine/context.h"
#include "model/model.h"

namespace py = pybind11;
using ei::Context;
using ei::Model;

namespace {

std::shared_ptr<Model> load_model(const std::string& path) {
    py::gil_scoped_release release;
    return std::make_shared<Model>(path);
}

void decode(Context& ctx, py::array_t<int32_t, py::array::c_style | py::array::forcecast> tokens, bool all_logits) {
    if (tokens.ndim() != 1) throw ei::Error("tokens must be a 1-D sequence of ids");
    const int32_t* data = tokens.data();
    const int64_t n = tokens.shape(0);
    py::gil_scoped_release release;
    ctx.decode(data, n, all_logits);
}

// [rows][n_vocab] float32 view of the context's logits; the array owns a reference to the buffer.
py::array logits_view(const Context& ctx) {
    auto* keep = new std::shared_ptr<std::vector<float>>(ctx.logits_buffer());
    py::capsule owner(keep, [](void* p) { delete static_cast<std::shared_ptr<std::vector<float>>*>(p); });
    const py::ssize_t rows = ctx.n_logit_rows(), cols = ctx.n_vocab();
    py::array_t<float> view({rows, cols}, {cols * (py::ssize_t)sizeof(float), (py::ssize_t)sizeof(float)},
                            (*keep)->data(), owner);
    py::detail::array_proxy(view.ptr())->flags &= ~py::detail::npy_api::NPY_ARRAY_WRITEABLE_;
    return view;
}

}  // namespace

void register_model(py::module_& m) {
    py::class_<Model, std::shared_ptr<Model>>(m, "Model", "A loaded GGUF model (weights used in place from the mapping).")
        .def(py::init(&load_model), py::arg("path"))
        .def_property_readonly("gguf", [](const Model& self) { return self.file(); })
        .def_property_readonly("vocab", [](const Model& self) { return &self.vocab(); },
                               py::return_value_policy::reference_internal)
        .def_property_readonly("arch", [](const Model& self) { return self.hparams().arch; })
        .def_property_readonly("n_vocab", [](const Model& self) { return self.hparams().n_vocab; })
        .def_property_readonly("n_ctx_train", [](const Model& self) { return self.hparams().n_ctx_train; })
        .def_property_readonly("n_embd", [](const Model& self) { return self.hparams().n_embd; })
        .def_property_readonly("n_layer", [](const Model& self) { return self.hparams().n_layer; })
        .def_property_readonly("n_head", [](const Model& self) { return self.hparams().n_head; })
        .def_property_readonly("n_head_kv", [](const Model& self) { return self.hparams().n_head_kv; })
        .def_property_readonly("head_dim", [](const Model& self) { return self.hparams().head_dim; })
        .def_property_readonly("n_params", &Model::n_params)
        .def_property_readonly("load_ms", &Model::load_ms);

    py::class_<Context>(m, "Context", "Decoding state over a Model: KV cache, thread pool, logits.")
        .def(py::init([](std::shared_ptr<Model> model, int64_t n_ctx, int n_threads, int64_t n_batch) {
                 py::gil_scoped_release release;
                 return new Context(std::move(model), n_ctx, n_threads, n_batch);
             }),
             py::arg("model"), py::arg("n_ctx") = 2048, py::arg("n_threads") = 0, py::arg("n_batch") = 512,
             py::keep_alive<1, 2>())
        .def("decode", &decode, py::arg("tokens"), py::arg("all_logits") = false,
             "Run tokens after the cached ones (one native call; the GIL is released).")
        .def_property_readonly("logits", &logits_view,
                               "Logits of the last decode, [rows, n_vocab] float32, a read-only zero-copy view.")
        .def_property_readonly("n_past", &Context::n_past)
        .def_property_readonly("n_ctx", &Context::n_ctx)
        .def_property_readonly("n_batch", &Context::n_batch)
        .def_property_readonly("n_threads", &Context::n_threads)
        .def_property_readonly("kv_bytes", &Context::kv_bytes)
        .def("truncate", &Context::truncate, py::arg("n"), "Forget cached positions >= n.");

    m.def("physical_cores", &ei::physical_core_count);
    m.def("supported_architectures", &ei::supported_architectures,
          "Values of general.architecture this build can run.");
}
