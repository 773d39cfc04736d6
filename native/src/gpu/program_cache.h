// OpenCL programs compiled at first use and kept: in memory for the life of the device, and on
// disk as the driver's binary, so that the next process skips the compiler (seconds per program
// on some drivers). The disk folder comes from Python (edgeinfer.paths.opencl_cache_dir: the
// platformdirs user cache); the core only reads and writes files inside it.
//
// A binary is keyed by a hash of everything that decides what the driver would compile: the
// device name, device and driver versions, the platform version, the build options and the source
// text. A new driver, device or kernel source therefore misses the cache and compiles afresh;
// stale files are simply never read again. A file that is truncated, corrupt or refused by the
// driver is ignored and rebuilt from source.
#pragma once
#include <cstdint>
#include <map>
#include <string>

#include "gpu/runtime.h"

namespace ei::cl {

class ProgramCache {
public:
    // `dir` is the folder for binaries ("" keeps them in memory only); created on first save.
    ProgramCache(Device& dev, std::string dir);

    // The built program `name` from `source` with `options`: from memory, else from the disk
    // cache, else compiled (and saved). A compile error -> ei::Error with the build log.
    cl_program get(const std::string& name, const std::string& source, const std::string& options = "");
    // A kernel of that program.
    Kernel kernel(const std::string& program, const std::string& source, const char* kernel_name,
                  const std::string& options = "");

    // Where the binary for (name, source, options) is kept on this device ("" without a folder).
    std::string binary_path(const std::string& name, const std::string& source, const std::string& options) const;

    int compiled() const { return compiled_; }  // programs built from source by this cache
    int loaded() const { return loaded_; }      // programs built from a binary on disk

private:
    Handle<cl_program> build_from_source(const std::string& name, const std::string& source,
                                         const std::string& options);
    Handle<cl_program> build_from_binary(const std::string& path, const std::string& options);
    void save_binary(cl_program p, const std::string& path);

    Device& dev_;
    std::string dir_;
    std::map<std::string, Handle<cl_program>> programs_;  // by name + '\0' + options + source hash
    int compiled_ = 0, loaded_ = 0;
};

// FNV-1a, 64 bits: a cache key, not a checksum against tampering (the folder is the user's own).
uint64_t fnv1a64(const std::string& bytes, uint64_t seed = 0xcbf29ce484222325ull);

}  // namespace ei::cl
