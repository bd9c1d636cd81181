// MoeTokenUnpermuteGrad (mpg::unpermute_grad): the reduction tree of dP worked by hand and by an
// independent recursive tree, fp64 checks of both outputs, a finite-difference check of the
// forward/backward pair, special weights, dropped copies, dtype mixes, and every fast path
// against the reference bit for bit across sizes, layouts and thread counts.
#include "test_util.hpp"

#include <array>
#include <cmath>
#include <functional>
#include <tuple>

namespace {

using mpg::bfloat16;
using mpg::DType;
using mpg::half;
using mpg::IndexType;
using mpg_test::bits_of;
using mpg_test::GuardedMatrix;
using mpg_test::PathCase;

// ---------------------------------------------------------------------------------------------
// The tree, written independently of the library: the perfect stage as a recursion on halves
// (the iterative adjacent-pair levels of the library compute the same subtrees), the folds as
// new vectors.

float pair_tree(const std::vector<float>& v, size_t begin, size_t size) {
  if (size == 1) return v[begin];
  return pair_tree(v, begin, size / 2) + pair_tree(v, begin + size / 2, size / 2);
}

// One fold: the first n - m values get the value m places later added; m values remain.
std::vector<float> fold(const std::vector<float>& v, size_t m) {
  std::vector<float> out(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(m));
  for (size_t i = 0; i + m < v.size(); ++i) out[i] = v[i] + v[m + i];
  return out;
}

// align: the rounding of the half in the folds (8 in the contract; others to show the values
// tell orders apart).
float expected_tree(std::vector<float> e, size_t align = 8) {
  if (e.size() < 64) {
    e.resize(64, 0.0f);
    return pair_tree(e, 0, 64);
  }
  const size_t width = e.size() >= 4096 ? 4096 : e.size() >= 512 ? 512 : 64;
  while (e.size() > 2 * width) e = fold(e, ((e.size() + 1) / 2 + align - 1) / align * align);
  return pair_tree(fold(e, width), 0, width);
}

std::vector<size_t> fold_sizes(size_t n, size_t align) {
  std::vector<size_t> sizes;
  const size_t width = n >= 4096 ? 4096 : n >= 512 ? 512 : 64;
  for (; n > 2 * width; n = (((n + 1) / 2 + align - 1) / align) * align) sizes.push_back(n);
  return sizes;
}

float sequential_sum(const std::vector<float>& e) {
  float acc = 0.0f;
  for (float x : e) acc += x;
  return acc;
}

// Values of one magnitude with full random mantissas and signs: nearly every add rounds, so a
// change of order shows in the last bits. seed picks one such row.
std::vector<float> mixed_values(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<float> v(n);
  for (float& x : v) {
    const float mantissa = 1.0f + static_cast<float>(rng() >> 41) * 0x1p-23f;
    x = std::ldexp(mantissa, static_cast<int>(rng() % 4)) * ((rng() & 1) ? -1.0f : 1.0f);
  }
  return v;
}

// Plausible other orders of the same sum, each of which the test values must tell apart.
std::vector<float> other_orders(const std::vector<float>& e) {
  std::vector<float> sums;
  sums.push_back(sequential_sum(e));
  sums.push_back(sequential_sum(std::vector<float>(e.rbegin(), e.rend())));
  if (e.size() > 64 && e.size() != 512 && e.size() != 4096) {
    std::vector<float> padded = e;  // a plain pairwise tree over the next power of two
    size_t size = 64;
    while (size < e.size()) size *= 2;
    padded.resize(size, 0.0f);
    sums.push_back(pair_tree(padded, 0, size));
  }
  // Folds at ceil(n / 2) unaligned, or aligned to 16, where that changes where they fold.
  for (const size_t align : {1, 16}) {
    if (fold_sizes(e.size(), align) != fold_sizes(e.size(), 8)) {
      sums.push_back(expected_tree(e, align));
    }
  }
  return sums;
}

// The first row of mixed values (by seed) whose contract tree differs from every other order
// (with one or two values there is no other order).
std::vector<float> discriminating_values(size_t n) {
  if (n <= 2) return mixed_values(n, 1);
  for (uint64_t seed = 1;; ++seed) {
    auto e = mixed_values(n, seed);
    const uint32_t want = bits_of(expected_tree(e));
    const auto others = other_orders(e);
    if (std::none_of(others.begin(), others.end(), [&](float x) { return bits_of(x) == want; })) {
      return e;
    }
    if (seed == 1000) {
      ADD_FAILURE() << "no row of " << n << " values tells the orders apart";
      return e;
    }
  }
}

// dP[0][0] for one token, one copy, g = 1 and X = e: the tree of e itself.
float library_tree(const std::vector<float>& e, PathCase path) {
  const auto hidden = static_cast<int64_t>(e.size());
  GuardedMatrix<float> x(1, hidden), g(1, hidden), dx(1, hidden), probs(1, 1), dp(1, 1);
  for (int64_t h = 0; h < hidden; ++h) {
    x.at(0, h) = e[static_cast<size_t>(h)];
    g.at(0, h) = 1.0f;
  }
  probs.at(0, 0) = 0.5f;
  const std::vector<int32_t> s = {0};
  const mpg::Status st = mpg::unpermute_grad(x.const_view(), g.const_view(), s, probs.const_view(),
                                             dx.view(), dp.view(), mpg_test::path_options(path, 1));
  EXPECT_TRUE(st.ok()) << st.message();
  return dp.at(0, 0);
}

TEST(UnpermuteGradTree, HandWorkedSmallRows) {
  // L = 1: x + 63 padding zeros is x; a lone -0.0 becomes +0.0 (-0 + +0, then +0.0 + that).
  EXPECT_EQ(bits_of(library_tree({3.5f}, mpg_test::kReferencePath)), bits_of(3.5f));
  EXPECT_EQ(bits_of(library_tree({-0.0f}, mpg_test::kReferencePath)), bits_of(0.0f));
  // L = 7, padded to 64: ((2^24 + 1) + (1 + 1)) + ((1 + 1) + (1 + 0)) + zeros.
  // 2^24 + 1 ties to 2^24; + 2 is exact; 2^24 + 2 + 3 = 2^24 + 5 ties to 2^24 + 4.
  // In sequence every + 1 is lost (2^24); the exact sum is 2^24 + 6.
  const std::vector<float> seven = {0x1p24f, 1, 1, 1, 1, 1, 1};
  EXPECT_EQ(library_tree(seven, mpg_test::kReferencePath), 0x1p24f + 4.0f);
  EXPECT_EQ(sequential_sum(seven), 0x1p24f);
  // L = 65: one fold e[0] += e[64] first: (2^24 + 1) ties to 2^24, then 2^24 + 1 (e[1]) ties to
  // 2^24 again, and the 62 other ones sum exactly to 62: 2^24 + 62.
  std::vector<float> sixty_five(65, 1.0f);
  sixty_five[0] = 0x1p24f;
  EXPECT_EQ(library_tree(sixty_five, mpg_test::kReferencePath), 0x1p24f + 62.0f);
  // L = 64 is the perfect tree: 2^24 + 1 ties down, + 2 exact, then + 4, .. + 32 exact: 2^24 + 62.
  std::vector<float> sixty_four(64, 1.0f);
  sixty_four[0] = 0x1p24f;
  EXPECT_EQ(library_tree(sixty_four, mpg_test::kReferencePath), 0x1p24f + 62.0f);
  // The same 64 values with the big one last: the last pair (1 + 2^24) ties down as well.
  std::rotate(sixty_four.begin(), sixty_four.begin() + 1, sixty_four.end());
  EXPECT_EQ(library_tree(sixty_four, mpg_test::kReferencePath), 0x1p24f + 62.0f);
}

class UnpermuteGradTreeLengths : public ::testing::TestWithParam<std::tuple<int64_t, int>> {};

TEST_P(UnpermuteGradTreeLengths, EveryPathIsTheContractTree) {
  const auto [length, path_index] = GetParam();
  const PathCase path = mpg_test::kAllPaths[path_index];
  MPG_SKIP_IF_UNSUPPORTED(path);
  const auto e = discriminating_values(static_cast<size_t>(length));
  const float want = 0.0f + expected_tree(e);
  EXPECT_EQ(bits_of(library_tree(e, path)), bits_of(want)) << "L = " << length;
}

INSTANTIATE_TEST_SUITE_P(
    HandPicked, UnpermuteGradTreeLengths,
    ::testing::Combine(::testing::Values(1, 7, 63, 64, 65, 127, 128, 129, 511, 512, 513, 1025, 4095,
                                         4096, 4097, 8192, 8193, 16385, 40000),
                       ::testing::Range(0, static_cast<int>(std::size(mpg_test::kAllPaths)))),
    [](const auto& info) {
      return "L" + std::to_string(std::get<0>(info.param)) + "_" +
             mpg_test::path_name(mpg_test::kAllPaths[std::get<1>(info.param)]);
    });

// ---------------------------------------------------------------------------------------------
// A whole call on guarded buffers.

// "" when got has want's bits everywhere, a NaN only having to be a NaN (its bits are not
// specified: x86 and the order of a commutative add choose them).
template <class T>
std::string value_difference(const GuardedMatrix<T>& got, const GuardedMatrix<T>& want) {
  for (int64_t r = 0; r < want.rows(); ++r) {
    for (int64_t c = 0; c < want.cols(); ++c) {
      const bool both_nan = mpg_test::is_nan(got.at(r, c)) && mpg_test::is_nan(want.at(r, c));
      if (!both_nan && bits_of(got.at(r, c)) != bits_of(want.at(r, c))) {
        return mpg_test::first_difference(got, want);
      }
    }
  }
  return "";
}

template <class T, class P, class I>
struct Call {
  int64_t tokens = 0, topk = 1, hidden = 0, kept_rows = 0;
  bool with_probs = true;
  GuardedMatrix<T> x, g, dx;
  GuardedMatrix<P> probs, dp;
  std::vector<I> s;

