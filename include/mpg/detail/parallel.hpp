#pragma once
#include "mpg/detail/guard.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <thread>

#if defined(__linux__)
#include <sched.h>
#endif

namespace mpg::detail {

inline int affinity_cpu_count() {
#if defined(__linux__)
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
#endif
  const unsigned n = std::thread::hardware_concurrency();
  return n > 0 ? static_cast<int>(n) : 1;
}

// Options::num_threads == 0 resolves here: $MPG_NUM_THREADS (a positive integer) wins, else the
// CPUs in the affinity mask (read once: a syscall per call would cost more than a small call).
inline int default_num_threads() {
  if (const char* env = std::getenv("MPG_NUM_THREADS")) {
    char* end = nullptr;
    const long n = std::strtol(env, &end, 10);
    if (end != env && *end == '\0' && n > 0) return n > 1024 ? 1024 : static_cast<int>(n);
  }
  static const int affinity = affinity_cpu_count();
  return affinity;
}

// A process-wide pool whose workers sleep between calls, so a call pays a wake-up, not a thread
// start. One parallel region runs at a time; a caller that finds the pool busy (another thread's
// call, or a nested call) runs its tasks itself. Results never depend on who runs a task.
class ThreadPool {
 public:
  static ThreadPool& instance() {
    // Never destroyed: workers may still be parked when static destructors run.
    static ThreadPool* pool = new ThreadPool();
    return *pool;
  }

  // Runs task(i) for i in [0, num_tasks) on up to num_threads threads, the caller being one.
  void run(int num_threads, int64_t num_tasks, const std::function<void(int64_t)>& task) {
    const int helpers =
        static_cast<int>(std::min<int64_t>(std::max(num_threads, 1), num_tasks) - 1);
    std::unique_lock<std::mutex> region(region_mutex_, std::try_to_lock);
    if (helpers <= 0 || !region.owns_lock()) {
      for (int64_t i = 0; i < num_tasks; ++i) task(i);
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (; num_workers_ < helpers; ++num_workers_) {
        std::thread([this, id = num_workers_] { worker_loop(id); }).detach();
      }
      task_ = &task;
      num_tasks_ = num_tasks;
      next_task_.store(0, std::memory_order_relaxed);
      helpers_wanted_ = helpers;
      helpers_running_ = helpers;
      ++generation_;
    }
    wake_.notify_all();
    drain();
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [this] { return helpers_running_ == 0; });
    task_ = nullptr;
  }

 private:
  ThreadPool() = default;

  void drain() {
    for (int64_t i; (i = next_task_.fetch_add(1, std::memory_order_relaxed)) < num_tasks_;) {
      (*task_)(i);
    }
  }

  void worker_loop(int id) {
    uint64_t seen = 0;
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      wake_.wait(lock, [&] { return generation_ != seen; });
      seen = generation_;
      if (id >= helpers_wanted_) continue;
      lock.unlock();
      drain();
      lock.lock();
      if (--helpers_running_ == 0) done_.notify_one();
    }
  }

  std::mutex region_mutex_;  // held by the caller for a whole parallel region
  std::mutex mutex_;         // guards the fields below
  std::condition_variable wake_;
  std::condition_variable done_;
  int num_workers_ = 0;  // detached; they park on wake_ for the life of the process
  const std::function<void(int64_t)>* task_ = nullptr;
  int64_t num_tasks_ = 0;
  std::atomic<int64_t> next_task_{0};
  uint64_t generation_ = 0;
  int helpers_wanted_ = 0;
  int helpers_running_ = 0;
};

}  // namespace mpg::detail
