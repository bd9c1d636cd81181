// bench/bandwidth.hpp: the same-run bandwidth yardstick and the row helpers shared by mpg's
// Google Benchmark binaries (bench/bench_<op>.cpp).
//
// THE YARDSTICK. For an op that reads R bytes and writes W bytes (its byte model), the yardstick
// is the plainest fast code that moves the same bytes: it reads R bytes sequentially from one
// buffer (AVX-512 loads into 8 independent accumulators, else AVX2, else portable 64-bit loads)
// and writes W bytes with non-temporal stores of whole 64-byte lines (_mm512_stream_si512 /
// _mm256_stream_si256, then sfence; plain stores on the portable path). How it does so is a Plan:
// the read as 1, 4 or 8 sequential streams in lockstep, with or without a software prefetch
// 4 KiB ahead, the writes after the reads or interleaved with them. Each row times all 12 plans
// on its own bytes and thread count before it starts and keeps the fastest (an op that reads
// K rows at once keeps K streams in flight, so a one-stream yardstick would be beaten). With n
// threads the buffers are cut into n x kChunksPerThread contiguous chunks run on mpg's own
// thread pool, so
// the yardstick and the op pay the same wake-up and balance a descheduled thread the same way
// (OpenMP was not used: its threads spin after a region and would steal the CPU from the op's
// pool, which runs right after it). Its buffers are allocated and touched once, outside the timed
// loop, in pages of the same size as the op's (see PAGES). It has no gather, no conversion and no
// arithmetic worth the name, and
//     efficiency = yardstick time / op time   (same bytes, same thread count, same run)
// is the share of the machine's plain streaming bandwidth the op reaches. It is not a bound on
// every access pattern: on the Zen 5 guest of 2026-12-07, 8 gathered rows per thread moved the
// same bytes 8-22% faster than the kept plan on 2 threads (bench_bandwidth's BM_Gather rows), so
// an op may read above 1 there. The yardstick is timed right before each op call (interleaved),
// so load from other processes hits both.
//
// HOW TO ADD AN OP'S ROWS (bench/bench_<op>.cpp):
//
//   void BM_MyOp(benchmark::State& state, mpg::bench::Yardstick yardstick) {  // per op and dtype
//     const int threads = static_cast<int>(state.range(kThreadsArg));
//     MyFixture& f = mpg::bench::cached_fixture<MyFixture>(key, [&](MyFixture& f) { ... });
//     // build inputs (row buffers as mpg::bench::Rows<T>), run the reference path, run the
//     // fast path once and memcmp: on a mismatch state.SkipWithError(...) and return (never
//     // time a wrong answer).
//     mpg::bench::ByteModel bytes;
//     bytes.read = kept_rows * H * sizeof(T) + indices_bytes;  // what the op must read
//     bytes.write = N * H * sizeof(T);                          // what it must write
//     mpg::bench::time_op(state, bytes, threads, [&] { return mpg::my_op(..., options); },
//                         yardstick);
//   }
//   // DRAM-sized shapes against the yardstick; in-cache and tiny shapes with Yardstick::kNone.
//   mpg::bench::add_rows("BM_MyOp_BF16_I32", mpg::bench::Yardstick::kSameRun, BM_MyOp,
//                        {"tokens", "topk", "hidden", "threads"}, {4096, 8, 4096}, {1, 2});
//   // and mpg::bench::add_context(); in main() before benchmark::Initialize.
//
// NAMING CONVENTION (bench/compare_pytorch.py and scripts/plot_bench.py rely on it):
//   binary: bench_<op in snake case>; rows:
//     BM_<Op>[Padded]_<dtype>_<index dtype>[_P<probs dtype>][/isa:<name>]/<arg>:<v>/.../threads:<n>
//   <Op> is the vendor op without "Moe"; dtypes FP32, FP16, BF16, I32, I64; args named with
//   ArgNames, "threads" always last (0 = default Options); rows forcing an ISA through
//   Options::isa carry "/isa:<name>" (mpg::name_of) right after the family name. The shape
//   args are tokens, topk, hidden, experts, then kept_pct (dropless: num_out_tokens or
//   active_num = N*K*kept_pct/100) or capacity (padded). The rows compare_pytorch.py expects:
//     bench_permute_grad          BM_PermuteGrad_BF16_I32        4096 x 8 x 4096, 64 experts, 100%
//                                 BM_PermuteGrad_FP32_I32        8192 x 2 x 4096, 8, 100%
//                                 BM_PermuteGrad_FP16_I32        2048 x 8 x 7168, 256, 90%
//                                 BM_PermuteGradPadded_BF16_I32  4096 x 8 x 4096, 64 x capacity 640
//     bench_token_unpermute       BM_TokenUnpermute_BF16_I32_PBF16   4096 x 8 x 4096, 64, 100%
//                                 BM_TokenUnpermute_FP16_I32_PFP16   2048 x 8 x 7168, 256, 90%
//     bench_init_routing_v2_grad  BM_InitRoutingV2Grad_BF16_I32        4096 x 8 x 4096, 64, 100%
//                                 BM_InitRoutingV2GradPadded_BF16_I32  4096 x 8 x 4096, 64 x 640
//     bench_token_permute         BM_TokenPermute_BF16_I32       4096 x 8 x 4096, 64, 100%
//     bench_token_unpermute_grad  BM_TokenUnpermuteGrad_BF16_I32_PBF16  4096 x 8 x 4096, 64, 100%
//                                 BM_TokenUnpermuteGrad_FP32_I32_PFP32  8192 x 2 x 4096, 8, 100%
//   each at threads 1 and 2, e.g.
//   BM_TokenUnpermute_BF16_I32_PBF16/tokens:4096/topk:8/hidden:4096/experts:64/kept_pct:100/threads:1
//   CMake builds every bench/bench_*.cpp (no CMake edit needed); scripts/bench.sh runs and charts
//   every one of them.
//
// COUNTERS of every row (JSON: --benchmark_out=f.json --benchmark_out_format=json):
//   bytes_per_second  the byte model's read + write bytes per second of the op
//   GBps              the same in GB/s (1e9 bytes), for the console
//   ref_GBps          the yardstick's rate for the same bytes in the same run (kSameRun rows)
//   efficiency        yardstick time / op time, summed over the row's calls (kSameRun rows)
//   ref_streams, ref_prefetch, ref_interleave   the yardstick's plan for the row (kSameRun rows)
//   read_MB, write_MB the byte model (1e6 bytes), so the JSON carries it
//   huge_pages        1 when the row ran with MPG_BENCH_HUGE_PAGES=1 (see PAGES)
//
// PAGES. Every buffer of 2 MiB or more (the yardstick's and the ops' rows alike) gets ordinary
// 4 KiB pages by default: what malloc gives where transparent huge pages are in madvise mode
// (Debian's default), and what PyTorch's CPU allocator gives unless THP_MEM_ALLOC_ENABLE=1.
// MPG_BENCH_HUGE_PAGES=1 in the environment starts them on a 2 MiB boundary and asks for 2 MiB
// pages with madvise(MADV_HUGEPAGE) before they are touched, to see whether a machine's gathers
// lose more to 4 KiB pages than its plain reads do (on the VM of the README's tables they did
// not: README, "Huge pages"). The kernel grants them unless
// /sys/kernel/mm/transparent_hugepage/enabled is "never".
#pragma once

