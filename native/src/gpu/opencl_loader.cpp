// Run-time loading of the OpenCL ICD loader and device enumeration (see opencl_loader.h).
#include "gpu/opencl_loader.h"

#include <dlfcn.h>

#include <cstring>
#include <utility>

#include "common/error.h"

namespace ei::cl {

Library::Library(Library&& other) noexcept
    : handle(std::exchange(other.handle, nullptr)), api(other.api), path(std::move(other.path)) {}

Library& Library::operator=(Library&& other) noexcept {
    if (this != &other) {
        if (handle) dlclose(handle);
        handle = std::exchange(other.handle, nullptr);
        api = other.api;
        path = std::move(other.path);
    }
    return *this;
}

Library::~Library() {
    if (handle) dlclose(handle);
}

namespace {

std::vector<std::string> default_names() {
#if defined(__APPLE__)
    return {"/System/Library/Frameworks/OpenCL.framework/OpenCL"};
#else
    return {"libOpenCL.so.1", "libOpenCL.so"};
#endif
}

template <typename Fn>
void resolve(void* handle, const char* symbol, const std::string& path, Fn*& out) {
    void* p = dlsym(handle, symbol);
    if (!p) throw Error(path + " is not an OpenCL library: " + symbol + " is missing");
    out = reinterpret_cast<Fn*>(p);
}

void check(cl_int code, const char* call) {
    if (code != CL_SUCCESS) throw Error(std::string(call) + " failed: " + error_name(code));
}

// A char[] query: ask for the size, then the bytes; the trailing NUL is dropped.
template <typename Handle, typename Query, typename Param>
std::string get_string(Query query, Handle h, Param param, const char* call) {
    size_t size = 0;
    check(query(h, param, 0, nullptr, &size), call);
    std::string s(size, '\0');
    if (size) check(query(h, param, size, s.data(), nullptr), call);
    while (!s.empty() && s.back() == '\0') s.pop_back();
    return s;
}

template <typename T>
T get_scalar(const Api& api, cl_device_id d, cl_device_info param) {
    T value{};
    check(api.GetDeviceInfo(d, param, sizeof value, &value, nullptr), "clGetDeviceInfo");
    return value;
}

std::string type_name(cl_device_type t) {
    if (t & CL_DEVICE_TYPE_GPU) return "GPU";
    if (t & CL_DEVICE_TYPE_CPU) return "CPU";
    if (t & CL_DEVICE_TYPE_ACCELERATOR) return "accelerator";
    if (t & CL_DEVICE_TYPE_CUSTOM) return "custom";
    return "other";
}

bool has_extension(const std::string& list, const char* ext) {
    // Extensions are space-separated; match whole words only.
    size_t n = std::strlen(ext);
    for (size_t pos = list.find(ext); pos != std::string::npos; pos = list.find(ext, pos + 1)) {
        bool starts = pos == 0 || list[pos - 1] == ' ';
        bool ends = pos + n == list.size() || list[pos + n] == ' ';
        if (starts && ends) return true;
    }
    return false;
}

}  // namespace

Library load_library(const std::string& path, std::string* reason) {
    std::vector<std::string> names = path.empty() ? default_names() : std::vector<std::string>{path};
    Library lib;
    for (const auto& name : names) {
        lib.handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
        if (lib.handle) {
            lib.path = name;
            break;
        }
    }
    if (!lib.handle) {
        if (reason) *reason = "no OpenCL library (" + names.front() + " not found)";
        return lib;
    }
    resolve(lib.handle, "clGetPlatformIDs", lib.path, lib.api.GetPlatformIDs);
    resolve(lib.handle, "clGetPlatformInfo", lib.path, lib.api.GetPlatformInfo);
    resolve(lib.handle, "clGetDeviceIDs", lib.path, lib.api.GetDeviceIDs);
    resolve(lib.handle, "clGetDeviceInfo", lib.path, lib.api.GetDeviceInfo);
    Api& a = lib.api;
    resolve(lib.handle, "clCreateContext", lib.path, a.CreateContext);
    resolve(lib.handle, "clReleaseContext", lib.path, a.ReleaseContext);
    resolve(lib.handle, "clCreateCommandQueue", lib.path, a.CreateCommandQueue);
    resolve(lib.handle, "clReleaseCommandQueue", lib.path, a.ReleaseCommandQueue);
    resolve(lib.handle, "clCreateBuffer", lib.path, a.CreateBuffer);
    resolve(lib.handle, "clReleaseMemObject", lib.path, a.ReleaseMemObject);
    resolve(lib.handle, "clEnqueueWriteBuffer", lib.path, a.EnqueueWriteBuffer);
    resolve(lib.handle, "clEnqueueReadBuffer", lib.path, a.EnqueueReadBuffer);
    resolve(lib.handle, "clCreateProgramWithSource", lib.path, a.CreateProgramWithSource);
    resolve(lib.handle, "clCreateProgramWithBinary", lib.path, a.CreateProgramWithBinary);
    resolve(lib.handle, "clBuildProgram", lib.path, a.BuildProgram);
    resolve(lib.handle, "clGetProgramInfo", lib.path, a.GetProgramInfo);
    resolve(lib.handle, "clGetProgramBuildInfo", lib.path, a.GetProgramBuildInfo);
    resolve(lib.handle, "clReleaseProgram", lib.path, a.ReleaseProgram);
    resolve(lib.handle, "clCreateKernel", lib.path, a.CreateKernel);
    resolve(lib.handle, "clReleaseKernel", lib.path, a.ReleaseKernel);
    resolve(lib.handle, "clSetKernelArg", lib.path, a.SetKernelArg);
    resolve(lib.handle, "clEnqueueNDRangeKernel", lib.path, a.EnqueueNDRangeKernel);
    resolve(lib.handle, "clFinish", lib.path, a.Finish);
    return lib;
}

DeviceList list_devices(const std::string& library_path) {
    DeviceList out;
    Library lib = load_library(library_path, &out.reason);
    if (!lib.loaded()) return out;
    return list_devices(lib, nullptr);
}

DeviceList list_devices(const Library& lib, std::vector<DeviceHandle>* handles) {
    DeviceList out;
    const Api& api = lib.api;

    cl_uint n_platforms = 0;
    cl_int rc = api.GetPlatformIDs(0, nullptr, &n_platforms);
    // The ICD loader reports "no platform" as an error code; for us it is an empty machine.
    if (rc == CL_PLATFORM_NOT_FOUND_KHR || (rc == CL_SUCCESS && n_platforms == 0)) {
        out.reason = "no OpenCL platforms";
        return out;
    }
    check(rc, "clGetPlatformIDs");
    std::vector<cl_platform_id> platforms(n_platforms);
    check(api.GetPlatformIDs(n_platforms, platforms.data(), nullptr), "clGetPlatformIDs");

    for (cl_platform_id p : platforms) {
        cl_uint n_devices = 0;
        rc = api.GetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 0, nullptr, &n_devices);
        if (rc == CL_DEVICE_NOT_FOUND || (rc == CL_SUCCESS && n_devices == 0)) continue;
        check(rc, "clGetDeviceIDs");
        std::vector<cl_device_id> devices(n_devices);
        check(api.GetDeviceIDs(p, CL_DEVICE_TYPE_ALL, n_devices, devices.data(), nullptr),
              "clGetDeviceIDs");

        const char* pcall = "clGetPlatformInfo";
        std::string pname = get_string(api.GetPlatformInfo, p, CL_PLATFORM_NAME, pcall);
        std::string pvendor = get_string(api.GetPlatformInfo, p, CL_PLATFORM_VENDOR, pcall);
        std::string pversion = get_string(api.GetPlatformInfo, p, CL_PLATFORM_VERSION, pcall);
        for (cl_device_id d : devices) {
            const char* dcall = "clGetDeviceInfo";
            DeviceInfo info;
            info.platform = pname;
            info.platform_vendor = pvendor;
            info.platform_version = pversion;
            info.name = get_string(api.GetDeviceInfo, d, CL_DEVICE_NAME, dcall);
            info.vendor = get_string(api.GetDeviceInfo, d, CL_DEVICE_VENDOR, dcall);
            info.type = type_name(get_scalar<cl_device_type>(api, d, CL_DEVICE_TYPE));
            info.compute_units = get_scalar<cl_uint>(api, d, CL_DEVICE_MAX_COMPUTE_UNITS);
            info.global_mem_bytes = get_scalar<cl_ulong>(api, d, CL_DEVICE_GLOBAL_MEM_SIZE);
            info.max_alloc_bytes = get_scalar<cl_ulong>(api, d, CL_DEVICE_MAX_MEM_ALLOC_SIZE);
            info.opencl_version = get_string(api.GetDeviceInfo, d, CL_DEVICE_VERSION, dcall);
            std::string ext = get_string(api.GetDeviceInfo, d, CL_DEVICE_EXTENSIONS, dcall);
            info.fp16 = has_extension(ext, "cl_khr_fp16");
            info.fp32_exact_divide =
                (get_scalar<cl_bitfield>(api, d, CL_DEVICE_SINGLE_FP_CONFIG) & CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT) != 0;
            out.devices.push_back(std::move(info));
            if (handles) handles->push_back({p, d});
        }
    }
    if (out.devices.empty()) {
        out.reason = "no OpenCL devices (" + std::to_string(n_platforms) + " platform" +
                     (n_platforms == 1 ? "" : "s") + ", none with a device)";
    }
    return out;
}

