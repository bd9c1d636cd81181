// MoeTokenUnpermute through both API layers: hand-worked weighted sums (product rounded on its
// own, zero weights dropping Inf/NaN rows, NaN weights kept, every token x probs dtype pair) on
// every path; fp64 properties (the adjoint of the forward permute, the sum of out); the
// two-phase entry; every error, with out untouched.
#include "test_util.hpp"

#include <cmath>

namespace {

using mpg::bfloat16;
using mpg::half;
using mpg::Mode;
using mpg_test::bits_of;
using mpg_test::GuardedMatrix;
using mpg_test::PathCase;

template <class T, class I, class P>
mpg::Status run_unpermute(const GuardedMatrix<T>& tokens, const std::vector<I>& indices,
                          const GuardedMatrix<P>& probs, GuardedMatrix<T>& out,
                          const mpg::Options& options, Mode mode = Mode::kDropless) {
  return mpg::unpermute(tokens.const_view(), indices, probs.const_view(), mode, out.view(),
                        options);
}

template <class T>
void fill_rows(GuardedMatrix<T>& m, const std::vector<float>& row_values) {
  for (int64_t r = 0; r < m.rows(); ++r) {
    for (int64_t h = 0; h < m.cols(); ++h) m.at(r, h) = T(row_values[static_cast<size_t>(r)]);
  }
}

class UnpermuteHandWorked : public ::testing::TestWithParam<PathCase> {
 protected:
  void SetUp() override { MPG_SKIP_IF_UNSUPPORTED(GetParam()); }
  mpg::Options options() const { return mpg_test::path_options(GetParam()); }
};

// out = fp32(x0 * p0) + fp32(x1 * p1), each product rounded before the add:
// (1 + 2^-12)^2 = 1 + 2^-11 + 2^-24 rounds to 1 + 2^-11 (2^-24 is half an ulp: tie, even), so
// out = -1 + (1 + 2^-11) = 2^-11 exactly. A fused multiply-add would keep the 2^-24.
TEST_P(UnpermuteHandWorked, ProductIsRoundedBeforeTheAdd) {
  const int64_t hidden = 35;
  const float a = 1.0f + 0x1p-12f;
  GuardedMatrix<float> tokens(2, hidden);
  fill_rows(tokens, {a, -1.0f});
  GuardedMatrix<float> probs(1, 2);
  probs.at(0, 0) = 1.0f;
  probs.at(0, 1) = a;
  const std::vector<int32_t> indices = {1, 0};  // copy 0 is row 1 (-1), copy 1 is row 0
  GuardedMatrix<float> out(1, hidden);
  const mpg::Status s = run_unpermute(tokens, indices, probs, out, options());
  ASSERT_TRUE(s.ok()) << s.message();
  for (int64_t h = 0; h < hidden; ++h) ASSERT_EQ(bits_of(out.at(0, h)), bits_of(0x1p-11f)) << h;
}

// A zero weight (+0 or -0, in every probs dtype) drops its copy: the Inf and NaN in its row never
// reach out. Token 0: rows Inf (p +0), NaN (p -0), 2 (p 0.5): out = +0 + 1 = 1. Token 1: the
// lone kept copy is -0.0 * 1 = -0.0, assigned: -0.0 (were the dropped copies added as
// products, Inf * 0 = NaN would show). Token 2: every weight zero: +0.0.
template <class P>
void expect_zero_weights_drop(const mpg::Options& options) {
  const int64_t hidden = 21;
  GuardedMatrix<float> tokens(9, hidden);
  fill_rows(tokens, {INFINITY, NAN, 2.0f, -0.0f, INFINITY, NAN, -0.0f, NAN, -INFINITY});
  GuardedMatrix<P> probs(3, 3);
  const float weights[3][3] = {{0.0f, -0.0f, 0.5f}, {1.0f, 0.0f, -0.0f}, {-0.0f, 0.0f, -0.0f}};
  for (int t = 0; t < 3; ++t) {
    for (int k = 0; k < 3; ++k) probs.at(t, k) = P(weights[t][k]);
  }
  const std::vector<int32_t> indices = {0, 1, 2, 3, 4, 5, 6, 7, 8};
  GuardedMatrix<float> out(3, hidden);
  const mpg::Status s = run_unpermute(tokens, indices, probs, out, options);
  ASSERT_TRUE(s.ok()) << s.message();
  for (int64_t h = 0; h < hidden; ++h) {
    ASSERT_EQ(bits_of(out.at(0, h)), bits_of(1.0f)) << h;
    ASSERT_EQ(bits_of(out.at(1, h)), 0x80000000u) << h;
    ASSERT_EQ(bits_of(out.at(2, h)), 0x00000000u) << h;
  }
}

TEST_P(UnpermuteHandWorked, ZeroWeightDropsInfAndNaNRows) {
  expect_zero_weights_drop<float>(options());
  expect_zero_weights_drop<half>(options());
  expect_zero_weights_drop<bfloat16>(options());
}

// NaN != 0, so a NaN weight keeps its copy and out is NaN, even for a zero row.
TEST_P(UnpermuteHandWorked, NaNWeightIsKept) {
  const int64_t hidden = 17;
  GuardedMatrix<bfloat16> tokens(4, hidden);
  fill_rows(tokens, {1.0f, 0.0f, 3.0f, 5.0f});
  GuardedMatrix<half> probs(2, 2);
  probs.at(0, 0) = half(NAN);
  probs.at(0, 1) = half(1.0f);
  probs.at(1, 0) = half(2.0f);
  probs.at(1, 1) = half(NAN);
  const std::vector<int64_t> indices = {0, 2, 3, 1};  // token 1's NaN weight is on the zero row
  GuardedMatrix<bfloat16> out(2, hidden);
  const mpg::Status s = run_unpermute(tokens, indices, probs, out, options());
  ASSERT_TRUE(s.ok()) << s.message();
  for (int64_t h = 0; h < hidden; ++h) {
    ASSERT_TRUE(mpg_test::is_nan(out.at(0, h))) << h;
    ASSERT_TRUE(mpg_test::is_nan(out.at(1, h))) << h;
  }
}

// Every token dtype with every probs dtype. Rows 1.5, -2, 4 and weights 0.75, 0.5, -1.25 are
// exact in all three dtypes: products 1.125, -1, -5; sum 1.125 - 1 - 5 = -4.875, exact too.
// Then the weight's own bits: fp32 out of x = 1 times p = 1 + 2^-10 (fp16) or 1 + 2^-7 (bf16)
// or 1 + 2^-20 (fp32) is p exactly, which a weight narrowed or widened wrongly would not give.
template <class T, class P>
void expect_mixed(const mpg::Options& options) {
  const int64_t hidden = 18;
  GuardedMatrix<T> tokens(3, hidden);
  fill_rows(tokens, {1.5f, -2.0f, 4.0f});
  GuardedMatrix<P> probs(1, 3);
  probs.at(0, 0) = P(0.75f);
  probs.at(0, 1) = P(0.5f);
  probs.at(0, 2) = P(-1.25f);
  const std::vector<int32_t> indices = {0, 1, 2};
  GuardedMatrix<T> out(1, hidden);
  mpg::Status s = run_unpermute(tokens, indices, probs, out, options);
  ASSERT_TRUE(s.ok()) << s.message();
  for (int64_t h = 0; h < hidden; ++h) ASSERT_EQ(static_cast<float>(out.at(0, h)), -4.875f) << h;

  const float p = std::is_same_v<P, half>       ? 1.0f + 0x1p-10f
                  : std::is_same_v<P, bfloat16> ? 1.0f + 0x1p-7f
                                                : 1.0f + 0x1p-20f;
  GuardedMatrix<float> one(1, hidden);
  fill_rows(one, {1.0f});
  GuardedMatrix<P> weight(1, 1);
  weight.at(0, 0) = P(p);
  ASSERT_EQ(static_cast<float>(weight.at(0, 0)), p);  // the literal is exact in P
  GuardedMatrix<float> got(1, hidden);
  s = run_unpermute(one, std::vector<int32_t>{0}, weight, got, options);
  ASSERT_TRUE(s.ok()) << s.message();
  for (int64_t h = 0; h < hidden; ++h) ASSERT_EQ(bits_of(got.at(0, h)), bits_of(p)) << h;
}

TEST_P(UnpermuteHandWorked, EveryTokenAndProbsDtypePair) {
  expect_mixed<float, float>(options());
  expect_mixed<float, half>(options());
  expect_mixed<float, bfloat16>(options());
  expect_mixed<half, float>(options());
  expect_mixed<half, half>(options());
  expect_mixed<half, bfloat16>(options());
  expect_mixed<bfloat16, float>(options());
  expect_mixed<bfloat16, half>(options());
  expect_mixed<bfloat16, bfloat16>(options());
}

// Where the fast path adds a weighted copy with a fused multiply-add (AVX-512, when every weight
// of the token makes exact products with the tokens' dtype), the bits must stay those of the
// rounded product then the add. Each token is two copies over 300 columns (whole blocks and a
// tail); copy 0 assigns x0 * w0 exactly, copy 1 adds x1 * w1:
//   fp16, w1 = -(1 + 2^-14) (15 bits, not exact with fp16's 11): x = 1 + 2^-10 for both copies,
//     x1 * w1 = -(1 + 2^-10 + 2^-14 + 2^-24) rounds (tie, even) to -(1 + 2^-10 + 2^-14), so
//     out = -2^-14; a fused add would keep the 2^-24: -(2^-14 + 2^-24), an fp16 too.
//   fp16, w1 = -(1 + 2^-12) (13 bits: exact): out = -(2^-12 + 2^-22), either way.
//   bf16, x0 = 2^-126, w0 = 2^-8 + 2^-23 (16 bits, lowest bit 2^-23: not exact for bf16's
//     2^-133), x1 = 2^-133, w1 = -2^-17: x0 * w0 = 2^-134 + 2^-149, x1 * w1 = -2^-150 rounds
//     (tie, even) to -0, so out = bf16(2^-134 + 2^-149) = 2^-133 (above the tie); fused, the sum
//     rounds to 2^-134 (tie, even) and then to bf16 +0 (tie, even).
//   bf16, x = 1.5, w0 = 1, w1 = -(1 + 2^-15) (16 bits, lowest 2^-15: exact):
//     out = -(2^-15 + 2^-16), either way.
template <class T>
void expect_two_copies(const mpg::Options& options, float x0, float w0, float x1, float w1,
                       float want) {
  const int64_t hidden = 300;
  GuardedMatrix<T> tokens(2, hidden);
  fill_rows(tokens, {x0, x1});
  ASSERT_EQ(static_cast<float>(tokens.at(0, 0)), x0);
  ASSERT_EQ(static_cast<float>(tokens.at(1, 0)), x1);
  GuardedMatrix<float> probs(1, 2);
  probs.at(0, 0) = w0;
  probs.at(0, 1) = w1;
  GuardedMatrix<T> out(1, hidden);
  const mpg::Status s = run_unpermute(tokens, std::vector<int32_t>{0, 1}, probs, out, options);
  ASSERT_TRUE(s.ok()) << s.message();
  for (int64_t h = 0; h < hidden; ++h) ASSERT_EQ(bits_of(out.at(0, h)), bits_of(T(want))) << h;
}

TEST_P(UnpermuteHandWorked, FusedOnlyWhereTheProductIsExact) {
  const float x = 1.0f + 0x1p-10f;
  expect_two_copies<half>(options(), x, 1.0f, x, -(1.0f + 0x1p-14f), -0x1p-14f);
  expect_two_copies<half>(options(), x, 1.0f, x, -(1.0f + 0x1p-12f), -(0x1p-12f + 0x1p-22f));
  ASSERT_NE(bits_of(half(-0x1p-14f)), bits_of(half(-(0x1p-14f + 0x1p-24f))));  // it can tell
  expect_two_copies<bfloat16>(options(), 0x1p-126f, 0x1p-8f + 0x1p-23f, 0x1p-133f, -0x1p-17f,
                              0x1p-133f);
  expect_two_copies<bfloat16>(options(), 1.5f, 1.0f, 1.5f, -(1.0f + 0x1p-15f),
                              -(0x1p-15f + 0x1p-16f));
}

// Without probs K = 1: out[i] = S[i] < R ? X[S[i]] : +0.0. R = 3 rows: 7, -0.0, -3.
TEST_P(UnpermuteHandWorked, WithoutProbsGathersKeptRows) {
  const int64_t hidden = 40;
  GuardedMatrix<half> tokens(3, hidden);
  fill_rows(tokens, {7.0f, -0.0f, -3.0f});
  const std::vector<int32_t> indices = {2, 4, 0, 3, 1};
  GuardedMatrix<half> out(5, hidden);
  const mpg::Status s =
      mpg::unpermute(tokens.const_view(), indices, Mode::kDropless, out.view(), options());
  ASSERT_TRUE(s.ok()) << s.message();
  const uint16_t want[] = {bits_of(half(-3.0f)), 0x0000, bits_of(half(7.0f)), 0x0000, 0x8000};
  for (int64_t i = 0; i < 5; ++i) {
    for (int64_t h = 0; h < hidden; ++h)
      ASSERT_EQ(bits_of(out.at(i, h)), want[i]) << i << ", " << h;
  }
}

// Padded (typed API only): -1 and a zero weight both drop. K = 2: token 0 = (-1 dropped) +
// 2 * 0.5 = 1; token 1 = 3 * 0.25 + (weight 0 dropped, row NaN) = 0.75.
TEST_P(UnpermuteHandWorked, PaddedExtension) {
  const int64_t hidden = 9;
  GuardedMatrix<float> tokens(4, hidden);
  fill_rows(tokens, {2.0f, NAN, 3.0f, 99.0f});
  GuardedMatrix<float> probs(2, 2);
  probs.at(0, 0) = 8.0f;
  probs.at(0, 1) = 0.5f;
  probs.at(1, 0) = 0.25f;
  probs.at(1, 1) = 0.0f;
  const std::vector<int32_t> indices = {-1, 0, 2, 1};
  GuardedMatrix<float> out(2, hidden);
  const mpg::Status s = run_unpermute(tokens, indices, probs, out, options(), Mode::kPadded);
  ASSERT_TRUE(s.ok()) << s.message();
  for (int64_t h = 0; h < hidden; ++h) {
    ASSERT_EQ(out.at(0, h), 1.0f);
    ASSERT_EQ(out.at(1, h), 0.75f);
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, UnpermuteHandWorked, ::testing::ValuesIn(mpg_test::kAllPaths),
                         [](const auto& info) { return mpg_test::path_name(info.param); });

// ---------------------------------------------------------------------------------------------
// fp64 properties, independent of any order.

// Unpermute without probs is the adjoint (transpose) of the forward permute with K = 1:
// <permute(x), y> = <x, unpermute(y)>. Products of two fp32 values are exact in fp64 and the
// K = 1 unpermute only copies, so both sides are sums of the same exact products: equal up to
// fp64 summation order, which the bound covers.
TEST(UnpermuteProperties, AdjointOfForwardPermute) {
  std::mt19937_64 rng(91);
  const int64_t tokens = 300, hidden = 37;
  const auto routing = mpg_test::make_routing<int32_t>(rng, Mode::kDropless, tokens, 1, 8);
  GuardedMatrix<float> x(tokens, hidden);
  mpg_test::fill_random(x, rng);
  GuardedMatrix<float> permuted(routing.grad_rows, hidden);
  const mpg::Status permuted_ok =
      mpg::permute(x.const_view(), routing.sorted_indices, 1, Mode::kDropless, permuted.view());
  ASSERT_TRUE(permuted_ok.ok()) << permuted_ok.message();
  GuardedMatrix<float> y(routing.grad_rows, hidden);
  mpg_test::fill_random(y, rng);
  for (PathCase path : mpg_test::kAllPaths) {
    if (!mpg_test::path_supported(path)) continue;
    GuardedMatrix<float> back(tokens, hidden);
    const mpg::Status s = mpg::unpermute(y.const_view(), routing.sorted_indices, Mode::kDropless,
                                         back.view(), mpg_test::path_options(path, 3));
    ASSERT_TRUE(s.ok()) << s.message();
    double lhs = 0, rhs = 0, magnitude = 0;
    for (int64_t r = 0; r < routing.grad_rows; ++r) {
      for (int64_t h = 0; h < hidden; ++h) {
        lhs += double(permuted.at(r, h)) * double(y.at(r, h));
        magnitude += std::abs(double(permuted.at(r, h)) * double(y.at(r, h)));
      }
    }
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t h = 0; h < hidden; ++h) rhs += double(x.at(t, h)) * double(back.at(t, h));
    }
    EXPECT_NEAR(lhs, rhs, magnitude * 0x1p-45) << mpg_test::path_name(path);
    EXPECT_GT(routing.num_kept(), 0);
  }
}

