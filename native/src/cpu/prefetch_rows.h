// Requests for cache rows ahead of the loads that need them (prefetches: no value changes). The
// attention kernels read one head's slice of each cached position: a few dozen to a few hundred
// bytes out of every row of all KV heads, a stride the hardware prefetcher does not follow far
// enough ahead, and the kernels' own dependent loads keep few misses in flight
// (docs/PERFORMANCE.md, "Measurements behind code choices").
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace ei {

// Requests the lines of [p, p + bytes) into L2.
inline void request_bytes(const void* p, int64_t bytes) {
    const uintptr_t begin = reinterpret_cast<uintptr_t>(p), end = begin + (uintptr_t)bytes;
    for (uintptr_t line = begin & ~uintptr_t(63); line < end; line += 64)
        __builtin_prefetch(reinterpret_cast<const void*>(line), 0, 2);
}

// Requests rows [i0, min(i1, n)) of a span that starts at cached position `first`: `bytes` of
// each, from base + position * stride.
inline void request_rows(const uint8_t* base, size_t stride, int64_t first, int64_t i0, int64_t i1, int64_t n,
                         int64_t bytes) {
    for (int64_t i = i0; i < std::min(i1, n); ++i) request_bytes(base + (first + i) * stride, bytes);
}

}  // namespace ei
