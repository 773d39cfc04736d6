// A zero-filled buffer whose pages the OS provides on first touch (an anonymous private mapping):
// a KV cache sized for the whole context then costs resident memory only for the positions
// written so far, as a std::vector, which writes its zeros up front, did not.
#pragma once
#include <cstddef>
#include <cstdint>

namespace ei {

class ZeroPages {
public:
    ZeroPages() = default;
    // Throws ei::Error when the OS refuses the mapping (names the size).
    explicit ZeroPages(size_t bytes);
    ~ZeroPages();
    ZeroPages(ZeroPages&& other) noexcept;
    ZeroPages& operator=(ZeroPages&& other) noexcept;
    ZeroPages(const ZeroPages&) = delete;
    ZeroPages& operator=(const ZeroPages&) = delete;

    uint8_t* data() { return data_; }
    const uint8_t* data() const { return data_; }
    size_t size() const { return size_; }

private:
    uint8_t* data_ = nullptr;
    size_t size_ = 0;
};

}  // namespace ei
