// OpenCL from Python: device discovery for `edgeinfer devices` (gpu/opencl_loader.h) and the
// weight types the device matmul takes. The opened test device (one op per call) is in testing/.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "gpu/opencl_loader.h"
#include "gpu/ops.h"
#include "quant/types.h"
#include "shared/opencl_info.h"

namespace py = pybind11;

void register_gpu(py::module_& m) {
    m.def(
        "opencl_devices",
        [](const std::string& library) {
            ei::cl::DeviceList list;
            {
                py::gil_scoped_release nogil;  // drivers can take a while to enumerate
                list = ei::cl::list_devices(library);
            }
            py::list devices;
            for (const auto& d : list.devices) devices.append(bindings::info_dict(d));
            return py::make_tuple(devices, list.reason);
        },
        py::arg("library") = "",
        "(devices, reason): every OpenCL device as a dict {platform, platform_vendor,\n"
        "platform_version, name, vendor, type, compute_units, global_mem_bytes, max_alloc_bytes,\n"
        "opencl_version, fp16}, and why the list is empty ('' when it is not). `library` opens\n"
        "that file instead of the default libOpenCL.so.1 / libOpenCL.so. No library, platform\n"
        "or device is not an error; a failing OpenCL call raises EdgeInferError.");

    m.def("opencl_matmul_types", [] {
        std::vector<std::string> names;
        for (uint32_t t = 0; t < ei::TYPE_COUNT; ++t)
            if (ei::cl::matmul_supports(t)) names.push_back(ei::type_info(t).name);
        return names;
    }, "Names of the weight types the OpenCL matmul takes (ggml's names: 'f32', 'q4_K', ...).");
}
