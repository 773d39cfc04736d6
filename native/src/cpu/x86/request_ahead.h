// The requests (prefetches) a packed kernel makes for the lines it reads a group later. A decode
// step streams its weights from DRAM, and the CPUs measured do not prefetch a loop this dense on
// their own (cpu/repack.h, "Prefetch").
//
// A panel of one or two columns requests each line twice: two groups ahead, then again one group
// ahead. On Zen 4 a request that finds the core's miss queues full is dropped, and a line whose
// only request was dropped stalls the loop for a whole DRAM latency when it gets there. Such a
// panel consumes faster than memory delivers, which keeps the queues full; the second request, a
// group later, finds room. Wider panels compute slower than memory delivers, their requests are
// not dropped, and the second one's instructions only cost them. (docs/PERFORMANCE.md, "Measurements
// behind code choices".)
#pragma once
#include <cstddef>
#include <cstdint>

namespace ei {

// Requests the line at `line + distance` into L1 (kLocality 3: the small scale arrays) or L2 (1:
// the values, whose requests into L1 throttled the stream), and for a panel of NC <= 2 columns the
// line at `line + 2 * distance` into L2 before it.
template <int kLocality, int NC = 1, class Byte>
inline void request_ahead(const Byte* line, size_t distance) {
    static_assert(sizeof(Byte) == 1, "a byte pointer: distance is in bytes");
    if constexpr (NC <= 2) __builtin_prefetch(line + 2 * distance, 0, 1);
    __builtin_prefetch(line + distance, 0, kLocality);
}

}  // namespace ei
