// A persistent pool of worker threads. `run(fn)` calls fn(ith, nth) on every thread (the caller
// is thread 0) and returns when all are done; workers spin briefly between jobs (decode steps
// come back-to-back) and then sleep, so an oversubscribed machine degrades instead of collapsing.
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
    explicit ThreadPool(int n_threads);
    ~ThreadPool();
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    int size() const { return n_threads_; }

    // Calls fn(ith, nth) for ith in [0, nth) concurrently; nth == size(). Not reentrant.
    void run(const std::function<void(int ith, int nth)>& fn);

    // Splits [0, n) into nth contiguous ranges; returns the range of thread ith.
    static void split(int64_t n, int ith, int nth, int64_t* begin, int64_t* end) {
        const int64_t per = (n + nth - 1) / nth;
        *begin = std::min<int64_t>(n, per * ith);
        *end = std::min<int64_t>(n, *begin + per);
    }

private:
    void worker(int ith);

    int n_threads_;
    std::vector<std::thread> threads_;
    const std::function<void(int, int)>* job_ = nullptr;
    std::atomic<uint64_t> generation_{0};  // bumped once per run(); workers wait for a change
    std::atomic<int> pending_{0};          // workers still busy with the current job
    std::atomic<bool> stop_{false};
    std::mutex mutex_;
    std::condition_variable wake_;
};

// Number of physical cores (falls back to the logical count).
int physical_core_count();

}  // namespace ei
