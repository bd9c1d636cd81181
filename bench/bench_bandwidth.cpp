// The yardstick of bench/bandwidth.hpp on its own: how fast this machine reads, writes
// (non-temporal) and does both, per thread count. A sanity check of the reference every op row
// is compared with, e.g. that one thread reads about as fast as the machine allows: the plan an
// op row would keep (plan:-1) and every plan of kPlans on its own (plan:0..11).

#include <benchmark/benchmark.h>

#include <cstdint>
#include <iterator>
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

}  // namespace

int main(int argc, char** argv) {
  // The kept plan for four mixes at 1 and 2 threads; every plan on its own, on one thread, for
  // a read-heavy and a write-heavy mix (how much the plans differ, and why a row keeps one).
  for (const auto& bytes : {std::vector<int64_t>{256, 0}, {0, 64}, {256, 32}, {32, 256}}) {
    std::vector<int64_t> shape = bytes;
    shape.push_back(-1);
    mpg::bench::add_rows("BM_Yardstick", mpg::bench::Yardstick::kNone, BM_Yardstick,
                         {"read_MiB", "write_MiB", "plan", "threads"}, shape, {1, 2});
  }
  const int64_t plans = static_cast<int64_t>(std::size(mpg::bench::kPlans));
  for (const auto& bytes : {std::vector<int64_t>{256, 32}, {32, 256}}) {
    for (int64_t plan = 0; plan < plans; ++plan) {
      std::vector<int64_t> shape = bytes;
      shape.push_back(plan);
      mpg::bench::add_rows("BM_Yardstick", mpg::bench::Yardstick::kNone, BM_Yardstick,
                           {"read_MiB", "write_MiB", "plan", "threads"}, shape, {1});
    }
  }
  mpg::bench::add_context();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
