#pragma once
#include "mpg/detail/guard.hpp"

#include <algorithm>
#include <cstdint>
#include <functional>

#include "mpg/detail/fp_env.hpp"
#include "mpg/detail/gather_sum.hpp"
#include "mpg/detail/kernel_table.hpp"
#include "mpg/detail/parallel.hpp"
#include "mpg/options.hpp"
#include "mpg/types.hpp"

namespace mpg::detail {

// Below this many bytes moved per thread, waking another thread costs more than it saves: a
// parked worker took 30-80 us to wake on the 2-CPU VM of the README's tables (bf16
// permute_grad, K = 8, H = 4096 and 7168, medians of 400 calls, 2026-12-06: 2 threads against 1
// at 1.2 MB moved 43-79 us against 21-23, at 2.4 MB even, at 4.1 MB 91 against 122, at 19 MB
// 1.8x faster; with 256 KiB here before, default calls of 0.5-3 MB ran 2-5x slower than on one
// thread). Wakes are cheaper on bare metal: there this costs a small share of a few-MB call.
inline constexpr int64_t kMinBytesPerThread = int64_t{2} << 20;
// Tasks per thread: dynamic hand-out of this many chunks evens out tokens whose copies were
// mostly dropped (cheap) against tokens with all K copies kept; whatever the drop pattern, the
// threads finish at most one chunk (1/16 of a share) apart. Weighing chunks by kept copies
// would need a pass over S before the kernels start, for at most that much gain.
inline constexpr int64_t kTasksPerThread = 16;
// Outputs at least this large bypass the cache on store (they are not read back by this call).
#ifndef MPG_TUNE_STREAMING_STORE_BYTES  // an override for scripts/tune_kernels.sh only
#define MPG_TUNE_STREAMING_STORE_BYTES (int64_t{8} << 20)
#endif
inline constexpr int64_t kStreamingStoreBytes = MPG_TUNE_STREAMING_STORE_BYTES;

// Runs fn(begin, end) over a deterministic partition of [0, num_tokens) into contiguous chunks,
// on options' threads (or its parallel_for hook), each chunk under the IEEE FP environment
// (MXCSR is per thread). bytes_moved (an upper bound of the bytes the op reads and writes)
// caps the default thread count so that each thread pays its way; an explicit count is obeyed,
// capped at one token per thread. Every token is computed by exactly one call of fn, so results
// cannot depend on the thread count as long as fn's result per token does not.
template <class Fn>
void run_tokens(int64_t num_tokens, int64_t bytes_moved, const Options& options, Fn&& fn) {
  if (num_tokens <= 0) return;
  int64_t threads = options.num_threads;
  if (threads == 0) {
    threads = std::min<int64_t>(default_num_threads(), bytes_moved / kMinBytesPerThread);
  }
  threads = std::clamp<int64_t>(threads, 1, num_tokens);
  if (threads == 1 && !options.parallel_for) {
    const ScopedIeeeFpEnv ieee;
    fn(int64_t{0}, num_tokens);
    return;
  }
  const int64_t max_tasks = std::min(num_tokens, threads * kTasksPerThread);
  const int64_t tokens_per_task = (num_tokens + max_tasks - 1) / max_tasks;
  const int64_t num_tasks = (num_tokens + tokens_per_task - 1) / tokens_per_task;
  const std::function<void(int64_t)> task = [&](int64_t i) {
    const ScopedIeeeFpEnv ieee;  // per thread: MXCSR is thread state
    const int64_t begin = i * tokens_per_task;
    fn(begin, std::min(num_tokens, begin + tokens_per_task));
  };
  if (options.parallel_for) {
    options.parallel_for(num_tasks, task);
  } else {
    ThreadPool::instance().run(static_cast<int>(threads), num_tasks, task);
  }
}

// The fast path of every gather-and-sum op: out[t] for t < out.rows from the kept (and, when
// kWeighted, nonzero-weight) rows of grad named by indices[t * topk ..], summed in order O,
// through the kernel set options.isa names (kAuto: the best this CPU runs). Inputs validated.
// Bit for bit equal to reference_gather_sum on every kernel set and thread count.
template <class T, class I, Mode M, Order O, bool kWeighted>
void fast_gather_sum(ConstMatrixView<T> grad, IndexView<I> indices, int64_t topk, WeightsView w,
                     MatrixView<T> out, const Options& options) {
  const int64_t num_tokens = out.rows;
  if (num_tokens == 0 || out.cols == 0) return;
  GatherSumArgs<T, I> args;
  args.grad = grad.data;
  args.grad_rows = grad.rows;
  args.grad_stride = grad.row_stride;
  args.indices = indices.data;
  args.topk = topk;
  args.weights = w;
  args.out = out.data;
  args.out_stride = out.row_stride;
  args.hidden = out.cols;
  const int64_t out_bytes = num_tokens * out.cols * static_cast<int64_t>(sizeof(T));
  args.streaming_stores = out_bytes >= kStreamingStoreBytes;
  const GatherSumKernel<T, I> kernel =
      select_gather_sum<T, I, M, O, kWeighted>(resolve_isa(options.isa));
  run_tokens(num_tokens, out_bytes * (topk + 1), options,
             [&](int64_t begin, int64_t end) { kernel(args, begin, end); });
}

}  // namespace mpg::detail
