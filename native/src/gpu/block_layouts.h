// The block layouts as the host compiler and as an OpenCL device compiler lay them out: sizeof
// and every field offset of each struct of quant/blocks.h, in one order (the generated
// EI_BLOCK_LAYOUT list), so a test can check that the generated prelude means the same bytes.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "gpu/program_cache.h"

namespace ei::cl {

struct LayoutEntry {
    std::string block;  // "block_q4_0"
    std::string field;  // "" for the struct's sizeof, else the field name
    uint64_t value;     // bytes: the size, or the field's offset
};

// From the C++ structs (sizeof / offsetof).
std::vector<LayoutEntry> host_block_layouts();
// The same list as the device's compiler lays out the generated prelude's structs.
std::vector<LayoutEntry> device_block_layouts(Device& dev, ProgramCache& programs);

}  // namespace ei::cl
