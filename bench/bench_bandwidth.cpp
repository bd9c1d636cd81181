// The yardstick of bench/bandwidth.hpp on its own: how fast this machine reads, writes
// (non-temporal) and does both, per thread count. A sanity check of the reference every op row
// is compared with, e.g. that one thread reads about as fast as the machine allows.

#include <benchmark/benchmark.h>

#include <cstdint>
#include <string>
#include <vector>

#include "bandwidth.hpp"

namespace {

enum Arg : int { kReadMiB, kWriteMiB, kThreads };

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
  reference.reserve(bytes);
  mpg::bench::time_op(
      state, bytes, threads,
      [&] {
        reference.run(bytes, threads);
        return Done{};
      },
      yardstick);
}

}  // namespace

int main(int argc, char** argv) {
  for (const auto& shape : {std::vector<int64_t>{256, 0}, {0, 64}, {256, 32}}) {
    mpg::bench::add_rows("BM_Yardstick", mpg::bench::Yardstick::kNone, BM_Yardstick,
                         {"read_MiB", "write_MiB", "threads"}, shape, {1, 2});
  }
  mpg::bench::add_context();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
