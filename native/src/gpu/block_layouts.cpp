// Host and device block layouts and value tables (see block_layouts.h).
#include "gpu/block_layouts.h"

#include <cstddef>
#include <iterator>

#include "common/error.h"
#include "gpu/kernel_sources.h"
#include "gpu/kernel_sources.inc"
#include "quant/blocks.h"
#include "quant/iq1_grids.h"
#include "quant/iq_grids.h"

namespace ei::cl {

std::vector<LayoutEntry> host_block_layouts() {
    std::vector<LayoutEntry> out;
    // offsetof on a name that is not a field does not compile: the generated list and the C++
    // structs cannot disagree on which fields exist.
#define EI_HOST_SIZE(block) out.push_back({#block, "", (uint64_t)sizeof(ei::block)});
#define EI_HOST_FIELD(block, field) out.push_back({#block, #field, (uint64_t)offsetof(ei::block, field)});
    EI_BLOCK_LAYOUT(EI_HOST_SIZE, EI_HOST_FIELD)
#undef EI_HOST_SIZE
#undef EI_HOST_FIELD
    return out;
}

std::vector<LayoutEntry> device_block_layouts(Device& dev, ProgramCache& programs) {
    std::vector<LayoutEntry> out = host_block_layouts();
    Kernel probe = programs.kernel("block_layouts", block_prelude() + generated::kLayoutProbe, "ei_block_layouts");
    Buffer values = dev.alloc(out.size() * sizeof(uint64_t), "the block layout probe");
    probe.set_args(values);
    const size_t one = 1;
    dev.run(probe, 1, &one, &one);
    std::vector<uint64_t> v(out.size());
    dev.read(values, v.data(), v.size() * sizeof(uint64_t));
    for (size_t i = 0; i < out.size(); ++i) out[i].value = v[i];
    return out;
}

std::vector<TableEntry> host_block_tables() {
    std::vector<TableEntry> out;
    // As for the layouts: a generated name that is not a table of blocks.h does not compile.
    // A 64-bit grid point is kept as its bit pattern (int64_t wraps it), as the probe writes it.
#define EI_HOST_TABLE(name) \
    out.push_back({#name, std::vector<int64_t>(std::begin(ei::name), std::end(ei::name))});
    EI_BLOCK_TABLES(EI_HOST_TABLE)
#undef EI_HOST_TABLE
    return out;
}

std::vector<TableEntry> device_block_tables(Device& dev, ProgramCache& programs) {
    std::vector<TableEntry> out = host_block_tables();
    size_t count = 0;
    for (const auto& t : out) count += t.values.size();
    if (count == 0) return out;
    std::string source = block_prelude();
    for (const char* grids : generated::kGridFiles) source += kernel_file(grids);
    Kernel probe = programs.kernel("block_tables", source + generated::kTableProbe, "ei_block_tables");
    Buffer values = dev.alloc(count * sizeof(int64_t), "the block table probe");
    probe.set_args(values);
    const size_t one = 1;
    dev.run(probe, 1, &one, &one);
    std::vector<int64_t> v(count);  // a 64-bit grid point as its bit pattern
    dev.read(values, v.data(), v.size() * sizeof(int64_t));
    size_t i = 0;
    for (auto& t : out)
        for (auto& x : t.values) x = v[i++];
    return out;
}

}  // namespace ei::cl
