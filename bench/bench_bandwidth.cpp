// The yardstick of bench/bandwidth.hpp on its own: how fast this machine reads, writes
// (non-temporal) and does both, per thread count. A sanity check of the reference every op row
// is compared with, e.g. that one thread reads about as fast as the machine allows: the plan an
// op row would keep (plan:-1) and every plan of kPlans on its own (plan:0..11). BM_Gather rows:
// the ops' gather access pattern alone against the yardstick (see BM_Gather below).

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "bandwidth.hpp"

namespace {

// Args of a row: the bytes, the plan (index into kPlans, or -1 = the one calibrate() keeps),
// the threads.
enum Arg : int { kReadMiB, kWriteMiB, kPlanIndex, kThreads };

struct Done {
  bool ok() const { return true; }
  std::string message() const { return {}; }
};

void BM_Yardstick(benchmark::State& state, mpg::bench::Yardstick yardstick) {
  mpg::bench::ByteModel bytes;
  bytes.read = state.range(kReadMiB) << 20;
  bytes.write = state.range(kWriteMiB) << 20;
  const int threads = mpg::bench::resolve_threads(static_cast<int>(state.range(kThreads)));
  auto& reference = mpg::bench::BandwidthReference::instance();
  const int64_t index = state.range(kPlanIndex);
  const mpg::bench::Plan plan = index < 0 ? reference.calibrate(bytes, threads)
                                          : mpg::bench::kPlans[static_cast<size_t>(index)];
  mpg::bench::add_plan_counters(state, plan, "");
  reference.reserve(bytes);
  mpg::bench::time_op(
      state, bytes, threads,
      [&] {
        reference.run(plan, bytes, threads);
        return Done{};
      },
      yardstick);
}

// BM_Gather: the bare gather (bandwidth.hpp, kGatherStepBytes) against the yardstick for the
// same bytes. Not an op and not a reference: it tells how much of the sequential rate the access
// pattern of permute_grad and MoeTokenUnpermute keeps by itself, so that an op row can be read
// against both (an op near the bare gather but short of the yardstick is held back by where
// its rows lie, not by its arithmetic).
enum GatherArg : int {
  kGatherTokens,
  kGatherTopk,
  kGatherRowBytes,
  kGatherExperts,
  kGatherKeptPct,
  kGatherThreads
};

struct GatherFixture {
  mpg::bench::Rows<unsigned char> grad;  // tokens x topk rows, expert-sorted copies
  mpg::bench::Rows<unsigned char> out;
  std::vector<const unsigned char*> rows;  // rows[t * topk + j]: token t's j-th kept row
  std::vector<int32_t> kept;               // kept[t]: token t's kept rows
  mpg::bench::ByteModel bytes;
  std::string error;
};

void BM_Gather(benchmark::State& state, mpg::bench::Yardstick yardstick) {
  const int64_t tokens = state.range(kGatherTokens);
  const int64_t topk = state.range(kGatherTopk);
  const int64_t row_bytes = state.range(kGatherRowBytes);
  const int64_t experts = state.range(kGatherExperts);
  const int64_t kept_pct = state.range(kGatherKeptPct);
  const int threads = mpg::bench::resolve_threads(static_cast<int>(state.range(kGatherThreads)));
  const std::vector<int64_t> key{tokens, topk, row_bytes, experts, kept_pct};
  auto& f = mpg::bench::cached_fixture<GatherFixture>(key, [&](GatherFixture& fresh) {
    std::mt19937_64 rng(20261202);
    const std::vector<int32_t> expert_ids =
        mpg::bench::random_expert_ids(tokens, topk, experts, rng);
    std::vector<int32_t> sorted_indices;
    int64_t grad_rows = 0;
    const mpg::Status s = mpg::route_dropless(
        expert_ids, topk, experts, tokens * topk * kept_pct / 100, &sorted_indices, &grad_rows);
    if (!s.ok()) {
      fresh.error = "routing: " + s.message();
      return;
    }
    fresh.grad.assign(static_cast<size_t>(grad_rows * row_bytes), 1);  // first touch here
    fresh.out.assign(static_cast<size_t>(tokens * row_bytes), 0);
    // Each token's kept rows first, in k order (a dropped copy's index is >= grad_rows).
    fresh.rows.assign(sorted_indices.size(), nullptr);
    fresh.kept.assign(static_cast<size_t>(tokens), 0);
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t k = 0; k < topk; ++k) {
        const int64_t row = sorted_indices[static_cast<size_t>(t * topk + k)];
        if (row >= grad_rows) continue;
        int32_t& kept = fresh.kept[static_cast<size_t>(t)];
        fresh.rows[static_cast<size_t>(t * topk + kept++)] = fresh.grad.data() + row * row_bytes;
      }
    }
    fresh.bytes.read = grad_rows * row_bytes;
    fresh.bytes.write = tokens * row_bytes;
  });
  if (!f.error.empty()) {
    state.SkipWithError(f.error.c_str());
    return;
  }
  if (row_bytes % mpg::bench::detail::kGatherStepBytes != 0) {
    state.SkipWithError("row_bytes must be a multiple of kGatherStepBytes");
    return;
  }
  const auto kernels = mpg::bench::detail::best_kernels();
  const int64_t chunks = std::min<int64_t>(tokens, threads * mpg::bench::detail::kChunksPerThread);
  mpg::bench::time_op(
      state, f.bytes, threads,
      [&] {
        mpg::detail::ThreadPool::instance().run(threads, chunks, [&](int64_t i) {
          const uint64_t sum = mpg::bench::detail::gather_lines(
              kernels, f.rows.data(), f.kept.data(), topk, row_bytes, tokens * i / chunks,
              tokens * (i + 1) / chunks, f.out.data());
          benchmark::DoNotOptimize(sum);
        });
        return Done{};
      },
      yardstick);
}

}  // namespace

