#include "common/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <set>
#include <string>
#include <system_error>
#include <utility>

#include "common/error.h"

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
// futex wake-up (tens of microseconds) to each one (or leave its tasks to the caller).
constexpr auto kSpinTime = std::chrono::microseconds(200);

// Threads per logical CPU a pool may have (max_pool_threads): enough to test oversubscription,
// far below what exhausts a machine.
constexpr int kMaxThreadsPerCpu = 4;
}  // namespace

int max_pool_threads() {
    return kMaxThreadsPerCpu * (int)std::max(1u, std::thread::hardware_concurrency());
}

ThreadPool::ThreadPool(int n_threads) : n_threads_(std::max(1, n_threads)) {
    const int limit = max_pool_threads();
    if (n_threads_ > limit)
        throw Error("n_threads=" + std::to_string(n_threads) + " is more than this machine can use: at most " +
                    std::to_string(limit) + " (" + std::to_string(kMaxThreadsPerCpu) + " per logical CPU)");
    threads_.reserve(n_threads_ - 1);
    try {
        for (int i = 1; i < n_threads_; ++i) threads_.emplace_back([this] { worker(); });
    } catch (const std::system_error& e) {
        // Members are destroyed without the destructor running: joinable threads would end the
        // process, and workers asleep on wake_ would hang its destruction. Stop them first.
        const size_t started = threads_.size();
        stop_workers();
        throw Error("could not start a pool of " + std::to_string(n_threads_) + " threads (the system refused "
                    "more than " + std::to_string(started + 1) + "): " + e.what());
    }
}

ThreadPool::~ThreadPool() { stop_workers(); }

void ThreadPool::stop_workers() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stop_.store(true);
        ticket_.fetch_add(uint64_t(1) << (2 * kTaskBits));  // a new generation wakes everyone
    }
    wake_.notify_all();
    for (auto& t : threads_) t.join();
}

void ThreadPool::work_on(uint64_t job_ticket) {
    const uint64_t gen = job_ticket >> (2 * kTaskBits);
    const int n_tasks = (int)((job_ticket >> kTaskBits) & kTaskMask);
    uint64_t t = ticket_.load(std::memory_order_acquire);
    for (;;) {
        if ((t >> (2 * kTaskBits)) != gen || (int)(t & kTaskMask) >= n_tasks) return;
        if (!ticket_.compare_exchange_weak(t, t + 1, std::memory_order_acq_rel, std::memory_order_acquire)) continue;
        // The claimed task keeps the job alive (run() waits for it), so job_ is this job's.
        (*job_)((int)(t & kTaskMask), n_tasks);
        done_.fetch_add(1, std::memory_order_acq_rel);
        t = ticket_.load(std::memory_order_acquire);
    }
}

void ThreadPool::run(const std::function<void(int, int)>& fn, int n_tasks) {
    if (n_tasks <= 0) n_tasks = n_threads_;
    if (n_threads_ == 1 || n_tasks == 1) {
        for (int i = 0; i < n_tasks; ++i) fn(i, n_tasks);
        return;
    }
    if ((uint64_t)n_tasks > kTaskMask) n_tasks = (int)kTaskMask;  // callers ask for far fewer
    job_ = &fn;
    done_.store(0, std::memory_order_relaxed);
    const uint64_t gen = (ticket_.load(std::memory_order_relaxed) >> (2 * kTaskBits)) + 1;
    const uint64_t job_ticket = (gen << (2 * kTaskBits)) | ((uint64_t)n_tasks << kTaskBits);
    ticket_.store(job_ticket, std::memory_order_seq_cst);
    if (sleepers_.load(std::memory_order_seq_cst) > 0) {
        // The lock orders the new ticket with a worker that is about to sleep.
        { std::lock_guard<std::mutex> lock(mutex_); }
        wake_.notify_all();
    }
    work_on(job_ticket);
    // Every task is claimed; wait for the ones still running on workers.
    for (int spins = 0; done_.load(std::memory_order_acquire) != n_tasks; ++spins) {
        if (spins < 4096) EI_CPU_RELAX();
        else std::this_thread::yield();  // the worker holding a task may need this CPU
    }
    job_ = nullptr;
}

void ThreadPool::worker() {
    // Generation 0 is the constructor's: a worker that starts late must still see every later
    // one, the destructor's included (its tasks may all have been done by others meanwhile).
    uint64_t seen = 0;
    for (;;) {
        // Spin a little, then sleep until a new generation is published.
        const auto spin_until = std::chrono::steady_clock::now() + kSpinTime;
        uint64_t t = ticket_.load(std::memory_order_acquire);
        while ((t >> (2 * kTaskBits)) == seen && std::chrono::steady_clock::now() < spin_until) {
            for (int i = 0; i < 64; ++i) EI_CPU_RELAX();
            t = ticket_.load(std::memory_order_acquire);
        }
        if ((t >> (2 * kTaskBits)) == seen) {
            std::unique_lock<std::mutex> lock(mutex_);
            sleepers_.fetch_add(1, std::memory_order_seq_cst);
            wake_.wait(lock, [&] {
                return stop_.load() || (ticket_.load(std::memory_order_seq_cst) >> (2 * kTaskBits)) != seen;
            });
            sleepers_.fetch_sub(1, std::memory_order_relaxed);
            t = ticket_.load(std::memory_order_acquire);
        }
        seen = t >> (2 * kTaskBits);
        if (stop_.load()) return;
        work_on(t);
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
