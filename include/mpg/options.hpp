// mpg: per-call options (threads, path, SIMD override, a caller-supplied parallel-for).
#pragma once

#include <cstdint>
#include <functional>

namespace mpg {

// Which implementation computes the result. All of them produce the same bits.
enum class Path : int32_t {
  kAuto,       // the fast path
  kReference,  // the short, obviously right Eigen path (single thread); the oracle in tests
  kFast,       // SIMD kernels + threads
};

// Which SIMD kernels the fast path uses. kAuto picks the best the CPU supports; forcing one the
// CPU lacks is an error (ErrorCode::kUnsupportedIsa), never a silent fallback.
enum class Isa : int32_t { kAuto, kPortable, kAvx2, kAvx512 };

constexpr const char* name_of(Isa isa) {
  switch (isa) {
    case Isa::kAuto: return "auto";
    case Isa::kPortable: return "portable";
    case Isa::kAvx2: return "avx2";
    case Isa::kAvx512: return "avx512";
  }
  return "unknown";
}

// Runs task(i) for every i in [0, num_tasks), in any order and on any threads, and returns when
// all have finished. Lets a framework run mpg on its own thread pool.
using ParallelFor =
    std::function<void(int64_t num_tasks, const std::function<void(int64_t)>& task)>;

struct Options {
  // Threads for the fast path. 0 = default: $MPG_NUM_THREADS if set, else the CPUs in this
  // process's affinity mask. Ignored when parallel_for is set (the hook owns the threads).
  int num_threads = 0;
  Path path = Path::kAuto;
  Isa isa = Isa::kAuto;
  ParallelFor parallel_for;  // empty = mpg's own pool
};

}  // namespace mpg
