// A read-only memory mapping of a whole file. Weights are used in place from it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace ei {

class MappedFile {
public:
    // Maps `path` read-only; throws ei::Error (file missing, unreadable, a directory, ...).
    explicit MappedFile(const std::string& path);
    ~MappedFile();
    MappedFile(const MappedFile&) = delete;
    MappedFile& operator=(const MappedFile&) = delete;

    const uint8_t* data() const { return data_; }
    size_t size() const { return size_; }
    const std::string& path() const { return path_; }

private:
    std::string path_;
    const uint8_t* data_ = nullptr;
    size_t size_ = 0;
};

// Tells the OS that the whole pages inside [p, p + n) of a read-only file mapping are not needed
// now (madvise MADV_DONTNEED): they leave the process's resident set and are read again from
// the file if touched later. For weights whose repacked copy replaces them.
void release_mapped_pages(const void* p, size_t n);
// Releases the pages around p that a read of it may have mapped: the 2 MiB-aligned span holding
// p (the largest folio a fault maps), clipped to [lo, hi) (the tensor's extent, rounded inward).
void release_mapped_folio(const void* p, const void* lo, const void* hi);

}  // namespace ei