#include <benchmark/benchmark.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <new>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "mpg/mpg.hpp"  // also mpg::detail::ThreadPool (detail headers are not included directly)

#if (defined(__x86_64__) || defined(_M_X64)) && (defined(__GNUC__) || defined(__clang__))
#define MPG_BENCH_X86 1
#include <immintrin.h>
#else
#define MPG_BENCH_X86 0
#endif

namespace mpg::bench {

// What an op must move, in bytes: every input byte it needs read once, every output byte
// written once. Bytes it may skip (dropped copies) are not counted.
struct ByteModel {
  int64_t read = 0;
  int64_t write = 0;
  int64_t total() const { return read + write; }
};

// Bytes of `rows` rows of `hidden` elements of `elem_size` bytes.
constexpr int64_t row_bytes(int64_t rows, int64_t hidden, int64_t elem_size) {
  return rows * hidden * elem_size;
}

// How the yardstick moves a row's bytes. No one way is fastest on every machine, load, thread
// count and read/write mix, so BandwidthReference::calibrate times every plan of kPlans for the
// row and keeps the fastest: the yardstick is the best of them, never a chosen one.
struct Plan {
  int streams = 1;          // sequential streams the read is cut into, read in lockstep
  bool prefetch = false;    // software prefetch kPrefetchBytes ahead in every stream
  bool interleave = false;  // writes issued between read steps in proportion, not after them
};

inline constexpr Plan kPlans[] = {
    {1, false, false}, {1, true, false}, {4, false, false}, {4, true, false},
    {8, false, false}, {8, true, false}, {1, false, true},  {1, true, true},
    {4, false, true},  {4, true, true},  {8, false, true},  {8, true, true},
};

enum class Yardstick {
  kSameRun,  // time the yardstick before every op call: ref_GBps and efficiency counters
  kNone,     // in-cache or tiny rows, where a DRAM yardstick says nothing: GB/s only
};

namespace detail {

inline constexpr int64_t kLine = 64;
inline constexpr int64_t kReadStep = 8 * kLine;  // one iteration of the read loops
// Chunks per thread: enough that a thread descheduled by another process is covered by the
// other, few enough that each chunk is a long sequential stream (>= 1 MiB on the DRAM rows).
inline constexpr int64_t kChunksPerThread = 16;

struct AlignedFree {
  void operator()(unsigned char* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<unsigned char[], AlignedFree>;

inline int64_t round_up(int64_t n, int64_t to) {
  return (n + to - 1) / to * to;
}

// MPG_BENCH_HUGE_PAGES=1 (see PAGES at the top).
inline bool huge_pages_requested() {
  static const bool requested = [] {
    const char* value = std::getenv("MPG_BENCH_HUGE_PAGES");
    return value != nullptr && std::strcmp(value, "1") == 0;
  }();
  return requested;
}

// Every bench buffer comes from here: `alignment` (a power of two dividing 4096), and with
// huge pages requested, buffers of 2 MiB or more on a 2 MiB boundary, madvised before the first
// touch (a page's size is fixed when it is first touched). Freed with std::free. nullptr when
// out of memory.
inline void* allocate_buffer(int64_t bytes, int64_t alignment) {
  constexpr int64_t kHugePage = int64_t{2} << 20;
  if (huge_pages_requested() && bytes >= kHugePage) {
    const int64_t rounded = round_up(bytes, kHugePage);
    void* p = std::aligned_alloc(static_cast<size_t>(kHugePage), static_cast<size_t>(rounded));
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (p != nullptr) madvise(p, static_cast<size_t>(rounded), MADV_HUGEPAGE);  // a hint only
#endif
    return p;
  }
  return std::aligned_alloc(static_cast<size_t>(alignment),
                            static_cast<size_t>(round_up(std::max<int64_t>(bytes, 1), alignment)));
}

// Software prefetch of the line kPrefetchBytes ahead of each loaded one (Plan::prefetch).
inline constexpr int64_t kPrefetchBytes = 4096;

template <bool kPrefetch>
MPG_ALWAYS_INLINE void prefetch_step(const unsigned char* p) {
  if constexpr (kPrefetch) {
    for (int64_t j = 0; j < kReadStep; j += kLine) __builtin_prefetch(p + kPrefetchBytes + j);
  } else {
    (void)p;
  }
}

// The bare gather of bench_bandwidth's BM_Gather rows (yardstick_body.hpp's gather_lines) reads
// as permute_grad's walk does for bf16 (detail/kernel_body.hpp): steps of 8 vectors of 16 bf16
// across the K rows, the in-row prefetch distance of the AVX-512 sets.
inline constexpr int64_t kGatherStepBytes = 4 * kLine;
inline constexpr int64_t kGatherPrefetchBytes = 1024;

// The line operations of each ISA; yardstick_body.hpp builds the chunk loop from them. The
// value written is arbitrary (bf16 1.0 pairs).
namespace portable {
struct Acc {
  uint64_t lane[8];
};
MPG_ALWAYS_INLINE Acc zero() {
  return Acc{};
}
MPG_ALWAYS_INLINE Acc add_line(Acc a, const unsigned char* p) {
  for (int k = 0; k < 8; ++k) {
    uint64_t v;
    std::memcpy(&v, p + 8 * k, sizeof(v));
    a.lane[k] += v;
  }
  return a;
}
MPG_ALWAYS_INLINE uint64_t lanes_sum(const Acc& a) {
  return std::accumulate(a.lane, a.lane + 8, uint64_t{0});
}
MPG_ALWAYS_INLINE void stream_line(unsigned char* p) {
  std::memset(p, 0x3f, kLine);
}
MPG_ALWAYS_INLINE void fence() {}
}  // namespace portable
}  // namespace detail
}  // namespace mpg::bench

#define MPG_BENCH_YARDSTICK_NAMESPACE portable
#include "yardstick_body.hpp"
#undef MPG_BENCH_YARDSTICK_NAMESPACE

#if MPG_BENCH_X86
MPG_BEGIN_TARGET("avx2")
namespace mpg::bench::detail::avx2 {
using Acc = __m256i;
MPG_ALWAYS_INLINE Acc zero() {
  return _mm256_setzero_si256();
}
MPG_ALWAYS_INLINE Acc add_line(Acc a, const unsigned char* p) {
  const auto* q = reinterpret_cast<const __m256i*>(p);
  return _mm256_add_epi64(_mm256_add_epi64(a, _mm256_load_si256(q)), _mm256_load_si256(q + 1));
}
MPG_ALWAYS_INLINE uint64_t lanes_sum(Acc a) {
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), a);
  return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}
MPG_ALWAYS_INLINE void stream_line(unsigned char* p) {
  const __m256i v = _mm256_set1_epi32(0x3f803f80);
  _mm256_stream_si256(reinterpret_cast<__m256i*>(p), v);
  _mm256_stream_si256(reinterpret_cast<__m256i*>(p + 32), v);
}
MPG_ALWAYS_INLINE void fence() {
  _mm_sfence();
}
}  // namespace mpg::bench::detail::avx2
#define MPG_BENCH_YARDSTICK_NAMESPACE avx2
#include "yardstick_body.hpp"
#undef MPG_BENCH_YARDSTICK_NAMESPACE
MPG_END_TARGET

