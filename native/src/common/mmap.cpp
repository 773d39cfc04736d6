// POSIX implementation of MappedFile: the whole file mapped read-only and private, so weights are
// paged in on demand and shared with the page cache instead of copied.
#include "common/mmap.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"

namespace ei {

namespace {

[[noreturn]] void fail_errno(const std::string& path, const char* what) {
    throw Error(path + ": " + what + ": " + std::strerror(errno));
}

// Closes the descriptor on every path out of the constructor; the mapping outlives it.
struct FdGuard {
    int fd;
    ~FdGuard() {
        if (fd >= 0) ::close(fd);
    }
};

}  // namespace

MappedFile::MappedFile(const std::string& path) : path_(path) {
    FdGuard fd{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
    if (fd.fd < 0) fail_errno(path, "cannot open");

    struct stat st;
    if (::fstat(fd.fd, &st) != 0) fail_errno(path, "cannot stat");
    if (S_ISDIR(st.st_mode)) throw Error(path + ": is a directory, not a file");
    if (!S_ISREG(st.st_mode)) throw Error(path + ": not a regular file");
    // mmap cannot map zero bytes. An empty file given as a model is a malformed model, so it is
    // reported as a FormatError (still an ei::Error) and callers see ModelFormatError.
    if (st.st_size == 0) throw FormatError(path + ": file is empty (0 bytes)");

    size_t size = (size_t)st.st_size;
    void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd.fd, 0);
    if (p == MAP_FAILED) fail_errno(path, "cannot map");
    data_ = static_cast<const uint8_t*>(p);
    size_ = size;
}

MappedFile::~MappedFile() {
    if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

void release_mapped_pages(const void* p, size_t n) {
    const uintptr_t page = (uintptr_t)::sysconf(_SC_PAGESIZE);
    const uintptr_t begin = ((uintptr_t)p + page - 1) & ~(page - 1), end = ((uintptr_t)p + n) & ~(page - 1);
    if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);  // advice only
}

void release_mapped_folio(const void* p, const void* lo, const void* hi) {
    constexpr uintptr_t kFolio = uintptr_t(2) << 20;
    const uintptr_t at = (uintptr_t)p & ~(kFolio - 1);
    const uintptr_t begin = std::max(at, (uintptr_t)lo), end = std::min(at + kFolio, (uintptr_t)hi);
    if (end > begin) release_mapped_pages(reinterpret_cast<const void*>(begin), end - begin);
}

}  // namespace ei
