// The OpenCL library, loaded at run time. Nothing here needs the OpenCL SDK: the few types and
// constants used are declared below (values from Khronos' cl.h), and the ICD loader
// (libOpenCL.so.1) is opened with dlopen, so the core builds everywhere and runs without a GPU.
// A missing library or no platform is not an error: enumeration returns no devices and says why.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#if defined(_WIN32)
#define EI_CL_CALL __stdcall
#else
#define EI_CL_CALL
#endif

namespace ei::cl {

// -- the subset of cl.h we use --------------------------------------------------------------
using cl_int = int32_t;
using cl_uint = uint32_t;
using cl_ulong = uint64_t;
using cl_bitfield = cl_ulong;
using cl_device_type = cl_bitfield;
using cl_platform_info = cl_uint;
using cl_device_info = cl_uint;
using cl_platform_id = struct _cl_platform_id*;
using cl_device_id = struct _cl_device_id*;

constexpr cl_int CL_SUCCESS = 0;
constexpr cl_int CL_DEVICE_NOT_FOUND = -1;
constexpr cl_int CL_PLATFORM_NOT_FOUND_KHR = -1001;  // the ICD loader found no platform

constexpr cl_platform_info CL_PLATFORM_VERSION = 0x0901;
constexpr cl_platform_info CL_PLATFORM_NAME = 0x0902;
constexpr cl_platform_info CL_PLATFORM_VENDOR = 0x0903;

constexpr cl_device_type CL_DEVICE_TYPE_DEFAULT = 1u << 0;
constexpr cl_device_type CL_DEVICE_TYPE_CPU = 1u << 1;
constexpr cl_device_type CL_DEVICE_TYPE_GPU = 1u << 2;
constexpr cl_device_type CL_DEVICE_TYPE_ACCELERATOR = 1u << 3;
constexpr cl_device_type CL_DEVICE_TYPE_CUSTOM = 1u << 4;
constexpr cl_device_type CL_DEVICE_TYPE_ALL = 0xFFFFFFFFu;

constexpr cl_device_info CL_DEVICE_TYPE = 0x1000;                // cl_device_type
constexpr cl_device_info CL_DEVICE_MAX_COMPUTE_UNITS = 0x1002;   // cl_uint
constexpr cl_device_info CL_DEVICE_MAX_MEM_ALLOC_SIZE = 0x1010;  // cl_ulong
constexpr cl_device_info CL_DEVICE_GLOBAL_MEM_SIZE = 0x101F;     // cl_ulong
constexpr cl_device_info CL_DEVICE_NAME = 0x102B;                // char[]
constexpr cl_device_info CL_DEVICE_VENDOR = 0x102C;              // char[]
constexpr cl_device_info CL_DEVICE_VERSION = 0x102F;             // char[] "OpenCL 3.0 ..."
constexpr cl_device_info CL_DEVICE_EXTENSIONS = 0x1030;          // char[], space-separated

// -- the entry points, resolved from the library --------------------------------------------
struct Api {
    cl_int(EI_CL_CALL* GetPlatformIDs)(cl_uint, cl_platform_id*, cl_uint*) = nullptr;
    cl_int(EI_CL_CALL* GetPlatformInfo)(cl_platform_id, cl_platform_info, size_t, void*,
                                        size_t*) = nullptr;
    cl_int(EI_CL_CALL* GetDeviceIDs)(cl_platform_id, cl_device_type, cl_uint, cl_device_id*,
                                     cl_uint*) = nullptr;
    cl_int(EI_CL_CALL* GetDeviceInfo)(cl_device_id, cl_device_info, size_t, void*,
                                      size_t*) = nullptr;
};

// An opened OpenCL library and its entry points; closes the library when destroyed. Move-only.
struct Library {
    void* handle = nullptr;
    Api api;
    std::string path;  // what was opened, e.g. "libOpenCL.so.1"

    Library() = default;
    Library(Library&& other) noexcept;
    Library& operator=(Library&& other) noexcept;
    Library(const Library&) = delete;
    Library& operator=(const Library&) = delete;
    ~Library();

    bool loaded() const { return handle != nullptr; }
};

// Opens `path`, or when empty the platform's default names (libOpenCL.so.1, then libOpenCL.so;
// the OpenCL framework on macOS). On failure returns an unloaded Library and sets `*reason`
// ("no OpenCL library (libOpenCL.so.1 not found)"). A library lacking an entry point is an
// ei::Error (it is not an OpenCL ICD loader).
Library load_library(const std::string& path, std::string* reason);

// What one device is, as `edgeinfer devices` shows it.
struct DeviceInfo {
    std::string platform, platform_vendor, platform_version;
    std::string name, vendor, type;  // type: "GPU", "CPU", "accelerator", ...
    uint32_t compute_units = 0;
    uint64_t global_mem_bytes = 0;
    uint64_t max_alloc_bytes = 0;
    std::string opencl_version;      // CL_DEVICE_VERSION, "OpenCL <major>.<minor> <vendor info>"
    bool fp16 = false;               // cl_khr_fp16 among the device extensions
};

struct DeviceList {
    std::vector<DeviceInfo> devices;
    std::string reason;  // why `devices` is empty; "" when it is not
};

// Every device of every platform. No library, no platform or no device -> an empty list and a
// reason; an OpenCL call failing otherwise -> ei::Error naming the call and the error code.
DeviceList list_devices(const std::string& library_path = "");

// "CL_INVALID_VALUE (-30)"; unknown codes as "CL error -N".
std::string error_name(cl_int code);

}  // namespace ei::cl