  struct Routed {
    std::vector<I> s;
    int64_t kept_rows = 0;
  };
  static Routed route(std::mt19937_64& rng, int64_t n, int64_t k) {
    auto r =
        mpg_test::make_routing<I>(rng, mpg::Mode::kDropless, n, k, std::max<int64_t>(k, 5) + 3);
    return {r.sorted_indices, r.grad_rows};
  }

  Call(int64_t n, int64_t k, int64_t h, bool probs_, std::mt19937_64& rng, int layout = 0,
       mpg_test::Values values = mpg_test::Values::kNormal)
      : Call(n, k, h, probs_, rng, layout, values, route(rng, n, k)) {}
  // layout: 0 contiguous, 1 misaligned (one element off 64 bytes), 2 strided rows.
  Call(int64_t n, int64_t k, int64_t h, bool probs_, std::mt19937_64& rng, int layout,
       mpg_test::Values values, Routed routed)
      : tokens(n),
        topk(k),
        hidden(h),
        kept_rows(routed.kept_rows),
        with_probs(probs_),
        x(routed.kept_rows, h, layout == 2 ? h + 1 : h, layout == 1),
        g(n, h, layout == 2 ? h + 3 : h, layout == 1),
        dx(n * k, h, layout == 2 ? h + 5 : h, layout == 1),
        probs(n, k, layout == 2 ? k + 1 : k, layout == 1),
        dp(n, k, layout == 2 ? k + 2 : k, layout == 1),
        s(std::move(routed.s)) {
    mpg_test::fill_random(x, rng, values);
    mpg_test::fill_random(g, rng, values);
    mpg_test::fill_random(probs, rng, values);
  }

