// An OpenCL device's description as the Python dict `edgeinfer devices` and the test device show.
#pragma once
#include <pybind11/pybind11.h>

#include "gpu/opencl_loader.h"

namespace bindings {

inline pybind11::dict info_dict(const ei::cl::DeviceInfo& d) {
    pybind11::dict row;
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
    return row;
}

}  // namespace bindings