// sum(out) = the sum of every kept x * p, within the fp32 rounding of K products and K - 1 adds
// per element (2^-24 relative each) and the final narrowing to T (u_T relative).
template <class T, class P>
void expect_sum_of_out(std::mt19937_64& rng, PathCase path) {
  const int64_t tokens = 40, topk = 6, hidden = 70;
  const auto routing = mpg_test::make_routing<int32_t>(rng, Mode::kDropless, tokens, topk, 9);
  GuardedMatrix<T> x(routing.grad_rows, hidden, hidden + 3);
  mpg_test::fill_random(x, rng);
  GuardedMatrix<P> probs(tokens, topk);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t k = 0; k < topk; ++k) {
      const int choice = std::uniform_int_distribution<int>(0, 9)(rng);
      probs.at(t, k) = P(choice == 0 ? 0.0f : choice == 1 ? -0.0f : (choice - 1) / 9.0f);
    }
  }
  GuardedMatrix<T> out(tokens, hidden);
  const mpg::Status s =
      run_unpermute(x, routing.sorted_indices, probs, out, mpg_test::path_options(path, 2));
  ASSERT_TRUE(s.ok()) << s.message();
  const double unit_t = std::is_same_v<T, float>  ? 0x1p-24
                        : std::is_same_v<T, half> ? 0x1p-11
                                                  : 0x1p-8;
  double got = 0, want = 0, bound = 0;
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t h = 0; h < hidden; ++h) {
      double magnitude = 0;
      for (int64_t k = 0; k < topk; ++k) {
        const int64_t row = routing.sorted_indices[t * topk + k];
        if (row >= routing.grad_rows) continue;
        const double term =
            double(static_cast<float>(x.at(row, h))) * double(static_cast<float>(probs.at(t, k)));
        want += term;
        magnitude += std::abs(term);
      }
      got += static_cast<float>(out.at(t, h));
      bound += magnitude * ((topk + 1) * 0x1p-24 + unit_t) * 1.01;
    }
  }
  EXPECT_LE(std::abs(got - want), bound) << "got " << got << ", want " << want;
  EXPECT_GT(bound, 0.0);
}

