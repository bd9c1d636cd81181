// Google Benchmark of mpg::permute_grad on realistic MoE inputs (routing + forward permute),
// timed against the same-run bandwidth yardstick of bench/bandwidth.hpp (counters and naming
// are documented there).
//
// Byte model: every kept copy's row of G read once (dropped copies cost nothing) +
// sorted_indices read once; out (N x H) written once.
// Before timing, the fast path's output is compared bit for bit with the reference path's.
//
// Rows: BM_PermuteGrad_<T>_<I> (dropless; kept_pct < 100 keeps only that share of the copies,
// i.e. num_out_tokens = N*K*kept_pct/100) and BM_PermuteGradPadded_<T>_<I> (capacity layout);
// /isa:<name> rows force one kernel set through Options::isa (one per ISA this CPU runs).
// threads:0 means default Options; threads:n sets Options::num_threads = n.
// Medians: --benchmark_repetitions=5 --benchmark_report_aggregates_only=true; all numbers and
// the chart: scripts/bench.sh.

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bandwidth.hpp"
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

// Inputs, outputs and the reference path's result of one case, built and touched once.
template <class T, class I>
struct Fixture {
  std::vector<I> indices;
  mpg::bench::Rows<T> grad;  // G: [grad_rows, H]
  int64_t grad_rows = 0;
  mpg::bench::Rows<T> out;
  mpg::bench::Rows<T> expected;  // the reference path's output
  mpg::bench::ByteModel bytes;
  std::string error;  // non-empty if the inputs could not be built
};

template <class T, class I>
void build(const Case& c, Fixture<T, I>& f) {
  std::mt19937_64 rng(20261202);
  const std::vector<int32_t> expert_ids =
      mpg::bench::random_expert_ids(c.tokens, c.topk, c.experts, rng);
  mpg::Status s;
  if (c.mode == mpg::Mode::kDropless) {
    s = mpg::route_dropless(expert_ids, c.topk, c.experts, c.tokens * c.topk * c.kept_pct / 100,
                            &f.indices, &f.grad_rows);
  } else {
    s = mpg::route_padded(expert_ids, c.topk, c.experts, c.capacity, &f.indices);
    f.grad_rows = c.experts * c.capacity;
  }
  if (!s.ok()) {
    f.error = "routing: " + s.message();
    return;
  }
  {
    mpg::bench::Rows<T> tokens(static_cast<size_t>(c.tokens * c.hidden));
    std::uniform_real_distribution<float> value(-1.0f, 1.0f);
    for (T& x : tokens) x = T(value(rng));
    f.grad.assign(static_cast<size_t>(f.grad_rows * c.hidden), T(0.0f));
    s = mpg::permute(mpg::MatrixView(tokens.data(), c.tokens, c.hidden), f.indices, c.topk, c.mode,
                     mpg::MatrixView(f.grad.data(), f.grad_rows, c.hidden));
  }
  if (!s.ok()) {
    f.error = "permute: " + s.message();
    return;
  }
  f.out.assign(static_cast<size_t>(c.tokens * c.hidden), T(0.0f));
  f.expected.assign(f.out.size(), T(0.0f));
  mpg::Options reference;
  reference.path = mpg::Path::kReference;
  s = mpg::permute_grad(mpg::MatrixView(f.grad.data(), f.grad_rows, c.hidden), f.indices, c.topk,
                        c.mode, mpg::MatrixView(f.expected.data(), c.tokens, c.hidden), reference);
  if (!s.ok()) {
    f.error = "reference path: " + s.message();
    return;
  }

  const auto kept = [&](I v) {
    return c.mode == mpg::Mode::kDropless ? v < f.grad_rows : v != I{-1};
  };
  const int64_t kept_copies = std::count_if(f.indices.begin(), f.indices.end(), kept);
  f.bytes.read = mpg::bench::row_bytes(kept_copies, c.hidden, sizeof(T)) +
                 static_cast<int64_t>(f.indices.size() * sizeof(I));
  f.bytes.write = mpg::bench::row_bytes(c.tokens, c.hidden, sizeof(T));
}

