#include "common/zero_pages.h"

#include <sys/mman.h>

#include <string>
#include <utility>

#include "common/error.h"

namespace ei {

ZeroPages::ZeroPages(size_t bytes) : size_(bytes) {
    if (bytes == 0) return;
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        throw Error("cannot allocate " + std::to_string(bytes >> 20) + " MiB of memory (the KV cache: try a smaller context)");
    data_ = static_cast<uint8_t*>(p);
}

ZeroPages::~ZeroPages() {
    if (data_) munmap(data_, size_);
}

ZeroPages::ZeroPages(ZeroPages&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

ZeroPages& ZeroPages::operator=(ZeroPages&& other) noexcept {
    if (this != &other) {
        if (data_) munmap(data_, size_);
        data_ = std::exchange(other.data_, nullptr);
        size_ = std::exchange(other.size_, 0);
    }
    return *this;
}

}  // namespace ei
