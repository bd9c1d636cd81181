// Google Benchmark of mpg::token_permute (MoeTokenPermute) on realistic MoE routings, timed
// against the same-run bandwidth yardstick of bench/bandwidth.hpp (counters and naming are
// documented there).
//
// Byte model: every token row with a kept copy read once (the fast path reads each token row
// once and writes it to its K ranks) + the expert ids read once; the n kept rows of
// permute_tokens_out and the N*K int32 sorted_indices written once. The sort's own passes over
// the ids (in cache, tens of microseconds) are not counted.
// Before timing, the fast path's outputs are compared byte for byte with the reference path's.
//
// Rows: BM_TokenPermute_<T>_<I>/tokens/topk/hidden/experts/kept_pct/threads, where
// num_out_tokens = N*K*kept_pct/100; /isa:<name> rows force one kernel set through Options::isa
// (one per ISA this CPU runs). threads:0 means default Options.

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

enum Arg : int { kTokens, kTopk, kHidden, kExperts, kKeptPct, kThreads };

struct Case {
  int64_t tokens = 0;
  int64_t topk = 0;
  int64_t hidden = 0;
  int64_t experts = 0;
  int64_t kept_pct = 100;

  static Case from(const benchmark::State& state) {
    return {state.range(kTokens), state.range(kTopk), state.range(kHidden), state.range(kExperts),
            state.range(kKeptPct)};
  }
  int64_t copies() const { return tokens * topk; }
  int64_t num_out_tokens() const { return copies() * kept_pct / 100; }
  std::vector<int64_t> key(int type_id) const {
    return {type_id, tokens, topk, hidden, experts, kept_pct};
  }
};

template <class T, class E>
struct Fixture {
  mpg::bench::Rows<T> tokens;  // [N, H]
  std::vector<E> expert_ids;
  int64_t rows = 0;  // n
  mpg::bench::Rows<T> permuted;
  std::vector<int32_t> sorted;
  mpg::bench::Rows<T> expected;  // the reference path's outputs
  std::vector<int32_t> expected_sorted;
  mpg::bench::ByteModel bytes;
  std::string error;
};

template <class T, class E>
void build(const Case& c, Fixture<T, E>& f) {
  std::mt19937_64 rng(20261202);
  const std::vector<int32_t> ids = mpg::bench::random_expert_ids(c.tokens, c.topk, c.experts, rng);
  f.expert_ids.assign(ids.begin(), ids.end());
  f.tokens.resize(static_cast<size_t>(c.tokens * c.hidden));
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  for (T& x : f.tokens) x = T(value(rng));
  f.rows = mpg::token_permute_rows(c.num_out_tokens(), c.copies());
  f.permuted.assign(static_cast<size_t>(f.rows * c.hidden), T(0.0f));
  f.expected = f.permuted;
  f.sorted.assign(static_cast<size_t>(c.copies()), 0);
  f.expected_sorted = f.sorted;
  mpg::Options reference;
  reference.path = mpg::Path::kReference;
  const mpg::Status s = mpg::token_permute(
      mpg::ConstMatrixView<T>(f.tokens.data(), c.tokens, c.hidden), f.expert_ids, c.topk,
      c.num_out_tokens(), mpg::MatrixView<T>(f.expected.data(), f.rows, c.hidden),
      f.expected_sorted, reference);
  if (!s.ok()) {
    f.error = "reference path: " + s.message();
    return;
  }
  // Token rows with at least one kept copy are read; every id; n rows and N*K ranks written.
  std::vector<bool> read(static_cast<size_t>(c.tokens), false);
  for (int64_t i = 0; i < c.copies(); ++i) {
    if (f.expected_sorted[static_cast<size_t>(i)] < f.rows)
      read[static_cast<size_t>(i / c.topk)] = true;
  }
  const int64_t read_rows = std::count(read.begin(), read.end(), true);
  f.bytes.read = mpg::bench::row_bytes(read_rows, c.hidden, sizeof(T)) +
                 c.copies() * static_cast<int64_t>(sizeof(E));
  f.bytes.write = mpg::bench::row_bytes(f.rows, c.hidden, sizeof(T)) +
                  c.copies() * static_cast<int64_t>(sizeof(int32_t));
}

