// What a Context asks of the OpenCL offload (gpu/offload.h): which layers go to which device.
// A plain struct, so that engine/context.h can include it without the OpenCL runtime.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ei::cl {

// Where to offload: the layers, the device (its index in `edgeinfer devices`), the OpenCL library
// and the folder for compiled programs (both from Python, which owns paths).
struct OffloadRequest {
    std::vector<int> layers;
    int device = 0;
    std::string library;    // "" = the default libOpenCL
    std::string cache_dir;  // "" = compiled programs in memory only
};

}  // namespace ei::cl