int main(int argc, char** argv) {
  // The kept plan for four mixes at 1 and 2 threads; every plan on its own for a read-heavy mix
  // (the bytes of bf16 4096 x 8 x 4096, on 1 and 2 threads, to set beside BM_Gather's first
  // rows) and a write-heavy one (1 thread): how much the plans differ, and why a row keeps one.
  for (const auto& bytes : {std::vector<int64_t>{256, 0}, {0, 64}, {256, 32}, {32, 256}}) {
    std::vector<int64_t> shape = bytes;
    shape.push_back(-1);
    mpg::bench::add_rows("BM_Yardstick", mpg::bench::Yardstick::kNone, BM_Yardstick,
                         {"read_MiB", "write_MiB", "plan", "threads"}, shape, {1, 2});
  }
  const int64_t plans = static_cast<int64_t>(std::size(mpg::bench::kPlans));
  for (const auto& bytes : {std::vector<int64_t>{256, 32}, {32, 256}}) {
    const std::vector<int64_t> threads =
        bytes[0] > bytes[1] ? std::vector<int64_t>{1, 2} : std::vector<int64_t>{1};
    for (int64_t plan = 0; plan < plans; ++plan) {
      std::vector<int64_t> shape = bytes;
      shape.push_back(plan);
      mpg::bench::add_rows("BM_Yardstick", mpg::bench::Yardstick::kNone, BM_Yardstick,
                           {"read_MiB", "write_MiB", "plan", "threads"}, shape, threads);
    }
  }
  // The bare gather of the shapes of bench_permute_grad's dropless rows: bf16 4096 x 8 x 4096
  // over 64 experts, fp32 8192 x 2 x 4096 over 8, fp16 2048 x 8 x 7168 over 256 with 90% kept.
  for (const auto& shape : {std::vector<int64_t>{4096, 8, 4096 * 2, 64, 100},
                            {8192, 2, 4096 * 4, 8, 100},
                            {2048, 8, 7168 * 2, 256, 90}}) {
    mpg::bench::add_rows("BM_Gather", mpg::bench::Yardstick::kSameRun, BM_Gather,
                         {"tokens", "topk", "row_bytes", "experts", "kept_pct", "threads"}, shape,
                         {1, 2});
  }
  mpg::bench::add_context();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