MPG_BEGIN_TARGET("avx2,avx512f")
namespace mpg::bench::detail::avx512 {
using Acc = __m512i;
MPG_ALWAYS_INLINE Acc zero() {
  return _mm512_setzero_si512();
}
MPG_ALWAYS_INLINE Acc add_line(Acc a, const unsigned char* p) {
  return _mm512_add_epi64(a, _mm512_load_si512(p));
}
MPG_ALWAYS_INLINE uint64_t lanes_sum(Acc a) {
  alignas(64) uint64_t lanes[8];  // not _mm512_reduce_add_epi64: g++ 12 warns inside it
  _mm512_store_si512(lanes, a);
  return std::accumulate(lanes, lanes + 8, uint64_t{0});
}
MPG_ALWAYS_INLINE void stream_line(unsigned char* p) {
  _mm512_stream_si512(reinterpret_cast<__m512i*>(p), _mm512_set1_epi32(0x3f803f80));
}
MPG_ALWAYS_INLINE void fence() {
  _mm_sfence();
}
}  // namespace mpg::bench::detail::avx512
#define MPG_BENCH_YARDSTICK_NAMESPACE avx512
#include "yardstick_body.hpp"
#undef MPG_BENCH_YARDSTICK_NAMESPACE
MPG_END_TARGET
#endif

