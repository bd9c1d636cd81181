// mpg: per-call options (threads, path, SIMD override, a caller-supplied parallel-for).
#pragma once

#include <cstdint>
#include <functional>

namespace mpg {

// Which implementation computes the result. All of them produce the same bits.
enum class Path : int32_t {
  kFast = 0,       // SIMD kernels + threads (the default)
  kReference = 1,  // the short, obviously right Eigen path (single thread); the oracle in tests
  // The old name of kFast (they always meant the same thing); kept so that code using it still
  // compiles, with a warning.
  kAuto [[deprecated("mpg::Path::kAuto is Path::kFast; write kFast")]] = kFast,
};

// Which SIMD kernels the fast path uses. kAuto picks the best the CPU supports; forcing one the
// CPU lacks is an error (ErrorCode::kUnsupportedIsa), never a silent fallback. kAvx512Bf16 is the
// AVX-512 set with the AVX512_BF16 conversion for bf16 outputs (fp32 and fp16 run its AVX-512
// kernels).
enum class Isa : int32_t { kAuto, kPortable, kAvx2, kAvx512, kNeon, kAvx512Bf16 };

constexpr const char* name_of(Isa isa) {
  switch (isa) {
    case Isa::kAuto: return "auto";
    case Isa::kPortable: return "portable";
    case Isa::kAvx2: return "avx2";
    case Isa::kAvx512: return "avx512";
    case Isa::kNeon: return "neon";
    case Isa::kAvx512Bf16: return "avx512_bf16";
  }
  return "unknown";
}

// Runs task(i) for every i in [0, num_tasks), in any order and on any threads, and returns when
// all have finished. Lets a framework run mpg on its own thread pool.
using ParallelFor =
    std::function<void(int64_t num_tasks, const std::function<void(int64_t)>& task)>;

struct Options {
  // Threads for the fast path. 0 = default: $MPG_NUM_THREADS if set, else the CPUs in this
  // process's affinity mask, fewer for small calls. With parallel_for set, the hook owns the
  // threads and this count only sizes the work: up to num_threads * a few tasks are handed to it.
  int num_threads = 0;
  Path path = Path::kFast;
  Isa isa = Isa::kAuto;
  ParallelFor parallel_for;  // empty = mpg's own pool
};

}  // namespace mpg