TEST(UnpermuteProperties, SumOfOutIsSumOfKeptWeightedRows) {
  std::mt19937_64 rng(92);
  for (PathCase path : mpg_test::kAllPaths) {
    if (!mpg_test::path_supported(path)) continue;
    SCOPED_TRACE(mpg_test::path_name(path));
    expect_sum_of_out<float, float>(rng, path);
    expect_sum_of_out<float, bfloat16>(rng, path);
    expect_sum_of_out<half, half>(rng, path);
    expect_sum_of_out<bfloat16, float>(rng, path);
    expect_sum_of_out<bfloat16, bfloat16>(rng, path);
  }
}

// ---------------------------------------------------------------------------------------------
// Round trip: mpg::token_permute's outputs with R = n fed to unpermute. Small-integer tokens and
// weights in {0, 0.25, 0.5, 1, 2} keep every product and sum exact, so the expected results are
// plain double sums over the copies whose rank is below n.

template <class T, class E>
void expect_round_trip(std::mt19937_64& rng, int64_t tokens, int64_t topk, int64_t experts,
                       int64_t num_out_tokens) {
  const int64_t hidden = 24;
  GuardedMatrix<T> x(tokens, hidden);
  mpg_test::fill_random(x, rng, mpg_test::Values::kSmallIntegers);
  const auto routing = mpg_test::make_routing<int32_t>(rng, Mode::kDropless, tokens, topk, experts);
  const std::vector<E> expert_ids(routing.expert_ids.begin(), routing.expert_ids.end());
  const int64_t n = mpg::token_permute_rows(num_out_tokens, tokens * topk);
  GuardedMatrix<T> permuted(n, hidden);
  std::vector<int32_t> sorted(static_cast<size_t>(tokens * topk));
  const mpg::Status forward =
      mpg::token_permute(x.const_view(), expert_ids, topk, num_out_tokens, permuted.view(), sorted);
  ASSERT_TRUE(forward.ok()) << forward.message();

  GuardedMatrix<float> probs(tokens, topk);
  const float weights[] = {0.0f, 0.25f, 0.5f, 1.0f, 2.0f};
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t k = 0; k < topk; ++k) {
      probs.at(t, k) = weights[std::uniform_int_distribution<int>(0, 4)(rng)];
    }
  }
  for (PathCase path : mpg_test::kAllPaths) {
    if (!mpg_test::path_supported(path)) continue;
    SCOPED_TRACE(mpg_test::path_name(path));
    GuardedMatrix<T> combined(tokens, hidden);
    mpg::Status s = run_unpermute(permuted, sorted, probs, combined, mpg_test::path_options(path));
    ASSERT_TRUE(s.ok()) << s.message();
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t h = 0; h < hidden; ++h) {
        double want = 0;
        for (int64_t k = 0; k < topk; ++k) {
          if (sorted[t * topk + k] < n) {
            want += static_cast<float>(x.at(t, h)) * static_cast<double>(probs.at(t, k));
          }
        }
        ASSERT_EQ(static_cast<float>(combined.at(t, h)), want) << t << ", " << h;
      }
    }
    // Without probs: copy i comes back as its token's row if it was kept, else +0.0.
    GuardedMatrix<T> copies(tokens * topk, hidden);
    s = mpg::unpermute(permuted.const_view(), sorted, Mode::kDropless, copies.view(),
                       mpg_test::path_options(path));
    ASSERT_TRUE(s.ok()) << s.message();
    for (int64_t i = 0; i < tokens * topk; ++i) {
      for (int64_t h = 0; h < hidden; ++h) {
        const auto want = sorted[i] < n ? bits_of(x.at(i / topk, h)) : bits_of(T(0.0f));
        ASSERT_EQ(bits_of(copies.at(i, h)), want) << i << ", " << h;
      }
    }
  }
}