template <class T, class E>
void BM_TokenPermute(benchmark::State& state, mpg::Isa isa, mpg::bench::Yardstick yardstick) {
  const Case c = Case::from(state);
  const int threads = static_cast<int>(state.range(kThreads));
  const int type_id = static_cast<int>(sizeof(T) * 16 + sizeof(E));
  auto& f = mpg::bench::cached_fixture<Fixture<T, E>>(
      c.key(type_id), [&](Fixture<T, E>& fresh) { build(c, fresh); });
  if (!f.error.empty()) {
    state.SkipWithError(f.error.c_str());
    return;
  }
  mpg::Options options;
  options.num_threads = threads;
  options.isa = isa;
  const mpg::ConstMatrixView<T> tokens(f.tokens.data(), c.tokens, c.hidden);
  const mpg::MatrixView<T> permuted(f.permuted.data(), f.rows, c.hidden);
  const auto run = [&] {
    return mpg::token_permute(tokens, f.expert_ids, c.topk, c.num_out_tokens(), permuted, f.sorted,
                              options);
  };
  // Byte-for-byte check of this thread count's and ISA's outputs, over poisoned outputs.
  std::memset(static_cast<void*>(f.permuted.data()), 0xA5, f.permuted.size() * sizeof(T));
  std::fill(f.sorted.begin(), f.sorted.end(), -1);
  if (mpg::Status s = run(); !s.ok()) {
    state.SkipWithError(("token_permute failed: " + s.message()).c_str());
    return;
  }
  if (std::memcmp(f.permuted.data(), f.expected.data(), f.permuted.size() * sizeof(T)) != 0 ||
      f.sorted != f.expected_sorted) {
    state.SkipWithError("fast path differs from the reference path");
    return;
  }
  mpg::bench::time_op(state, f.bytes, threads, run, yardstick);
}

template <class T, class E>
void add(const std::string& name, const std::vector<int64_t>& shape,
         const std::vector<int64_t>& threads,
         mpg::bench::Yardstick yardstick = mpg::bench::Yardstick::kSameRun,
         mpg::Isa isa = mpg::Isa::kAuto) {
  const std::string family =
      isa == mpg::Isa::kAuto ? name : name + "/isa:" + std::string(mpg::name_of(isa));
  mpg::bench::add_rows(family, yardstick, &BM_TokenPermute<T, E>,
                       {"tokens", "topk", "hidden", "experts", "kept_pct", "threads"}, shape,
                       threads, isa);
}

void register_all() {
  using mpg::bfloat16;
  using mpg::Isa;
  using mpg::bench::Yardstick;
  // The DRAM shape: 4096 tokens of 4096 bf16 to top-8 of 64 experts (256 MiB written).
  add<bfloat16, int32_t>("BM_TokenPermute_BF16_I32", {4096, 8, 4096, 64, 100}, {1, 2});
  add<bfloat16, int32_t>("BM_TokenPermute_BF16_I32", {4096, 8, 4096, 64, 90}, {1, 2});
  add<int8_t, int64_t>("BM_TokenPermute_I8_I64", {4096, 8, 4096, 64, 100}, {1, 2});
  for (int i = 1; std::string(mpg::name_of(static_cast<Isa>(i))) != "unknown"; ++i) {
    const auto isa = static_cast<Isa>(i);
    if (!mpg::detail::cpu_supports(isa)) continue;
    add<bfloat16, int32_t>("BM_TokenPermute_BF16_I32", {4096, 8, 4096, 64, 100}, {1},
                           Yardstick::kSameRun, isa);
  }
  // In cache and tiny: overheads (validation, sort, dispatch, wake-up); 0 = default options.
  add<bfloat16, int32_t>("BM_TokenPermute_BF16_I32", {16, 8, 4096, 64, 100}, {0, 1, 2},
                         Yardstick::kNone);
  add<float, int32_t>("BM_TokenPermute_FP32_I32", {1, 1, 64, 8, 100}, {0, 1, 2}, Yardstick::kNone);
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
