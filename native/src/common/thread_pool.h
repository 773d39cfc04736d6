// A persistent pool of worker threads. `run(fn)` calls fn(i, n) for every task i of n (n ==
// size() by default) and returns when all are done. Tasks are claimed from a shared counter, so
// the calling thread and whichever workers are running take them in any order: a worker the OS
// has not scheduled yet is simply not waited for (its tasks are done by the others), which is
// what keeps an oversubscribed machine from collapsing. Workers spin briefly between jobs
// (decode steps issue a few hundred back to back) and then sleep.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace ei {

class ThreadPool {
public:
    // n_threads < 1 means 1. Throws ei::Error above max_pool_threads() (nothing is started), or
    // when the OS refuses a thread (the ones already started are stopped first).
    explicit ThreadPool(int n_threads);
    ~ThreadPool();
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    int size() const { return n_threads_; }

    // Calls fn(i, n_tasks) once for each i in [0, n_tasks), concurrently on the pool's threads
    // (the caller included); n_tasks <= 0 means size(). A task must not assume which thread
    // runs it. Not reentrant.
    void run(const std::function<void(int i, int n)>& fn, int n_tasks = 0);

    // Splits [0, n) into nth contiguous ranges; returns the range of part ith.
    static void split(int64_t n, int ith, int nth, int64_t* begin, int64_t* end) {
        const int64_t per = (n + nth - 1) / nth;
        *begin = std::min<int64_t>(n, per * ith);
        *end = std::min<int64_t>(n, *begin + per);
    }

private:
    void worker();
    // Wakes every worker with stop_ set and joins them (the destructor; a failed constructor).
    void stop_workers();
    // Claims and runs tasks of the current job until none are left.
    void work_on(uint64_t job_ticket);

    // ticket_ = generation << 40 | n_tasks << 20 | next task. A thread claims a task with a CAS
    // that also checks the generation, so a late worker can never take a task of a later job.
    static constexpr int kTaskBits = 20;
    static constexpr uint64_t kTaskMask = (uint64_t(1) << kTaskBits) - 1;

    int n_threads_;
    std::vector<std::thread> threads_;
    const std::function<void(int, int)>* job_ = nullptr;  // valid while tasks are unfinished
    std::atomic<uint64_t> ticket_{0};
    std::atomic<int> done_{0};      // tasks of the current job finished
    std::atomic<int> sleepers_{0};  // workers waiting on wake_
    std::atomic<bool> stop_{false};
    std::mutex mutex_;
    std::condition_variable wake_;
};

// Number of physical cores (falls back to the logical count).
int physical_core_count();

// The most threads a pool may have: a few per logical CPU. Past that, threads only take turns
// on the same CPUs (the Python layer already caps requests at the logical CPUs, with a warning),
// and a count like 100000 would exhaust the process's thread and memory limits.
int max_pool_threads();

}  // namespace ei