TEST(UnpermuteRoundTrip, TokenPermuteThenUnpermute) {
  std::mt19937_64 rng(94);
  expect_round_trip<bfloat16, int32_t>(rng, 50, 4, 9, 0);    // n = N*K: nothing dropped
  expect_round_trip<bfloat16, int32_t>(rng, 50, 4, 9, -17);  // the 17 highest ranks dropped
  expect_round_trip<float, int64_t>(rng, 33, 3, 5, 70);      // n = 70 < N*K = 99
  expect_round_trip<half, int32_t>(rng, 20, 8, 16, 1000);    // clamped to N*K
}

// ---------------------------------------------------------------------------------------------
// The two-phase API.

using namespace mpg::aclnn;  // NOLINT(google-build-using-namespace)

struct UnpermuteCall {
  std::vector<int64_t> tokens_dims = {8, 6};
  std::vector<int64_t> probs_dims = {4, 2};
  std::vector<int64_t> out_dims = {4, 6};
  std::vector<int64_t> restore_shape;  // empty: pass null
  bool pass_restore_shape = false;
  bool padded_mode = false;
  DataType tokens_dtype = DataType::kFloat;
  DataType probs_dtype = DataType::kBFloat16;
  DataType out_dtype = DataType::kFloat;
  DataType index_dtype = DataType::kInt32;
  void* tokens = nullptr;
  void* indices = nullptr;
  int64_t num_indices = 8;
  void* probs = nullptr;  // null: no probs
  void* out = nullptr;
  bool null_tokens = false;
  bool null_indices = false;
  bool null_out = false;
  bool workspace_on_probs = false;
};

