#pragma once
#include "mpg/detail/guard.hpp"

#include <algorithm>
#include <cstdint>
#include <functional>

#include "mpg/detail/cpu.hpp"
#include "mpg/detail/fp_env.hpp"
#include "mpg/detail/kernel_args.hpp"
#include "mpg/detail/kernel_avx2.hpp"
#include "mpg/detail/kernel_avx512.hpp"
#include "mpg/detail/kernel_portable.hpp"
#include "mpg/detail/parallel.hpp"
#include "mpg/options.hpp"
#include "mpg/types.hpp"

namespace mpg::detail {

// Below this many bytes moved, waking a second thread costs more than it saves.
inline constexpr int64_t kMinBytesPerThread = int64_t{256} << 10;
// Tasks per thread: dynamic hand-out of this many chunks evens out tokens whose copies were
// mostly dropped (cheap) against tokens with all K copies kept; whatever the drop pattern, the
// threads finish at most one chunk (1/16 of a share) apart. Weighing chunks by kept copies
// would need a pass over S before the kernels start, for at most that much gain.
inline constexpr int64_t kTasksPerThread = 16;
// Outputs at least this large bypass the cache on store (they are not read back by this call).
inline constexpr int64_t kStreamingStoreBytes = int64_t{8} << 20;

// The one ISA dispatch point. isa is resolved (not kAuto) and supported by this CPU: execute.hpp
// rejects a forced ISA the CPU lacks before anything runs.
template <class T, class I, Mode M>
GatherSumKernel<T, I> select_kernel(Isa isa) {
  switch (isa) {
#if MPG_HAVE_X86_KERNELS
    case Isa::kAvx512: return &avx512::gather_sum<T, I, M>;
    case Isa::kAvx2: return &avx2::gather_sum<T, I, M>;
#else
    case Isa::kAvx512:
    case Isa::kAvx2:
#endif
    case Isa::kAuto:
    case Isa::kPortable: break;
  }
  return &portable::gather_sum<T, I, M>;
}

inline Isa resolve_isa(Isa requested) {
  return requested == Isa::kAuto ? best_isa() : requested;
}

// SIMD kernels over a deterministic partition: each out row is computed by one thread, in
// ascending k, so the bits do not depend on the number of threads or who ran which chunk.
template <class T, class I, Mode M>
void fast_permute_grad(ConstMatrixView<T> grad, IndexView<I> indices, int64_t num_topk,
                       MatrixView<T> out, const Options& options) {
  const int64_t num_tokens = out.rows;
  if (num_tokens == 0 || out.cols == 0) return;
  GatherSumArgs<T, I> args;
  args.grad = grad.data;
  args.grad_rows = grad.rows;
  args.grad_stride = grad.row_stride;
  args.indices = indices.data;
  args.topk = num_topk;
  args.out = out.data;
  args.out_stride = out.row_stride;
  args.hidden = out.cols;
  const int64_t out_bytes = num_tokens * out.cols * static_cast<int64_t>(sizeof(T));
  args.streaming_stores = out_bytes >= kStreamingStoreBytes;
  const GatherSumKernel<T, I> kernel = select_kernel<T, I, M>(resolve_isa(options.isa));

  // An explicit thread count is obeyed (capped at one token per thread); the default is capped
  // further so that each thread gets enough bytes (upper bound: every copy kept) to pay its way.
  int64_t threads = options.num_threads;
  if (threads == 0) {
    threads =
        std::min<int64_t>(default_num_threads(), out_bytes * (num_topk + 1) / kMinBytesPerThread);
  }
  threads = std::clamp<int64_t>(threads, 1, num_tokens);
  if (threads == 1 && !options.parallel_for) {
    const ScopedIeeeFpEnv ieee;
    kernel(args, 0, num_tokens);
    return;
  }
  const int64_t max_tasks = std::min(num_tokens, threads * kTasksPerThread);
  const int64_t tokens_per_task = (num_tokens + max_tasks - 1) / max_tasks;
  const int64_t num_tasks = (num_tokens + tokens_per_task - 1) / tokens_per_task;
  const std::function<void(int64_t)> task = [&](int64_t i) {
    const ScopedIeeeFpEnv ieee;  // per thread: MXCSR is thread state
    const int64_t begin = i * tokens_per_task;
    kernel(args, begin, std::min(num_tokens, begin + tokens_per_task));
  };
  if (options.parallel_for) {
    options.parallel_for(num_tasks, task);
  } else {
    ThreadPool::instance().run(static_cast<int>(threads), num_tasks, task);
  }
}

}  // namespace mpg::detail