namespace mpg::bench {
namespace detail {

enum class Kernels { kPortable, kAvx2, kAvx512 };

inline Kernels best_kernels() {
#if MPG_BENCH_X86
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return Kernels::kAvx512;
  if (__builtin_cpu_supports("avx2")) return Kernels::kAvx2;
#endif
  return Kernels::kPortable;
}

// One chunk of the yardstick under `plan`, by the ISA's loop (yardstick_body.hpp).
inline uint64_t move_chunk(Kernels k, const Plan& plan, const unsigned char* in, int64_t n,
                           unsigned char* out, int64_t w) {
#if MPG_BENCH_X86
  if (k == Kernels::kAvx512) return avx512::move_chunk(plan, in, n, out, w);
  if (k == Kernels::kAvx2) return avx2::move_chunk(plan, in, n, out, w);
#endif
  (void)k;
  return portable::move_chunk(plan, in, n, out, w);
}

// The bare gather (bench_bandwidth's BM_Gather rows) by the ISA's loop (yardstick_body.hpp).
inline uint64_t gather_lines(Kernels k, const unsigned char* const* rows, const int32_t* kept,
                             int64_t topk, int64_t row_bytes, int64_t token_begin,
                             int64_t token_end, unsigned char* out) {
#if MPG_BENCH_X86
  if (k == Kernels::kAvx512) {
    return avx512::gather_lines(rows, kept, topk, row_bytes, token_begin, token_end, out);
  }
  if (k == Kernels::kAvx2) {
    return avx2::gather_lines(rows, kept, topk, row_bytes, token_begin, token_end, out);
  }
#endif
  (void)k;
  return portable::gather_lines(rows, kept, topk, row_bytes, token_begin, token_end, out);
}

// [begin, end) of chunk i of n over `bytes`, cut at multiples of `unit`.
inline std::pair<int64_t, int64_t> chunk(int64_t bytes, int64_t i, int64_t n, int64_t unit) {
  const int64_t units = bytes / unit;
  return {units * i / n * unit, units * (i + 1) / n * unit};
}

}  // namespace detail

// The yardstick's buffers (process-wide, grown on demand, touched once) and its one call.
class BandwidthReference {
 public:
  static BandwidthReference& instance() {
    static BandwidthReference reference;
    return reference;
  }

