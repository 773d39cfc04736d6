#include "common/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <set>
#include <string>
#include <utility>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define EI_CPU_RELAX() _mm_pause()
#elif defined(__aarch64__)
#define EI_CPU_RELAX() __asm__ __volatile__("yield")
#else
#define EI_CPU_RELAX() ((void)0)
#endif

namespace ei {

namespace {
// How long a worker spins for the next job before it sleeps. Decode steps issue a few hundred
// jobs back to back, so the gap between two jobs is microseconds; a sleeping worker would add a
// futex wake-up (tens of microseconds) to each one.
constexpr auto kSpinTime = std::chrono::microseconds(200);
}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(std::max(1, n_threads)) {
    threads_.reserve(n_threads_ - 1);
    for (int i = 1; i < n_threads_; ++i) threads_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stop_.store(true);
        generation_.fetch_add(1);
    }
    wake_.notify_all();
    for (auto& t : threads_) t.join();
}

void ThreadPool::run(const std::function<void(int, int)>& fn) {
    if (n_threads_ == 1) {
        fn(0, 1);
        return;
    }
    job_ = &fn;
    pending_.store(n_threads_ - 1, std::memory_order_relaxed);
    {
        // The lock orders the generation bump with a worker that is about to sleep.
        std::lock_guard<std::mutex> lock(mutex_);
        generation_.fetch_add(1, std::memory_order_release);
    }
    wake_.notify_all();
    fn(0, n_threads_);
    while (pending_.load(std::memory_order_acquire) != 0) EI_CPU_RELAX();
    job_ = nullptr;
}

void ThreadPool::worker(int ith) {
    uint64_t seen = 0;
    for (;;) {
        // Spin a little, then sleep until the generation changes.
        const auto spin_until = std::chrono::steady_clock::now() + kSpinTime;
        uint64_t gen = generation_.load(std::memory_order_acquire);
        while (gen == seen && std::chrono::steady_clock::now() < spin_until) {
            for (int i = 0; i < 64; ++i) EI_CPU_RELAX();
            gen = generation_.load(std::memory_order_acquire);
        }
        if (gen == seen) {
            std::unique_lock<std::mutex> lock(mutex_);
            wake_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
            gen = generation_.load(std::memory_order_acquire);
        }
        seen = gen;
        if (stop_.load()) return;
        (*job_)(ith, n_threads_);
        pending_.fetch_sub(1, std::memory_order_acq_rel);
    }
}

int physical_core_count() {
    // Count distinct (physical id, core id) pairs; hyper-threads share a core and slow each other
    // down on these memory- and FMA-bound kernels.
    std::ifstream cpuinfo("/proc/cpuinfo");
    std::set<std::pair<std::string, std::string>> cores;
    std::string line, phys = "0";
    while (std::getline(cpuinfo, line)) {
        auto value = [&] { return line.substr(line.find(':') + 1); };
        if (line.rfind("physical id", 0) == 0) phys = value();
        if (line.rfind("core id", 0) == 0) cores.insert({phys, value()});
    }
    const int logical = (int)std::max(1u, std::thread::hardware_concurrency());
    if (cores.empty()) return logical;
    return std::min<int>(logical, (int)cores.size());
}

}  // namespace ei
