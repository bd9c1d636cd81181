// Google Benchmark of mpg::permute_grad on realistic MoE inputs (routing + forward permute).
//
// Every row carries, besides the time:
//   bytes_per_second  from the byte model: kept copies x H x sizeof(T) read from G (each kept
//                     row once; dropped copies cost nothing) + N x H x sizeof(T) written to out +
//                     N x K x sizeof(I) of sorted_indices read
//   op_GBps           the same rate in GB/s (1e9 bytes)
//   stream_GBps       a same-run bandwidth reference that moves the same bytes (see stream_sum)
//   efficiency        op_GBps / stream_GBps, measured in the same call, so machine noise from
//                     other processes hits both sides of the ratio about equally
// Before timing, the fast path's output is compared bit for bit with the reference path.
//
// Rows: BM_PermuteGrad_<T>_<I> (dropless; kept_pct < 100 keeps only that share of the copies,
// i.e. num_out_tokens = N*K*kept_pct/100) and BM_PermuteGradPadded_<T>_<I> (capacity layout).
// threads:0 means default Options; threads:n sets Options::num_threads = n.
// Run with --benchmark_repetitions=5 --benchmark_report_aggregates_only=true for medians.

#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "mpg/mpg.hpp"

namespace {

// Argument positions, shared by both families so that one function reads them.
enum Arg : int { kTokens, kTopk, kHidden, kExperts, kKeptPctOrCapacity, kThreads };

struct Case {
  mpg::Mode mode = mpg::Mode::kDropless;
  int64_t tokens = 0;
  int64_t topk = 0;
  int64_t hidden = 0;
  int64_t experts = 0;
  int64_t kept_pct = 100;  // dropless only
  int64_t capacity = 0;    // padded only

  static Case from(const benchmark::State& state, mpg::Mode mode) {
    Case c;
    c.mode = mode;
    c.tokens = state.range(kTokens);
    c.topk = state.range(kTopk);
    c.hidden = state.range(kHidden);
    c.experts = state.range(kExperts);
    (mode == mpg::Mode::kDropless ? c.kept_pct : c.capacity) = state.range(kKeptPctOrCapacity);
    return c;
  }
  std::vector<int64_t> key() const {
    return {static_cast<int64_t>(mode), tokens, topk, hidden, experts, kept_pct, capacity};
  }
};

// The stream reference: out_block[j] = sum of its share of input blocks, all contiguous. It has
// the op's shape (a few rows summed into one, reads and writes interleaved) without the gather,
// so it shows what this machine's memory system gives plain code for the same bytes. Plain C++
// (kBlock is a compile-time trip count, so GCC vectorizes it even at -O2) with ordinary stores:
// its writes pay a read-for-ownership the op's streaming stores may avoid, which can put
// efficiency a little above 1 when out is a large share of the bytes (K = 2, fp32).
constexpr int64_t kStreamBlock = 1024;  // floats: 4 KiB

struct StreamBuffers {
  std::vector<float> in;  // in_blocks x kStreamBlock
  std::vector<float> out;
  int64_t in_blocks = 0;
  int64_t out_blocks = 0;