  // Allocates and touches the buffers for `bytes`; call outside the timed loop.
  void reserve(const ByteModel& bytes) {
    grow(&in_, &in_size_, detail::round_up(bytes.read, detail::kReadStep));
    grow(&out_, &out_size_, detail::round_up(bytes.write, detail::kLine));
  }

  // Outside any timed loop, once per (bytes, threads): runs every plan of kPlans over the row's
  // bytes in 7 rounds, plan after plan, after a warm-up round, and keeps for run() the plan
  // whose time relative to its round's fastest plan has the lowest median. Relative to the
  // round: a slow spell on this shared machine that covers a whole round cancels out, one that
  // hits a single run of a plan is outvoted by the median (seen with plain medians or minima of
  // the times: the chosen plan 15-20% slower than the best one).
  Plan calibrate(const ByteModel& bytes, int threads) {
    const Key key{bytes.read, bytes.write, threads};
    for (const auto& [k, plan] : plans_) {
      if (k == key) return plan;
    }
    reserve(bytes);
    using Clock = std::chrono::steady_clock;
    constexpr int kCount = static_cast<int>(std::size(kPlans));
    constexpr int kRounds = 7;
    std::vector<double> relative[kCount];
    for (int round = 0; round <= kRounds; ++round) {
      double seconds[kCount];
      for (int i = 0; i < kCount; ++i) {
        const auto start = Clock::now();
        run(kPlans[i], bytes, threads);
        seconds[i] = std::chrono::duration<double>(Clock::now() - start).count();
      }
      if (round == 0) continue;  // warm-up
      const double fastest = *std::min_element(seconds, seconds + kCount);
      for (int i = 0; i < kCount; ++i) relative[i].push_back(seconds[i] / fastest);
    }
    double medians[kCount];
    for (int i = 0; i < kCount; ++i) {
      std::sort(relative[i].begin(), relative[i].end());
      medians[i] = relative[i][kRounds / 2];
    }
    const int best = static_cast<int>(std::min_element(medians, medians + kCount) - medians);
    plans_.emplace_back(key, kPlans[best]);
    return plans_.back().second;
  }

