// Build-once OpenCL programs with an on-disk binary cache (see program_cache.h).
#include "gpu/program_cache.h"

#include <atomic>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include <unistd.h>

#include "common/error.h"

namespace fs = std::filesystem;

namespace ei::cl {

uint64_t fnv1a64(const std::string& bytes, uint64_t seed) {
    uint64_t h = seed;
    for (unsigned char c : bytes) {
        h ^= c;
        h *= 0x100000001b3ull;
    }
    return h;
}

namespace {

// File layout: magic, payload size (uint64 LE), fnv1a64 of the payload, payload (the driver's
// binary). The header lets a truncated or overwritten file be told from a real one without
// handing garbage to the driver.
std::atomic<int> next_tmp_id{0};  // two caches of one process never share a temp file

constexpr char kMagic[8] = {'E', 'I', 'C', 'L', 'B', 'I', 'N', '1'};

std::string hex16(uint64_t v) {
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016llx", (unsigned long long)v);
    return buf;
}

std::string build_log(const Api& api, cl_program p, cl_device_id d) {
    size_t size = 0;
    if (api.GetProgramBuildInfo(p, d, CL_PROGRAM_BUILD_LOG, 0, nullptr, &size) != CL_SUCCESS) return "";
    std::string log(size, '\0');
    if (size && api.GetProgramBuildInfo(p, d, CL_PROGRAM_BUILD_LOG, size, log.data(), nullptr) != CL_SUCCESS)
        return "";
    while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
    return log;
}

bool read_file(const std::string& path, std::string* out) {
    std::ifstream f(path, std::ios::binary);
    if (!f) return false;
    std::ostringstream ss;
    ss << f.rdbuf();
    *out = ss.str();
    return true;
}

}  // namespace

ProgramCache::ProgramCache(Device& dev, std::string dir) : dev_(dev), dir_(std::move(dir)) {}

std::string ProgramCache::binary_path(const std::string& name, const std::string& source,
                                      const std::string& options) const {
    if (dir_.empty()) return "";
    const DeviceInfo& info = dev_.info();
    uint64_t h = fnv1a64(info.name);
    for (const std::string* part : {&info.platform_version, &info.opencl_version, &dev_.driver_version(),
                                    &options, &source})
        h = fnv1a64(std::string(1, '\0') + *part, h);
    return (fs::path(dir_) / (name + "-" + hex16(h) + ".bin")).string();
}

cl_program ProgramCache::get(const std::string& name, const std::string& source, const std::string& options) {
    const std::string key = name + '\0' + options + '\0' + hex16(fnv1a64(source));
    auto it = programs_.find(key);
    if (it != programs_.end()) return it->second.get();

    const std::string path = binary_path(name, source, options);
    Handle<cl_program> p;
    if (!path.empty()) p = build_from_binary(path, options);
    if (p) {
        ++loaded_;
    } else {
        p = build_from_source(name, source, options);
        ++compiled_;
        if (!path.empty()) save_binary(p.get(), path);
    }
    return programs_.emplace(key, std::move(p)).first->second.get();
}

Kernel ProgramCache::kernel(const std::string& program, const std::string& source, const char* kernel_name,
                            const std::string& options) {
    cl_program p = get(program, source, options);
    cl_int rc = CL_SUCCESS;
    cl_kernel k = dev_.api().CreateKernel(p, kernel_name, &rc);
    if (rc != CL_SUCCESS)
        throw Error(std::string("clCreateKernel(") + kernel_name + ") in program '" + program +
                    "' failed: " + error_name(rc));
    return Kernel(Handle<cl_kernel>(k, dev_.api().ReleaseKernel), &dev_.api(), kernel_name);
}

Handle<cl_program> ProgramCache::build_from_source(const std::string& name, const std::string& source,
                                                   const std::string& options) {
    const Api& api = dev_.api();
    const char* text = source.c_str();
    const size_t length = source.size();
    cl_int rc = CL_SUCCESS;
    cl_program raw = api.CreateProgramWithSource(dev_.context(), 1, &text, &length, &rc);
    check(rc, "clCreateProgramWithSource");
    Handle<cl_program> p(raw, api.ReleaseProgram);
    const cl_device_id id = dev_.id();
    rc = api.BuildProgram(raw, 1, &id, options.c_str(), nullptr, nullptr);
    if (rc != CL_SUCCESS) {
        const std::string log = build_log(api, raw, id);
        throw Error("OpenCL program '" + name + "' failed to build on '" + dev_.info().name +
                    "': clBuildProgram failed: " + error_name(rc) +
                    (log.empty() ? std::string(" (no build log)") : "\nbuild log:\n" + log));
    }
    return p;
}

Handle<cl_program> ProgramCache::build_from_binary(const std::string& path, const std::string& options) {
    std::string file;
    if (!read_file(path, &file)) return {};
    const size_t header = sizeof kMagic + 2 * sizeof(uint64_t);
    if (file.size() < header || std::memcmp(file.data(), kMagic, sizeof kMagic) != 0) return {};
    uint64_t size = 0, hash = 0;
    std::memcpy(&size, file.data() + sizeof kMagic, sizeof size);
    std::memcpy(&hash, file.data() + sizeof kMagic + sizeof size, sizeof hash);
    if (size != file.size() - header) return {};
    const std::string payload = file.substr(header);
    if (fnv1a64(payload) != hash) return {};

    const Api& api = dev_.api();
    const cl_device_id id = dev_.id();
    const unsigned char* bytes = reinterpret_cast<const unsigned char*>(payload.data());
    const size_t length = payload.size();
    cl_int status = CL_SUCCESS, rc = CL_SUCCESS;
    cl_program raw = api.CreateProgramWithBinary(dev_.context(), 1, &id, &length, &bytes, &status, &rc);
    if (rc != CL_SUCCESS || status != CL_SUCCESS) {
        if (raw) api.ReleaseProgram(raw);
        return {};  // refused by this driver: rebuilt from source and overwritten
    }
    Handle<cl_program> p(raw, api.ReleaseProgram);
    if (api.BuildProgram(raw, 1, &id, options.c_str(), nullptr, nullptr) != CL_SUCCESS) return {};
    return p;
}

void ProgramCache::save_binary(cl_program p, const std::string& path) {
    const Api& api = dev_.api();
    size_t size = 0;
    check(api.GetProgramInfo(p, CL_PROGRAM_BINARY_SIZES, sizeof size, &size, nullptr), "clGetProgramInfo");
    if (size == 0) return;  // the driver offers no binary: stay memory-only
    std::string payload(size, '\0');
    unsigned char* dst = reinterpret_cast<unsigned char*>(payload.data());
    check(api.GetProgramInfo(p, CL_PROGRAM_BINARIES, sizeof dst, &dst, nullptr), "clGetProgramInfo");

    // A cache that cannot be written costs a compile next time, not a failure now.
    std::error_code ec;
    fs::create_directories(fs::path(path).parent_path(), ec);
    if (ec) return;
    const uint64_t n = payload.size(), hash = fnv1a64(payload);
    // Written beside the final name and renamed, so a concurrent reader never sees half a file.
    const std::string tmp = path + ".tmp" + std::to_string((long long)getpid()) + "." + std::to_string(next_tmp_id++);
    {
        std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
        if (!f) return;
        f.write(kMagic, sizeof kMagic);
        f.write(reinterpret_cast<const char*>(&n), sizeof n);
        f.write(reinterpret_cast<const char*>(&hash), sizeof hash);
        f.write(payload.data(), (std::streamsize)payload.size());
        if (!f) {
            f.close();
            fs::remove(tmp, ec);
            return;
        }
    }
    fs::rename(tmp, path, ec);
    if (ec) fs::remove(tmp, ec);
}

}  // namespace ei::cl
