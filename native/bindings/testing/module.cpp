// edgeinfer._testing: entry points for tests and measurement scripts only. Each runs one kernel,
// one float op, one attention, one OpenCL device op, one layer on both backends or one
// mixture-of-experts feed-forward on numpy arrays, with a chosen ISA's table, so that every
// implementation can be compared with the scalar reference; or one pre-tokenizer on text; or a
// plain read of memory (the bandwidth reference of scripts/read_bandwidth.py). The
// package never imports this module; the forward pass calls the same code directly.
#include <pybind11/pybind11.h>

#include "shared/error_translation.h"

namespace py = pybind11;

void register_kernel_entries(py::module_& m);
void register_ops(py::module_& m);
void register_kv_attention(py::module_& m);
void register_opencl_device(py::module_& m);
void register_offload_layer(py::module_& m);
void register_moe(py::module_& m);
void register_pretokenize(py::module_& m);
void register_read_memory(py::module_& m);
void register_stream_gemv(py::module_& m);

PYBIND11_MODULE(_testing, m) {
    m.doc() = "edgeinfer test-only entry points (kernels, ops and device ops one call at a time)";
    // The same exception classes as the core's: a test catches EdgeInferError from either module.
    py::module_ core = py::module_::import("edgeinfer._core");
    // Kept for the life of the process (released, never decremented), as the core keeps them.
    auto keep = [&core](const char* name) { return py::object(core.attr(name)).release(); };
    static const bindings::ErrorClasses classes{keep("EdgeInferError"), keep("ModelFormatError"),
                                                keep("ContextOverflowError"), keep("StateFileError")};
    py::register_local_exception_translator(
        [](std::exception_ptr p) { bindings::translate_core_error(classes, p); });
    register_kernel_entries(m);
    register_ops(m);
    register_kv_attention(m);
    register_opencl_device(m);
    register_offload_layer(m);
    register_moe(m);
    register_pretokenize(m);
    register_read_memory(m);
    register_stream_gemv(m);
}
