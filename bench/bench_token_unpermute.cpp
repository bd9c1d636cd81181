// Google Benchmark of mpg::unpermute (MoeTokenUnpermute with probs: gather, weight, sum) on
// realistic MoE inputs (routing + forward permute + router probabilities), timed against the
// same-run bandwidth yardstick of bench/bandwidth.hpp (counters and naming are documented there).
//
// Byte model: every kept copy's row of permuted_tokens read once (copies past num_out_tokens
// cost nothing; no weight is zero here) + sorted_indices and probs read once; out (N x H)
// written once.
// Before timing, the fast path's output is compared bit for bit with the reference path's.
//
// Rows: BM_TokenUnpermute_<T>_<I>_P<probs dtype> (kept_pct < 100: R = num_out_tokens =
// N*K*kept_pct/100). threads:n sets Options::num_threads = n.

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
  std::vector<int64_t> key(int type_id) const {
    return {type_id, tokens, topk, hidden, experts, kept_pct};
  }
};

template <class T, class I, class P>
struct Fixture {
  std::vector<I> indices;
  mpg::bench::Rows<T> permuted;  // X: [rows, H]
  int64_t rows = 0;
  std::vector<P> probs;  // [N, K]
  mpg::bench::Rows<T> out;
  mpg::bench::Rows<T> expected;  // the reference path's output
  mpg::bench::ByteModel bytes;
  std::string error;
};

template <class T, class I, class P>
void build(const Case& c, Fixture<T, I, P>& f) {
  std::mt19937_64 rng(20261202);
  const std::vector<int32_t> expert_ids =
      mpg::bench::random_expert_ids(c.tokens, c.topk, c.experts, rng);
  mpg::Status s = mpg::route_dropless(expert_ids, c.topk, c.experts,
                                      c.tokens * c.topk * c.kept_pct / 100, &f.indices, &f.rows);
  if (!s.ok()) {
    f.error = "routing: " + s.message();
    return;
  }
  {
    mpg::bench::Rows<T> tokens(static_cast<size_t>(c.tokens * c.hidden));
    std::uniform_real_distribution<float> value(-1.0f, 1.0f);
    for (T& x : tokens) x = T(value(rng));
    f.permuted.assign(static_cast<size_t>(f.rows * c.hidden), T(0.0f));
    s = mpg::permute(mpg::MatrixView(tokens.data(), c.tokens, c.hidden), f.indices, c.topk,
                     mpg::Mode::kDropless, mpg::MatrixView(f.permuted.data(), f.rows, c.hidden));
  }
  if (!s.ok()) {
    f.error = "permute: " + s.message();
    return;
  }
  // Router probabilities: positive, so every copy below R is kept.
  std::uniform_real_distribution<float> weight(0.01f, 1.0f);
  f.probs.resize(static_cast<size_t>(c.tokens * c.topk));
  for (P& p : f.probs) p = P(weight(rng));
  f.out.assign(static_cast<size_t>(c.tokens * c.hidden), T(0.0f));
  f.expected.assign(f.out.size(), T(0.0f));
  mpg::Options reference;
  reference.path = mpg::Path::kReference;
  s = mpg::unpermute(mpg::MatrixView(f.permuted.data(), f.rows, c.hidden), f.indices,
                     mpg::MatrixView(f.probs.data(), c.tokens, c.topk), mpg::Mode::kDropless,
                     mpg::MatrixView(f.expected.data(), c.tokens, c.hidden), reference);
  if (!s.ok()) {
    f.error = "reference path: " + s.message();
    return;
  }
  const int64_t kept_copies =
      std::count_if(f.indices.begin(), f.indices.end(), [&](I v) { return v < f.rows; });
  f.bytes.read = mpg::bench::row_bytes(kept_copies, c.hidden, sizeof(T)) +
                 static_cast<int64_t>(f.indices.size() * sizeof(I)) +
                 static_cast<int64_t>(f.probs.size() * sizeof(P));
  f.bytes.write = mpg::bench::row_bytes(c.tokens, c.hidden, sizeof(T));
}

template <class T, class I, class P>
void BM_TokenUnpermute(benchmark::State& state, mpg::bench::Yardstick yardstick) {
  const Case c = Case::from(state);
  const int threads = static_cast<int>(state.range(kThreads));
  const int type_id = static_cast<int>(sizeof(T) * 256 + sizeof(I) * 16 + sizeof(P));
  auto& f = mpg::bench::cached_fixture<Fixture<T, I, P>>(
      c.key(type_id), [&](Fixture<T, I, P>& fresh) { build(c, fresh); });
  if (!f.error.empty()) {
    state.SkipWithError(f.error.c_str());
    return;
  }
  mpg::Options options;
  options.num_threads = threads;
  const mpg::ConstMatrixView<T> permuted(f.permuted.data(), f.rows, c.hidden);
  const mpg::ConstMatrixView<P> probs(f.probs.data(), c.tokens, c.topk);
  const mpg::MatrixView<T> out(f.out.data(), c.tokens, c.hidden);
  const auto run = [&] {
    return mpg::unpermute(permuted, f.indices, probs, mpg::Mode::kDropless, out, options);
  };
  std::memset(static_cast<void*>(f.out.data()), 0xA5, f.out.size() * sizeof(T));
  if (mpg::Status s = run(); !s.ok()) {
    state.SkipWithError(("unpermute failed: " + s.message()).c_str());
    return;
  }
  if (std::memcmp(f.out.data(), f.expected.data(), f.out.size() * sizeof(T)) != 0) {
    state.SkipWithError("fast path differs from the reference path");
    return;
  }
  mpg::bench::time_op(state, f.bytes, threads, run, yardstick);
}

template <class T, class I, class P>
void add(const std::string& name, const std::vector<int64_t>& shape,
         const std::vector<int64_t>& threads) {
  mpg::bench::add_rows(name, mpg::bench::Yardstick::kSameRun, &BM_TokenUnpermute<T, I, P>,
                       {"tokens", "topk", "hidden", "experts", "kept_pct", "threads"}, shape,
                       threads);
}

void register_all() {
  using mpg::bfloat16;
  using mpg::half;
  add<bfloat16, int32_t, bfloat16>("BM_TokenUnpermute_BF16_I32_PBF16", {4096, 8, 4096, 64, 100},
                                   {1, 2});
  add<half, int32_t, half>("BM_TokenUnpermute_FP16_I32_PFP16", {2048, 8, 7168, 256, 90}, {1, 2});
  // Probs in fp32 with bf16 tokens (a router kept in fp32): the widening differs, not the bytes.
  add<bfloat16, int32_t, float>("BM_TokenUnpermute_BF16_I32_PFP32", {4096, 8, 4096, 64, 100}, {1});
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