  StreamBuffers(int64_t read_bytes, int64_t write_bytes) {
    const int64_t block_bytes = kStreamBlock * static_cast<int64_t>(sizeof(float));
    in_blocks = std::max<int64_t>(1, (read_bytes + block_bytes - 1) / block_bytes);
    out_blocks = std::max<int64_t>(1, (write_bytes + block_bytes - 1) / block_bytes);
    in.assign(static_cast<size_t>(in_blocks * kStreamBlock), 1.0f);  // touched here, once
    out.assign(static_cast<size_t>(out_blocks * kStreamBlock), 0.0f);
  }
  int64_t bytes() const {
    return (in_blocks + out_blocks) * kStreamBlock * static_cast<int64_t>(sizeof(float));
  }
};

void stream_sum_blocks(const float* __restrict in, float* __restrict out, int64_t in_begin,
                       int64_t in_end) {
  if (in_begin == in_end) {
    for (int64_t j = 0; j < kStreamBlock; ++j) out[j] = 0.0f;
    return;
  }
  const float* first = in + in_begin * kStreamBlock;
  for (int64_t j = 0; j < kStreamBlock; ++j) out[j] = first[j];
  for (int64_t b = in_begin + 1; b < in_end; ++b) {
    const float* row = in + b * kStreamBlock;
    for (int64_t j = 0; j < kStreamBlock; ++j) out[j] += row[j];
  }
}

// Same partition as the op (kTasksPerThread chunks per thread on mpg's own pool), so both sides
// pay the same wake-up cost.
void stream_sum(StreamBuffers& s, int threads) {
  const int64_t num_tasks =
      std::min<int64_t>(s.out_blocks, int64_t{threads} * mpg::detail::kTasksPerThread);
  const auto task = [&s, num_tasks](int64_t i) {
    const int64_t out_begin = s.out_blocks * i / num_tasks;
    const int64_t out_end = s.out_blocks * (i + 1) / num_tasks;
    for (int64_t o = out_begin; o < out_end; ++o) {
      stream_sum_blocks(s.in.data(), s.out.data() + o * kStreamBlock,
                        s.in_blocks * o / s.out_blocks, s.in_blocks * (o + 1) / s.out_blocks);
    }
  };
  mpg::detail::ThreadPool::instance().run(threads, num_tasks, task);
  benchmark::ClobberMemory();
}

// Median over 5 timed batches, each long enough (>= 2 ms) for the clock to resolve it.
double stream_bytes_per_second(StreamBuffers& s, int threads) {
  using Clock = std::chrono::steady_clock;
  const auto seconds_for = [&](int64_t reps) {
    const auto start = Clock::now();
    for (int64_t r = 0; r < reps; ++r) stream_sum(s, threads);
    return std::chrono::duration<double>(Clock::now() - start).count();
  };
  const double once = seconds_for(1);  // also a warm-up
  const int64_t reps = std::max<int64_t>(1, static_cast<int64_t>(2e-3 / std::max(once, 1e-9)));
  std::vector<double> per_rep;
  for (int batch = 0; batch < 5; ++batch) per_rep.push_back(seconds_for(reps) / reps);
  std::nth_element(per_rep.begin(), per_rep.begin() + 2, per_rep.end());
  return static_cast<double>(s.bytes()) / per_rep[2];
}

struct FixtureBase {
  virtual ~FixtureBase() = default;
  std::vector<int64_t> key;
};

// Inputs, outputs and the stream buffers of one case, built and touched once.
template <class T, class I>
struct Fixture : FixtureBase {
  std::vector<I> indices;
  std::vector<T> grad;  // G: [grad_rows, H]
  int64_t grad_rows = 0;
  std::vector<T> out;
  std::vector<T> expected;  // the reference path's output
  int64_t model_bytes = 0;
  std::optional<StreamBuffers> stream;
  std::string error;  // non-empty if the inputs could not be built
};

// Token t picks topk distinct experts uniformly at random (fixed seed).
std::vector<int32_t> random_expert_ids(const Case& c, std::mt19937_64& rng) {
  std::vector<int32_t> all(static_cast<size_t>(c.experts));
  std::iota(all.begin(), all.end(), 0);
  std::vector<int32_t> ids;
  ids.reserve(static_cast<size_t>(c.tokens * c.topk));
  for (int64_t t = 0; t < c.tokens; ++t) {
    for (int64_t k = 0; k < c.topk; ++k) {
      std::uniform_int_distribution<int64_t> pick(k, c.experts - 1);
      std::swap(all[static_cast<size_t>(k)], all[static_cast<size_t>(pick(rng))]);
      ids.push_back(all[static_cast<size_t>(k)]);
    }
  }
  return ids;
}

template <class T, class I>
void build(const Case& c, Fixture<T, I>& f) {
  std::mt19937_64 rng(20261202);
  const std::vector<int32_t> expert_ids = random_expert_ids(c, rng);
  const mpg::IndexView<int32_t> ids(expert_ids);
  mpg::Status s;
  if (c.mode == mpg::Mode::kDropless) {
    s = mpg::route_dropless<I>(ids, c.topk, c.experts, c.tokens * c.topk * c.kept_pct / 100,
                               &f.indices, &f.grad_rows);
  } else {
    s = mpg::route_padded<I>(ids, c.topk, c.experts, c.capacity, &f.indices);
    f.grad_rows = c.experts * c.capacity;
  }
  if (!s.ok()) {
    f.error = "routing: " + s.message();
    return;
  }
  {
    std::vector<T> tokens(static_cast<size_t>(c.tokens * c.hidden));
    std::uniform_real_distribution<float> value(-1.0f, 1.0f);
    for (T& x : tokens) x = T(value(rng));
    f.grad.assign(static_cast<size_t>(f.grad_rows * c.hidden), T(0.0f));
    s = mpg::permute<T, I>({tokens.data(), c.tokens, c.hidden}, f.indices, c.topk, c.mode,
                           {f.grad.data(), f.grad_rows, c.hidden});
  }
  if (!s.ok()) {
    f.error = "permute: " + s.message();
    return;
  }
  f.out.assign(static_cast<size_t>(c.tokens * c.hidden), T(0.0f));
  f.expected.assign(f.out.size(), T(0.0f));
  mpg::Options reference;
  reference.path = mpg::Path::kReference;
  s = mpg::permute_grad<T, I>({f.grad.data(), f.grad_rows, c.hidden}, f.indices, c.topk, c.mode,
                              {f.expected.data(), c.tokens, c.hidden}, reference);
  if (!s.ok()) {
    f.error = "reference path: " + s.message();
    return;
  }

  const auto kept = [&](I v) {
    return c.mode == mpg::Mode::kDropless ? v < f.grad_rows : v != I{-1};
  };
  const int64_t kept_copies = std::count_if(f.indices.begin(), f.indices.end(), kept);
  const int64_t elem = sizeof(T);
  const int64_t read_bytes =
      kept_copies * c.hidden * elem + static_cast<int64_t>(f.indices.size() * sizeof(I));
  const int64_t write_bytes = c.tokens * c.hidden * elem;
  f.model_bytes = read_bytes + write_bytes;
  f.stream.emplace(read_bytes, write_bytes);
}

// One case's buffers at a time: consecutive rows of a case (1 and 2 threads, repetitions) reuse
// them, and memory stays bounded by the largest case.
template <class T, class I>
Fixture<T, I>& fixture_for(const Case& c) {
  static std::unique_ptr<FixtureBase> cached;
  auto* f = dynamic_cast<Fixture<T, I>*>(cached.get());
  if (f == nullptr || f->key != c.key()) {
    cached.reset();  // free the previous case before building this one
    auto fresh = std::make_unique<Fixture<T, I>>();
    fresh->key = c.key();
    build(c, *fresh);
    f = fresh.get();
    cached = std::move(fresh);
  }
  return *f;
}

template <class T, class I>
void BM_PermuteGrad(benchmark::State& state, mpg::Mode mode) {
  const Case c = Case::from(state, mode);
  const int threads = static_cast<int>(state.range(kThreads));
  Fixture<T, I>& f = fixture_for<T, I>(c);
  if (!f.error.empty()) {
    state.SkipWithError(f.error.c_str());
    return;
  }
  mpg::Options options;
  options.num_threads = threads;
  const mpg::ConstMatrixView<T> grad(f.grad.data(), f.grad_rows, c.hidden);
  const mpg::MatrixView<T> out(f.out.data(), c.tokens, c.hidden);

  // Bit-for-bit check of this thread count's output, over a poisoned out.
  std::memset(static_cast<void*>(f.out.data()), 0xA5, f.out.size() * sizeof(T));
  if (mpg::Status s = mpg::permute_grad<T, I>(grad, f.indices, c.topk, mode, out, options);
      !s.ok()) {
    state.SkipWithError(("permute_grad failed: " + s.message()).c_str());
    return;
  }
  if (std::memcmp(f.out.data(), f.expected.data(), f.out.size() * sizeof(T)) != 0) {
    state.SkipWithError("fast path differs from the reference path");
    return;
  }

  // Default-option rows (small calls, where efficiency says little) compare with one thread.
  const double stream_bps = stream_bytes_per_second(*f.stream, std::max(threads, 1));

  for (auto _ : state) {
    mpg::Status s = mpg::permute_grad<T, I>(grad, f.indices, c.topk, mode, out, options);
    benchmark::DoNotOptimize(s);
    benchmark::ClobberMemory();
  }

  const double bytes = static_cast<double>(state.iterations()) * f.model_bytes;
  state.SetBytesProcessed(static_cast<int64_t>(bytes));
  state.counters["op_GBps"] = benchmark::Counter(bytes / 1e9, benchmark::Counter::kIsRate);
  state.counters["stream_GBps"] = stream_bps / 1e9;
  // kIsRate divides by the elapsed time: (bytes / time) / stream_bps.
  state.counters["efficiency"] =
      benchmark::Counter(bytes / stream_bps, benchmark::Counter::kIsRate);
}

template <class T, class I>
void add(const char* name, mpg::Mode mode, std::vector<int64_t> shape,
         std::vector<int64_t> threads) {
  const char* fourth = mode == mpg::Mode::kDropless ? "kept_pct" : "capacity";
  auto* b = benchmark::RegisterBenchmark(name, &BM_PermuteGrad<T, I>, mode)
                ->ArgNames({"tokens", "topk", "hidden", "experts", fourth, "threads"})
                ->UseRealTime();  // the pool's threads do the work: CPU time of one is meaningless
  for (int64_t n : threads) {
    std::vector<int64_t> args = shape;
    args.push_back(n);
    b->Args(args);
  }
}

void register_all() {
  using mpg::bfloat16;
  using mpg::half;
  using mpg::Mode;
  // Shapes: tokens, topk, hidden, experts, kept_pct (dropless) or capacity (padded). Expert
  // counts follow common models: 64 for top-8 at 4096, 8 for top-2 (Mixtral), 256 at 7168
  // (DeepSeek-V3). The large cases are far bigger than the caches: they measure DRAM.
  add<bfloat16, int32_t>("BM_PermuteGrad_BF16_I32", Mode::kDropless, {4096, 8, 4096, 64, 100},
                         {1, 2});
  add<float, int32_t>("BM_PermuteGrad_FP32_I32", Mode::kDropless, {8192, 2, 4096, 8, 100}, {1, 2});
  add<half, int32_t>("BM_PermuteGrad_FP16_I32", Mode::kDropless, {2048, 8, 7168, 256, 90}, {1, 2});
  add<bfloat16, int32_t>("BM_PermuteGradPadded_BF16_I32", Mode::kPadded, {4096, 8, 4096, 64, 640},
                         {1, 2});
  // Small calls: overheads (validation, dispatch, thread wake-up) dominate; 0 = default options.
  add<bfloat16, int32_t>("BM_PermuteGrad_BF16_I32", Mode::kDropless, {16, 8, 4096, 64, 100},
                         {0, 1, 2});
  add<float, int32_t>("BM_PermuteGrad_FP32_I32", Mode::kDropless, {1, 1, 64, 8, 100}, {0, 1, 2});
}

}  // namespace

int main(int argc, char** argv) {
  register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
