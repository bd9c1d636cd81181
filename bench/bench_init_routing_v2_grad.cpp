// Google Benchmark of mpg::init_routing_v2_grad (MoeInitRoutingV2Grad, binary-bins order) on
// realistic MoE inputs (routing + forward permute), timed against the same-run bandwidth
// yardstick of bench/bandwidth.hpp (counters and naming are documented there).
//
// Byte model: every kept copy's row of G read once (dropped copies cost nothing) +
// expanded_row_idx read once; out (N x H) written once. The same bytes as PermuteGrad: only the
// order of the adds differs.
// Before timing, the fast path's output is compared bit for bit with the reference path's.
//
// Rows: BM_InitRoutingV2Grad_<T>_<I> (drop_pad_mode 0; kept_pct < 100 is active_num =
// N*K*kept_pct/100) and BM_InitRoutingV2GradPadded_<T>_<I> (drop_pad_mode 1, capacity layout).
// threads:n sets Options::num_threads = n.

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
  std::vector<int64_t> key(int type_id) const {
    return {type_id, static_cast<int64_t>(mode), tokens, topk, hidden, experts, kept_pct, capacity};
  }
};

template <class T, class I>
struct Fixture {
  std::vector<I> indices;
  mpg::bench::Rows<T> grad;  // G: [grad_rows, H]
  int64_t grad_rows = 0;
  mpg::bench::Rows<T> out;
  mpg::bench::Rows<T> expected;  // the reference path's output
  mpg::bench::ByteModel bytes;
  std::string error;
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
  s = mpg::init_routing_v2_grad(mpg::MatrixView(f.grad.data(), f.grad_rows, c.hidden), f.indices,
                                c.topk, c.mode,
                                mpg::MatrixView(f.expected.data(), c.tokens, c.hidden), reference);
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
void BM_InitRoutingV2Grad(benchmark::State& state, mpg::Mode mode,
                          mpg::bench::Yardstick yardstick) {
  const Case c = Case::from(state, mode);
  const int threads = static_cast<int>(state.range(kThreads));
  const int type_id = static_cast<int>(sizeof(T) * 16 + sizeof(I));
  auto& f = mpg::bench::cached_fixture<Fixture<T, I>>(
      c.key(type_id), [&](Fixture<T, I>& fresh) { build(c, fresh); });
  if (!f.error.empty()) {
    state.SkipWithError(f.error.c_str());
    return;
  }
  mpg::Options options;
  options.num_threads = threads;
  const mpg::ConstMatrixView<T> grad(f.grad.data(), f.grad_rows, c.hidden);
  const mpg::MatrixView<T> out(f.out.data(), c.tokens, c.hidden);
  const auto run = [&] {
    return mpg::init_routing_v2_grad(grad, f.indices, c.topk, mode, out, options);
  };
  std::memset(static_cast<void*>(f.out.data()), 0xA5, f.out.size() * sizeof(T));
  if (mpg::Status s = run(); !s.ok()) {
    state.SkipWithError(("init_routing_v2_grad failed: " + s.message()).c_str());
    return;
  }
  if (std::memcmp(f.out.data(), f.expected.data(), f.out.size() * sizeof(T)) != 0) {
    state.SkipWithError("fast path differs from the reference path");
    return;
  }
  mpg::bench::time_op(state, f.bytes, threads, run, yardstick);
}

template <class T, class I>
void add(const std::string& name, mpg::Mode mode, const std::vector<int64_t>& shape,
         const std::vector<int64_t>& threads) {
  const char* fifth = mode == mpg::Mode::kDropless ? "kept_pct" : "capacity";
  mpg::bench::add_rows(name, mpg::bench::Yardstick::kSameRun, &BM_InitRoutingV2Grad<T, I>,
                       {"tokens", "topk", "hidden", "experts", fifth, "threads"}, shape, threads,
                       mode);
}

void register_all() {
  using mpg::bfloat16;
  using mpg::Mode;
  add<bfloat16, int32_t>("BM_InitRoutingV2Grad_BF16_I32", Mode::kDropless, {4096, 8, 4096, 64, 100},
                         {1, 2});
  add<bfloat16, int32_t>("BM_InitRoutingV2Grad_BF16_I32", Mode::kDropless, {4096, 8, 4096, 64, 90},
                         {1, 2});
  add<bfloat16, int32_t>("BM_InitRoutingV2GradPadded_BF16_I32", Mode::kPadded,
                         {4096, 8, 4096, 64, 640}, {1, 2});
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
