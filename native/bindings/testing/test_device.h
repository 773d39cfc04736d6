// The OpenCLDevice of edgeinfer._testing (bind_opencl_device.cpp): an opened device, its program
// cache and its ops, shared with the bindings that run a layer op on it (bind_moe.cpp).
#pragma once
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <memory>
#include <string>
#include <vector>

#include "gpu/ops.h"
#include "gpu/program_cache.h"
#include "gpu/runtime.h"

namespace testing {

using Floats = pybind11::array_t<float, pybind11::array::c_style | pybind11::array::forcecast>;

// A device, its program cache and its ops; each method copies its inputs to new device buffers,
// runs one op and reads the result back.
class TestDevice {
public:
    TestDevice(int index, const std::string& library, const std::string& cache_dir)
        : dev_(ei::cl::Device::open(library, index)),
          programs_(std::make_unique<ei::cl::ProgramCache>(*dev_, cache_dir)),
          ops_(std::make_unique<ei::cl::DeviceOps>(*dev_, *programs_)) {}

    ei::cl::Device& dev() { return *dev_; }
    ei::cl::ProgramCache& programs() { return *programs_; }
    ei::cl::DeviceOps& ops() { return *ops_; }

    ei::cl::Buffer upload(const void* data, size_t bytes, const char* what) {
        ei::cl::Buffer b = dev_->alloc(bytes, what);
        dev_->write(b, data, bytes);
        return b;
    }
    ei::cl::Buffer upload(const Floats& a, const char* what) { return upload(a.data(), a.size() * sizeof(float), what); }
    pybind11::array_t<float> download(const ei::cl::Buffer& b, std::vector<pybind11::ssize_t> shape) {
        pybind11::array_t<float> out(shape);
        dev_->read(b, out.mutable_data(), out.size() * sizeof(float));
        return out;
    }

private:
    // Destroyed bottom-up: ops and programs (kernels, cl_programs) before the device.
    std::unique_ptr<ei::cl::Device> dev_;
    std::unique_ptr<ei::cl::ProgramCache> programs_;
    std::unique_ptr<ei::cl::DeviceOps> ops_;
};

}  // namespace testing
