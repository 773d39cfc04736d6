// Memory for the weights the loader writes itself (the repacked 16-row groups, cpu/repack.h),
// carved from large chunks that the OS is asked to back with transparent huge pages.
//
// Why. A decode step streams every weight byte once. In 4 KiB pages that is a page, and a TLB
// miss with its page walk, every 64 cache lines, and the hardware prefetchers stop at each page
// boundary; in 2 MiB pages it is 512 times fewer. Linux's default THP mode ("madvise") gives huge
// pages only to memory that asks for them, and a model's tensors one by one are mostly smaller
// than 2 MiB, so they share chunks. docs/PERFORMANCE.md has the measurement.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

namespace ei {

// `bytes` of uninitialized memory, 64-byte aligned. The pointer keeps its chunk alive; a chunk is
// unmapped when the last allocation in it is released. Pages become resident as they are written
// (in 2 MiB steps where huge pages are granted). Thread-safe. Throws std::bad_alloc.
std::shared_ptr<uint8_t> alloc_weight_bytes(size_t bytes);

}  // namespace ei
