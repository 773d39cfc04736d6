#include "common/weight_arena.h"

#include <sys/mman.h>

#include <mutex>
#include <new>

namespace ei {

namespace {

constexpr size_t kHugePage = size_t(2) << 20;
// Big enough that a small model's weights fill a few chunks, small enough that the unused end of
// the last one (virtual memory only, never written) is not worth thinking about.
constexpr size_t kChunkBytes = size_t(64) << 20;

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

class Chunk {
public:
    explicit Chunk(size_t size) : size_(size) {
        // Over-map by one huge page and trim both ends, so the chunk starts on a 2 MiB boundary
        // and every 2 MiB of it can be one huge page.
        const size_t span = size + kHugePage;
        void* p = ::mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) throw std::bad_alloc();
        const uintptr_t raw = reinterpret_cast<uintptr_t>(p), aligned = round_up(raw, kHugePage);
        if (aligned > raw) ::munmap(p, aligned - raw);
        if (raw + span > aligned + size) ::munmap(reinterpret_cast<void*>(aligned + size), raw + span - aligned - size);
        base_ = reinterpret_cast<uint8_t*>(aligned);
#ifdef MADV_HUGEPAGE
        ::madvise(base_, size_, MADV_HUGEPAGE);  // advice only: without THP these stay 4 KiB pages
#endif
    }
    ~Chunk() { ::munmap(base_, size_); }
    Chunk(const Chunk&) = delete;
    Chunk& operator=(const Chunk&) = delete;

    // nullptr when `bytes` (a multiple of 64) no longer fits.
    uint8_t* take(size_t bytes) {
        if (bytes > size_ - used_) return nullptr;
        uint8_t* p = base_ + used_;
        used_ += bytes;
        return p;
    }

private:
    uint8_t* base_ = nullptr;
    size_t size_ = 0;
    size_t used_ = 0;
};

}  // namespace

std::shared_ptr<uint8_t> alloc_weight_bytes(size_t bytes) {
    static std::mutex mutex;
    // Weak, so that the chunk in use is unmapped with the last model holding it instead of living
    // on in this static.
    static std::weak_ptr<Chunk> current;
    const size_t want = round_up(bytes ? bytes : 1, 64);
    std::lock_guard<std::mutex> lock(mutex);
    std::shared_ptr<Chunk> chunk = current.lock();
    uint8_t* p = chunk ? chunk->take(want) : nullptr;
    if (!p) {
        chunk = std::make_shared<Chunk>(want > kChunkBytes ? round_up(want, kHugePage) : kChunkBytes);
        p = chunk->take(want);
        // A tensor bigger than a chunk gets one of its own; the smaller ones keep filling the
        // current chunk.
        if (want <= kChunkBytes) current = chunk;
    }
    return std::shared_ptr<uint8_t>(chunk, p);
}

}  // namespace ei