aclnnStatus run_two_phase(const UnpermuteCall& c) {
  Tensor* x = c.null_tokens ? nullptr
                            : CreateTensor(c.tokens_dims.data(), c.tokens_dims.size(),
                                           c.tokens_dtype, nullptr, 0, c.tokens);
  Tensor* s = c.null_indices
                  ? nullptr
                  : CreateTensor(&c.num_indices, 1, c.index_dtype, nullptr, 0, c.indices);
  Tensor* p = c.probs == nullptr ? nullptr
                                 : CreateTensor(c.probs_dims.data(), c.probs_dims.size(),
                                                c.probs_dtype, nullptr, 0, c.probs);
  Tensor* o = c.null_out ? nullptr
                         : CreateTensor(c.out_dims.data(), c.out_dims.size(), c.out_dtype, nullptr,
                                        0, c.out);
  IntArray* restore = c.pass_restore_shape
                          ? CreateIntArray(c.restore_shape.data(), c.restore_shape.size())
                          : nullptr;
  uint64_t workspace_size = 0;
  Executor* executor = nullptr;
  const aclnnStatus first = MoeTokenUnpermuteGetWorkspaceSize(x, s, p, c.padded_mode, restore, o,
                                                              &workspace_size, &executor);
  DestroyTensor(x);
  DestroyTensor(s);
  DestroyTensor(p);
  DestroyTensor(o);
  DestroyIntArray(restore);
  if (first != kSuccess) {
    EXPECT_EQ(executor, nullptr);
    return first;
  }
  EXPECT_STREQ(GetLastErrorMessage(), "");
  std::vector<uint8_t> workspace(workspace_size);
  void* space = c.workspace_on_probs ? c.probs : workspace.data();
  return MoeTokenUnpermute(space, workspace_size, executor);
}