  // Reads bytes.read bytes and writes bytes.write bytes with non-temporal stores, on `threads`
  // threads, by the plan calibrate() kept for them.
  void run(const ByteModel& bytes, int threads) { run(calibrate(bytes, threads), bytes, threads); }

  // The same by a given plan. The bytes are cut into threads x kChunksPerThread chunks, each
  // its share of the reads and of the writes (detail::move_chunk).
  void run(const Plan& plan, const ByteModel& bytes, int threads) {
    reserve(bytes);
    const int64_t read = detail::round_up(bytes.read, detail::kReadStep);
    const int64_t write = detail::round_up(bytes.write, detail::kLine);
    const int64_t max_chunks = std::max<int64_t>(1, read / detail::kReadStep);
    const int64_t chunks = std::min<int64_t>(max_chunks, threads * detail::kChunksPerThread);
    const auto task = [&](int64_t i) {
      const auto [r0, r1] = detail::chunk(read, i, chunks, detail::kReadStep);
      const auto [w0, w1] = detail::chunk(write, i, chunks, detail::kLine);
      const uint64_t sum =
          detail::move_chunk(kernels_, plan, in_.get() + r0, r1 - r0, out_.get() + w0, w1 - w0);
      benchmark::DoNotOptimize(sum);
    };
    mpg::detail::ThreadPool::instance().run(threads, chunks, task);
    benchmark::ClobberMemory();
  }

  const char* kernels_name() const {
    switch (kernels_) {
      case detail::Kernels::kAvx512: return "avx512";
      case detail::Kernels::kAvx2: return "avx2";
      case detail::Kernels::kPortable: return "portable";
    }
    return "unknown";
  }

 private:
  BandwidthReference() = default;

  static void grow(detail::Buffer* buffer, int64_t* size, int64_t wanted) {
    if (wanted <= *size) return;
    buffer->reset();  // free first: the DRAM rows' buffers are hundreds of MiB
    void* p = detail::allocate_buffer(wanted, 4096);
    if (p == nullptr) std::abort();
    std::memset(p, 1, static_cast<size_t>(wanted));  // first touch here, never in a timed call
    buffer->reset(static_cast<unsigned char*>(p));
    *size = wanted;
  }

  using Key = std::tuple<int64_t, int64_t, int>;  // read bytes, write bytes, threads

