// Google Benchmark of mpg::unpermute_grad (MoeTokenUnpermuteGrad) on realistic inputs: random
// top-K routing, X = the permuted tokens, g and probs random.
//
// Byte model (bench/bandwidth.hpp): read = the kept X rows (R x H x sizeof(T)) + g once per
// token (N x H x sizeof(T)) + probs (N x K x sizeof(P)) + sorted_indices (N x K x sizeof(I));
// write = dX (N*K x H x sizeof(T)) + dP (N x K x sizeof(P)). Before timing, the fast path's
// outputs are compared bit for bit with the reference path's.
//
// Rows (threads 1 and 2, efficiency against the same-run yardstick):
//   BM_TokenUnpermuteGrad_BF16_I32_PBF16/tokens:4096/topk:8/hidden:4096/experts:64/kept_pct:100
//   BM_TokenUnpermuteGrad_FP32_I32_PFP32/tokens:8192/topk:2/hidden:4096/experts:8/kept_pct:100
// and the same dtypes in cache (tokens 16 and 64, one thread, GB/s only): the kernel's
// instruction throughput, which a DRAM row hides where the two are close.
// Run with --benchmark_repetitions=5 --benchmark_report_aggregates_only=true for medians.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bandwidth.hpp"
#include "mpg/mpg.hpp"

namespace {

enum Arg : int { kTokens, kTopk, kHidden, kExperts, kKeptPct, kThreads };

template <class T, class P>
struct Fixture {
  std::vector<int32_t> indices;
  int64_t kept_rows = 0;
  mpg::bench::Rows<T> tokens;  // X [R, H]
  mpg::bench::Rows<T> grad;    // g [N, H]
  std::vector<P> probs;        // [N, K]
  mpg::bench::Rows<T> dx;
  std::vector<P> dp;
  std::string error;  // non-empty when the fast path disagreed with the reference
};

template <class T, class P>
void BM_TokenUnpermuteGrad(benchmark::State& state, mpg::bench::Yardstick yardstick) {
  const int64_t n = state.range(kTokens), k = state.range(kTopk), h = state.range(kHidden);
  const int64_t experts = state.range(kExperts), kept_pct = state.range(kKeptPct);
  const int threads = static_cast<int>(state.range(kThreads));
  using F = Fixture<T, P>;
  const std::vector<int64_t> key = {
      n, k, h, experts, kept_pct, static_cast<int64_t>(sizeof(T)), static_cast<int64_t>(sizeof(P))};
  F& f = mpg::bench::cached_fixture<F>(key, [&](F& f) {
    std::mt19937_64 rng(20261202);
    const auto ids = mpg::bench::random_expert_ids(n, k, experts, rng);
    const mpg::Status s =
        mpg::route_dropless(ids, k, experts, n * k * kept_pct / 100, &f.indices, &f.kept_rows);
    if (!s.ok()) {
      f.error = s.message();
      return;
    }
    std::uniform_real_distribution<float> value(-1.0f, 1.0f);
    f.tokens.resize(static_cast<size_t>(f.kept_rows * h));
    for (T& x : f.tokens) x = T(value(rng));
    f.grad.resize(static_cast<size_t>(n * h));
    for (T& x : f.grad) x = T(value(rng));
    f.probs.resize(static_cast<size_t>(n * k));
    for (P& x : f.probs) x = P(value(rng));
    f.dx.assign(static_cast<size_t>(n * k * h), T(0.0f));
    f.dp.assign(static_cast<size_t>(n * k), P(0.0f));
    mpg::bench::Rows<T> want_dx(f.dx.size());
    std::vector<P> want_dp(f.dp.size());
    mpg::Options reference;
    reference.path = mpg::Path::kReference;
    const auto run = [&](mpg::bench::Rows<T>& dx, std::vector<P>& dp, const mpg::Options& o) {
      return mpg::unpermute_grad(
          mpg::MatrixView(f.tokens.data(), f.kept_rows, h), mpg::MatrixView(f.grad.data(), n, h),
          f.indices, mpg::MatrixView(f.probs.data(), n, k), mpg::MatrixView(dx.data(), n * k, h),
          mpg::MatrixView(dp.data(), n, k), o);
    };
    if (!run(want_dx, want_dp, reference).ok() || !run(f.dx, f.dp, mpg::Options{}).ok() ||
        std::memcmp(want_dx.data(), f.dx.data(), f.dx.size() * sizeof(T)) != 0 ||
        std::memcmp(want_dp.data(), f.dp.data(), f.dp.size() * sizeof(P)) != 0) {
      f.error = "the fast path differs from the reference";
    }
  });
  if (!f.error.empty()) {
    state.SkipWithError(f.error.c_str());
    return;
  }
  mpg::bench::ByteModel bytes;
  bytes.read = mpg::bench::row_bytes(f.kept_rows, h, sizeof(T)) +
               mpg::bench::row_bytes(n, h, sizeof(T)) + n * k * int64_t{sizeof(P)} +
               n * k * int64_t{sizeof(int32_t)};
  bytes.write = mpg::bench::row_bytes(n * k, h, sizeof(T)) + n * k * int64_t{sizeof(P)};
  mpg::Options options;
  options.num_threads = threads;
  mpg::bench::time_op(
      state, bytes, threads,
      [&] {
        return mpg::unpermute_grad(
            mpg::MatrixView(f.tokens.data(), f.kept_rows, h), mpg::MatrixView(f.grad.data(), n, h),
            f.indices, mpg::MatrixView(f.probs.data(), n, k),
            mpg::MatrixView(f.dx.data(), n * k, h), mpg::MatrixView(f.dp.data(), n, k), options);
      },
      yardstick);
}

}  // namespace

int main(int argc, char** argv) {
  using mpg::bench::Yardstick;
  const std::vector<std::string> names = {"tokens",  "topk",     "hidden",
                                          "experts", "kept_pct", "threads"};
  mpg::bench::add_rows("BM_TokenUnpermuteGrad_BF16_I32_PBF16", Yardstick::kSameRun,
                       BM_TokenUnpermuteGrad<mpg::bfloat16, mpg::bfloat16>, names,
                       {4096, 8, 4096, 64, 100}, {1, 2});
  mpg::bench::add_rows("BM_TokenUnpermuteGrad_FP32_I32_PFP32", Yardstick::kSameRun,
                       BM_TokenUnpermuteGrad<float, float>, names, {8192, 2, 4096, 8, 100}, {1, 2});
  mpg::bench::add_rows("BM_TokenUnpermuteGrad_BF16_I32_PBF16", Yardstick::kNone,
                       BM_TokenUnpermuteGrad<mpg::bfloat16, mpg::bfloat16>, names,
                       {16, 8, 4096, 64, 100}, {1});
  mpg::bench::add_rows("BM_TokenUnpermuteGrad_FP32_I32_PFP32", Yardstick::kNone,
                       BM_TokenUnpermuteGrad<float, float>, names, {64, 2, 4096, 8, 100}, {1});
  mpg::bench::add_context();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