// Small integers and weights in {0.5, 1, 2, 0}: every result is exact, so the expected out is a
// plain double sum.
TEST(UnpermuteAclnn, WithAndWithoutProbs) {
  std::mt19937_64 rng(93);
  const int64_t tokens = 9, topk = 3, hidden = 20;
  const auto routing = mpg_test::make_routing<int64_t>(rng, Mode::kDropless, tokens, topk, 5);
  GuardedMatrix<bfloat16> x(routing.grad_rows, hidden);
  mpg_test::fill_random(x, rng, mpg_test::Values::kSmallIntegers);
  GuardedMatrix<half> probs(tokens, topk);
  const float weights[] = {0.5f, 1.0f, 2.0f, 0.0f};
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t k = 0; k < topk; ++k) probs.at(t, k) = half(weights[(t + k) % 4]);
  }
  GuardedMatrix<bfloat16> out(tokens, hidden);
  UnpermuteCall c;
  c.tokens_dims = {routing.grad_rows, hidden};
  c.probs_dims = {tokens, topk};
  c.out_dims = {tokens, hidden};
  c.tokens_dtype = c.out_dtype = DataType::kBFloat16;
  c.probs_dtype = DataType::kFloat16;
  c.index_dtype = DataType::kInt64;
  c.tokens = x.data();
  c.indices = const_cast<int64_t*>(routing.sorted_indices.data());
  c.num_indices = tokens * topk;
  c.probs = probs.data();
  c.out = out.data();
  c.pass_restore_shape = true;
  c.restore_shape = {tokens, hidden};
  ASSERT_EQ(run_two_phase(c), kSuccess) << GetLastErrorMessage();
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t h = 0; h < hidden; ++h) {
      double want = 0;
      for (int64_t k = 0; k < topk; ++k) {
        const int64_t row = routing.sorted_indices[t * topk + k];
        if (row < routing.grad_rows) {
          want += static_cast<float>(x.at(row, h)) * static_cast<float>(probs.at(t, k));
        }
      }
      ASSERT_EQ(static_cast<float>(out.at(t, h)), want) << t << ", " << h;
    }
  }

  // Without probs: K = 1, out is [len(S), H].
  GuardedMatrix<bfloat16> gathered(tokens * topk, hidden);
  c.probs = nullptr;
  c.out = gathered.data();
  c.out_dims = {tokens * topk, hidden};
  c.restore_shape = {tokens * topk, hidden};
  ASSERT_EQ(run_two_phase(c), kSuccess) << GetLastErrorMessage();
  for (int64_t i = 0; i < tokens * topk; ++i) {
    const int64_t row = routing.sorted_indices[i];
    for (int64_t h = 0; h < hidden; ++h) {
      const uint16_t want = row < routing.grad_rows ? bits_of(x.at(row, h)) : 0;
      ASSERT_EQ(bits_of(gathered.at(i, h)), want) << i << ", " << h;
    }
  }
}