  detail::Kernels kernels_ = detail::best_kernels();
  std::vector<std::pair<Key, Plan>> plans_;  // calibrate()'s choices
  detail::Buffer in_;
  detail::Buffer out_;
  int64_t in_size_ = 0;
  int64_t out_size_ = 0;
};

// Threads a row's `threads` argument stands for (0 = mpg's default).
inline int resolve_threads(int threads) {
  return threads > 0 ? threads : mpg::detail::default_num_threads();
}

// A plan as counters <prefix>streams, <prefix>prefetch and <prefix>interleave (0 or 1).
inline void add_plan_counters(benchmark::State& state, const Plan& plan,
                              const std::string& prefix) {
  state.counters[prefix + "streams"] = plan.streams;
  state.counters[prefix + "prefetch"] = plan.prefetch ? 1 : 0;
  state.counters[prefix + "interleave"] = plan.interleave ? 1 : 0;
}

// The benchmark loop of one op row; `yardstick` is the one add_rows passed to the row's
// function. `op` runs one call and returns something with ok() and message() (mpg::Status); a
// failed warm-up call ends the row with an error. kSameRun rows time each call themselves
// (manual time), right after a yardstick run with the same bytes and threads; kNone rows use
// Google Benchmark's own loop (real time).
template <class Op>
void time_op(benchmark::State& state, const ByteModel& bytes, int threads, Op&& op,
             Yardstick yardstick) {
  using Clock = std::chrono::steady_clock;
  const auto seconds_since = [](Clock::time_point start) {
    return std::chrono::duration<double>(Clock::now() - start).count();
  };
  const int ref_threads = resolve_threads(threads);
  auto& reference = BandwidthReference::instance();
  if (yardstick == Yardstick::kSameRun) {
    reference.calibrate(bytes, ref_threads);  // also wakes the pool and touches the buffers
  }
  if (auto s = op(); !s.ok()) {  // warm-up, and a last check that the op runs
    state.SkipWithError(("op failed: " + s.message()).c_str());
    return;
  }

  double op_seconds = 0.0;
  double ref_seconds = 0.0;
  if (yardstick == Yardstick::kSameRun) {
    for (auto _ : state) {
      const auto ref_start = Clock::now();
      reference.run(bytes, ref_threads);
      ref_seconds += seconds_since(ref_start);
      const auto start = Clock::now();
      auto s = op();
      benchmark::DoNotOptimize(s);
      benchmark::ClobberMemory();
      const double seconds = seconds_since(start);
      op_seconds += seconds;
      state.SetIterationTime(seconds);
    }
  } else {
    const auto start = Clock::now();
    for (auto _ : state) {
      auto s = op();
      benchmark::DoNotOptimize(s);
      benchmark::ClobberMemory();
    }
    op_seconds = seconds_since(start);
  }

  const double calls = static_cast<double>(state.iterations());
  const double total = static_cast<double>(bytes.total());
  state.SetBytesProcessed(static_cast<int64_t>(calls * total));
  state.counters["GBps"] = op_seconds > 0.0 ? calls * total / op_seconds / 1e9 : 0.0;
  state.counters["read_MB"] = static_cast<double>(bytes.read) / 1e6;
  state.counters["write_MB"] = static_cast<double>(bytes.write) / 1e6;
  state.counters["huge_pages"] = detail::huge_pages_requested() ? 1 : 0;
  if (yardstick == Yardstick::kSameRun && op_seconds > 0.0 && ref_seconds > 0.0) {
    state.counters["ref_GBps"] = calls * total / ref_seconds / 1e9;
    state.counters["efficiency"] = ref_seconds / op_seconds;
    add_plan_counters(state, reference.calibrate(bytes, ref_threads), "ref_");
  }
}

// Registers `name` with one row per thread count: args = shape followed by the thread count,
// arg_names = the shape's names followed by "threads". The row runs fn(state, extra...,
// yardstick); fn passes that yardstick on to time_op. kSameRun rows are UseManualTime (named
// .../manual_time), kNone rows UseRealTime (.../real_time): the work runs on the pool's threads,
// so the CPU time of the calling thread means little.
template <class Fn, class... Extra>
benchmark::internal::Benchmark* add_rows(const std::string& name, Yardstick yardstick, Fn&& fn,
                                         const std::vector<std::string>& arg_names,
                                         const std::vector<int64_t>& shape,
                                         const std::vector<int64_t>& threads, Extra&&... extra) {
  auto* b = benchmark::RegisterBenchmark(name.c_str(), std::forward<Fn>(fn),
                                         std::forward<Extra>(extra)..., yardstick)
                ->ArgNames(arg_names);
  if (yardstick == Yardstick::kSameRun) {
    b->UseManualTime();
  } else {
    b->UseRealTime();
  }
  for (int64_t n : threads) {
    std::vector<int64_t> args = shape;
    args.push_back(n);
    b->Args(args);
  }
  return b;
}

// One fixture (inputs, outputs, expected result) at a time, process-wide and whatever its type:
// consecutive rows of one case (thread counts, ISAs, repetitions) share it, a new case frees the
// previous one before it is built, so memory stays bounded by the largest case. `build(F&)` fills
// a fresh fixture.
namespace detail {
struct FixtureSlot {
  const void* type = nullptr;  // identifies the (F, Key) instantiation
  std::shared_ptr<void> key;
  std::shared_ptr<void> fixture;
};
inline FixtureSlot& fixture_slot() {
  static FixtureSlot slot;
  return slot;
}
}  // namespace detail

// Row buffers start on a 64-byte line, as tensors from PyTorch's CPU allocator or aclrtMalloc do.
// std::vector's do not: glibc puts a large block 16 bytes past a page, so every streamed row would
// start and end with a partial line written by plain stores (bf16 MoeTokenUnpermuteGrad 4096 x 8
// x 4096, 1 and 2 threads: 0.70-0.72 against 0.75-0.78 line-aligned, 2026-12-05).
template <class T>
struct LineAlignedAllocator {
  using value_type = T;
  LineAlignedAllocator() = default;
  template <class U>
  explicit LineAlignedAllocator(const LineAlignedAllocator<U>& /*other*/) {}
  T* allocate(size_t n) {
    void* p = detail::allocate_buffer(static_cast<int64_t>(n * sizeof(T)), detail::kLine);
    if (p == nullptr) throw std::bad_alloc();
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t /*n*/) { std::free(p); }
  template <class U>
  bool operator==(const LineAlignedAllocator<U>& /*other*/) const {
    return true;
  }
  template <class U>
  bool operator!=(const LineAlignedAllocator<U>& /*other*/) const {
    return false;
  }
};
template <class T>
using Rows = std::vector<T, LineAlignedAllocator<T>>;

template <class F, class Key, class Build>
F& cached_fixture(const Key& key, Build&& build) {
  static const char type_tag = 0;
  detail::FixtureSlot& slot = detail::fixture_slot();
  if (slot.type != &type_tag || !(*static_cast<const Key*>(slot.key.get()) == key)) {
    slot = detail::FixtureSlot{};  // free the previous case before building this one
    auto fresh = std::make_shared<F>();
    build(*fresh);
    slot.type = &type_tag;
    slot.key = std::make_shared<Key>(key);
    slot.fixture = std::move(fresh);
  }
  return *static_cast<F*>(slot.fixture.get());
}

// Realistic top-K routing: token t picks `topk` distinct experts of `experts` uniformly at random.
inline std::vector<int32_t> random_expert_ids(int64_t tokens, int64_t topk, int64_t experts,
                                              std::mt19937_64& rng) {
  std::vector<int32_t> all(static_cast<size_t>(experts));
  std::iota(all.begin(), all.end(), 0);
  std::vector<int32_t> ids;
  ids.reserve(static_cast<size_t>(tokens * topk));
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t k = 0; k < topk; ++k) {
      std::uniform_int_distribution<int64_t> pick(k, experts - 1);
      std::swap(all[static_cast<size_t>(k)], all[static_cast<size_t>(pick(rng))]);
      ids.push_back(all[static_cast<size_t>(k)]);
    }
  }
  return ids;
}

// Context lines every bench binary should record (shown in the JSON "context").
inline void add_context() {
  benchmark::AddCustomContext("yardstick_kernels", BandwidthReference::instance().kernels_name());
  benchmark::AddCustomContext(
      "yardstick",
      "sequential read of the op's read bytes from one buffer (1, 4 or 8 lockstep streams, with "
      "or without software prefetch) and non-temporal write of its written bytes (after the "
      "reads or interleaved with them): the fastest of these plans for each row, same threads, "
      "same run; the row's ref_streams, ref_prefetch and ref_interleave say which");
  // The kernel choices made by CPU model (kernel_avx512_vec.hpp's prefetch_bytes and
  // prefetch_to_l2).
  benchmark::AddCustomContext("cpu_model_tuning",
                              mpg::detail::cpu_features().amd_zen4
                                  ? "amd_zen4: AVX-512 in-row prefetch kPrefetchBytesZen4, into L2"
                                  : "none");
}

}  // namespace mpg::bench
