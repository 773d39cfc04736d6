// The block layouts as the host compiler and as an OpenCL device compiler lay them out: sizeof
// and every field offset of each struct of quant/blocks.h, in one order (the generated
// EI_BLOCK_LAYOUT list), so a test can check that the generated prelude means the same bytes;
// and the value tables of blocks.h (kIq4nlValues, ...) and the i-quants' grids (quant/iq_grids.h,
// iq1_grids.h) as the host has them and as a kernel reads the generated copies (the
// EI_BLOCK_TABLES list), for the same check of the values.
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

struct TableEntry {
    std::string name;             // "kIq4nlValues"
    std::vector<int64_t> values;  // every entry, in order (a 64-bit grid point as its bit pattern)
};

// From the C++ structs (sizeof / offsetof).
std::vector<LayoutEntry> host_block_layouts();
// The same list as the device's compiler lays out the generated prelude's structs.
std::vector<LayoutEntry> device_block_layouts(Device& dev, ProgramCache& programs);

// The tables from the C++ arrays.
std::vector<TableEntry> host_block_tables();
// The same tables as a kernel reads the generated prelude's __constant arrays.
std::vector<TableEntry> device_block_tables(Device& dev, ProgramCache& programs);

}  // namespace ei::cl
