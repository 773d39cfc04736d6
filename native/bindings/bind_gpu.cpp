// GPU discovery for `edgeinfer devices`: the OpenCL platforms and devices of this machine, found
// through the run-time loaded OpenCL library (gpu/opencl_loader.h).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>

#include "gpu/opencl_loader.h"

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
            for (const auto& d : list.devices) {
                py::dict row;
                row["platform"] = d.platform;
                row["platform_vendor"] = d.platform_vendor;
                row["platform_version"] = d.platform_version;
                row["name"] = d.name;
                row["vendor"] = d.vendor;
                row["type"] = d.type;
                row["compute_units"] = d.compute_units;
                row["global_mem_bytes"] = d.global_mem_bytes;
                row["max_alloc_bytes"] = d.max_alloc_bytes;
                row["opencl_version"] = d.opencl_version;
                row["fp16"] = d.fp16;
                devices.append(row);
            }
            return py::make_tuple(devices, list.reason);
        },
        py::arg("library") = "",
        "(devices, reason): every OpenCL device as a dict {platform, platform_vendor,\n"
        "platform_version, name, vendor, type, compute_units, global_mem_bytes, max_alloc_bytes,\n"
        "opencl_version, fp16}, and why the list is empty ('' when it is not). `library` opens\n"
        "that file instead of the default libOpenCL.so.1 / libOpenCL.so. No library, platform\n"
        "or device is not an error; a failing OpenCL call raises EdgeInferError.");
}