template <class T, class I>
void BM_PermuteGrad(benchmark::State& state, mpg::Mode mode, mpg::Isa isa,
                    mpg::bench::Yardstick yardstick) {  // yardstick: from add_rows
  const Case c = Case::from(state, mode);
  const int threads = static_cast<int>(state.range(kThreads));
  auto& f = mpg::bench::cached_fixture<Fixture<T, I>>(
      c.key(), [&](Fixture<T, I>& fresh) { build(c, fresh); });
  if (!f.error.empty()) {
    state.SkipWithError(f.error.c_str());
    return;
  }
  mpg::Options options;
  options.num_threads = threads;
  options.isa = isa;
  const mpg::ConstMatrixView<T> grad(f.grad.data(), f.grad_rows, c.hidden);
  const mpg::MatrixView<T> out(f.out.data(), c.tokens, c.hidden);

  // Bit-for-bit check of this thread count's and ISA's output, over a poisoned out.
  std::memset(static_cast<void*>(f.out.data()), 0xA5, f.out.size() * sizeof(T));
  if (mpg::Status s = mpg::permute_grad(grad, f.indices, c.topk, mode, out, options); !s.ok()) {
    state.SkipWithError(("permute_grad failed: " + s.message()).c_str());
    return;
  }
  if (std::memcmp(f.out.data(), f.expected.data(), f.out.size() * sizeof(T)) != 0) {
    state.SkipWithError("fast path differs from the reference path");
    return;
  }

  mpg::bench::time_op(
      state, f.bytes, threads,
      [&] { return mpg::permute_grad(grad, f.indices, c.topk, mode, out, options); }, yardstick);
}

template <class T, class I>
void add(const std::string& name, mpg::Mode mode, const std::vector<int64_t>& shape,
         const std::vector<int64_t>& threads,
         mpg::bench::Yardstick yardstick = mpg::bench::Yardstick::kSameRun,
         mpg::Isa isa = mpg::Isa::kAuto) {
  const char* fourth = mode == mpg::Mode::kDropless ? "kept_pct" : "capacity";
  const std::string family =
      isa == mpg::Isa::kAuto ? name : name + "/isa:" + std::string(mpg::name_of(isa));
  mpg::bench::add_rows(family, yardstick, &BM_PermuteGrad<T, I>,
                       {"tokens", "topk", "hidden", "experts", fourth, "threads"}, shape, threads,
                       mode, isa);
}

void register_all() {
  using mpg::bfloat16;
  using mpg::half;
  using mpg::Isa;
  using mpg::Mode;
  using mpg::bench::Yardstick;
  // Shapes: tokens, topk, hidden, experts, kept_pct (dropless) or capacity (padded). Expert
  // counts follow common models: 64 for top-8 at 4096, 8 for top-2 (Mixtral), 256 at 7168
  // (DeepSeek-V3). The DRAM cases are far bigger than the caches.
  add<bfloat16, int32_t>("BM_PermuteGrad_BF16_I32", Mode::kDropless, {4096, 8, 4096, 64, 100},
                         {1, 2});
  add<float, int32_t>("BM_PermuteGrad_FP32_I32", Mode::kDropless, {8192, 2, 4096, 8, 100}, {1, 2});
  add<half, int32_t>("BM_PermuteGrad_FP16_I32", Mode::kDropless, {2048, 8, 7168, 256, 90}, {1, 2});
  add<bfloat16, int32_t>("BM_PermuteGradPadded_BF16_I32", Mode::kPadded, {4096, 8, 4096, 64, 640},
                         {1, 2});
  // One forced row per kernel set this CPU runs (every Isa value after kAuto), on the bf16 DRAM
  // shape at one thread.
  for (int i = 1; std::string(mpg::name_of(static_cast<Isa>(i))) != "unknown"; ++i) {
    const auto isa = static_cast<Isa>(i);
    if (!mpg::detail::cpu_supports(isa)) continue;
    add<bfloat16, int32_t>("BM_PermuteGrad_BF16_I32", Mode::kDropless, {4096, 8, 4096, 64, 100},
                           {1}, Yardstick::kSameRun, isa);
  }
  // In cache and tiny calls: overheads (validation, dispatch, thread wake-up) dominate, and a
  // DRAM yardstick says nothing about them; 0 = default options.
  add<bfloat16, int32_t>("BM_PermuteGrad_BF16_I32", Mode::kDropless, {16, 8, 4096, 64, 100},
                         {0, 1, 2}, Yardstick::kNone);
  add<float, int32_t>("BM_PermuteGrad_FP32_I32", Mode::kDropless, {1, 1, 64, 8, 100}, {0, 1, 2},
                      Yardstick::kNone);
}

}  // namespace

int main(int argc, char** argv) {
  register_all();
  mpg::bench::add_context();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
