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
using cl_context = struct _cl_context*;
using cl_command_queue = struct _cl_command_queue*;
using cl_mem = struct _cl_mem*;
using cl_program = struct _cl_program*;
using cl_kernel = struct _cl_kernel*;
using cl_event = struct _cl_event*;
using cl_bool = cl_uint;
using cl_mem_flags = cl_bitfield;
using cl_context_properties = intptr_t;
using cl_command_queue_properties = cl_bitfield;
using cl_program_info = cl_uint;
using cl_program_build_info = cl_uint;

constexpr cl_int CL_SUCCESS = 0;
constexpr cl_int CL_DEVICE_NOT_FOUND = -1;
constexpr cl_int CL_MEM_OBJECT_ALLOCATION_FAILURE = -4;
constexpr cl_int CL_OUT_OF_RESOURCES = -5;
constexpr cl_int CL_BUILD_PROGRAM_FAILURE = -11;
constexpr cl_int CL_INVALID_BUFFER_SIZE = -61;
constexpr cl_int CL_PLATFORM_NOT_FOUND_KHR = -1001;  // the ICD loader found no platform
constexpr cl_bool CL_TRUE = 1;

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
constexpr cl_device_info CL_DEVICE_SINGLE_FP_CONFIG = 0x101B;    // cl_bitfield (CL_FP_*)
constexpr cl_bitfield CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT = 1u << 7;
constexpr cl_device_info CL_DRIVER_VERSION = 0x102D;             // char[]

constexpr cl_mem_flags CL_MEM_READ_WRITE = 1u << 0;
constexpr cl_program_info CL_PROGRAM_BINARY_SIZES = 0x1165;      // size_t[n_devices]
constexpr cl_program_info CL_PROGRAM_BINARIES = 0x1166;          // unsigned char*[n_devices]
constexpr cl_program_build_info CL_PROGRAM_BUILD_LOG = 0x1183;   // char[]

// -- the entry points, resolved from the library --------------------------------------------
struct Api {
    cl_int(EI_CL_CALL* GetPlatformIDs)(cl_uint, cl_platform_id*, cl_uint*) = nullptr;
    cl_int(EI_CL_CALL* GetPlatformInfo)(cl_platform_id, cl_platform_info, size_t, void*,
                                        size_t*) = nullptr;
    cl_int(EI_CL_CALL* GetDeviceIDs)(cl_platform_id, cl_device_type, cl_uint, cl_device_id*,
                                     cl_uint*) = nullptr;
    cl_int(EI_CL_CALL* GetDeviceInfo)(cl_device_id, cl_device_info, size_t, void*,
                                      size_t*) = nullptr;
    // Compute: context, in-order queue, buffers, programs, kernels (gpu/runtime.h wraps them).
    cl_context(EI_CL_CALL* CreateContext)(const cl_context_properties*, cl_uint, const cl_device_id*,
                                          void(EI_CL_CALL*)(const char*, const void*, size_t, void*),
                                          void*, cl_int*) = nullptr;
    cl_int(EI_CL_CALL* ReleaseContext)(cl_context) = nullptr;
    // clCreateCommandQueue (OpenCL 1.x, deprecated but present in 2.x/3.x) rather than the 2.0
    // clCreateCommandQueueWithProperties, so that 1.2-only platforms (Apple, older mobile) work.
    cl_command_queue(EI_CL_CALL* CreateCommandQueue)(cl_context, cl_device_id,
                                                     cl_command_queue_properties, cl_int*) = nullptr;
    cl_int(EI_CL_CALL* ReleaseCommandQueue)(cl_command_queue) = nullptr;
    cl_mem(EI_CL_CALL* CreateBuffer)(cl_context, cl_mem_flags, size_t, void*, cl_int*) = nullptr;
    cl_int(EI_CL_CALL* ReleaseMemObject)(cl_mem) = nullptr;
    cl_int(EI_CL_CALL* EnqueueWriteBuffer)(cl_command_queue, cl_mem, cl_bool, size_t, size_t,
                                           const void*, cl_uint, const cl_event*,
                                           cl_event*) = nullptr;
    cl_int(EI_CL_CALL* EnqueueReadBuffer)(cl_command_queue, cl_mem, cl_bool, size_t, size_t, void*,
                                          cl_uint, const cl_event*, cl_event*) = nullptr;
    cl_program(EI_CL_CALL* CreateProgramWithSource)(cl_context, cl_uint, const char**,
                                                    const size_t*, cl_int*) = nullptr;
    cl_program(EI_CL_CALL* CreateProgramWithBinary)(cl_context, cl_uint, const cl_device_id*,
                                                    const size_t*, const unsigned char**,
                                                    cl_int*, cl_int*) = nullptr;
    cl_int(EI_CL_CALL* BuildProgram)(cl_program, cl_uint, const cl_device_id*, const char*,
                                     void(EI_CL_CALL*)(cl_program, void*), void*) = nullptr;
    cl_int(EI_CL_CALL* GetProgramInfo)(cl_program, cl_program_info, size_t, void*,
                                       size_t*) = nullptr;
    cl_int(EI_CL_CALL* GetProgramBuildInfo)(cl_program, cl_device_id, cl_program_build_info,
                                            size_t, void*, size_t*) = nullptr;
    cl_int(EI_CL_CALL* ReleaseProgram)(cl_program) = nullptr;
    cl_kernel(EI_CL_CALL* CreateKernel)(cl_program, const char*, cl_int*) = nullptr;
    cl_int(EI_CL_CALL* ReleaseKernel)(cl_kernel) = nullptr;
    cl_int(EI_CL_CALL* SetKernelArg)(cl_kernel, cl_uint, size_t, const void*) = nullptr;
    cl_int(EI_CL_CALL* EnqueueNDRangeKernel)(cl_command_queue, cl_kernel, cl_uint, const size_t*,
                                             const size_t*, const size_t*, cl_uint,
                                             const cl_event*, cl_event*) = nullptr;
    cl_int(EI_CL_CALL* Finish)(cl_command_queue) = nullptr;
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
    // CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT: the device may be asked (build option
    // -cl-fp32-correctly-rounded-divide-sqrt) to divide as the CPU does.
    bool fp32_exact_divide = false;
};

struct DeviceList {
    std::vector<DeviceInfo> devices;
    std::string reason;  // why `devices` is empty; "" when it is not
};

// The platform and device ids behind list_devices' entries, in the same order (so that index i
// of one is index i of the other). Used to open a device for computing (gpu/runtime.h).
struct DeviceHandle {
    cl_platform_id platform;
    cl_device_id device;
};

// Every device of every platform. No library, no platform or no device -> an empty list and a
// reason; an OpenCL call failing otherwise -> ei::Error naming the call and the error code.
DeviceList list_devices(const std::string& library_path = "");
// The same over an already opened library, with each device's ids (handles[i] is devices[i]).
DeviceList list_devices(const Library& lib, std::vector<DeviceHandle>* handles);

// "CL_INVALID_VALUE (-30)"; unknown codes as "CL error -N".
std::string error_name(cl_int code);

}  // namespace ei::cl