std::string error_name(cl_int code) {
    const char* name = nullptr;
    switch (code) {
        case 0: name = "CL_SUCCESS"; break;
        case -1: name = "CL_DEVICE_NOT_FOUND"; break;
        case -2: name = "CL_DEVICE_NOT_AVAILABLE"; break;
        case -5: name = "CL_OUT_OF_RESOURCES"; break;
        case -4: name = "CL_MEM_OBJECT_ALLOCATION_FAILURE"; break;
        case -6: name = "CL_OUT_OF_HOST_MEMORY"; break;
        case -11: name = "CL_BUILD_PROGRAM_FAILURE"; break;
        case -17: name = "CL_LINK_PROGRAM_FAILURE"; break;
        case -42: name = "CL_INVALID_BINARY"; break;
        case -44: name = "CL_INVALID_PROGRAM"; break;
        case -45: name = "CL_INVALID_PROGRAM_EXECUTABLE"; break;
        case -46: name = "CL_INVALID_KERNEL_NAME"; break;
        case -48: name = "CL_INVALID_KERNEL"; break;
        case -49: name = "CL_INVALID_ARG_INDEX"; break;
        case -50: name = "CL_INVALID_ARG_VALUE"; break;
        case -51: name = "CL_INVALID_ARG_SIZE"; break;
        case -52: name = "CL_INVALID_KERNEL_ARGS"; break;
        case -54: name = "CL_INVALID_WORK_GROUP_SIZE"; break;
        case -55: name = "CL_INVALID_WORK_ITEM_SIZE"; break;
        case -38: name = "CL_INVALID_MEM_OBJECT"; break;
        case -36: name = "CL_INVALID_COMMAND_QUEUE"; break;
        case -34: name = "CL_INVALID_CONTEXT"; break;
        case -61: name = "CL_INVALID_BUFFER_SIZE"; break;
        case -63: name = "CL_INVALID_GLOBAL_WORK_SIZE"; break;
        case -30: name = "CL_INVALID_VALUE"; break;
        case -31: name = "CL_INVALID_DEVICE_TYPE"; break;
        case -32: name = "CL_INVALID_PLATFORM"; break;
        case -33: name = "CL_INVALID_DEVICE"; break;
        case -1001: name = "CL_PLATFORM_NOT_FOUND_KHR"; break;
        default: return "CL error " + std::to_string(code);
    }
    return std::string(name) + " (" + std::to_string(code) + ")";
}

}  // namespace ei::cl
