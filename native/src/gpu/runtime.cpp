// OpenCL context, queue, buffers and kernels (see runtime.h).
#include "gpu/runtime.h"

#include <cstdio>
#include <vector>

#include "common/error.h"

namespace ei::cl {

void check(cl_int code, const char* call) {
    if (code != CL_SUCCESS) throw Error(std::string(call) + " failed: " + error_name(code));
}

namespace {

std::string mib(uint64_t bytes) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f MiB", (double)bytes / (1024.0 * 1024.0));
    return buf;
}

std::string device_string(const Api& api, cl_device_id d, cl_device_info param, const char* call) {
    size_t size = 0;
    check(api.GetDeviceInfo(d, param, 0, nullptr, &size), call);
    std::string s(size, '\0');
    if (size) check(api.GetDeviceInfo(d, param, size, s.data(), nullptr), call);
    while (!s.empty() && s.back() == '\0') s.pop_back();
    return s;
}

}  // namespace

void Kernel::set_raw(cl_uint index, size_t size, const void* value) {
    const cl_int rc = api_->SetKernelArg(k_.get(), index, size, value);
    if (rc != CL_SUCCESS)
        throw Error("clSetKernelArg(" + name_ + ", argument " + std::to_string(index) +
                    ") failed: " + error_name(rc));
}

std::unique_ptr<Device> Device::open(const std::string& library, int index) {
    std::unique_ptr<Device> dev(new Device());
    std::string reason;
    dev->lib_ = load_library(library, &reason);
    if (!dev->lib_.loaded()) throw Error("cannot open an OpenCL device: " + reason);
    std::vector<DeviceHandle> handles;
    DeviceList list = list_devices(dev->lib_, &handles);
    if (list.devices.empty()) throw Error("cannot open an OpenCL device: " + list.reason);
    if (index < 0 || index >= (int)list.devices.size())
        throw Error("OpenCL device " + std::to_string(index) + " does not exist (" +
                    std::to_string(list.devices.size()) + " device" +
                    (list.devices.size() == 1 ? "" : "s") + ": 0.." +
                    std::to_string(list.devices.size() - 1) + ", see `edgeinfer devices`)");
    const Api& api = dev->lib_.api;
    dev->index_ = index;
    dev->info_ = std::move(list.devices[index]);
    dev->id_ = handles[index].device;
    dev->driver_version_ = device_string(api, dev->id_, CL_DRIVER_VERSION, "clGetDeviceInfo");

    cl_int rc = CL_SUCCESS;
    cl_context ctx = api.CreateContext(nullptr, 1, &dev->id_, nullptr, nullptr, &rc);
    check(rc, "clCreateContext");
    dev->context_ = Handle<cl_context>(ctx, api.ReleaseContext);
    // In order, no profiling: the ops are a chain where each reads the previous one's output.
    cl_command_queue q = api.CreateCommandQueue(ctx, dev->id_, 0, &rc);
    check(rc, "clCreateCommandQueue");
    dev->queue_ = Handle<cl_command_queue>(q, api.ReleaseCommandQueue);
    return dev;
}

Device::~Device() {
    // Work still queued may write into buffers being released by their owners; drain it first.
    if (queue_) api().Finish(queue_.get());
}

Buffer Device::alloc(size_t bytes, const char* what) {
    if (bytes == 0) bytes = 1;  // a zero-size buffer is CL_INVALID_BUFFER_SIZE; keep callers simple
    if (bytes > info_.max_alloc_bytes)
        throw Error(std::string("OpenCL device '") + info_.name + "' cannot hold " + what + ": " +
                    mib(bytes) + " is more than its largest allocation (" +
                    mib(info_.max_alloc_bytes) + " of " + mib(info_.global_mem_bytes) + ")");
    cl_int rc = CL_SUCCESS;
    cl_mem m = api().CreateBuffer(context_.get(), CL_MEM_READ_WRITE, bytes, nullptr, &rc);
    if (rc == CL_MEM_OBJECT_ALLOCATION_FAILURE || rc == CL_OUT_OF_RESOURCES ||
        rc == CL_INVALID_BUFFER_SIZE)
        throw Error(std::string("OpenCL device '") + info_.name + "' is out of memory for " + what +
                    " (" + mib(bytes) + "; device memory " + mib(info_.global_mem_bytes) +
                    "): clCreateBuffer failed: " + error_name(rc));
    check(rc, "clCreateBuffer");
    Buffer b;
    b.mem = Handle<cl_mem>(m, api().ReleaseMemObject);
    b.bytes = bytes;
    return b;
}

void Device::write(const Buffer& dst, const void* src, size_t bytes, size_t offset) {
    if (offset + bytes > dst.bytes)
        throw Error("OpenCL write of " + std::to_string(bytes) + " bytes at " + std::to_string(offset) +
                    " overruns a buffer of " + std::to_string(dst.bytes));
    if (bytes == 0) return;
    check(api().EnqueueWriteBuffer(queue_.get(), dst.get(), CL_TRUE, offset, bytes, src, 0, nullptr,
                                   nullptr),
          "clEnqueueWriteBuffer");
}

void Device::read(const Buffer& src, void* dst, size_t bytes, size_t offset) {
    if (offset + bytes > src.bytes)
        throw Error("OpenCL read of " + std::to_string(bytes) + " bytes at " + std::to_string(offset) +
                    " overruns a buffer of " + std::to_string(src.bytes));
    if (bytes == 0) return;
    check(api().EnqueueReadBuffer(queue_.get(), src.get(), CL_TRUE, offset, bytes, dst, 0, nullptr,
                                  nullptr),
          "clEnqueueReadBuffer");
}

void Device::run(const Kernel& k, cl_uint dims, const size_t* global, const size_t* local) {
    for (cl_uint d = 0; d < dims; ++d)
        if (global[d] == 0) return;  // an empty range is legal for callers, not for OpenCL
    const cl_int rc =
        api().EnqueueNDRangeKernel(queue_.get(), k.get(), dims, nullptr, global, local, 0, nullptr, nullptr);
    if (rc != CL_SUCCESS) throw Error("clEnqueueNDRangeKernel(" + k.name() + ") failed: " + error_name(rc));
}

void Device::finish() { check(api().Finish(queue_.get()), "clFinish"); }

}  // namespace ei::cl