// Errors. Valid base call: X [8, 6] fp32, S a permutation of [0, 8), probs bf16 [4, 2], out
// [4, 6] fp32.
struct ErrorCase {
  const char* name;
  aclnnStatus status;
  const char* message;
  void (*mutate)(UnpermuteCall& c);
};

std::vector<ErrorCase> error_cases() {
  return {
      {"NullTokens", kErrParamNullptr, "permuted_tokens is null",
       [](UnpermuteCall& c) { c.null_tokens = true; }},
      {"NullIndices", kErrParamNullptr, "sorted_indices is null",
       [](UnpermuteCall& c) { c.null_indices = true; }},
      {"NullOut", kErrParamNullptr, "out is null", [](UnpermuteCall& c) { c.null_out = true; }},
      {"PaddedMode", kErrParamInvalid, "padded_mode = true is not supported",
       [](UnpermuteCall& c) { c.padded_mode = true; }},
      {"ProbsDtype", kErrParamInvalid, "probs dtype 3 is not supported",
       [](UnpermuteCall& c) { c.probs_dtype = DataType::kInt32; }},
      {"ProbsRank", kErrParamInvalid, "probs has rank 1",
       [](UnpermuteCall& c) { c.probs_dims = {8}; }},
      {"ProbsRows", kErrParamInvalid,
       "probs has shape [2, 2] but must be [N, K] with N = len(sorted_indices) / K = 8 / 2 = 4",
       [](UnpermuteCall& c) {
         c.probs_dims = {2, 2};
       }},
      {"ProbsColsNotDividing", kErrParamInvalid,
       "sorted_indices has 8 elements, which is not a multiple of K (probs dim 1) = 3",
       [](UnpermuteCall& c) {
         c.probs_dims = {2, 3};
       }},
      {"ProbsColsZero", kErrParamInvalid, "K (probs dim 1) = 0 must be >= 1",
       [](UnpermuteCall& c) {
         c.probs_dims = {4, 0};
       }},
      {"RestoreShapeValues", kErrParamInvalid,
       "restore_shape = [4, 7] does not describe out, whose shape is [4, 6]",
       [](UnpermuteCall& c) {
         c.pass_restore_shape = true;
         c.restore_shape = {4, 7};
       }},
      {"RestoreShapeLength", kErrParamInvalid, "restore_shape = [24] does not describe out",
       [](UnpermuteCall& c) {
         c.pass_restore_shape = true;
         c.restore_shape = {24};
       }},
      {"OutRows", kErrParamInvalid, "out has 5 rows but must have N = len(sorted_indices) / K",
       [](UnpermuteCall& c) {
         c.out_dims = {5, 6};
       }},
      {"OutRowsWithoutProbs", kErrParamInvalid,
       "out has 4 rows but must have N = len(sorted_indices) / K = 8 / 1 = 8",
       [](UnpermuteCall& c) { c.probs = nullptr; }},
      {"OutHidden", kErrParamInvalid, "out has hidden size 5 but permuted_tokens has hidden size 6",
       [](UnpermuteCall& c) {
         c.out_dims = {4, 5};
       }},
      {"OutDtype", kErrParamInvalid, "out dtype 27 differs from permuted_tokens dtype 0",
       [](UnpermuteCall& c) { c.out_dtype = DataType::kBFloat16; }},
      {"TooManyRows", kErrParamInvalid, "permuted_tokens has 9 rows, more than N * K",
       [](UnpermuteCall& c) {
         c.tokens_dims = {9, 6};
       }},
      {"OutOverlapsProbs", kErrParamInvalid, "out overlaps probs in memory",
       [](UnpermuteCall& c) { c.out = c.probs; }},
      {"OutOverlapsTokens", kErrParamInvalid, "out overlaps permuted_tokens in memory",
       [](UnpermuteCall& c) { c.out = static_cast<float*>(c.tokens) + 5; }},
      {"WorkspaceOverlapsProbs", kErrParamInvalid, "workspace overlaps probs in memory",
       [](UnpermuteCall& c) { c.workspace_on_probs = true; }},
      {"IndexOutOfRange", kErrParamInvalid, "sorted_indices[3] = 8 is out of range [0, 8)",
       [](UnpermuteCall& c) { static_cast<int32_t*>(c.indices)[3] = 8; }},
      {"DuplicateIndex", kErrParamInvalid, "sorted_indices[6] = 3 duplicates sorted_indices[0]",
       [](UnpermuteCall& c) { static_cast<int32_t*>(c.indices)[6] = 3; }},
  };
}