  mpg::Status run(const mpg::Options& options) {
    if (with_probs) {
      return mpg::unpermute_grad(x.const_view(), g.const_view(), s, probs.const_view(), dx.view(),
                                 dp.view(), options);
    }
    return mpg::unpermute_grad(x.const_view(), g.const_view(), s, dx.view(), options);
  }
};

double f64(float x) {
  return static_cast<double>(x);
}
template <class T>
double f64(T x) {
  return static_cast<double>(static_cast<float>(x));
}

template <class T, class P, class I>
void check_against_definition(Call<T, P, I>& c) {
  ASSERT_TRUE(c.run(mpg_test::path_options(mpg_test::kReferencePath)).ok());
  const double u = std::ldexp(1.0, -24);
  for (int64_t t = 0; t < c.tokens; ++t) {
    for (int64_t k = 0; k < c.topk; ++k) {
      const int64_t row = c.s[static_cast<size_t>(t * c.topk + k)];
      const bool kept = row < c.kept_rows;
      const double p = c.with_probs ? f64(c.probs.at(t, k)) : 1.0;
      double dot = 0.0, magnitude = 0.0;
      for (int64_t h = 0; h < c.hidden; ++h) {
        // dX: the product of two fp32 values is exact in fp64; one rounding to fp32, one to T.
        const double exact = f64(c.g.at(t, h)) * p;
        const T want = c.with_probs ? T(static_cast<float>(exact)) : (kept ? c.g.at(t, h) : T(0));
        const T got = c.dx.at(row, h);
        ASSERT_EQ(bits_of(got), bits_of(kept ? want : T(0.0f)))
            << "dX[" << row << "][" << h << "] of copy (" << t << ", " << k << ")";
        const double product = (kept ? f64(c.x.at(row, h)) : 0.0) * f64(c.g.at(t, h));
        dot += product;
        magnitude += std::fabs(product);
      }
      if (!c.with_probs) continue;
      // dP: the products round once (u), the tree has at most log2(L) + 2 levels of adds, the
      // store rounds once more to P.
      const double levels = std::ceil(std::log2(std::max<double>(64, c.hidden))) + 2;
      const double p_unit = std::ldexp(1.0, -std::numeric_limits<P>::digits);
      const double bound = (levels + 1) * u * magnitude * 1.01 + std::fabs(dot) * p_unit +
                           static_cast<double>(std::numeric_limits<P>::denorm_min());
      EXPECT_LE(std::fabs(f64(c.dp.at(t, k)) - dot), bound)
          << "dP[" << t << "][" << k << "], L = " << c.hidden;
    }
  }
}

template <class T>
class UnpermuteGradDefinition : public ::testing::Test {};
TYPED_TEST_SUITE(UnpermuteGradDefinition, mpg_test::ElementTypes, mpg_test::ElementTypeNames);

TYPED_TEST(UnpermuteGradDefinition, BothOutputsMatchFp64ForEveryProbsType) {
  using T = TypeParam;
  std::mt19937_64 rng(7);
  for (const int64_t hidden : {1, 33, 64, 300, 513, 4100}) {
    SCOPED_TRACE(testing::Message() << "H = " << hidden);
    Call<T, float, int32_t> f32(6, 3, hidden, true, rng);
    check_against_definition(f32);
    Call<T, half, int64_t> f16(5, 2, hidden, true, rng);
    check_against_definition(f16);
    Call<T, bfloat16, int32_t> bf16(4, 4, hidden, true, rng);
    check_against_definition(bf16);
    Call<T, float, int64_t> no_probs(9, 1, hidden, false, rng);
    check_against_definition(no_probs);
  }
}

// ---------------------------------------------------------------------------------------------
// The forward/backward pair: loss = sum(w * unpermute(X, S, P)), out[t] = sum_k P[t][k] X[S]
// over kept copies; dL/dX and dL/dP by central differences in fp64 against the op's outputs.

TEST(UnpermuteGradFiniteDifferences, GradientsOfTheCombine) {
  std::mt19937_64 rng(11);
  const int64_t n = 5, k = 3, h = 7;
  Call<float, float, int32_t> c(n, k, h, true, rng, 0, mpg_test::Values::kSmallIntegers);
  GuardedMatrix<float> w(n, h);
  mpg_test::fill_random(w, rng);
  for (int64_t t = 0; t < n; ++t) {  // g = dL/dout = w
    for (int64_t j = 0; j < h; ++j) c.g.at(t, j) = w.at(t, j);
  }
  ASSERT_TRUE(c.run(mpg_test::path_options(mpg_test::kFastPaths[0])).ok());
  const auto loss = [&]() {
    double sum = 0.0;
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t kk = 0; kk < k; ++kk) {
        const int64_t row = c.s[static_cast<size_t>(t * k + kk)];
        if (row >= c.kept_rows) continue;
        for (int64_t j = 0; j < h; ++j) {
          sum += f64(w.at(t, j)) * f64(c.probs.at(t, kk)) * f64(c.x.at(row, j));
        }
      }
    }
    return sum;
  };
  const auto central = [&](float& v) {
    const float saved = v;
    const float step = 0x1p-6f;
    v = saved + step;
    const double up = loss();
    v = saved - step;
    const double down = loss();
    v = saved;
    return (up - down) / (2.0 * static_cast<double>(step));
  };
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t kk = 0; kk < k; ++kk) {
      EXPECT_NEAR(central(c.probs.at(t, kk)), f64(c.dp.at(t, kk)), 1e-4) << t << ", " << kk;
      const int64_t row = c.s[static_cast<size_t>(t * k + kk)];
      if (row >= c.kept_rows) continue;
      for (int64_t j = 0; j < h; ++j) {
        EXPECT_NEAR(central(c.x.at(row, j)), f64(c.dx.at(row, j)), 1e-4) << row << ", " << j;
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Special weights and dropped copies: nothing is skipped in the backward.

TEST(UnpermuteGradSpecials, ZeroAndNanWeightsAreComputedNotSkipped) {
  for (const PathCase path : mpg_test::kAllPaths) {
    if (!mpg_test::path_supported(path)) continue;
    SCOPED_TRACE(mpg_test::path_name(path));
    std::mt19937_64 rng(3);
    Call<float, float, int32_t> c(1, 3, 70, true, rng, 0, mpg_test::Values::kNormal,
                                  {{2, 0, 1}, 3});
    for (int64_t j = 0; j < 70; ++j) {
      c.x.at(0, j) = 1.0f;
      c.x.at(1, j) = 2.0f;
      c.x.at(2, j) = 0.5f;
      c.g.at(0, j) = j == 5 ? -3.0f : 1.0f;
    }
    c.g.at(0, 9) = std::numeric_limits<float>::infinity();
    c.probs.at(0, 0) = 0.0f;
    c.probs.at(0, 1) = -0.0f;
    c.probs.at(0, 2) = std::numeric_limits<float>::quiet_NaN();
    ASSERT_TRUE(c.run(mpg_test::path_options(path, 2)).ok());
    // Weight +0: dX row 2 = g * +0 (-0 where g < 0, NaN where g is inf).
    EXPECT_EQ(bits_of(c.dx.at(2, 0)), bits_of(0.0f));
    EXPECT_EQ(bits_of(c.dx.at(2, 5)), bits_of(-0.0f));
    EXPECT_TRUE(std::isnan(c.dx.at(2, 9)));
    EXPECT_EQ(bits_of(c.dx.at(0, 5)), bits_of(0.0f));  // -3 * -0 = +0
    EXPECT_TRUE(std::isnan(c.dx.at(1, 0)));            // NaN weight
    // dP ignores the weights: the inf in g makes every kept copy's dot inf.
    EXPECT_EQ(c.dp.at(0, 0), std::numeric_limits<float>::infinity());
    EXPECT_EQ(c.dp.at(0, 2), std::numeric_limits<float>::infinity());
  }
}

TEST(UnpermuteGradSpecials, DroppedCopiesGiveZeroRowsAndTheTreeOfAZeroRow) {
  for (const PathCase path : mpg_test::kAllPaths) {
    if (!mpg_test::path_supported(path)) continue;
    SCOPED_TRACE(mpg_test::path_name(path));
    std::mt19937_64 rng(5);
    // Only copy (0, 1) is kept.
    Call<bfloat16, half, int64_t> c(2, 2, 20, true, rng, 0, mpg_test::Values::kNormal,
                                    {{3, 0, 1, 2}, 1});
    for (int64_t j = 0; j < 20; ++j) c.g.at(1, j) = bfloat16(-1.0f);  // 0 * -1 = -0
    c.g.at(0, 4) = bfloat16(std::numeric_limits<float>::infinity());
    ASSERT_TRUE(c.run(mpg_test::path_options(path, 3)).ok());
    for (int64_t row = 1; row < 4; ++row) {
      for (int64_t j = 0; j < 20; ++j) ASSERT_EQ(bits_of(c.dx.at(row, j)), 0) << row << ", " << j;
    }
    EXPECT_TRUE(std::isnan(static_cast<float>(c.dp.at(0, 0))));  // 0 * inf in its zero row
    EXPECT_EQ(bits_of(c.dp.at(1, 0)), 0);                        // +0.0 + (sum of -0.0) = +0.0
    EXPECT_EQ(bits_of(c.dp.at(1, 1)), 0);
    EXPECT_TRUE(c.dx.guards_intact() && c.dp.guards_intact());
  }
}

// ---------------------------------------------------------------------------------------------
// Fast paths against the reference, bit for bit.

using SweepParam = std::tuple<int, DType, DType, IndexType>;
class UnpermuteGradSweep : public ::testing::TestWithParam<SweepParam> {};

// The kernel of the path's kernel set called directly with streaming_stores on (the library
// turns them on only from kStreamingStoreBytes of dX, far above the sweep's shapes), on want's
// inputs with outputs back to the sentinel.
template <class T, class P, class I>
void expect_streamed_kernel_matches(const Call<T, P, I>& want, PathCase path) {
  Call<T, P, I> got = want;
  got.dx.buffer().fill_sentinel();
  got.dp.buffer().fill_sentinel();
  mpg::detail::UnpermuteGradArgs<T, P, I> a;
  const auto x = got.x.const_view();
  const auto g = got.g.const_view();
  const auto probs = got.probs.const_view();
  const auto dx = got.dx.view();
  const auto dp = got.dp.view();
  a.tokens = x.data;
  a.kept_rows = got.kept_rows;
  a.tokens_stride = x.row_stride;
  a.tokens_grad = g.data;
  a.tokens_grad_stride = g.row_stride;
  a.indices = got.s.data();
  a.topk = got.topk;
  a.probs = probs.data;
  a.probs_stride = probs.row_stride;
  a.permuted_grad = dx.data;
  a.permuted_grad_stride = dx.row_stride;
  a.probs_grad = dp.data;
  a.probs_grad_stride = dp.row_stride;
  a.hidden = got.hidden;
  a.streaming_stores = true;
  const mpg::Isa isa = mpg::detail::resolve_isa(mpg_test::path_options(path).isa);
  mpg::detail::select_unpermute_grad<T, P, I>(isa)(a, 0, got.tokens);
  EXPECT_EQ(value_difference(got.dx, want.dx), "");
  EXPECT_EQ(value_difference(got.dp, want.dp), "");
  EXPECT_TRUE(got.dx.guards_intact() && got.dp.guards_intact());
  EXPECT_TRUE(got.dx.row_gaps_untouched() && got.dp.row_gaps_untouched());
}

template <class T, class P, class I>
void sweep(PathCase path) {
  constexpr int64_t kHidden[] = {0,   1,   7,   8,   15,  16,   17,   31,   33,   63,   64,  65,
                                 127, 129, 511, 512, 513, 1023, 1025, 4095, 4096, 4097, 8200};
  // K = 11: more kept copies than one fused group holds (8), so a second, partial group.
  constexpr int64_t kTopK[] = {1, 2, 3, 8, 11};
  std::mt19937_64 rng(2026);
  int case_number = 0;
  for (const int64_t hidden : kHidden) {
    for (const int64_t topk : kTopK) {
      const int layout = case_number % 3;
      const bool with_probs = case_number++ % 6 != 5;  // rotates over kTopK
      const int64_t tokens = std::clamp<int64_t>((int64_t{1} << 14) / (topk * (hidden + 1)), 9, 24);
      Call<T, P, I> want(
          tokens, with_probs ? topk : 1, hidden, with_probs, rng, layout,
          case_number % 7 == 0 ? mpg_test::Values::kWithSpecials : mpg_test::Values::kNormal);
      ASSERT_TRUE(want.run(mpg_test::path_options(mpg_test::kReferencePath)).ok());
      for (const int threads : {1, 2, 3, 8}) {
        SCOPED_TRACE(testing::Message()
                     << "H = " << hidden << ", K = " << want.topk << ", N = " << tokens
                     << ", R = " << want.kept_rows << ", probs = " << with_probs
                     << ", threads = " << threads << ", layout = " << layout);
        Call<T, P, I> got = want;  // same inputs, outputs back to the sentinel
        got.dx.buffer().fill_sentinel();
        got.dp.buffer().fill_sentinel();
        const mpg::Status s = got.run(mpg_test::path_options(path, threads));
        ASSERT_TRUE(s.ok()) << s.message();
        EXPECT_EQ(value_difference(got.dx, want.dx), "");
        EXPECT_EQ(value_difference(got.dp, want.dp), "");
        EXPECT_TRUE(got.dx.guards_intact() && got.dp.guards_intact());
        EXPECT_TRUE(got.dx.row_gaps_untouched() && got.dp.row_gaps_untouched());
        if (!with_probs) {
          EXPECT_TRUE(got.dp.payload_untouched());
        }
        if (testing::Test::HasFailure()) return;
      }
      if (want.with_probs) {  // and the kernel with streaming dX stores (used from 8 MiB of dX)
        SCOPED_TRACE(testing::Message() << "H = " << hidden << ", K = " << want.topk
                                        << ", layout = " << layout << ", streaming stores");
        expect_streamed_kernel_matches(want, path);
        if (testing::Test::HasFailure()) return;
      }
    }
  }
}

TEST_P(UnpermuteGradSweep, FastPathsMatchReference) {
  const auto [path_index, dtype, probs_dtype, index_type] = GetParam();
  const PathCase path = mpg_test::kFastPaths[path_index];
  MPG_SKIP_IF_UNSUPPORTED(path);
  mpg::detail::dispatch(dtype, probs_dtype, index_type, [&](auto t, auto p, auto i) {
    sweep<typename decltype(t)::type, typename decltype(p)::type, typename decltype(i)::type>(path);
  });
}

INSTANTIATE_TEST_SUITE_P(
    Sweep, UnpermuteGradSweep,
    ::testing::Combine(::testing::Range(0, static_cast<int>(std::size(mpg_test::kFastPaths))),
                       ::testing::Values(DType::kFloat32, DType::kFloat16, DType::kBFloat16),
                       ::testing::Values(DType::kFloat32, DType::kFloat16, DType::kBFloat16),
                       ::testing::Values(IndexType::kInt32, IndexType::kInt64)),
    [](const auto& info) {
      return mpg_test::path_name(mpg_test::kFastPaths[std::get<0>(info.param)]) + "_" +
             mpg_test::short_name(std::get<1>(info.param)) + "_P" +
             mpg_test::short_name(std::get<2>(info.param)) + "_" +
             mpg_test::short_name(std::get<3>(info.param));
    });

// The streamed fused pass narrows bf16 g * p without the NaN fix-up when p is not NaN:
// finite products that overflow to inf or round up into it, against NaN and inf in g or p
// (a NaN p's payload propagates into g * p).
template <class T>
void expect_streamed_specials_match(PathCase path) {
  using L = std::numeric_limits<float>;
  std::mt19937_64 rng(11);
  for (const int64_t hidden : {64, 512, 4096}) {
    for (const int layout : {0, 1}) {
      SCOPED_TRACE(testing::Message() << "H = " << hidden << ", layout = " << layout);
      Call<T, float, int32_t> want(7, 2, hidden, true, rng, layout);
      const float max = static_cast<float>(std::numeric_limits<T>::max());
      // Halfway between T's max and the next step: rounds to even, which is inf.
      float round_up = L::max();
      if constexpr (std::is_same_v<T, bfloat16>) round_up = mpg_test::from_bits<float>(0x7F7F8000u);
      if constexpr (std::is_same_v<T, half>) round_up = 65520.0f;
      // g finite, p a NaN whose payload the rounding's carry would turn into -0 and +0.
      want.probs.at(0, 0) = mpg_test::from_bits<float>(0x7FFFFFFFu);
      want.probs.at(0, 1) = mpg_test::from_bits<float>(0xFFFFFFFFu);
      want.probs.at(1, 0) = L::infinity();
      want.probs.at(1, 1) = -L::infinity();
      for (int64_t j = 0; j < hidden; j += 3) want.g.at(2, j) = T(j % 2 == 0 ? max : -max);
      want.probs.at(2, 0) = 2.0f;  // max * 2 overflows to inf
      want.probs.at(2, 1) = 1.0f;
      want.g.at(3, hidden / 2) = T(L::infinity());  // p finite, g not
      want.g.at(4, hidden - 1) = T(L::quiet_NaN());
      for (int64_t j = 0; j < hidden; ++j) want.g.at(5, j) = T(j % 2 == 0 ? 1.0f : -1.0f);
      want.probs.at(5, 0) = round_up;
      ASSERT_TRUE(want.run(mpg_test::path_options(mpg_test::kReferencePath)).ok());
      expect_streamed_kernel_matches(want, path);
    }
  }
}

TEST(UnpermuteGradSpecials, StreamedNarrowingOfFiniteAndNonFiniteProducts) {
  for (const PathCase path : mpg_test::kFastPaths) {
    if (!mpg_test::path_supported(path)) continue;
    SCOPED_TRACE(mpg_test::path_name(path));
    expect_streamed_specials_match<bfloat16>(path);
    expect_streamed_specials_match<half>(path);
    expect_streamed_specials_match<float>(path);
  }
}

// The streamed fused pass narrows a step's bf16 g * p without the AVX512_BF16 set's guard when
// products_ordinary proves from |g|'s range and the weights' that none is a NaN or subnormal
// (that conversion flushes subnormals). One token per edge of that proof, each token's step
// alone: products at the smallest normal, just below it, 0 * inf, inf * 0, subnormal g.
TEST(UnpermuteGradSpecials, StreamedNarrowingAtTheEdgesOfOrdinaryProducts) {
  const float two_m63 = std::ldexp(1.0f, -63), inf = std::numeric_limits<float>::infinity();
  for (const PathCase path : mpg_test::kFastPaths) {
    if (!mpg_test::path_supported(path)) continue;
    for (const int64_t hidden : {64, 512, 4096}) {
      for (const int layout : {0, 1, 2}) {
        SCOPED_TRACE(testing::Message()
                     << mpg_test::path_name(path) << ", H = " << hidden << ", layout = " << layout);
        std::mt19937_64 rng(12);
        Call<bfloat16, float, int32_t> want(8, 4, hidden, true, rng, layout);
        const auto weights = [&](int64_t t, std::array<float, 4> p) {
          for (int64_t k = 0; k < 4; ++k) want.probs.at(t, k) = p[static_cast<size_t>(k)];
        };
        const int64_t lane = hidden / 2 + 3;                    // inside a step past the first
        want.g.at(0, lane) = bfloat16(std::ldexp(1.0f, -100));  // * 2^-30: subnormal
        weights(0, {std::ldexp(1.0f, -30), 1.0f, -1.0f, 0.5f});
        want.g.at(1, lane) = bfloat16(two_m63);  // * 2^-63 = the smallest normal: ordinary
        weights(1, {two_m63, 1.0f, 2.0f, -0.25f});
        want.g.at(2, lane) = bfloat16(-two_m63);  // * 2^-64: subnormal
        weights(2, {1.0f, two_m63 / 2, 2.0f, -0.25f});
        want.g.at(3, lane) = bfloat16(inf);  // * 0: NaN
        weights(3, {1.0f, 0.0f, -1.0f, 0.5f});
        for (int64_t j = 0; j < hidden; j += 2) want.g.at(4, j) = bfloat16(0.0f);  // * inf: NaN
        weights(4, {1.0f, -inf, -1.0f, 0.5f});
        for (int64_t j = 0; j < hidden; ++j) want.g.at(5, j) = bfloat16(j % 3 == 0 ? -0.0f : 0.0f);
        weights(5, {1.0f, -2.0f, 0.0f, 0.5f});                  // every product +-0
        want.g.at(6, lane) = bfloat16(std::ldexp(1.0f, -130));  // a subnormal g, * 2^4: normal
        weights(6, {std::ldexp(1.0f, 10), std::ldexp(1.0f, 4), 64.0f, -32.0f});
        weights(7, {-0.0f, 1.0f, 2.0f, 3.0f});
        ASSERT_TRUE(want.run(mpg_test::path_options(mpg_test::kReferencePath)).ok());
        // The proof's edges are visible in the result: a subnormal dX where a flush would give 0.
        const float subnormal = static_cast<float>(want.dx.at(want.s[0], lane));
        ASSERT_EQ(std::fpclassify(subnormal), FP_SUBNORMAL);
        expect_streamed_kernel_matches(want, path);
        if (testing::Test::HasFailure()) return;
      }
    }
  }
}

// products_ordinary claims no g * p is a NaN or subnormal only where none is: every pair of
// value sets drawn from the edges (zeros, subnormals, the smallest normal and its neighbours,
// infinities, NaN), their ranges computed here, each claim checked product by product.
TEST(UnpermuteGradSpecials, OrdinaryProductsClaimIsSound) {
  const float inf = std::numeric_limits<float>::infinity();
  const float min = std::numeric_limits<float>::min();
  const float edges[] = {0.0f,
                         -0.0f,
                         std::numeric_limits<float>::denorm_min(),
                         std::ldexp(1.0f, -130),
                         min,
                         std::nextafter(min, 1.0f),
                         std::ldexp(1.0f, -63),
                         std::ldexp(1.0f, -64),
                         std::nextafter(std::ldexp(1.0f, -63), 0.0f),
                         -0.5f,
                         1.0f,
                         std::ldexp(1.0f, 63),
                         std::numeric_limits<float>::max(),
                         -inf,
                         inf,
                         std::numeric_limits<float>::quiet_NaN()};
  const auto is_ordinary = [](float v) {
    return !std::isnan(v) && std::fpclassify(v) != FP_SUBNORMAL;
  };
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<size_t> pick(0, std::size(edges) - 1);
  int claimed = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    std::vector<float> g(1 + trial % 4), p(1 + trial / 4 % 3);
    for (float& v : g) v = edges[pick(rng)];
    for (float& v : p) v = edges[pick(rng)];
    mpg::detail::AbsRange g_range;
    uint32_t min_nonzero = 0xFFFFFFFFu;
    for (const float v : g) {
      const uint32_t magnitude = mpg_test::bits_of(v) & 0x7FFFFFFFu;
      g_range.max_bits = std::max(g_range.max_bits, magnitude);
      if (magnitude != 0) min_nonzero = std::min(min_nonzero, magnitude);
    }
    g_range.min_nonzero_bits = min_nonzero == 0xFFFFFFFFu ? 0 : min_nonzero;
    mpg::detail::WeightRange p_range;
    for (const float v : p) mpg::detail::include_weight(p_range, v);
    if (!mpg::detail::products_ordinary(g_range, p_range)) continue;
    ++claimed;
    for (const float a : g) {
      for (const float b : p) {
        const float product = a * b;
        EXPECT_TRUE(is_ordinary(product)) << a << " * " << b << " = " << product;
      }
    }
    if (testing::Test::HasFailure()) return;
  }
  EXPECT_GT(claimed, 1000);  // and the claim is made where it holds, not never
  // Ordinary gradients and weights take the unguarded narrowing.
  mpg::detail::WeightRange typical;
  mpg::detail::include_weight(typical, 0.125f);
  mpg::detail::include_weight(typical, -0.0f);
  EXPECT_TRUE(mpg::detail::products_ordinary(
      {mpg_test::bits_of(3.0f), mpg_test::bits_of(std::ldexp(1.0f, -20))}, typical));
}

TEST(UnpermuteGradThreads, ResultsDoNotDependOnTheThreadCount) {
  std::mt19937_64 rng(99);
  Call<bfloat16, bfloat16, int32_t> one(64, 4, 1000, true, rng);
  ASSERT_TRUE(one.run(mpg_test::path_options(mpg_test::kFastPaths[0], 1)).ok());
  for (const PathCase path : mpg_test::kFastPaths) {
    if (!mpg_test::path_supported(path)) continue;
    for (const int threads : {1, 2, 3, 5, 8, 16}) {
      Call<bfloat16, bfloat16, int32_t> many = one;
      many.dx.buffer().fill_sentinel();
      many.dp.buffer().fill_sentinel();
      ASSERT_TRUE(many.run(mpg_test::path_options(path, threads)).ok());
      EXPECT_TRUE(many.dx.same_bytes(one.dx)) << mpg_test::path_name(path) << " x " << threads;
      EXPECT_TRUE(many.dp.same_bytes(one.dp)) << mpg_test::path_name(path) << " x " << threads;
    }
  }
}

}  // namespace
