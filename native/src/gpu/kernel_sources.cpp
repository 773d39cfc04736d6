// Lookup of the embedded kernel sources (see kernel_sources.h).
#include "gpu/kernel_sources.h"

#include <map>

#include "common/error.h"
#include "gpu/kernel_sources.inc"  // generated into the build folder by embed_kernels.py

namespace ei::cl {

const std::string& block_prelude() {
    static const std::string prelude = generated::kBlockPrelude;
    return prelude;
}

const std::string& kernel_file(const std::string& file) {
    static const std::map<std::string, std::string> files = [] {
        std::map<std::string, std::string> m;
        for (const auto& f : generated::kKernelFiles) m.emplace(f.name, f.text);
        return m;
    }();
    auto it = files.find(file);
    if (it == files.end()) throw Error("no OpenCL kernel file '" + file + "' in this build");
    return it->second;
}

std::string program_source(std::initializer_list<const char*> files) {
    std::string s = block_prelude();
    for (const char* f : files) {
        s += "\n// ---- ";
        s += f;
        s += " ----\n";
        s += kernel_file(f);
    }
    return s;
}

}  // namespace ei::cl