class UnpermuteErrors : public ::testing::TestWithParam<size_t> {};

TEST_P(UnpermuteErrors, StatusMessageAndOutUntouched) {
  const ErrorCase e = error_cases()[GetParam()];
  GuardedMatrix<float> tokens(9, 6);  // one spare row for TooManyRows
  std::mt19937_64 rng(1);
  mpg_test::fill_random(tokens, rng);
  std::vector<int32_t> indices = {3, 0, 7, 2, 1, 6, 5, 4};
  // 64 probs elements: room for any probs shape a case asks for, and for the workspace.
  GuardedMatrix<bfloat16> probs(1, 64);
  for (int64_t i = 0; i < 64; ++i) probs.at(0, i) = bfloat16(0.5f);
  GuardedMatrix<float> out(8, 8);
  UnpermuteCall c;
  c.tokens = tokens.data();
  c.indices = indices.data();
  c.probs = probs.data();
  c.out = out.data();
  e.mutate(c);
  const GuardedMatrix<float> tokens_before = tokens;
  const GuardedMatrix<bfloat16> probs_before = probs;
  EXPECT_EQ(run_two_phase(c), e.status);
  EXPECT_NE(std::string(GetLastErrorMessage()).find(e.message), std::string::npos)
      << "message: \"" << GetLastErrorMessage() << "\"\nexpected to contain: \"" << e.message
      << "\"";
  EXPECT_TRUE(out.payload_untouched());
  EXPECT_TRUE(out.guards_intact());
  EXPECT_TRUE(tokens.same_bytes(tokens_before));
  EXPECT_TRUE(probs.same_bytes(probs_before));
}

INSTANTIATE_TEST_SUITE_P(Aclnn, UnpermuteErrors, ::testing::Range<size_t>(0, error_cases().size()),
                         [](const auto& info) {
                           return std::string(error_cases()[info.param].name);
                         });

// The typed layer: the same rules, with probs of any element type.
TEST(UnpermuteTyped, ErrorsNameTheArguments) {
  GuardedMatrix<float> tokens(8, 6);
  const std::vector<int32_t> indices = {3, 0, 7, 2, 1, 6, 5, 4};
  GuardedMatrix<half> probs(3, 2);
  GuardedMatrix<float> out(4, 6);
  mpg::Status s = run_unpermute(tokens, indices, probs, out, {});
  EXPECT_EQ(s.code(), mpg::ErrorCode::kShapeMismatch);
  EXPECT_NE(s.message().find("probs has shape [3, 2] but must be [N, K]"), std::string::npos)
      << s.message();
  GuardedMatrix<half> good(4, 2);
  s = mpg::unpermute(tokens.const_view(), indices, good.const_view(), Mode::kDropless,
                     mpg::MatrixView(tokens.data(), 4, 6));
  EXPECT_EQ(s.code(), mpg::ErrorCode::kOverlap) << s.message();
  EXPECT_NE(s.message().find("out overlaps permuted_tokens"), std::string::npos) << s.message();
  EXPECT_TRUE(out.payload_untouched());
}

// Eigen overloads deduce every type, probs included.
TEST(UnpermuteTyped, EigenOverloads) {
  using Rows = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using Probs = Eigen::Matrix<bfloat16, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  Rows x(4, 3);
  for (int r = 0; r < 4; ++r) x.row(r).setConstant(static_cast<float>(r + 1));
  const std::vector<int32_t> indices = {2, 0, 3, 1};
  Probs probs(2, 2);
  probs << bfloat16(0.5f), bfloat16(2.0f), bfloat16(1.0f), bfloat16(-1.0f);
  Rows out(2, 3);
  ASSERT_TRUE(
      mpg::unpermute(x, mpg::IndexView<int32_t>(indices), probs, Mode::kDropless, out).ok());
  EXPECT_EQ(out(0, 0), 3.0f * 0.5f + 1.0f * 2.0f);
  EXPECT_EQ(out(1, 2), 4.0f * 1.0f - 2.0f);
  Rows gathered(4, 3);
  ASSERT_TRUE(mpg::unpermute(x, mpg::IndexView<int32_t>(indices), Mode::kDropless, gathered).ok());
  EXPECT_EQ(gathered(0, 1), 3.0f);
  EXPECT_EQ(gathered(3, 0), 2.0f);
}

}  // namespace
