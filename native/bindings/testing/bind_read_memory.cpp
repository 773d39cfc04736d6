// The machine's read bandwidth as the engine's own threads see it, for scripts/read_bandwidth.py
// (the reference of "decode at N % of read bandwidth"). numpy's sum, the script's first measure,
// does float work per element and reads well below what the memory gives (docs/PERFORMANCE.md):
// this loop does no work on the data but load it.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <vector>

#include "common/thread_pool.h"

namespace py = pybind11;

namespace {

constexpr size_t kLine = 64;
// 32-byte vectors, two loads a line (AVX2 where the CPU has it: GCC clones the loop per target
// and picks at load time; elsewhere the compiler's pairs of 16-byte loads). Few instructions a
// line, because the lines one thread has in flight are what the core's instruction window holds:
// eight 8-byte loads and adds a line read measurably slower.
typedef uint64_t Vec32 __attribute__((vector_size(32)));
#if defined(__x86_64__) && defined(__GNUC__)
#define EI_READ_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define EI_READ_CLONES
#endif

// Every 64-byte line of [p, p + bytes) loaded once; the sums only keep the loads alive.
EI_READ_CLONES uint64_t read_lines(const uint8_t* p, size_t bytes) {
    const Vec32* v = reinterpret_cast<const Vec32*>(p);
    Vec32 s0 = {0, 0, 0, 0}, s1 = s0;
    for (size_t i = 0; i < bytes / sizeof(Vec32); i += kLine / sizeof(Vec32)) {
        s0 += v[i];
        s1 += v[i + 1];
    }
    const Vec32 s = s0 + s1;
    return s[0] + s[1] + s[2] + s[3];
}

}  // namespace

void register_read_memory(py::module_& m) {
    m.def("read_seconds", [](py::array_t<uint8_t, py::array::c_style> buffer, int threads, int runs) {
        // The whole lines inside the buffer (numpy aligns an array's data to 16 bytes only).
        const uintptr_t begin = reinterpret_cast<uintptr_t>(buffer.data());
        const uintptr_t first = (begin + kLine - 1) / kLine * kLine;
        const uint8_t* p = reinterpret_cast<const uint8_t*>(first);
        const size_t lines = first - begin < (size_t)buffer.size() ? ((size_t)buffer.size() - (first - begin)) / kLine : 0;
        py::gil_scoped_release release;
        ei::ThreadPool pool(threads);
        std::vector<uint64_t> sink((size_t)pool.size());
        double best = 1e30;
        for (int r = 0; r < std::max(runs, 1); ++r) {
            const auto t0 = std::chrono::steady_clock::now();
            pool.run([&](int i, int n) {
                int64_t l0, l1;
                ei::ThreadPool::split((int64_t)lines, i, n, &l0, &l1);
                sink[(size_t)i] += read_lines(p + l0 * kLine, (size_t)(l1 - l0) * kLine);
            });
            best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        }
        volatile uint64_t keep = 0;
        for (uint64_t s : sink) keep = keep + s;
        return best;
    }, py::arg("buffer"), py::arg("threads"), py::arg("runs") = 5,
       "The best wall time, in seconds, of `runs` passes in which a thread pool of `threads` threads "
       "reads every whole 64-byte line of `buffer` once (each thread its own contiguous part).");
}
