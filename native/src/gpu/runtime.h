// An OpenCL device opened for computing: its context and in-order queue, device buffers and
// kernels, each an RAII owner of one cl_* object. Every failing OpenCL call throws ei::Error
// naming the call and the error code ("clCreateBuffer failed: CL_INVALID_BUFFER_SIZE (-61)");
// running out of device memory names the sizes.
//
// Lifetimes: a Device owns the OpenCL library it was opened through, so it must outlive every
// Buffer, Program and Kernel made from it (they hold a pointer to its entry points). Devices are
// neither copied nor moved; hold them by unique_ptr.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>

#include "gpu/opencl_loader.h"

namespace ei::cl {

// Throws ei::Error("<call> failed: <name> (<code>)") unless code is CL_SUCCESS.
void check(cl_int code, const char* call);

// One cl_* object and the function that releases it; move-only.
template <typename H>
class Handle {
public:
    using Release = cl_int(EI_CL_CALL*)(H);
    Handle() = default;
    Handle(H h, Release release) : h_(h), release_(release) {}
    Handle(Handle&& o) noexcept : h_(std::exchange(o.h_, nullptr)), release_(o.release_) {}
    Handle& operator=(Handle&& o) noexcept {
        if (this != &o) {
            reset();
            h_ = std::exchange(o.h_, nullptr);
            release_ = o.release_;
        }
        return *this;
    }
    Handle(const Handle&) = delete;
    Handle& operator=(const Handle&) = delete;
    ~Handle() { reset(); }

    H get() const { return h_; }
    explicit operator bool() const { return h_ != nullptr; }
    void reset() {
        if (h_) release_(h_);  // a release failing in a destructor has nowhere to go
        h_ = nullptr;
    }

private:
    H h_ = nullptr;
    Release release_ = nullptr;
};

// A device buffer of `bytes` bytes (CL_MEM_READ_WRITE).
struct Buffer {
    Handle<cl_mem> mem;
    size_t bytes = 0;
    cl_mem get() const { return mem.get(); }
};

// A kernel of a built program; arguments are set one by one (set_arg) or all at once (set_args).
class Kernel {
public:
    Kernel() = default;
    Kernel(Handle<cl_kernel> k, const Api* api, std::string name)
        : k_(std::move(k)), api_(api), name_(std::move(name)) {}

    cl_kernel get() const { return k_.get(); }
    const std::string& name() const { return name_; }

    void set_arg(cl_uint index, const Buffer& b) {
        cl_mem m = b.get();
        set_raw(index, sizeof m, &m);
    }
    void set_local(cl_uint index, size_t bytes) { set_raw(index, bytes, nullptr); }  // __local scratch
    template <typename T>
    void set_arg(cl_uint index, const T& value) {
        static_assert(std::is_trivially_copyable_v<T>, "kernel arguments are plain values");
        set_raw(index, sizeof(T), &value);
    }
    template <typename... Args>
    void set_args(const Args&... args) {
        cl_uint i = 0;
        (set_arg(i++, args), ...);
    }

private:
    void set_raw(cl_uint index, size_t size, const void* value);

    Handle<cl_kernel> k_;
    const Api* api_ = nullptr;
    std::string name_;
};

class Device {
public:
    // Opens device `index` in `edgeinfer devices`' order (list_devices), through `library` (""
    // for the default). No library / no device / index out of range -> ei::Error saying which.
    static std::unique_ptr<Device> open(const std::string& library, int index);
    ~Device();
    Device(const Device&) = delete;
    Device& operator=(const Device&) = delete;

    const Api& api() const { return lib_.api; }
    const DeviceInfo& info() const { return info_; }
    const std::string& driver_version() const { return driver_version_; }
    int index() const { return index_; }
    cl_device_id id() const { return id_; }
    cl_context context() const { return context_.get(); }
    cl_command_queue queue() const { return queue_.get(); }

    // A new buffer; `what` names it in the out-of-memory error, which also gives the sizes.
    Buffer alloc(size_t bytes, const char* what);
    // Blocking copies host <-> device of `bytes` bytes at `offset` into the buffer.
    void write(const Buffer& dst, const void* src, size_t bytes, size_t offset = 0);
    void read(const Buffer& src, void* dst, size_t bytes, size_t offset = 0);
    // Enqueues k over `dims` dimensions of global size `global` (rounded up to multiples of
    // `local` by the caller); local == nullptr lets the driver choose.
    void run(const Kernel& k, cl_uint dims, const size_t* global, const size_t* local);
    void finish();

private:
    Device() = default;

    Library lib_;  // first member: destroyed last, after everything that calls into it
    DeviceInfo info_;
    std::string driver_version_;
    int index_ = -1;
    cl_device_id id_ = nullptr;
    Handle<cl_context> context_;
    Handle<cl_command_queue> queue_;
};

}  // namespace ei::cl
